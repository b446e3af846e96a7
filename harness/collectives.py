"""A hang or a desync at the collective level: each rank's recent collectives (torch's flight recorder), and
where the ranks part.

Three parts, in the order the data flows:

* in a rank: :func:`enable` turns torch's flight recorder on before the first process group
  (``TORCH_FR_BUFFER_SIZE``); :func:`begin_test` marks where a test starts; :func:`own_dump` turns the
  recorder's entries since then into a small dict (a "dump"): per collective its group, its number on that
  group counted from the test's start, its op, sizes and dtypes, and whether it finished.
  :func:`serve_dumps` runs a thread that writes a dump when the parent asks (a FIFO in the pool's
  directory), even while the rank's main thread is blocked inside a collective;
* in the parent of a pool: :func:`request_dumps` asks live ranks for their dumps;
* anywhere, pure functions over dumps (rank -> dump): :func:`analyse` (per group, each rank's last
  collective and the first point where the ranks differ), :func:`stuck` (ranks waiting for a collective
  or a process group that a rank which left the test can never join), :func:`culprit` and
  :func:`section` (the text a report shows before the stacks).

Comparing two collectives is torch's own rule (``torch.distributed.flight_recorder``'s ``Op.match``);
what is written here is the glue. The same records come from NCCL's recorder (``_dump_nccl_trace_json``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any, Iterable, Mapping

__all__ = ["enable", "begin_test", "note_groups", "own_dump", "serve_dumps", "request_dumps", "Call", "GroupView",
           "Cell", "Lane", "Picture", "picture", "analyse", "stuck", "culprit", "section", "describe_call",
           "group_label"]

#: entries torch keeps (a ring): enough for the collectives of one test, a few hundred KiB at most
BUFFER = 2000
#: functions of torch.distributed.distributed_c10d inside which a rank waits for the world to create a group
_CREATION = frozenset({"_new_process_group_helper", "_store_based_barrier", "init_process_group"})
#: c10d's names of scalar types (as the recorder writes them) -> torch's
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128", "ComplexHalf": "complex32"}


# ---- in a rank --------------------------------------------------------------------------------------


def enable() -> None:
    """Keep torch's flight recorder from the first process group on (torch reads the variable then).

    A value already set wins: ``TORCH_FR_BUFFER_SIZE=0`` turns the recorder, and this report, off.
    """
    if "TORCH_FR_BUFFER_SIZE" not in os.environ:
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFER)


@dataclasses.dataclass
class _Mark:
    since_ns: int = 0  # the recorder's clock (the wall clock, ns) when the test started
    base: dict[str, int] = dataclasses.field(default_factory=dict)  # group name -> its sequence number then
    groups: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # name -> ranks, desc, default


_mark = _Mark()


def _c10d() -> Any:
    """torch.distributed's c10d module if this process imported it (never imports torch itself)."""
    module = sys.modules.get("torch.distributed.distributed_c10d")
    return module if module is not None and getattr(module, "is_initialized", lambda: False)() else None


def begin_test() -> None:
    """The test starts now (after the harness set up its default group): later collectives are its own."""
    _mark.since_ns = time.time_ns()
    _mark.base = {}
    _mark.groups = {}
    c10d = _c10d()
    if c10d is None:
        return
    for pg, name in list(c10d._world.pg_names.items()):
        try:
            _mark.base[name] = int(pg._get_sequence_number_for_group())
        except Exception:
            pass


def note_groups() -> None:
    """Remember the members of the groups alive now (before the harness destroys the test's groups), so a
    dump taken afterwards still names them."""
    c10d = _c10d()
    if c10d is None:
        return
    try:
        default = c10d._world.default_pg
        for pg, name in list(c10d._world.pg_names.items()):
            ranks = sorted(c10d._world.pg_group_ranks.get(pg, {}))
            _mark.groups[name] = {"ranks": ranks, "desc": str(getattr(pg, "group_desc", "") or ""),
                                  "default": pg is default}
    except Exception:
        pass


def _raw_entries() -> list[dict[str, Any]]:
    """The recorder's entries: gloo's (and other CPU backends') and, in a CUDA build, NCCL's."""
    try:
        from torch._C import _distributed_c10d as c
    except ImportError:
        return []
    entries: list[dict[str, Any]] = []
    for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c, name, None)
        if dump is None:
            continue
        try:
            raw = dump(includeCollectives=True, onlyActive=False)
        except TypeError:
            raw = dump()
        except Exception:
            continue
        try:
            entries += json.loads(raw).get("entries", []) or []
        except Exception:
            continue
    return entries


def _in_group_creation() -> bool:
    """Whether the main thread waits inside process-group creation (which every rank of the world joins)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        if frame.f_code.co_name in _CREATION and frame.f_code.co_filename.endswith("distributed_c10d.py"):
            return True
        frame = frame.f_back
    return False


def own_dump(rank: int) -> dict[str, Any] | None:
    """This rank's collectives since the test started, as a dump (None: torch.distributed was never used).

    Callable from any thread, also while the main thread is blocked inside a collective.
    """
    if "torch.distributed" not in sys.modules:
        return None
    since = _mark.since_ns
    by_pg: dict[Any, list[dict[str, Any]]] = {}
    for e in _raw_entries():
        if e.get("is_p2p") or int(e.get("time_created_ns", 0)) < since:
            continue
        by_pg.setdefault(e.get("pg_id"), []).append(e)
    # One group name may have had two groups in one test (a test that destroyed and made again its default
    # group): the later group's entries are the ones that matter.
    latest: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
    for pg_id, entries in by_pg.items():
        name = str(entries[0]["process_group"][0])
        if name not in latest or (pg_id or 0) > (latest[name][0] or 0):
            latest[name] = (pg_id, entries)
    calls = []
    for name, (_, entries) in latest.items():
        entries.sort(key=lambda e: e["collective_seq_id"])
        base = _mark.base.get(name, 0)
        if entries[0]["collective_seq_id"] <= base:
            base = 0  # a group made in the test under the name of one that was there before it
        for e in entries:
            backend, _, op = str(e.get("profiling_name", "")).partition(":")
            state = str(e.get("state", ""))
            calls.append({"group": name, "desc": str(e["process_group"][1]), "seq": e["collective_seq_id"] - base,
                          "op": op or backend, "backend": backend, "state": state,
                          "done": bool(e.get("retired")) or state == "completed",
                          "input_sizes": e.get("input_sizes") or [], "output_sizes": e.get("output_sizes") or [],
                          "input_dtypes": e.get("input_dtypes") or [], "output_dtypes": e.get("output_dtypes") or [],
                          # ms: None unless the recorder timed it (a CUDA backend); t: orders a rank's calls
                          # across its groups for the HTML report's picture
                          "ms": e.get("duration_ms"), "t": int(e.get("time_created_ns", 0))})
    note_groups()
    return {"rank": rank, "calls": calls, "groups": dict(_mark.groups), "creating": _in_group_creation()}


def _dump_paths(directory: str, rank: int) -> tuple[str, str]:
    return os.path.join(directory, f"rank{rank}.fr.req"), os.path.join(directory, f"rank{rank}.fr.json")


def serve_dumps(directory: str, rank: int) -> None:
    """Start this rank's dump thread: it waits (at no cost) on a FIFO in ``directory``; for each request
    of the parent it writes ``rank{rank}.fr.json`` (see :func:`request_dumps`)."""
    fifo, _ = _dump_paths(directory, rank)
    try:
        os.mkfifo(fifo)
    except OSError:
        return  # no FIFO, no dumps: the report goes without the section
    threading.Thread(target=_answer_dump_requests, args=(directory, rank), daemon=True,
                     name="harness-collectives").start()


def _answer_dump_requests(directory: str, rank: int) -> None:
    fifo, out = _dump_paths(directory, rank)
    while True:
        try:
            fd = os.open(fifo, os.O_RDONLY)  # blocks until the parent opens it to write
            try:
                token = os.read(fd, 64).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
        except OSError:
            return  # the pool's directory is gone
        if not token:
            continue
        try:
            dump = own_dump(rank)
        except Exception as exc:  # a dump must never take the rank down
            dump = {"rank": rank, "calls": [], "groups": {}, "creating": False, "error": repr(exc)}
        try:
            with open(out + ".tmp", "w") as f:
                json.dump({"token": token, "dump": dump}, f)
            os.replace(out + ".tmp", out)
        except OSError:
            return


def request_dumps(directory: str, ranks: Iterable[int], timeout: float = 2.0) -> dict[int, dict[str, Any]]:
    """In the parent: ask each of ``ranks`` (live ranks of the pool in ``directory``) for its dump; the
    dumps that came within ``timeout`` seconds, by rank."""
    token = f"{time.monotonic_ns()}"
    asked = []
    for r in ranks:
        fifo, _ = _dump_paths(directory, r)
        for _ in range(20):  # the thread may be between two requests: it reopens the FIFO at once
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)
                continue
            try:
                os.write(fd, token.encode() + b"\n")
                asked.append(r)
            except OSError:
                pass
            finally:
                os.close(fd)
            break
    dumps: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while asked and time.monotonic() < deadline:
        for r in list(asked):
            try:
                with open(_dump_paths(directory, r)[1]) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if data.get("token") == token:
                asked.remove(r)
                if data.get("dump") is not None:
                    dumps[r] = data["dump"]
        if asked:
            time.sleep(0.01)
    return dumps


# ---- the analysis: pure functions over dumps ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Call:
    """One collective one rank called: the ``seq``-th on ``group`` since the test started."""

    rank: int
    group: str
    seq: int
    op: str
    done: bool
    entry: Mapping[str, Any]  # the dump's record of it (sizes, dtypes, backend, state)

    @property
    def text(self) -> str:
        return f"#{self.seq} {describe_call(self.entry)}"


def _dtype(name: str) -> str:
    return _DTYPES.get(name, name.lower())


def describe_call(entry: Mapping[str, Any]) -> str:
    """``all_gather(float32[4])``: the op and its input tensors (its outputs where it has no input)."""
    sizes, dtypes = entry.get("input_sizes") or [], entry.get("input_dtypes") or []
    if not sizes:
        sizes, dtypes = entry.get("output_sizes") or [], entry.get("output_dtypes") or []
    tensors = [f"{_dtype(dtypes[i]) if i < len(dtypes) else ''}[{', '.join(map(str, shape))}]"
               for i, shape in enumerate(sizes)]
    if len(tensors) > 3:
        tensors = tensors[:3] + [f"... {len(tensors) - 3} more"]
    return f"{entry.get('op', '?')}({', '.join(tensors)})"


@dataclasses.dataclass
class GroupView:
    """One process group as the dumps show it: its members, each rank's calls, the first difference."""

    name: str
    label: str  # as a reader knows it: "the default group", 'group [0, 1] (name "1")'
    members: list[int]
    calls: dict[int, list[Call]]  # rank -> its calls on this group, in order (ranks with a dump only)
    #: ("op" | "size" | "dtype", seq, {rank: Call}) or ("missing", seq, {rank: Call}, {missing rank: last seq})
    difference: tuple | None = None

    def last(self, rank: int) -> Call | None:
        calls = self.calls.get(rank) or []
        return calls[-1] if calls else None


def group_label(name: str, info: Mapping[str, Any] | None) -> str:
    """The default group, or its members and its name: ``group [0, 1] (name "1")``."""
    info = info or {}
    if info.get("default") or info.get("desc") == "default_pg":
        return "the default group"
    desc = str(info.get("desc") or "")
    named = f'name "{name}"' + (f", {desc}" if desc and desc not in ("undefined", "default_pg") else "")
    ranks = info.get("ranks")
    return f"group {list(ranks)} ({named})" if ranks else f"the group of {named}"


def _matches(a: Call, b: Call, members: int) -> str:
    """"" when ``b`` is the same collective as ``a`` by torch's rule; else "op", "size" or "dtype"."""
    ea, eb = a.entry, b.entry
    keys = ("op", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
    if all(ea.get(k) == eb.get(k) for k in keys):
        return ""
    try:
        from torch.distributed.flight_recorder.components.types import MatchState, Op

        def op(call: Call) -> Any:
            e = call.entry
            event = {"profiling_name": f"{e.get('backend') or 'gloo'}:{e.get('op')}", "state": "scheduled",
                     "process_group": [call.group, e.get("desc", "")], "input_sizes": e.get("input_sizes"),
                     "output_sizes": e.get("output_sizes"), "input_dtypes": e.get("input_dtypes"),
                     "output_dtypes": e.get("output_dtypes"), "collective_seq_id": call.seq, "p2p_seq_id": 0,
                     "time_created_ns": 0}
            return Op(event, {call.group: set(range(members))}, call.group)

        state = op(a).match(op(b)).state
        return {MatchState.COLLECTIVE_TYPE_MISMATCH: "op", MatchState.SIZE_OR_SYNTAX_MISMATCH: "size",
                MatchState.COLLECTIVE_DTYPE_MISMATCH: "dtype"}.get(state, "")
    except Exception:  # an op torch's analyser does not know, or a torch without it: compare plainly
        if ea.get("op") != eb.get("op"):
            return "op"
        if ea.get("input_sizes") != eb.get("input_sizes") or ea.get("output_sizes") != eb.get("output_sizes"):
            return "size"
        return "dtype"


def analyse(dumps: Mapping[int, Mapping[str, Any] | None], world_size: int) -> list[GroupView]:
    """Per process group that any rank called a collective on in the test: its view, those that differ first."""
    infos: dict[str, dict[str, Any]] = {}
    calls: dict[str, dict[int, list[Call]]] = {}
    for rank, dump in dumps.items():
        if not dump:
            continue
        for name, info in (dump.get("groups") or {}).items():
            infos.setdefault(name, dict(info))
        for e in dump.get("calls") or []:
            call = Call(rank, str(e["group"]), int(e["seq"]), str(e.get("op", "?")), bool(e.get("done")), e)
            calls.setdefault(call.group, {}).setdefault(rank, []).append(call)
    views = []
    for name, by_rank in calls.items():
        info = infos.get(name) or {}
        if not info.get("desc"):
            desc = next((c.entry.get("desc") for cs in by_rank.values() for c in cs), "")
            info = {**info, "desc": desc}
        members = list(info.get("ranks") or [])
        if not members:
            members = list(range(world_size)) if info.get("desc") == "default_pg" else sorted(by_rank)
        recorded = [r for r in members if dumps.get(r)]
        for r in recorded:
            by_rank.setdefault(r, [])
            by_rank[r].sort(key=lambda c: c.seq)
        view = GroupView(name, group_label(name, {**info, "ranks": members}), members,
                         {r: by_rank[r] for r in recorded})
        view.difference = _first_difference(view)
        views.append(view)
    views.sort(key=lambda v: (v.difference is None, v.label != "the default group", v.name))
    return views


def _first_difference(view: GroupView) -> tuple | None:
    at: dict[int, dict[int, Call]] = {r: {c.seq: c for c in cs} for r, cs in view.calls.items()}
    top = max((c.seq for cs in view.calls.values() for c in cs), default=0)
    for seq in range(1, top + 1):
        present = {r: at[r][seq] for r in at if seq in at[r]}
        if not present:
            continue
        first = present[min(present)]
        for r, call in sorted(present.items()):
            kind = _matches(first, call, len(view.members))
            if kind:
                return (kind, seq, present)
        missing = {r: (view.last(r).seq if view.last(r) else 0) for r in at if seq not in at[r]}
        if missing:
            return ("missing", seq, present, missing)
    return None


def _never(view: GroupView, rank: int, call: Call, last: int) -> str:
    was = f"its last was #{last}" if last else "it called none on it in this test"
    return f"rank {rank} never called {call.text} on {view.label}: {was}"


def stuck(dumps: Mapping[int, Mapping[str, Any] | None], returned: Mapping[int, str], waiting: Iterable[int],
          world_size: int) -> dict[int, str]:
    """Ranks still in the test whose wait can never end, each with why (words that follow "after").

    ``returned``: ranks whose test is over -> how it went ("passed", "failed", "was skipped"). A rank in
    ``waiting`` is stuck when it is inside a collective of a group that a returned member never called
    (that member is gone from the test), or inside process-group creation, which every rank joins.
    """
    views = analyse(dumps, world_size)
    found: dict[int, str] = {}
    for r in waiting:
        dump = dumps.get(r)
        if not dump:
            continue
        if dump.get("creating") and returned:
            q = min(returned)
            found[r] = (f"rank {q} {returned[q]} while rank {r} was creating a process group, which every rank of "
                        "the world joins")
            continue
        for view in views:
            last = view.last(r)
            if last is None or last.done:
                continue
            for q in sorted(returned):
                if q not in view.members or q not in view.calls:
                    continue
                theirs = view.last(q)
                if theirs is None or theirs.seq < last.seq:
                    found[r] = f"rank {q} {returned[q]} without calling {last.text} on {view.label}"
                    break
            if r in found:
                break
    return found


def culprit(dumps: Mapping[int, Mapping[str, Any] | None], ok: Iterable[int], world_size: int
            ) -> tuple[int, int, str] | None:
    """A rank that ended its test normally (``ok``: passed or skipped) while a peer waited in a collective it
    never called: (that rank, the peer, the sentence), else None."""
    ok = set(ok)
    for view in analyse(dumps, world_size):
        d = view.difference
        if d is None or d[0] != "missing":
            continue
        _, seq, present, missing = d
        for q in sorted(missing):
            if q in ok:
                p = min(present)
                return q, p, _never(view, q, present[p], missing[q])
    return None


def section(dumps: Mapping[int, Mapping[str, Any] | None], world_size: int, max_groups: int = 6) -> str:
    """The report's section on collectives: per group, the last collective each rank called and the first
    point where the ranks differ. "" when no rank recorded a collective in the test."""
    views = analyse(dumps, world_size)
    if not views:
        return ""
    lines = ["Collectives, per process group (torch's flight recorder; #N counts from the test's start):"]
    for view in views[:max_groups]:
        lines.append(f"  {view.label}:")
        rows: dict[str, list[int]] = {}
        for r in view.members:
            if r not in view.calls:
                rows.setdefault("no record (the rank died, or has no recorder)", []).append(r)
                continue
            last = view.last(r)
            text = ("called none in this test" if last is None else
                    f"last called {last.text} on {view.label}, " + ("ended" if last.done else "unfinished"))
            rows.setdefault(text, []).append(r)
        for text, ranks in rows.items():
            who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
            lines.append(f"    {who}: {text}")
        d = view.difference
        if d is None:
            lines.append("    the ranks agree")
        elif d[0] == "missing":
            _, seq, present, missing = d
            p = min(present)
            lines += [f"    first difference: {_never(view, q, present[p], missing[q])}" for q in sorted(missing)]
        else:
            kind, seq, present = d
            word = {"op": "ops", "size": "sizes", "dtype": "dtypes"}[kind]
            shown = "; ".join(f"{describe_call(c.entry)} on rank {r}" for r, c in sorted(present.items()))
            lines.append(f"    first difference: #{seq}, different {word}: {shown}")
    if len(views) > max_groups:
        lines.append(f"  ... and {len(views) - max_groups} more groups")
    return "\n".join(lines)


# ---- the picture: each rank's collectives in order, as small picklable data (the HTML report draws it) ----


@dataclasses.dataclass(frozen=True)
class Cell:
    """One collective one rank called, as the picture shows it."""

    group: str  # the group's label ("the default group", 'group [0, 1] (name "1")')
    seq: int  # its number on that group since the test started
    op: str
    tensors: str  # "float32[4]": describe_call's argument list
    done: bool
    ms: float | None = None  # its duration where the flight recorder timed it
    parted: bool = False  # the collective where the ranks parted: this rank's call differs, or a peer never made it


@dataclasses.dataclass(frozen=True)
class Lane:
    """One rank's row: how its test ended, its collectives in order, where it parted from the others."""

    rank: int
    status: str  # harness.shared.outcome's word (passed, failed, error, timeout, killed, ...)
    line: str  # its one-line outcome
    recorded: bool  # it has a flight-recorder dump (False: it died first, or has no recorder)
    cells: tuple[Cell, ...] = ()
    missing: str = ""  # the collective the others called here and this rank never did ("#3 all_reduce(...)")
    waiting: bool = False  # stopped inside its last collective, which never ended
    error: str = ""  # its traceback (or message)
    stack: str = ""  # where it was when the parent stopped it (faulthandler), for a hang
    output: str = ""  # what it printed in the test


@dataclasses.dataclass(frozen=True)
class Picture:
    """A failing test's ranks x collectives: one lane per rank and the sentence on where they parted."""

    lanes: tuple[Lane, ...]
    parted: str = ""  # the first difference, in the text report's words ("" when the ranks agree)


def picture(dumps: Mapping[int, Mapping[str, Any] | None], outcomes: Mapping[int, Mapping[str, str]],
            world_size: int) -> Picture:
    """The picture of one test from its ranks' dumps and ``outcomes``: rank -> its texts (``status``, ``line``,
    ``error``, ``stack``, ``output``; harness.shared.outcome.RankResult's, each already bounded)."""
    views = analyse(dumps, world_size)
    marked: set[tuple[int, str, int]] = set()  # (rank, group name, seq) of the parting cells
    missing: dict[int, str] = {}
    words = ""
    for view in views:
        d = view.difference
        if d is None:
            continue
        if d[0] == "missing":
            _, seq, present, absent = d
            p = min(present)
            marked |= {(r, view.name, seq) for r in present}
            for q in sorted(absent):
                missing.setdefault(q, f"{present[p].text} on {view.label}")
            if len(absent) == 1:
                q = next(iter(absent))
                words = words or _never(view, q, present[p], absent[q])
            else:
                words = words or f"{_ranks_text(absent)} never called {present[p].text} on {view.label}"
        else:
            kind, seq, present = d
            marked |= {(r, view.name, seq) for r in present}
            word = {"op": "ops", "size": "sizes", "dtype": "dtypes"}[kind]
            alike: dict[str, list[int]] = {}  # the same call on many ranks is said once: 64 ranks stay one line
            for r, c in sorted(present.items()):
                alike.setdefault(describe_call(c.entry), []).append(r)
            words = words or (f"#{seq} on {view.label}, different {word}: " + "; ".join(
                f"{text} on {_ranks_text(ranks)}" for text, ranks in alike.items()))
    lanes = []
    for rank in sorted(set(range(world_size)) | set(outcomes)):
        said = outcomes.get(rank) or {}
        status = said.get("status", "")
        calls = _in_call_order(dumps.get(rank), views, rank)
        label = {v.name: v.label for v in views}
        cells = tuple(Cell(label.get(c.group, c.group), c.seq, c.op, describe_call(c.entry)[len(c.op) + 1:-1],
                           c.done, _ms(c.entry.get("ms")), (rank, c.group, c.seq) in marked) for c in calls)
        waiting = bool(cells) and not cells[-1].done and status not in ("passed", "skipped")
        lanes.append(Lane(rank, status, said.get("line", "no result"), bool(dumps.get(rank)), cells,
                          missing.get(rank, ""), waiting, said.get("error", ""), said.get("stack", ""),
                          said.get("output", "")))
    return Picture(tuple(lanes), words)


def _ranks_text(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0-62``, ``ranks 1, 4, 6``."""
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs))


def _in_call_order(dump: Mapping[str, Any] | None, views: list[GroupView], rank: int) -> list[Call]:
    """This rank's calls on every group in the order it made them (the dump's order), not group by group."""
    by_key = {(c.group, c.seq): c for v in views for c in v.calls.get(rank, [])}
    out = []
    for e in sorted((dump or {}).get("calls") or [], key=lambda e: int(e.get("t", 0))):
        c = by_key.get((str(e["group"]), int(e["seq"])))
        if c is not None:
            out.append(c)
    return out


def _ms(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
