"""The collectives by the names users call them: each op torch dispatches, or a process group's method, to
``torch.distributed``'s name for it, the same on every backend.

A pure table, read by the collective recorder (``harness.testing.collectives``) and by whatever else needs to
say which collective a rank is in (a fault fired at "the Nth ``all_gather_into_tensor`` of rank R"): the
op ``c10d::_allgather_base_`` and the functional ``_c10d_functional::all_gather_into_tensor`` are both what
the user called ``all_gather_into_tensor``; a ``*_coalesced`` op is several of that collective issued as one.
"""
from __future__ import annotations

__all__ = ["OPS", "COALESCED", "PROCESS_GROUP_METHODS", "user_name", "is_coalesced"]

#: "namespace::op" (the dispatcher's name, overload dropped) -> the name the user called
OPS: dict[str, str] = {
    # torch.distributed's c10d API: each call dispatches one of these
    "c10d::allreduce_": "all_reduce",
    "c10d::allreduce_coalesced_": "all_reduce",
    "c10d::allgather_": "all_gather",
    "c10d::allgather_coalesced_": "all_gather",
    "c10d::_allgather_base_": "all_gather_into_tensor",
    "c10d::allgather_into_tensor_coalesced_": "all_gather_into_tensor",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::_reduce_scatter_base_": "reduce_scatter_tensor",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor",
    "c10d::alltoall_": "all_to_all",
    "c10d::alltoall_base_": "all_to_all_single",
    "c10d::broadcast_": "broadcast",
    "c10d::reduce_": "reduce",
    "c10d::gather_": "gather",
    "c10d::scatter_": "scatter",
    "c10d::barrier": "barrier",
    "c10d::monitored_barrier_": "monitored_barrier",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::recv_any_source_": "recv",
    # functional collectives (torch.distributed._functional_collectives: DTensor's redistributions)
    "_c10d_functional::all_gather_into_tensor": "all_gather_into_tensor",
    "_c10d_functional::all_gather_into_tensor_out": "all_gather_into_tensor",
    "_c10d_functional::all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce",
    "_c10d_functional::all_reduce_coalesced_": "all_reduce",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter_tensor",
    "_c10d_functional::reduce_scatter_tensor_out": "reduce_scatter_tensor",
    "_c10d_functional::reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "_c10d_functional::all_to_all_single": "all_to_all_single",
    "_c10d_functional::broadcast": "broadcast",
    "_c10d_functional::broadcast_": "broadcast",
    "_c10d_functional::isend": "send",
    "_c10d_functional::irecv": "recv",
    "_c10d_functional::batch_p2p_ops": "batch_isend_irecv",
    "_c10d_functional_autograd::all_gather_into_tensor": "all_gather_into_tensor",
    "_c10d_functional_autograd::reduce_scatter_tensor": "reduce_scatter_tensor",
    "_c10d_functional_autograd::all_to_all_single": "all_to_all_single",
}

#: the ops above that are several collectives issued as one (a coalesced block)
COALESCED: frozenset[str] = frozenset({
    "c10d::allreduce_coalesced_", "c10d::allgather_coalesced_", "c10d::allgather_into_tensor_coalesced_",
    "c10d::reduce_scatter_tensor_coalesced_", "_c10d_functional::all_gather_into_tensor_coalesced",
    "_c10d_functional::all_reduce_coalesced", "_c10d_functional::all_reduce_coalesced_",
    "_c10d_functional::reduce_scatter_tensor_coalesced", "_c10d_functional::batch_p2p_ops",
})

#: a ``torch.distributed.ProcessGroup``'s collective methods (what a process group written in Python, such as the
#: threaded classes' one, is called through) -> the name the user called
PROCESS_GROUP_METHODS: dict[str, str] = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "allgather": "all_gather",
    "allgather_coalesced": "all_gather", "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor", "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_single_coalesced": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor", "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single", "broadcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter", "barrier": "barrier", "send": "send",
    "recv": "recv", "recv_anysource": "recv",
    # the names a process group in Python may report its calls under: already the user's
    **{name: name for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
                               "all_to_all", "all_to_all_single")},
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
}


def _key(op: str) -> str:
    """``c10d.allreduce_.default`` / ``c10d::allreduce_`` / ``c10d::allreduce_.default`` -> ``c10d::allreduce_``."""
    if "::" not in op:
        namespace, _, rest = op.partition(".")
        op = f"{namespace}::{rest}"
    namespace, _, name = op.partition("::")
    return f"{namespace}::{name.split('.')[0]}"


def user_name(op: str) -> str | None:
    """The name the user called for a dispatched op (``str(func)`` or ``func.name()``); None: not a collective.

    Example::

        user_name("c10d._allgather_base_.default")   # 'all_gather_into_tensor'
        user_name("aten.add.Tensor")                # None
    """
    return OPS.get(_key(op))


def is_coalesced(op: str) -> bool:
    """Whether the op is several collectives issued as one (``all_gather_into_tensor_coalesced``, ...)."""
    return _key(op) in COALESCED
