"""Inside a rank: torch's flight recorder turned on before the first process group, and read on demand.

:func:`enable` turns the recorder on (``TORCH_FR_BUFFER_SIZE``); :func:`begin_test` marks where a test starts;
:func:`own_dump` turns the recorder's entries since then into a small dict (a "dump"): per collective its
group, its number on that group counted from the test's start, its op, sizes and dtypes, and whether it
finished. :func:`serve_dumps` runs a thread that writes a dump when the parent asks
(``harness.parent.recorders``, through a FIFO in the pool's directory), even while the rank's main thread
is blocked inside a collective. The dumps are read by ``harness.judging.analysis``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from typing import Any

from harness.shared.protocol import dump_paths

__all__ = ["enable", "new_task", "begin_test", "note_groups", "own_dump", "serve_dumps", "main_waits", "main_cpu_ns", "BUFFER"]


#: entries torch keeps (a ring): enough for the collectives of one test, a few hundred KiB at most
BUFFER = 2000


#: functions of torch.distributed.distributed_c10d inside which a rank waits for the world to create a group
_CREATION = frozenset({"_new_process_group_helper", "_store_based_barrier", "init_process_group"})


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


def new_task() -> None:
    """A new test reached this rank: the groups the last one made are gone (a dump lists this test's only,
    so that a group this rank is still creating reads as one it lacks: harness.judging.analysis)."""
    _mark.groups = {}


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


def _in_group_creation() -> tuple[bool, list[int] | None]:
    """Whether the main thread waits inside process-group creation, and for which ranks' group.

    The ranks (global) are those of the group being made, read from ``_new_process_group_helper``'s arguments
    (``global_ranks_in_group``); None where every rank of the world joins (the default group, a split of its
    NCCL communicator, a store-based barrier over the world) or where the frame does not say. A rank making a
    group it is alone in, or one it is not a member of, waits for no peer (harness.judging.analysis)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        if frame.f_code.co_name in _CREATION and frame.f_code.co_filename.endswith("distributed_c10d.py"):
            ranks = None
            if frame.f_code.co_name == "_new_process_group_helper":
                local = frame.f_locals
                try:
                    # [] is the default group; a split of the default group's communicator (NCCL) joins every rank
                    if not local.get("split_from"):
                        ranks = sorted(int(r) for r in local["global_ranks_in_group"]) or None
                except (KeyError, TypeError, ValueError):
                    ranks = None
            return True, ranks
        frame = frame.f_back
    return False, None


#: functions of torch.distributed.distributed_c10d that wait for one peer, not for a collective (the recorder
#: leaves them out on gloo): a main thread waiting in one of them is not waiting in a collective
_POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
                             "recv_object_list"})


def _torch_dir() -> str:
    torch = sys.modules.get("torch")
    return os.path.dirname(getattr(torch, "__file__", "") or "") + os.sep if torch is not None else ""


def main_waits() -> str:
    """Where the main thread is, when torch's own Python code is running it (the innermost frame is in torch's
    package: a collective's wait, a c10d call, ...): that function's name; "" when the innermost frame is
    the test's own code (it computes, sleeps or waits on something else) or a point-to-point call.

    Cheap (a walk up the main thread's frames): a launched rank's watchdog calls it, with :func:`main_cpu_ns`,
    to see whether its main thread is idle in a collective before it takes a dump (harness.torchrun.desync)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    root = _torch_dir()
    if frame is None or not root or not frame.f_code.co_filename.startswith(root):
        return ""
    innermost = frame.f_code.co_name
    while frame is not None and frame.f_code.co_filename.startswith(root):
        if frame.f_code.co_name in _POINT_TO_POINT and frame.f_code.co_filename.endswith("distributed_c10d.py"):
            return ""
        frame = frame.f_back
    return innermost


def main_cpu_ns() -> int:
    """The main thread's CPU time (ns): unchanged between two dumps while it is blocked; -1 where unknown."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(threading.main_thread().ident or 0))
    except (AttributeError, OSError, OverflowError):
        return -1


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
    # waits and cpu_ns: whether the main thread is blocked in torch's code now (harness.judging.analysis.never_meet)
    creating, creating_ranks = _in_group_creation()
    return {"rank": rank, "calls": calls, "groups": dict(_mark.groups), "creating": creating,
            "creating_ranks": creating_ranks, "waits": main_waits(), "cpu_ns": main_cpu_ns()}


def serve_dumps(directory: str, rank: int) -> None:
    """Start this rank's dump thread: it waits (at no cost) on a FIFO in ``directory``; for each request
    of the parent it writes ``rank{rank}.fr.json`` (see :func:`request_dumps`)."""
    fifo, _ = dump_paths(directory, rank)
    try:
        os.mkfifo(fifo)
    except OSError:
        return  # no FIFO, no dumps: the report goes without the section
    threading.Thread(target=_answer_dump_requests, args=(directory, rank), daemon=True,
                     name="harness-collectives").start()


def _answer_dump_requests(directory: str, rank: int) -> None:
    fifo, out = dump_paths(directory, rank)
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
