"""An in-process process group for ranks that are threads of one process (the threaded classes' ``harness_threaded``).

Registered through torch's public ``Backend.register_backend``; every collective is a meeting of the
world's threads: the last to arrive does the copy for all, under one lock. A meeting names its
collective, so a thread that calls another collective than its peers fails at once (a mismatch, with
both names), a thread that waits longer than the test's timeout fails naming the collective and the
ranks that never came, and a thread that failed ends every meeting its peers wait in (``abort``). A group's
creation is a meeting of its ranks too, as upstream's threaded backend ends it with a store barrier.

torch.distributed keeps its groups in one per-process object (``distributed_c10d._world``); while
threads are installed (:func:`installed`) that object is replaced by one that gives each thread its
own, so each thread rank has its own default group, as each process has.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

__all__ = ["BACKEND", "ThreadWorld", "CollectiveError", "CollectiveTimeout", "installed", "bind", "unbind",
           "current_collective"]

#: the backend's name for ``init_process_group``
BACKEND = "harness_threaded"


class CollectiveError(RuntimeError):
    """A collective of the thread ranks went wrong: a mismatch, a wait past the timeout, or a peer that failed."""


class CollectiveTimeout(CollectiveError):
    """A thread rank waited in a collective past the test's timeout: a hang, reported as one."""


class ThreadWorld:
    """The thread ranks of one test: their meetings, the first failure, the timeout of a wait."""

    def __init__(self, world_size: int, timeout: float) -> None:
        self.world_size = world_size
        self.timeout = timeout
        self.lock = threading.Condition()
        self.meetings: dict[tuple[str, int], _Meeting] = {}
        self.failed: str = ""  # set by abort(): why every wait ends
        self.where: dict[int, str] = {}  # thread rank -> the collective it waits in (the hang report)

    def abort(self, why: str) -> None:
        """A thread rank failed: every meeting its peers wait in (or come to) ends with ``why``."""
        with self.lock:
            if not self.failed:
                self.failed = why
            self.lock.notify_all()


class _Meeting:
    def __init__(self, name: str, world_size: int) -> None:
        self.name = name
        self.data: list[Any] = [None] * world_size
        self.names: dict[int, str] = {}  # global rank -> the collective it called
        self.came: set[int] = set()  # the group ranks that came
        self.done = False
        self.error = ""


#: the world of the test whose threads run now (one test at a time runs threads in a process)
_current: ThreadWorld | None = None
_local = threading.local()  # per thread: its own torch.distributed world, its rank


def current_collective(rank: int) -> str:
    """The collective thread ``rank`` waits in now ("" when none): for the hang report."""
    world = _current
    return world.where.get(rank, "") if world is not None else ""


class _ThreadGroup(dist.ProcessGroup):
    """One thread rank's member of a group; the group's threads meet in ``ThreadWorld`` by group name and sequence."""

    def __init__(self, rank: int, world_size: int, world: ThreadWorld, key: str) -> None:
        super().__init__(rank, world_size)
        self._harness_rank = rank
        self._harness_size = world_size
        self._harness_world = world
        self._harness_key = key
        self._harness_seq = 0
        self._harness_name = key

    def size(self) -> int:
        return self._harness_size

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:
        # torch's C++ ProcessGroup reads the name from a registered backend, which a Python group has none of
        return self._harness_name

    @property
    def group_desc(self) -> str:
        return self._harness_name

    def __repr__(self) -> str:
        return f"ThreadGroup(rank={self._harness_rank}, world_size={self._harness_size}, {self._harness_key})"

    def _meet(self, name: str, data: Any, work: Any) -> Any:
        """Wait for every rank of the group in collective ``name``; the last one runs ``work(all data)``."""
        _observe(self, name, data, work)
        seq = self._harness_seq
        self._harness_seq += 1
        _wait_for_all(self, (self._harness_key, seq), name, f"#{seq} on {self._harness_key}", data, work)
        return _done_work(data)

    def _meet_created(self) -> None:
        """Wait for every rank of the new group to have made its member, as upstream's threaded backend does (a
        store barrier): a rank's first collective finds its peers' members made, and the last rank to come goes on
        first, as there. Not a collective: no record sees it, and the group's collectives count from #0."""
        _wait_for_all(self, (self._harness_key, -1), "group creation", self._harness_key, None, _nothing)

    # ---- the collectives torch calls on a ProcessGroup ----------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        op = _reduce(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._meet("all_reduce", tensors, functools.partial(_all_reduce, op))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        return self.allreduce(tensors, opts)

    def barrier(self, opts: Any = None) -> Any:
        return self._meet("barrier", [], _nothing)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        src = opts.rootRank if opts is not None else 0
        return self._meet("broadcast", tensors, functools.partial(_broadcast, src))

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._meet("all_gather", (outputs, inputs), _all_gather)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._meet("all_gather_into_tensor", (output, input), _all_gather_base)

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        return self._meet("all_gather_into_tensor_coalesced", (outputs, inputs), _all_gather_coalesced)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        op = _reduce(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._meet("reduce_scatter", (outputs, inputs), functools.partial(_reduce_scatter, op))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        op = _reduce(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._meet("reduce_scatter_tensor", (output, input), functools.partial(_reduce_scatter_base, op))

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        op = _reduce(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        return self._meet("reduce_scatter_tensor_coalesced", (outputs, inputs),
                          functools.partial(_reduce_scatter_coalesced, op))

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                      input_splits: list[int], opts: Any = None) -> Any:
        return self._meet("all_to_all_single", (output, input, output_splits, input_splits), _all_to_all_base)

    # torch 2.13 calls these names; earlier versions the ones above (the group answers both)
    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._allgather_base(output, input, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        return self._reduce_scatter_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                    opts: Any = None) -> Any:
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                                        opts: Any = None) -> Any:
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int] | None,
                          input_splits: list[int] | None, opts: Any = None) -> Any:
        return self.alltoall_base(output, input, output_splits, input_splits, opts)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._meet("all_to_all", (outputs, inputs), _all_to_all)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        return self._meet("scatter", (outputs, inputs), functools.partial(_scatter, opts.rootRank))

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        return self._meet("gather", (outputs, inputs), functools.partial(_gather, opts.rootRank))

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        # every rank gets the result (the others' buffers are unspecified after reduce, as in gloo's docs)
        return self._meet("reduce", tensors, functools.partial(_all_reduce, _reduce(opts.reduceOp)))


def _wait_for_all(group: _ThreadGroup, key: tuple[str, int], name: str, where: str, data: Any, work: Any) -> None:
    """Meet the other ranks of ``group`` at ``key``: the last to arrive runs ``work(all data)`` for all; a mismatch,
    a peer that failed or a wait past the timeout raises, naming ``name`` and ``where`` (the call, the group)."""
    world = group._harness_world
    size = group._harness_size
    global_rank = getattr(_local, "rank", group._harness_rank)
    label = f"{name} ({where})"
    deadline = time.monotonic() + world.timeout
    with world.lock:
        meeting = world.meetings.setdefault(key, _Meeting(name, size))
        meeting.data[group._harness_rank] = data
        meeting.came.add(group._harness_rank)
        meeting.names[global_rank] = name
        world.where[global_rank] = label
        try:
            if len(meeting.came) == size:
                names = set(meeting.names.values())
                if len(names) > 1:
                    meeting.error = "mismatched collectives: " + ", ".join(
                        f"rank {r} called {n}" for r, n in sorted(meeting.names.items())) + f" (call {where})"
                else:
                    try:
                        with torch.no_grad():
                            work(meeting.data)
                    except Exception as exc:  # the copy itself failed: every rank of the meeting says so
                        meeting.error = f"{name} failed: {type(exc).__name__}: {exc}"
                meeting.done = True
                del world.meetings[key]
                world.lock.notify_all()
            while not meeting.done:
                if world.failed:
                    raise CollectiveError(f"rank {global_rank} left {label}: Connection closed by peer "
                                          f"({world.failed})")
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(size)) - meeting.came)
                    raise CollectiveTimeout(f"rank {global_rank} timed out after {world.timeout:g} s in {label}: "
                                            f"group rank(s) {missing} never called it (set HARNESS_TIMEOUT to raise)")
                world.lock.wait(min(left, 1.0))
        finally:
            world.where.pop(global_rank, None)
    if meeting.error:
        raise CollectiveError(f"rank {global_rank}: {meeting.error}")


# ---- the copies (run by the last thread to arrive, for all) ------------------------------------------


def _reduce(op: Any) -> Any:
    op = getattr(op, "op", op)
    ops = {dist.ReduceOp.SUM: lambda s: s.sum(0), dist.ReduceOp.AVG: lambda s: s.mean(0),
           dist.ReduceOp.PRODUCT: lambda s: s.prod(0), dist.ReduceOp.MIN: lambda s: s.amin(0),
           dist.ReduceOp.MAX: lambda s: s.amax(0)}
    for known, fn in ops.items():
        if op == known:
            fn.harness_reduce_op = op  # type: ignore[attr-defined]  # what a collective record shows
            return fn
    raise CollectiveError(f"reduce op {op} is not supported by the thread ranks' group (use SUM, AVG, PRODUCT, "
                          "MIN or MAX)")


def _observe(group: _ThreadGroup, name: str, data: Any, work: Any) -> None:
    """Tell the collective records open in this thread (``harness.record_collectives``) of the call: this group's
    collectives do not go through torch's dispatcher, where a record sees the others."""
    from harness.testing.collectives import observe_process_group_call

    first = work.args[0] if isinstance(work, functools.partial) and work.args else None
    reduce_op = getattr(first, "harness_reduce_op", None)
    root = first if isinstance(first, int) else None
    if name in ("all_reduce", "broadcast", "reduce"):
        inputs, outputs = data, []
    elif name == "barrier":
        inputs, outputs = [], []
    else:  # (outputs, inputs, ...)
        outputs, inputs = data[0], data[1]
    observe_process_group_call(name, group, inputs, outputs, reduce_op=reduce_op, root=root,
                               in_place=name in ("all_reduce", "broadcast", "reduce"))


def _nothing(data: list[Any]) -> None:
    pass


def _all_reduce(op: Any, data: list[list[torch.Tensor]]) -> None:
    for i in range(len(data[0])):
        device = data[0][i].device
        result = op(torch.stack([d[i].to(device) for d in data]))
        for d in data:
            d[i].copy_(result.to(d[i].device))


def _broadcast(src: int, data: list[list[torch.Tensor]]) -> None:
    for rank, tensors in enumerate(data):
        if rank != src:
            for out, inp in zip(tensors, data[src]):
                out.copy_(inp)


def _all_gather(data: list[Any]) -> None:
    for src, (_, inputs) in enumerate(data):
        for outputs, _ in data:
            outputs[0][src].copy_(inputs[0])


def _all_gather_base(data: list[Any]) -> None:
    for src, (_, inp) in enumerate(data):
        for out, _ in data:
            out.view(len(data), -1)[src].copy_(inp.reshape(-1))


def _all_gather_coalesced(data: list[Any]) -> None:
    for i in range(len(data[0][0])):
        _all_gather_base([(outs[i], ins[i]) for outs, ins in data])


def _reduce_scatter(op: Any, data: list[Any]) -> None:
    for dst, (outputs, _) in enumerate(data):
        outputs[0].copy_(op(torch.stack([inputs[0][dst].to(outputs[0].device) for _, inputs in data])))


def _reduce_scatter_base(op: Any, data: list[Any]) -> None:
    n = len(data)
    for dst, (out, _) in enumerate(data):
        parts = [inp.reshape(n, -1)[dst].to(out.device) for _, inp in data]
        out.copy_(op(torch.stack(parts)).view_as(out))


def _reduce_scatter_coalesced(op: Any, data: list[Any]) -> None:
    for i in range(len(data[0][0])):
        _reduce_scatter_base(op, [(outs[i], ins[i]) for outs, ins in data])


def _all_to_all(data: list[Any]) -> None:
    for dst, (outputs, _) in enumerate(data):
        for src, (_, inputs) in enumerate(data):
            outputs[src].copy_(inputs[dst])


def _splits(size: int, splits: list[int] | None, n: int) -> list[int]:
    sizes = list(splits) if splits else [size // n] * n
    return [sum(sizes[:i]) for i in range(n + 1)]


def _all_to_all_base(data: list[Any]) -> None:
    n = len(data)
    for dst, (out, _, out_splits, _) in enumerate(data):
        out_at = _splits(out.size(0), out_splits, n)
        for src, (_, inp, _, in_splits) in enumerate(data):
            in_at = _splits(inp.size(0), in_splits, n)
            out[out_at[src]:out_at[src + 1]].copy_(inp[in_at[dst]:in_at[dst + 1]])


def _scatter(src: int, data: list[Any]) -> None:
    for dst, (outputs, _) in enumerate(data):
        outputs[0].copy_(data[src][1][0][dst])


def _gather(dst: int, data: list[Any]) -> None:
    for src, (_, inputs) in enumerate(data):
        data[dst][0][0][src].copy_(inputs[0])


def _done_work(result: Any) -> Any:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


# ---- the backend and each thread's own torch.distributed world ----------------------------------------


def _create(opts: Any, backend_options: Any = None) -> _ThreadGroup:
    """``init_process_group`` / ``new_group`` on a thread rank: that rank's member of a group of the current test.

    torch's extended creator arguments carry the group's name and global ranks, the same on every rank of
    the group: the threads of one group meet by them, those of another (a mesh dimension) do not."""
    world = _current
    if world is None:
        raise CollectiveError(f"backend {BACKEND!r} is for the harness's threaded classes (MultiThreadedTestCase "
                              "and its kin); it has no world outside their tests")
    ranks = list(getattr(opts, "global_ranks_in_group", None) or range(opts.group_size))
    key = f"group {opts.group_id} ranks {ranks}"
    group = _ThreadGroup(opts.group_rank, opts.group_size, world, key)
    group._harness_name = opts.group_id
    group._meet_created()
    return group


class _PerThreadWorld:
    """Stands in for ``distributed_c10d._world``: each thread sees its own (``_World`` with its own maps)."""

    def _own(self) -> Any:
        world = getattr(_local, "world", None)
        if world is None:
            world = _local.world = _OwnWorld()
        return world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._own(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._own(), name, value)


class _OwnWorld(c10d._World):
    """One thread's torch.distributed state: the maps ``_World`` keeps in module globals, kept here instead."""

    def __init__(self) -> None:
        super().__init__()
        self._maps: dict[str, Any] = {"pg_map": {}, "pg_names": {}, "pg_group_ranks": {}, "pg_backend_config": {},
                                      "tags_to_pg": {}, "pg_to_tag": {}}
        self._count = 0

    pg_map = property(lambda self: self._maps["pg_map"])
    pg_names = property(lambda self: self._maps["pg_names"])
    pg_group_ranks = property(lambda self: self._maps["pg_group_ranks"])
    pg_backend_config = property(lambda self: self._maps["pg_backend_config"])
    tags_to_pg = property(lambda self: self._maps["tags_to_pg"])
    pg_to_tag = property(lambda self: self._maps["pg_to_tag"])

    @property
    def group_count(self) -> int:
        return self._count

    @group_count.setter
    def group_count(self, value: int) -> None:
        self._count = value


_registered = False
_install_lock = threading.Lock()


def _register() -> None:
    global _registered
    if not _registered:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
        _registered = True


@contextlib.contextmanager
def installed(world: ThreadWorld) -> Iterator[ThreadWorld]:
    """Thread ranks of ``world`` may make groups for the block: the backend registered, each thread its own world.

    Example::

        with installed(ThreadWorld(4, timeout=120.0)):
            ...  # start the threads; each calls bind(rank) then init_process_group(BACKEND, ...)
    """
    global _current
    if not _install_lock.acquire(blocking=False):
        raise CollectiveError("thread ranks of two tests at once in one process: run threaded tests one at a time")
    _register()
    previous = c10d._world
    isolate = getattr(torch._C._distributed_c10d, "_set_thread_isolation_mode", None)
    try:
        c10d._world = _PerThreadWorld()  # private, but the one object torch reads its groups from (2.11 and 2.13)
        if isolate is not None:
            isolate(True)  # functional collectives find groups by name: per thread too
        _current = world
        yield world
    finally:
        _current = None
        if isolate is not None:
            isolate(False)
        c10d._world = previous
        _install_lock.release()


def bind(rank: int) -> None:
    """This thread is thread rank ``rank`` (its collectives name it in reports); it starts with no groups."""
    _local.rank = rank
    _local.world = _OwnWorld()


def unbind() -> None:
    """Destroy what groups this thread left and forget its world."""
    with contextlib.suppress(Exception):
        if c10d._world.default_pg is not None:
            dist.destroy_process_group()
    _local.__dict__.clear()
