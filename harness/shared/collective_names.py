"""The collectives by the names users call them, at both levels a rank is seen at, in one table: each op torch
dispatches or a process group's method (what the recorder sees, ``harness.testing.collectives``), and each Python
function of ``torch.distributed`` and its functional collectives (what faults and sweeps count, wrapped by
``harness.ranks.collective_calls``), to ``torch.distributed``'s name for the collective, the same on every backend.

A call has one name at both levels: ``dist.all_gather_single`` (an alias), the op ``c10d::_allgather_base_`` and
the functional ``_c10d_functional::all_gather_into_tensor`` are all ``all_gather_into_tensor``; ``isend`` is a
``send``; ``all_reduce_coalesced`` is ``all_reduce`` (a coalesced block: one call to a fault, its members one
each in a trace). So a fault at "the Nth ``all_gather_into_tensor`` of rank R", a sweep's point and a pinned trace
say the same name for the same call. The object collectives (:data:`OBJECT_CALLS`: ``gather_object``, ...) are
Python functions only: one call to a fault and a sweep (what DCP's save is made of); a trace records the tensor
collectives they are made of.
"""
from __future__ import annotations

__all__ = ["OPS", "COALESCED", "PROCESS_GROUP_METHODS", "CALLS", "FUNCTIONAL_CALLS", "OBJECT_CALLS", "user_name",
           "call_name", "call_names", "is_coalesced"]

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


#: torch.distributed's collective (and point-to-point) Python functions -> the collective's name (an alias, or a
#: coalesced form, to the collective it is)
CALLS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "all_gather": "all_gather",
    "all_gather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_object": "all_gather_object",
    "gather": "gather",
    "gather_object": "gather_object",
    "scatter": "scatter",
    "scatter_object_list": "scatter_object_list",
    "broadcast_object_list": "broadcast_object_list",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all_single",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "send": "send",
    "recv": "recv",
    "isend": "send",
    "irecv": "recv",
    "send_object_list": "send_object_list",
    "recv_object_list": "recv_object_list",
    "batch_isend_irecv": "batch_isend_irecv",
}

#: torch.distributed._functional_collectives (DTensor's collectives) -> the collective's name
FUNCTIONAL_CALLS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_gather_tensor": "all_gather_into_tensor",
    "all_gather_tensor_autograd": "all_gather_into_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor_autograd": "reduce_scatter_tensor",
    "all_to_all_single": "all_to_all_single",
    "all_to_all_single_autograd": "all_to_all_single",
    "broadcast": "broadcast",
}

#: the Python calls made of other collectives: one call to a fault and a sweep, their tensor collectives in a trace
OBJECT_CALLS: frozenset[str] = frozenset({"all_gather_object", "gather_object", "scatter_object_list",
                                          "broadcast_object_list", "send_object_list", "recv_object_list"})


def call_name(function: str) -> str | None:
    """The collective a Python function of ``torch.distributed`` (or its functional collectives) is, by name; or a
    collective's own name; None: not a collective.

    Example::

        call_name("all_gather_single")    # 'all_gather_into_tensor'
        call_name("isend")                # 'send'
    """
    return CALLS.get(function) or FUNCTIONAL_CALLS.get(function)


def call_names() -> list[str]:
    """Every name a fault's ``op`` may take: the collectives' names and the functions' (aliases), sorted."""
    return sorted(set(CALLS) | set(CALLS.values()) | set(FUNCTIONAL_CALLS) | set(FUNCTIONAL_CALLS.values()))


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
