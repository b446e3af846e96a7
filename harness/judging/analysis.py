"""A hang or a desync at the collective level, read from the ranks' flight-recorder dumps: where the ranks part.

Pure functions over dumps (rank -> dump, as ``harness.ranks.recorder`` makes them): :func:`analyse` (per
group, each rank's last collective and the first point where the ranks differ), :func:`stuck` (ranks waiting
for a collective or a process group that a rank which left the test can never join), :func:`never_meet`
(every rank still in the test blocked in a collective that can never complete: a desync), :func:`culprit` and
:func:`section` (the text a report shows before the stacks), :func:`picture` (the ranks x collectives the
HTML report draws).

Comparing two collectives is torch's own rule (``torch.distributed.flight_recorder``'s ``Op.match``);
what is written here is the glue. The same records come from NCCL's recorder (``_dump_nccl_trace_json``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

__all__ = ["Call", "GroupView", "Cell", "Lane", "Picture", "picture", "analyse", "stuck", "never_meet",
           "stopped_at_once", "culprit", "section", "describe_call", "group_label"]


#: c10d's names of scalar types (as the recorder writes them) -> torch's
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Int": "int32",
           "Long": "int64", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128", "ComplexHalf": "complex32"}


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
    (that member is gone from the test), or inside the creation of a process group that a returned rank is a
    member of (every rank, where the dump does not name the group's), unless a returned rank has a group this
    rank lacks by their dumps: the creating rank may be making that very group, slowly (a loaded machine), and
    its peer made its side of it before its body ended.
    """
    views = analyse(dumps, world_size)
    found: dict[int, str] = {}
    for r in waiting:
        dump = dumps.get(r)
        if not dump:
            continue
        if dump.get("creating") and returned:
            gone = [q for q in _creation_peers(dumps, r, world_size) if q in returned]
            if not gone:
                continue  # the group it makes waits for none of the returned ranks (or for no peer at all)
            if any(_lacks(dumps, r, g) for q in returned for g in ((dumps.get(q) or {}).get("groups") or {})):
                continue  # a returned rank already made its side of a group this rank lacks: slow, on its way
            q = gone[0]
            joins = "every rank of the world joins" if dump.get("creating_ranks") is None else f"rank {q} joins"
            found[r] = f"rank {q} {returned[q]} while rank {r} was creating {_creating(dump)}, which {joins}"
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


def _blocked_in(dump: Mapping[str, Any], rank: int) -> Call | str | None:
    """What a rank's main thread is blocked in, by its dump: its latest collective (a Call) when that is
    unfinished and the main thread waits inside torch's code, "creating" inside a process group's creation,
    else None (it computes, sleeps, waits on something else, or its latest collective ended)."""
    if dump.get("creating"):
        return "creating"
    if not dump.get("waits"):
        return None
    entries = dump.get("calls") or []
    if not entries:
        return None
    e = max(entries, key=lambda e: (int(e.get("t", 0)), int(e.get("seq", 0))))
    if e.get("done"):
        return None
    return Call(rank, str(e["group"]), int(e["seq"]), str(e.get("op", "?")), False, e)


def _still(before: Mapping[str, Any] | None, now: Mapping[str, Any], rank: int) -> bool:
    """The rank did not move between two dumps: the same wait, and its main thread used no CPU in between."""
    if before is None:
        return False
    a, b = _blocked_in(before, rank), _blocked_in(now, rank)
    same = (a == b) if isinstance(a, str) or isinstance(b, str) else (
        a is not None and b is not None and (a.group, a.seq) == (b.group, b.seq))
    cpu = before.get("cpu_ns", -1), now.get("cpu_ns", -1)
    return same and cpu[0] == cpu[1] and cpu[0] != -1


def never_meet(dumps: Mapping[int, Mapping[str, Any] | None], pending: Iterable[int], world_size: int,
               before: Mapping[int, Mapping[str, Any] | None] | None = None) -> tuple[int, str] | None:
    """A desync no wait can end: (the root cause rank, why, in words), else None.

    ``dumps``: rank -> its dump, for every live rank of the test; ``pending``: the ranks whose test goes on (the
    others' test ended: they will call nothing more). ``before``: the same ranks' dumps a moment earlier.
    It is a desync when every rank in ``pending`` is blocked (torch's code holds its main thread, inside its
    latest collective, unfinished, or inside a process group's creation), did not move since ``before`` (the
    same wait, no CPU used), and none of those waits can complete: each collective has a member of its group
    whose call at that ``#N`` is a different collective by torch's rule (:func:`_matches`: op, sizes, dtypes), or
    who never called that ``#N`` (it is blocked elsewhere, or its test ended); a group's creation waits for its
    members, so it can end only while another rank creates a group too, or while a peer waits in a group the
    creating rank has not got yet (it may be making that very group, slowly: the peer made its side of it); a
    rank creating one alone, its peers blocked in groups it has, waits for ever. Ranks merely slow (computing,
    sleeping, not yet in their collective) and ranks in matching collectives, finished or not, are never a desync.
    """
    pending = sorted(set(pending))
    if not pending:
        return None
    blocked: dict[int, Call | str] = {}
    for r in pending:
        dump = dumps.get(r)
        if not dump or not _still((before or {}).get(r), dump, r):
            return None
        what = _blocked_in(dump, r)
        if what is None:
            return None
        blocked[r] = what
    views = {v.name: v for v in analyse(dumps, world_size)}
    why: dict[int, str] = {}
    for r, what in blocked.items():
        reason = _cannot_complete(r, what, blocked, views, dumps, pending, world_size)
        if not reason:
            return None  # that rank can go on: nothing is proven yet
        why[r] = reason
    root = _odd_one_out(blocked, views)
    return root, why[root]


def stopped_at_once(rank: int, found: tuple[int, str]) -> str:
    """Why ``rank`` was stopped when :func:`never_meet` found a desync (``found``: its answer), in the words of
    the rank's result, the same in a pool (harness.parent.pool) and under torchrun (harness.torchrun.job)."""
    root, why = found
    if rank == root:
        return (f"can never meet the other ranks: {why}; every rank was blocked in a collective, so the test was "
                "stopped at once, not at its timeout")
    return f"stopped at once with rank {root}, whose collective can never meet the others'"


def _cannot_complete(r: int, what: Call | str, blocked: Mapping[int, Call | str], views: Mapping[str, GroupView],
                     dumps: Mapping[int, Mapping[str, Any] | None], pending: list[int], world_size: int) -> str:
    """Why rank ``r``'s wait can never end, given that every rank in ``pending`` stays blocked ("" if it can)."""
    def doing(q: int) -> str:
        theirs = blocked.get(q)
        if theirs is None:
            return "its test ended"
        if isinstance(theirs, str):
            return "it is creating a process group"
        return f"it waits in {theirs.text} on {views[theirs.group].label}"

    if isinstance(what, str):  # creating a group: its other members must come
        peers = _creation_peers(dumps, r, world_size)
        if not peers:
            return ""  # alone in the group it makes, or not in it: it waits for no peer (slow, not stuck)
        if any(blocked.get(q) == "creating" for q in peers):
            return ""  # another member creates one too, maybe the same group: they can finish it together
        if any(isinstance(theirs, Call) and _lacks(dumps, r, theirs.group) for theirs in blocked.values()):
            return ""  # maybe the group a peer already waits in, made on the peer's side: slow, not stuck
        if any(dumps.get(q) is None for q in peers):
            return ""
        q = peers[0]
        return f"rank {r} is creating {_creating(dumps.get(r) or {})} alone, which no other rank comes to join; " \
               f"rank {q}: {doing(q)}"
    view = views.get(what.group)
    if view is None:
        return ""
    for q in view.members:
        if q == r:
            continue
        if q not in view.calls:
            return ""  # no dump of that member (it died, or has no recorder): not proven
        at = {c.seq: c for c in view.calls[q]}
        theirs = at.get(what.seq)
        if theirs is not None:
            if _matches(what, theirs, len(view.members)):
                return _different(view, what.seq)
            continue  # the same collective: it can complete on that member's side
        last = view.last(q)
        if last is not None and last.seq > what.seq:
            return ""  # past it without a record of it (the recorder's ring lost it): not proven
        if blocked.get(q) == "creating" and _lacks(dumps, q, what.group):
            return ""  # that member is still making this very group (a loaded machine): it comes
        return f"rank {r} waits in {what.text} on {view.label}, which rank {q} never called ({doing(q)})"
    return ""


def _creation_peers(dumps: Mapping[int, Mapping[str, Any] | None], rank: int, world_size: int) -> list[int]:
    """The ranks that ``rank``, inside a process group's creation, waits for: the group's other members by its
    dump (``creating_ranks``), every other rank of the world where the dump does not name them; none when it is
    alone in the group, or not in it (torch makes nothing there: a rank slow in it is on its way, not stuck)."""
    ranks = (dumps.get(rank) or {}).get("creating_ranks")
    members = list(range(world_size)) if ranks is None else [int(q) for q in ranks]
    return [q for q in members if q != rank] if rank in members else []


def _creating(dump: Mapping[str, Any]) -> str:
    """``a process group`` (every rank's), or ``process group [0, 1]`` where the dump names its ranks."""
    ranks = dump.get("creating_ranks")
    return "a process group" if ranks is None else f"process group {list(ranks)}"


def _lacks(dumps: Mapping[int, Mapping[str, Any] | None], rank: int, group: str) -> bool:
    """``rank`` has no group named ``group`` by its dump: one it creates now may be that group, whose other
    members already made their side of it (the default group on a rank that a loaded machine slowed down)."""
    return group not in ((dumps.get(rank) or {}).get("groups") or {})


def _different(view: GroupView, seq: int) -> str:
    """``#1 on the default group, different ops: broadcast(float32[4]) on rank 2; all_reduce(...) on ranks 0, 1, 3``."""
    present = {r: c for r, cs in view.calls.items() for c in cs if c.seq == seq}
    first = present[min(present)]
    kind = next((k for k in (_matches(first, c, len(view.members)) for c in present.values()) if k), "op")
    alike: dict[str, list[int]] = {}
    for r, c in sorted(present.items()):
        alike.setdefault(describe_call(c.entry), []).append(r)
    word = {"op": "ops", "size": "sizes", "dtype": "dtypes"}[kind]
    shown = sorted(alike.items(), key=lambda item: (len(item[1]), item[1][0]))  # the odd one out first
    return f"#{seq} on {view.label}, different {word}: " + "; ".join(f"{text} on {_ranks_text(ranks)}"
                                                                     for text, ranks in shown)


def _odd_one_out(blocked: Mapping[int, Call | str], views: Mapping[str, GroupView]) -> int:
    """The rank whose wait differs from most ranks' (the root cause of a desync): the ranks are sorted into
    alike waits (the same group, #N and call; a returned rank counts with the call it made at that #N), and
    the lowest rank outside the largest set (ties: the set that holds the lowest rank) is named."""
    def key(what: Call | str) -> tuple:
        return ("creating",) if isinstance(what, str) else (what.group, what.seq, describe_call(what.entry))

    sets: dict[tuple, set[int]] = {}
    for r, what in blocked.items():
        sets.setdefault(key(what), set()).add(r)
        if isinstance(what, Call) and what.group in views:
            for q, cs in views[what.group].calls.items():
                if q not in blocked:
                    sets[key(what)] |= {q for c in cs if c.seq == what.seq and key(c) == key(what)}
    largest = max(sets.values(), key=lambda ranks: (len(ranks), -min(ranks)))
    outside = sorted(set(blocked) - largest)
    return outside[0] if outside else min(blocked)


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
