"""A test's collectives, recorded in call order: ``record_collectives()``, the record, its counts.

Inside ``with record_collectives() as record:`` every collective the rank issues through torch's dispatcher is
seen: the ``c10d`` ops behind ``torch.distributed``'s API (what FSDP, FSDP2 and DDP's reducer call, backward
hooks included) and the functional collectives DTensor uses. Each one is kept as a line: the op under the
name the user called (``harness.shared.collective_names``, the same on every backend), its tensors' dtypes and
shapes, its reduce op or peer, and its group (``world``, a device mesh's dimension name, or its ranks: decided by
its members and the dimension's name, never by how torch built the group, :func:`group_label`); a
coalesced call is one block. Nothing in a line depends on addresses, times, or on what earlier tests did in a
reused rank.

How they are seen: a kernel at the ``BackendSelect`` dispatch key of each collective op (registered once per
process, on the first record) runs the op and hands it to the open records. That key is part of every op's
dispatch, with autograd on or off and in inference mode, and no collective op has a kernel there; other ops
never reach it, so recording costs nothing outside the collectives. A ``TorchDispatchMode`` (how
``CommDebugMode`` sees collectives) sees the same ops, but it is called for every op of the block, which
doubled the CPU time of code made of small ops; it is still what records where the dispatcher's backend is not
what answers (``LocalTensorMode`` and the ``fake`` backend of the local-tensor classes) and where a torch
refuses the kernels. Torch's flight recorder, which the harness keeps on, was not used: it names ops as the
backend does (gloo's ``all_gather`` for an ``all_gather_into_tensor``), leaves out gloo's point-to-point calls
and every reduce op, and numbers calls per group from a sequence the earlier tests of a reused rank moved.

Where a collective bypasses the dispatcher the record is told directly: a process group written in Python
(the threaded classes' own) calls :func:`observe_process_group_call`. In the local-tensor classes the record
must be entered inside ``LocalTensorMode`` (which answers collectives itself, above any mode below it): a
record that a ``LocalTensorMode`` was entered inside fails, saying so, rather than keep an empty trace.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any

from harness.shared import collective_names
from harness.shared.errors import UsageError
from harness.testing.collective_trace import render

__all__ = ["record_collectives", "CollectiveRecord", "Counts", "observe_process_group_call", "group_label"]

#: per thread: the records open in it, and how deep it is inside a collective a record is handling
_local = threading.local()


def _open_records() -> list[CollectiveRecord]:
    records = getattr(_local, "records", None)
    if records is None:
        records = _local.records = []
    return records


def _current_test() -> Any:
    """The unittest TestCase whose method is on this thread's stack (the innermost), or None."""
    import unittest

    frame = sys._getframe(2)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, unittest.TestCase):
            return candidate
        frame = frame.f_back
    return None


def _where(test: Any) -> str:
    """``t.TestX.test_y [rank 1]: `` for a message (the test and rank the record was made in)."""
    if test is None:
        return ""
    rank = test.__dict__.get("rank", getattr(type(test), "rank", None))
    shown = f" [rank {rank}]" if isinstance(rank, int) and rank >= 0 else ""
    return f"{test.id()}{shown}: "


class Counts(dict):
    """Collectives per name, as ``CommDebugMode.get_comm_counts()`` gives them per op; a member of a coalesced
    block counts once. Looked up by name (``"all_gather_into_tensor"``) or by a torch op
    (``torch.ops.c10d._allgather_base_``, ``funcol.all_gather_into_tensor``); a missing one counts 0."""

    def __missing__(self, key: Any) -> int:
        name = _name_of(key)
        if name is not None and name != key:
            return self.get(name, 0)
        return 0


def _name_of(key: Any) -> str | None:
    if isinstance(key, str):
        return key
    op = getattr(key, "default", key)  # an OpOverloadPacket -> its default overload
    name = getattr(op, "name", None)
    if callable(name):
        try:
            return collective_names.user_name(name())
        except Exception:
            return None
    module = getattr(key, "__module__", "") or ""
    if "functional_collectives" in module:  # the Python functional collectives (funcol.all_reduce, ...)
        return collective_names.user_name(f"_c10d_functional::{getattr(key, '__name__', '')}")
    return None


class CollectiveRecord:
    """The collectives one rank issued inside ``with record_collectives() as record:``, in call order.

    ``record.lines()``: one string per collective (a coalesced block: its header and members, one string);
    ``record.counts()``: per name; ``str(record)``: this rank's trace. ``self.assertCollectivesInline(record,
    \"\"\"...\"\"\")`` compares every rank's trace with a pinned text.
    """

    def __init__(self, meshes: tuple[Any, ...] = ()) -> None:
        self._meshes = meshes
        self._items: list[Any] = []  # _Call or _Block
        self._owner = (os.getpid(), threading.get_ident())
        self._test = _current_test()
        self._state = "new"  # new -> open -> closed
        self._mode: Any = None
        self._group_names: dict[str, str] = {}  # c10d's name of a group -> the name a trace shows (a cache)
        self._named_ranks: dict[tuple[int, ...], str] = {}  # a given mesh dimension's ranks -> its name
        self._local_ranks: list[int] | None = None  # the simulated ranks (LocalTensorMode), else None
        self._local_depth = 0
        self._unseen = ""
        self._block_token: Any = None

    # ---- what a test reads ------------------------------------------------------------------------

    def lines(self) -> list[str]:
        return [item.render() for item in self._items]

    def counts(self) -> Counts:
        counts = Counts()
        for item in self._items:
            for call in (item.calls if isinstance(item, _Block) else [item]):
                counts[call.op] = counts.get(call.op, 0) + 1
        return counts

    def __str__(self) -> str:
        return render({0: self.lines()})

    def __repr__(self) -> str:
        return f"<CollectiveRecord {self._state}, {len(self._items)} collective(s)>"

    # ---- the block ---------------------------------------------------------------------------------

    def __enter__(self) -> CollectiveRecord:
        where = _where(self._test)
        if self._state != "new":
            raise UsageError(f"{where}this record was already entered once; make a new one for each block: "
                             "`with record_collectives() as record:`")
        self._check_owner("enter it")
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise UsageError(f"{where}record_collectives(): no process group is up in this rank, so no collective "
                             "can be recorded; decorate the test with @with_comms (or derive from FSDPTest, which "
                             "sets one up for every test), or enter the record after init_process_group()")
        self._local_ranks = _local_tensor_ranks()
        self._local_depth = len(_local_tensor_modes())
        for mesh in self._meshes:
            for dim, name in enumerate(getattr(mesh, "mesh_dim_names", None) or ()):
                self._named_ranks.setdefault(_ranks_of(mesh.get_group(dim)), name)
        # Where no LocalTensorMode can answer collectives above the dispatcher (a real backend), a kernel on each
        # collective op sees them at no cost to any other op; else a dispatch mode, which sees every op.
        simulated = self._local_ranks is not None or dist.get_backend() == "fake"
        if self._local_ranks is None and simulated:  # the fake backend: one process stands for every rank
            self._local_ranks = list(range(dist.get_world_size()))
        if not simulated and _install_kernels():
            self._mode = None
        else:
            self._mode = _mode_class()(self)
            self._mode.__enter__()
        _open_records().append(self)
        _PROCESS_OPEN.append(self)
        self._state = "open"
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            for records in (_open_records(), _PROCESS_OPEN):
                if self in records:
                    records.remove(self)
            self._state = "closed"
        if self._unseen and exc[0] is None:
            raise UsageError(f"{_where(self._test)}{self._unseen}")

    def _check_owner(self, doing: str, test: Any = None) -> None:
        if (os.getpid(), threading.get_ident()) == self._owner:
            return
        here = test if test is not None else _current_test()
        maker = _where(self._test).rstrip(": ") or f"process {self._owner[0]}"
        raise UsageError(f"{_where(here)}this collective record was made by {maker}, and a record belongs to the rank "
                         f"(process or thread rank) that made it: another cannot {doing}; make the record inside "
                         "the test body, on every rank, with `with record_collectives() as record:`")

    # ---- what the assertion needs ------------------------------------------------------------------

    def _usable_in(self, test: Any) -> None:
        """Raise, naming the test and the fix, unless ``test`` may compare this record now."""
        where = _where(test)
        if self._state == "new":
            raise UsageError(f"{where}this record was never entered: record with `with record_collectives() as "
                             "record:` around the code, then assert after the block")
        if self._state == "open":
            raise UsageError(f"{where}assertCollectivesInline(record, ...) inside the record's own `with` block; "
                             "call it after the block ends (the gathering of the ranks' traces is a collective too)")
        self._check_owner("compare it", test)
        if self._test is not None and test is not None and self._test.id() != test.id():
            raise UsageError(f"{where}this record was made in another test ({self._test.id()}); a record belongs "
                             "to the test and rank that made it: record again in this test")

    def _traces(self, test: Any) -> dict[int, list[str]]:
        """Every rank's lines: this process's own for all simulated ranks (local-tensor), else gathered over the
        default group (every rank calls the assertion, as every rank calls the test's collectives)."""
        mine = self.lines()
        if self._local_ranks is not None:
            return {r: mine for r in self._local_ranks}
        import torch.distributed as dist

        if not dist.is_initialized():
            raise UsageError(f"{_where(test)}assertCollectivesInline needs the process group to gather every rank's "
                             "trace, and none is up any more; assert before destroying the group")
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        return {r: list(lines) for r, lines in enumerate(gathered)}

    @property
    def _rank(self) -> int:
        if self._local_ranks is not None:
            return 0
        import torch.distributed as dist

        return dist.get_rank() if dist.is_initialized() else 0

    # ---- recording -------------------------------------------------------------------------------

    def _add(self, call: Any, group: str, coalescing: Any) -> None:
        """One collective; ``coalescing``: a token for the coalescing manager it was issued in (None: none)."""
        if coalescing is None:
            self._block_token = None
            self._items.append(call)
            return
        last = self._items[-1] if self._items else None
        if coalescing is self._block_token and isinstance(last, _Block) and last.group == group:
            last.calls.append(call)
            return
        self._block_token = coalescing
        self._items.append(_Block(group, [call]))


class _Call:
    """One collective: its name, input and output tensors, what else it was called with, its group."""

    __slots__ = ("op", "inputs", "outputs", "extra", "group", "in_place")

    def __init__(self, op: str, inputs: list[str], outputs: list[str], extra: list[str], group: str,
                 in_place: bool = False) -> None:
        self.op, self.inputs, self.outputs, self.extra, self.group = op, inputs, outputs, extra, group
        self.in_place = in_place

    def render(self, with_group: bool = True) -> str:
        args = ", ".join(([_tensors(self.inputs)] if self.inputs else []) + self.extra)
        text = f"{self.op}({args})"
        if self.outputs and not self.in_place:
            text += f" -> {_tensors(self.outputs)}"
        return f"{text} on {self.group}" if with_group else text


class _Block:
    """Collectives issued as one (a ``*_coalesced`` op, or a coalescing manager's calls)."""

    __slots__ = ("group", "calls")

    def __init__(self, group: str, calls: list[_Call]) -> None:
        self.group, self.calls = group, calls

    def render(self) -> str:
        return "\n".join([f"coalesced on {self.group}:"] + ["  " + c.render(with_group=False) for c in self.calls])


def _tensors(described: list[str]) -> str:
    if len(described) == 1:
        return described[0]
    if described and all(d == described[0] for d in described):
        return f"{len(described)} x {described[0]}"
    return "(" + ", ".join(described) + ")"


def _tensor(t: Any) -> str:
    dims = []
    for size in t.shape:
        try:
            dims.append(str(int(size)))
        except Exception:  # a size that differs per simulated rank (LocalTensorMode)
            dims.append(str(size))
    return f"{str(t.dtype).replace('torch.', '')}[{', '.join(dims)}]"


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    return [] if value is None else [value]


# ---- a kernel on each collective op -----------------------------------------------------------------

#: every record open in this process, whichever thread opened it
_PROCESS_OPEN: list[CollectiveRecord] = []
#: the libraries holding the kernels (registered once per process, on the first record); False: not possible here
_KERNELS: Any = None


def _install_kernels() -> bool:
    """Put a kernel at the ``BackendSelect`` key of every collective op (``harness.shared.collective_names.OPS``)
    that torch dispatches, once per process: it runs the op (redispatching below that key) and hands it to the
    open records. ``BackendSelect`` is in every op's dispatch, with autograd on or off, in inference mode too,
    and no collective op has a kernel of its own there. Other ops never pass through it: unlike a dispatch
    mode, recording costs nothing outside the collectives. False where this torch does not allow it (then a
    dispatch mode records instead)."""
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS is not False
    try:
        import torch

        after = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
        libraries: dict[str, Any] = {}
        kernels = []
        for full, name in collective_names.OPS.items():
            namespace, short = full.split("::")
            try:
                packet = getattr(getattr(torch.ops, namespace), short)
            except (AttributeError, RuntimeError):
                continue  # not an op of this torch
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "BackendSelect"):
                    raise RuntimeError(f"{op.name()} has a BackendSelect kernel of its own")
                kernels.append((namespace, short if overload == "default" else f"{short}.{overload}", op, name))
        for namespace, qualified, op, name in kernels:
            library = libraries.get(namespace)
            if library is None:
                library = libraries[namespace] = torch.library.Library(namespace, "IMPL")
            library.impl(qualified, _kernel(op, name, after), "BackendSelect", with_keyset=True)
        _KERNELS = libraries
    except Exception:
        _KERNELS = False
    return _KERNELS is not False


def _kernel(op: Any, name: str, after: Any) -> Any:
    def collective(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            result = op.redispatch(keyset & after, *args, **kwargs)
        finally:
            _local.depth = depth
        if depth == 0 and _PROCESS_OPEN:
            for record in _kernel_records():
                _describe(record, op, name, args, kwargs, result)
        return result

    return collective


def _kernel_records() -> list[CollectiveRecord]:
    """The records a collective dispatched in this thread belongs to: this thread's, else (an autograd engine's
    thread running a backward hook) those of the one thread of the process that has records open."""
    mine = [r for r in getattr(_local, "records", None) or [] if r._mode is None]
    if mine:
        return mine
    owners = {r._owner for r in _PROCESS_OPEN}
    return [r for r in _PROCESS_OPEN if r._mode is None] if len(owners) == 1 else []


# ---- the dispatch mode ------------------------------------------------------------------------------

_MODE: Any = None


def _mode_class() -> type:
    global _MODE
    if _MODE is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _RecordingMode(TorchDispatchMode):
            """Hands every collective op to its record; every other op passes at the cost of one dict lookup."""

            def __init__(self, record: CollectiveRecord) -> None:
                super().__init__()
                self.record = record
                # LocalTensorMode's own stack (a list it pushes to and pops from): one len() per op tells
                # whether one was entered inside the record
                self.local_modes = _local_tensor_mode_stack()

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                name = _NAMES.get(func)
                if name is None:
                    name = _NAMES[func] = collective_names.user_name(func.name()) or ""
                if not name:
                    modes = self.local_modes
                    if modes is not None and len(modes) > self.record._local_depth:
                        self.record._unseen = _UNSEEN
                    return func(*args, **kwargs)
                _local.depth = getattr(_local, "depth", 0) + 1
                try:
                    result = func(*args, **kwargs)
                finally:
                    _local.depth -= 1
                _describe(self.record, func, name, args, kwargs, result)
                return result

        _MODE = _RecordingMode
    return _MODE


#: OpOverload -> the user's name of the collective, "" for any other op
_NAMES: dict[Any, str] = {}

_UNSEEN = ("a LocalTensorMode was entered inside record_collectives(): it answers collectives itself, above the "
           "record, which then sees none of them; enter the record inside the LocalTensorMode (`with "
           "self._get_local_tensor_mode(): with record_collectives() as record: ...`)")


def _local_tensor_mode_stack() -> list[Any] | None:
    """The list ``LocalTensorMode`` keeps its active modes in (this thread's), or None (a torch without it)."""
    import importlib

    try:
        module = importlib.import_module("torch.distributed._local_tensor")
        stack = module.get_local_tensor_mode_list()
    except Exception:
        return None
    return stack if isinstance(stack, list) else None


def _local_tensor_modes() -> list[Any]:
    module = sys.modules.get("torch.distributed._local_tensor")
    getter = getattr(module, "get_local_tensor_mode_list", None)
    if getter is None:
        return []
    try:
        return list(getter())
    except Exception:
        return []


def _local_tensor_ranks() -> list[int] | None:
    modes = _local_tensor_modes()
    if not modes:
        return None
    return sorted(int(r) for r in getattr(modes[-1], "ranks", ()))


def _reduce_name(op: Any) -> str:
    import torch.distributed as dist

    if isinstance(op, str):
        return op.lower()
    value = op.op() if hasattr(op, "op") and callable(op.op) else getattr(op, "op", op)
    for name, member in dist.ReduceOp.RedOpType.__members__.items():
        if int(member) == int(value):
            return name.lower()
    return str(value)


def _ranks_of(pg: Any) -> tuple[int, ...]:
    """The group's members, as global ranks in ascending order."""
    import torch.distributed as dist

    return tuple(sorted(int(r) for r in dist.get_process_group_ranks(pg)))


def group_label(ranks: tuple[int, ...], world_size: int, description: str = "",
                named: dict[tuple[int, ...], str] | None = None) -> str:
    """The name a trace shows for a group: decided by its members and a device mesh dimension's name only, never by
    how torch built it (c10d's counter of group names, whether a mesh reused the default group or made its own).

    1. a dimension of a mesh given to the record (``named``: its members -> its name), by its members: any group
       with those members reads that name, the default group too;
    2. every rank of the world: ``world`` (the default group; a 1-D mesh over the whole world, which reuses the
       default group on CPU and on NCCL and makes one of its own, ``mesh_default``, where CUDA sits beside gloo);
    3. a device mesh dimension's own group (c10d's description ``mesh_<dim name>``): the dimension's name;
    4. else its members, ``ranks [0, 2]``.

    Example::

        group_label((0, 1), 2, "mesh_default")    # 'world'
        group_label((0, 1), 4, "mesh_dp")         # 'dp'
        group_label((0, 2), 4, "")                # 'ranks [0, 2]'
    """
    if named and ranks in named:
        return named[ranks]
    if ranks == tuple(range(world_size)):
        return "world"
    if description.startswith("mesh_") and description != "mesh_default":
        return description[len("mesh_"):]
    return "ranks [" + ", ".join(str(r) for r in ranks) + "]"


def _group_of(record: CollectiveRecord, group: Any) -> tuple[Any, str]:
    """(the ProcessGroup, the name a trace shows for it: :func:`group_label`)."""
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    if isinstance(group, str):
        pg = c10d._resolve_process_group(group)
    elif isinstance(group, dist.ProcessGroup):
        pg = group
    else:
        pg = dist.ProcessGroup.unbox(group)
    name = pg.group_name
    shown = record._group_names.get(name)
    if shown is not None:
        return pg, shown
    shown = group_label(_ranks_of(pg), dist.get_world_size(), str(getattr(pg, "group_desc", "") or ""),
                        record._named_ranks)
    record._group_names[name] = shown
    return pg, shown


def _global(pg: Any, group_rank: int) -> int:
    import torch.distributed as dist

    try:
        return dist.get_global_rank(pg, group_rank)
    except Exception:
        return group_rank


def _coalescing(pg: Any, name: str) -> Any:
    """The coalescing manager ``pg`` is inside (its op list, kept alive by the record), or a
    ``batch_isend_irecv`` call on the stack (backends that issue its ops one by one); None: neither."""
    import torch.distributed as dist

    state = dist.distributed_c10d._world.pg_coalesce_state
    if state:
        for group, ops in state.items():
            if group is pg or getattr(group, "group_name", None) == pg.group_name:
                return ops
    if name in ("send", "recv"):
        frame = sys._getframe(3)
        for _ in range(12):
            if frame is None:
                break
            if frame.f_code.co_name == "batch_isend_irecv":
                return frame
            frame = frame.f_back
    return None


def _describe(record: CollectiveRecord, func: Any, name: str, args: Any, kwargs: Any, result: Any) -> None:
    """Turn one dispatched collective into the record's calls."""
    schema = func._schema
    bound = dict(zip([a.name for a in schema.arguments], args))
    bound.update(kwargs)
    op = func.name()
    group_arg = bound.get("process_group", bound.get("group_name"))
    pg, group = _group_of(record, group_arg)
    extra: list[str] = []
    if "reduce_op" in bound:
        extra.append(_reduce_name(bound["reduce_op"]))
    calls: list[_Call] = []
    functional = not op.startswith("c10d::")
    if functional:
        inputs = bound.get("input", bound.get("inputs", bound.get("tensor", bound.get("tensors"))))
        out = kwargs.get("out", result)
        if name == "broadcast" and "src" in bound:
            extra.append(f"src={bound['src']}")
        if name == "send":
            extra.append(f"to={bound['dst']}")
        if name == "recv":
            extra.append(f"from={bound['src']}")
        if name == "all_to_all_single":
            extra += _splits(bound.get("input_split_sizes"), bound.get("output_split_sizes"))
        if op.endswith("batch_p2p_ops"):
            for kind, peer, t in zip(bound["op_list"], bound["peer_list"], bound["tensors"]):
                send = "send" in kind
                calls.append(_Call("send" if send else "recv", [_tensor(t)] if send else [],
                                   [] if send else [_tensor(t)], [f"to={peer}" if send else f"from={peer}"], group))
        elif collective_names.is_coalesced(op):
            for i, t in enumerate(_flat(inputs)):
                o = _flat(out)[i] if i < len(_flat(out)) else None
                calls.append(_Call(name, [_tensor(t)], [_tensor(o)] if o is not None else [], list(extra), group,
                                   in_place=name == "all_reduce"))
        elif name == "recv":
            calls.append(_Call(name, [], [_tensor(inputs)], extra, group))
        else:
            calls.append(_Call(name, [_tensor(t) for t in _flat(inputs)], [_tensor(t) for t in _flat(out)], extra,
                               group, in_place=name in ("all_reduce", "broadcast", "send")))
    else:
        calls = _c10d_calls(name, op, bound, pg, group, extra)
    if collective_names.is_coalesced(op) or op.endswith("batch_p2p_ops"):
        record._block_token = None
        record._items.append(_Block(group, calls))
        return
    token = _coalescing(pg, name)
    for call in calls:
        record._add(call, group, token)


def _splits(inputs: Any, outputs: Any) -> list[str]:
    words = []
    if inputs:
        words.append(f"in_splits={[int(s) for s in inputs]}")
    if outputs:
        words.append(f"out_splits={[int(s) for s in outputs]}")
    return words


def _c10d_calls(name: str, op: str, bound: dict[str, Any], pg: Any, group: str, extra: list[str]) -> list[_Call]:
    t = _tensor
    short = op.split("::", 1)[1]
    if short in ("allreduce_", "broadcast_", "reduce_"):
        if short == "broadcast_":
            extra.append(f"src={_global(pg, bound['root_rank'])}")
        if short == "reduce_":
            extra.append(f"dst={_global(pg, bound['root_rank'])}")
        return [_Call(name, [t(x) for x in bound["tensors"]], [], extra, group, in_place=True)]
    if short == "allreduce_coalesced_":
        return [_Call(name, [t(x)], [], list(extra), group, in_place=True) for x in bound["tensors"]]
    if short == "allgather_":
        return [_Call(name, [t(x) for x in bound["input_tensors"]], [t(x) for x in _flat(bound["output_tensors"])],
                      extra, group)]
    if short == "allgather_coalesced_":
        return [_Call(name, [t(x)], [t(o) for o in outs], list(extra), group)
                for x, outs in zip(bound["input_list"], bound["output_lists"])]
    if short in ("_allgather_base_", "_reduce_scatter_base_"):
        return [_Call(name, [t(bound["input_tensor"])], [t(bound["output_tensor"])], extra, group)]
    if short in ("allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_"):
        return [_Call(name, [t(x)], [t(o)], list(extra), group) for x, o in zip(bound["inputs"], bound["outputs"])]
    if short in ("reduce_scatter_", "alltoall_"):
        return [_Call(name, [t(x) for x in _flat(bound["input_tensors"])],
                      [t(x) for x in _flat(bound["output_tensors"])], extra, group)]
    if short == "alltoall_base_":
        extra += _splits(bound.get("input_split_sizes"), bound.get("output_split_sizes"))
        return [_Call(name, [t(bound["input"])], [t(bound["output"])], extra, group)]
    if short in ("gather_", "scatter_"):
        extra.append(("dst=" if short == "gather_" else "src=") + str(_global(pg, bound["root_rank"])))
        return [_Call(name, [t(x) for x in _flat(bound["input_tensors"])],
                      [t(x) for x in _flat(bound["output_tensors"])], extra, group)]
    if short in ("barrier", "monitored_barrier_"):
        return [_Call(name, [], [], extra, group)]
    if short == "send":
        return [_Call(name, [t(x) for x in bound["tensors"]], [], extra + [f"to={_global(pg, bound['dst'])}"],
                      group)]
    if short in ("recv_", "recv_any_source_"):
        peer = f"from={_global(pg, bound['src'])}" if "src" in bound else "from=any"
        return [_Call(name, [], [t(x) for x in bound["tensors"]], extra + [peer], group)]
    return [_Call(name, [t(x) for x in _flat(list(bound.values())) if hasattr(x, "dtype")], [], extra, group)]


# ---- process groups written in Python ----------------------------------------------------------------


def observe_process_group_call(method: str, group: Any, inputs: Any, outputs: Any, *, reduce_op: Any = None,
                               root: int | None = None, in_place: bool = False) -> None:
    """A process group whose collectives do not go through torch's dispatcher (one written in Python, such as the
    threaded classes') tells the records open in this thread of each call: ``method``, the ProcessGroup method
    (``allreduce``, ``_allgather_base``, ...); ``root``: the group rank of a broadcast's, scatter's, gather's or
    reduce's root. A call made for a collective the dispatcher already showed a record is not counted twice."""
    records = getattr(_local, "records", None)
    if not records or getattr(_local, "depth", 0):
        return
    name = collective_names.PROCESS_GROUP_METHODS.get(method)
    if name is None:
        return
    for record in records:
        _, shown = _group_of(record, group)
        extra = [_reduce_name(reduce_op)] if reduce_op is not None else []
        if root is not None:
            key = {"broadcast": "src", "scatter": "src", "gather": "dst", "reduce": "dst"}.get(name, "root")
            extra.append(f"{key}={_global(group, root)}")
        ins, outs = [_tensor(t) for t in _flat(inputs)], [_tensor(t) for t in _flat(outputs)]
        if "coalesced" in method:
            record._block_token = None
            members = [_Call(name, [i], outs[k:k + 1], list(extra), shown, in_place=in_place)
                       for k, i in enumerate(ins)]
            record._items.append(_Block(shown, members))
        else:
            record._add(_Call(name, ins, outs, extra, shown, in_place=in_place), shown, None)


def record_collectives(*meshes: Any) -> CollectiveRecord:
    """Record the collectives this rank issues inside the block, in call order.

    ``meshes``: device meshes whose dimension names a trace shows for every group with a dimension's members, the
    default group included (without them a group over the whole world reads ``world``, a mesh dimension's own
    group over fewer ranks its name: :func:`group_label`). Every rank records its own; compare them all with
    ``self.assertCollectivesInline(record, \"\"\"...\"\"\")`` after the block (``EXPECTTEST_ACCEPT=1`` writes the
    literal; ``cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\"`` pins each device's where they differ).

    Example::

        with record_collectives() as record:
            model(x).sum().backward()
        self.assertEqual(record.counts()["reduce_scatter_tensor"], 2)
        self.assertCollectivesInline(record, \"\"\"\\
        all_gather_into_tensor(float32[40]) -> float32[80] on world
        ...\"\"\")
    """
    return CollectiveRecord(tuple(meshes))
