"""Functional all-gathers and reduce-scatters, sends and receives of CUDA tensors over gloo, staged through the CPU.

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

Point-to-point is the other gap: gloo's ``send``/``recv`` hand the tensor's pointer to its transport whatever
the device, so a CUDA tensor fails with ``writev ... Bad address`` (``dist.send``, ``recv``, ``isend``,
``irecv``, ``batch_isend_irecv``, whose gloo path is one isend/irecv per op, and ``send_object_list`` /
``recv_object_list`` on a CUDA device). The same function replaces the CUDA kernels of ``c10d::send``,
``c10d::recv_`` and ``c10d::recv_any_source_`` with ones that run the same gloo backend on a CPU copy: a send
copies first (so the caller may reuse its tensor at once, as with gloo on CPU), a receive returns a work whose
``wait()`` waits for gloo and then copies into the caller's tensor. Everything else gloo carries on CUDA
tensors itself, through pinned host copies of its own (``libtorch_cpu.so`` of torch 2.13 and 2.15 holds
``AsyncBroadcastCUDAWork``, ``AsyncAllgatherCUDAWork``, ``AsyncGatherCUDAWork``, ``AsyncScatterCUDAWork``,
``AsyncReduceCUDAWork``, ``AsyncAlltoallCUDAWork`` and ``AsyncAlltoallListCUDAWork``; the all-reduce's
are in ``libtorch_cuda.so``): scatter, gather, all_to_all_single and the object collectives that stay on
their tensors' device are left to it.

The list ``all_to_all`` is staged too (``c10d::alltoall_``): torch 2.11's gloo has no list all-to-all on any
device (``Backend gloo does not support alltoall``), so its kernel concatenates the inputs into one CPU tensor,
runs gloo's ``all_to_all_single`` with the tensors' sizes as the splits, and copies each part back into its
output, synchronously. Every release gets it, so that a test gives the same values on each.
"""
from __future__ import annotations

import functools

__all__ = ["stage_through_cpu", "STAGED_OPS", "STAGED_P2P_OPS", "STAGED_LIST_OPS"]

#: the functional ops whose CUDA kernels gloo lacks (their coalesced c10d calls are CPU-only in gloo)
STAGED_OPS = ("all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
              "reduce_scatter_tensor", "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced")
#: the ``c10d`` point-to-point ops, whose gloo kernels read any pointer as host memory
STAGED_P2P_OPS = ("send", "recv_", "recv_any_source_")
#: the ``c10d`` list collectives staged through a single-tensor one gloo has on every release
STAGED_LIST_OPS = ("alltoall_",)

_installed: dict[str, tuple] = {}  # dispatch key -> the torch.library.Library objects that hold the kernels alive
_pending: set = set()  # staged receives not waited for yet: their Python object is the work torch holds


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
    p2p = torch.library.Library("c10d", "IMPL")
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
        device = torch.device(dispatch_key.lower())
        p2p.impl("send", lambda tensors, group, dst, tag: _send(tensors, group, dst, tag, device), dispatch_key)
        p2p.impl("recv_", lambda tensors, group, src, tag: _recv(tensors, group, device, src, tag), dispatch_key)
        p2p.impl("recv_any_source_", lambda tensors, group, tag: _recv(tensors, group, device, None, tag),
                 dispatch_key)
        # (async_op and timeout follow the group in its schema: not needed, the staged call waits itself)
        p2p.impl("alltoall_", lambda outputs, inputs, group, *rest: _all_to_all(outputs, inputs, group, device),
                 dispatch_key)
    _installed[dispatch_key] = (lib, p2p)
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


def _backend(group, device):
    """The gloo backend ``group`` runs ``device``'s tensors on: the one torch's own kernel would have used."""
    import torch.distributed as dist

    return dist.ProcessGroup.unbox(group)._get_backend(device)


def _send(tensors, group, dst: int, tag: int, device):
    # a copy, also where the key is CPU (the harness's own tests): gloo sends it later, the caller's tensor
    # may change meanwhile
    staged = [t.detach().to("cpu", copy=True).contiguous() for t in tensors]
    return _backend(group, device).send(staged, dst, tag).boxed()


def _all_to_all(outputs, inputs, group, device):
    """The list all-to-all as one ``all_to_all_single`` of CPU copies: input i goes to rank i, output j comes
    from rank j, each of its own size."""
    import torch
    import torch.distributed as dist

    dtype = outputs[0].dtype if outputs else inputs[0].dtype
    send = (torch.cat([t.detach().reshape(-1).to("cpu", dtype) for t in inputs]) if inputs
            else torch.empty(0, dtype=dtype))
    sizes = [t.numel() for t in outputs]
    received = torch.empty(sum(sizes), dtype=dtype)
    work = _backend(group, device).alltoall_base(received, send, sizes, [t.numel() for t in inputs],
                                                 dist.AllToAllOptions())
    work.wait()
    for t, part in zip(outputs, received.split(sizes)):
        t.copy_(part.view(t.shape))
    return outputs, work.boxed()


def _recv(tensors, group, device, src: int | None, tag: int):
    import torch

    staged = [torch.empty(t.shape, dtype=t.dtype) for t in tensors]
    backend = _backend(group, device)
    work = backend.recv(staged, src, tag) if src is not None else backend.recv_anysource(staged, tag)
    receive = _staged_receive_class()(work, staged, tensors)
    _pending.add(receive)
    return receive.boxed()


@functools.cache
def _staged_receive_class():
    import torch.distributed as dist

    class StagedReceive(dist.Work):
        """A gloo receive into a CPU copy; ``wait()`` waits for it, then copies into the caller's tensors.

        torch keeps only the C++ side of a work: the Python object that says what ``wait()`` does stays in
        ``_pending`` until then, else ``wait()`` would be the base class's, which never returns.
        """

        def __init__(self, work, staged, tensors):
            super().__init__()
            self._work, self._staged, self._tensors, self._done = work, staged, tensors, False

        def wait(self, timeout=None):
            if not self._done:
                self._work.wait() if timeout is None else self._work.wait(timeout)
                for tensor, staged in zip(self._tensors, self._staged):
                    tensor.copy_(staged)
                self._done = True
                _pending.discard(self)
            return True

        def is_completed(self):
            return self._done or self._work.is_completed()

        def _source_rank(self):
            return self._work._source_rank()

        def source_rank(self):
            return self._work._source_rank()

        def result(self):
            self.wait()
            return list(self._tensors)

        def synchronize(self):
            self.wait()

    return StagedReceive
