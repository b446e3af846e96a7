"""A rank put on its GPU: ``cuda:local_rank % G``, and its share of that GPU's memory where ranks share it.

Which placement a test gets is decided in harness.shared.placement (pure); this is the rank's side of it, done
once when a rank starts (harness.ranks.process for a pool, harness.torchrun.job for a launched rank).
"""
from __future__ import annotations

from harness.ranks.gloo_cuda import stage_through_cpu

__all__ = ["take_gpu"]


def take_gpu(local_rank: int, ranks_on_node: int, shared: bool) -> int:
    """Put this rank on its GPU (``cuda:local_rank % G``); sharing a GPU, cap its share of the GPU's memory.

    Ranks that share a GPU each have their own CUDA context and caching allocator; without a cap one rank
    can take the whole GPU and the others fail with out-of-memory errors that are not theirs. Each gets
    an equal share of 90% of the memory (the rest is left for the CUDA contexts themselves). Their gloo
    cannot run torch's functional all-gathers and reduce-scatters, nor sends and receives, on CUDA tensors:
    those are staged through the CPU (harness.ranks.gloo_cuda).
    """
    import torch

    gpus = torch.cuda.device_count()
    device = local_rank % gpus
    torch.cuda.set_device(device)
    if shared:
        stage_through_cpu("CUDA")  # gloo's functional all-gather / reduce-scatter, send / recv of CUDA tensors
        on_this_gpu = len(range(device, ranks_on_node, gpus))
        if on_this_gpu > 1:
            torch.cuda.set_per_process_memory_fraction(0.9 / on_this_gpu, device)
    return device
