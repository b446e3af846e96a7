"""Functional all-gathers and reduce-scatters of CUDA tensors over gloo, staged through the CPU.

Ranks that share a GPU talk over gloo, which carries CUDA tensors in its eager collectives
(``dist.all_gather_into_tensor``, ``dist.reduce_scatter_tensor``, ``dist.all_reduce``, ...), but not in the
coalesced all-gather and reduce-scatter that torch's *functional* collectives call
(``_c10d_functional::all_gather_into_tensor`` and friends): gloo copies the CUDA pointer as if it were host
memory and the rank dies with SIGSEGV (pytorch/pytorch#152645, open). DTensor's ``full_tensor()``, its
redistributions and DCP's state-dict helpers go through those ops, so on shared GPUs every FSDP2 checkpoint
test died that way (seen on one H200, torch 2.11.0+cu130).

:func:`stage_through_cpu` replaces the CUDA kernels of those six ops in this process with ones that copy the
input to the CPU, run the eager collective there on the same process group, and copy the result back: the
same values, synchronously (``wait_tensor`` on the result returns at once). It is installed once per rank
process and only where the ranks share GPUs over gloo (harness.ranks.gpu.take_gpu); ranks on NCCL keep
torch's kernels.
"""
from __future__ import annotations

__all__ = ["stage_through_cpu", "STAGED_OPS"]

#: the functional ops whose CUDA kernels gloo lacks (their coalesced c10d calls are CPU-only in gloo)
STAGED_OPS = ("all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
              "reduce_scatter_tensor", "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced")

_installed: dict[str, object] = {}  # dispatch key -> the torch.library.Library that holds the kernels alive


def stage_through_cpu(dispatch_key: str = "CUDA") -> bool:
    """Register the staged kernels for ``dispatch_key`` in this process (once); True if it did so now.

    ``dispatch_key`` is ``"CUDA"`` in ranks; the harness's own tests register it for ``"CPU"`` in a process
    of their own to check the staged values against gloo's CPU kernels on a machine without a GPU.
    """
    if dispatch_key in _installed:
        return False
    import warnings

    import torch

    lib = torch.library.Library("_c10d_functional", "IMPL")
    kernels = {
        "all_gather_into_tensor": _all_gather,
        "all_gather_into_tensor_out": _all_gather_out,
        "all_gather_into_tensor_coalesced": _all_gather_coalesced,
        "reduce_scatter_tensor": _reduce_scatter,
        "reduce_scatter_tensor_out": _reduce_scatter_out,
        "reduce_scatter_tensor_coalesced": _reduce_scatter_coalesced,
    }
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": that is the point
        warnings.simplefilter("ignore")
        for name, kernel in kernels.items():
            lib.impl(name, kernel, dispatch_key)
    _installed[dispatch_key] = lib
    return True


def _group(group_name):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


def _gathered(tensor, group_size: int, group_name):
    import torch
    import torch.distributed as dist

    source = tensor.detach().contiguous().cpu()
    out = torch.empty((source.shape[0] * group_size, *source.shape[1:]), dtype=source.dtype)
    dist.all_gather(list(out.chunk(group_size)) if source.shape[0] else
                    [torch.empty_like(source) for _ in range(group_size)], source, group=_group(group_name))
    return out.to(tensor.device)


def _all_gather(input, group_size, group_name):
    return _gathered(input, group_size, group_name)


def _all_gather_out(input, group_size, group_name, *, out):
    return out.copy_(_gathered(input, group_size, group_name))


def _all_gather_coalesced(inputs, group_size, group_name):
    return [_gathered(tensor, group_size, group_name) for tensor in inputs]


def _reduce_op(name: str):
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
           "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
    if name.lower() not in ops:
        raise RuntimeError(f"harness: reduce op {name!r} of a functional reduce-scatter of CUDA tensors over "
                           "gloo is not staged through the CPU (sum, avg, product, min, max are); run this test "
                           "on one GPU per rank (HARNESS_DEVICE=nccl) or on CPU (HARNESS_DEVICE=cpu)")
    return ops[name.lower()]


def _scattered(tensor, reduce_op: str, group_size: int, group_name):
    import torch
    import torch.distributed as dist

    op = _reduce_op(reduce_op)
    group = _group(group_name)
    source = tensor.detach().to("cpu", copy=True).contiguous()  # reduced in place: never the caller's tensor
    # an all-reduce then this rank's slice: gloo's CPU reduce-scatter of a flat tensor is not in every torch
    dist.all_reduce(source, op=op, group=group)
    if reduce_op.lower() == "avg":
        source = source / group_size if source.is_floating_point() else source // group_size
    return torch.chunk(source, group_size)[dist.get_rank(group)].contiguous().to(tensor.device)


def _reduce_scatter(input, reduce_op, group_size, group_name):
    return _scattered(input, reduce_op, group_size, group_name)


def _reduce_scatter_out(input, reduce_op, group_size, group_name, *, out):
    return out.copy_(_scattered(input, reduce_op, group_size, group_name))


def _reduce_scatter_coalesced(inputs, reduce_op, group_size, group_name):
    return [_scattered(tensor, reduce_op, group_size, group_name) for tensor in inputs]
