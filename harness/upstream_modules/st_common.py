"""``torch.testing._internal.distributed._shard.sharded_tensor._test_st_common``: the sharded-tensor test models
(``MyShardedModel1`` holding ``MyShardedModel2``) and chunk sharding specs over four ranks."""
from __future__ import annotations

import random
from typing import Any

import torch

__all__ = ["PLACEMENTS", "DEFAULT_GPU_NUM", "_chunk_sharding_specs_list_for_test", "MyShardedModel1",
           "MyShardedModel2"]

#: upstream's placements: one shard per rank, rank r on cuda:r
PLACEMENTS = [f"rank:{r}/cuda:{r}" for r in range(4)]
DEFAULT_GPU_NUM = 4


def _chunk_sharding_specs_list_for_test(sharding_dims: list[int], seed: int = 0) -> list[Any]:
    """One ``ChunkShardingSpec`` per dimension in ``sharding_dims``, spec ``i`` over :data:`PLACEMENTS` shuffled by
    ``random.Random(seed + i)``. As upstream's, each shuffle reorders the module's ``PLACEMENTS`` list in place,
    so a second call sees the order the first left (the same specs as upstream's, call for call)."""
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    specs = []
    for i, dim in enumerate(sharding_dims):
        random.Random(seed + i).shuffle(PLACEMENTS)
        specs.append(ChunkShardingSpec(dim=dim, placements=list(PLACEMENTS)))
    return specs


def _sharded_rand(spec: Any, group: Any, init_rrefs: bool) -> Any:
    from torch.distributed._shard import sharded_tensor

    return sharded_tensor.rand(spec, 10, 20, process_group=group, init_rrefs=init_rrefs)


class MyShardedModel2(torch.nn.Module):
    """``sharded_tensor2``: a 10 x 20 sharded tensor of ``spec`` (None without a spec); ``random_tensor2``: a 2 x 2
    parameter."""

    def __init__(self, spec: Any = None, group: Any = None, init_rrefs: bool = True) -> None:
        super().__init__()
        self.sharded_tensor2 = _sharded_rand(spec, group, init_rrefs) if spec is not None else None
        self.random_tensor2 = torch.nn.Parameter(torch.rand(2, 2))


class MyShardedModel1(torch.nn.Module):
    """``sharded_tensor1`` and ``random_tensor1`` as in :class:`MyShardedModel2`, and ``submodule``, one of those."""

    def __init__(self, spec: Any = None, group: Any = None, init_rrefs: bool = True) -> None:
        super().__init__()
        self.sharded_tensor1 = _sharded_rand(spec, group, init_rrefs) if spec is not None else None
        self.random_tensor1 = torch.nn.Parameter(torch.rand(2, 2))
        self.submodule = MyShardedModel2(spec, group, init_rrefs)
