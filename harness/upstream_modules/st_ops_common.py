"""``torch.testing._internal.distributed._shard.sharded_tensor._test_ops_common``: the sharding specs and helpers
the sharded-tensor op tests (embedding, linear, binary ops) build on, over four ranks."""
from __future__ import annotations

from typing import Any, Callable

import torch

from harness.upstream_modules.common_utils import torch_release

__all__ = ["generate_chunk_sharding_specs_for_test", "generate_enumerable_sharding_specs_for_test",
           "generate_local_weight_sharding_params_for_test", "clone_module_parameter", "gen_binary_op_func"]


def _placement(rank: int) -> str:
    """Rank ``rank``'s shard's place: its own GPU (``cuda:r``) up to torch 2.14; from 2.15 the accelerator's, or
    the CPU where there is none, as upstream's."""
    if torch_release() < (2, 15):
        return f"rank:{rank}/cuda:{rank}"
    found = torch.accelerator.current_accelerator()
    return f"rank:{rank}/cpu" if found is None else f"rank:{rank}/{found.type}:{rank}"


def generate_chunk_sharding_specs_for_test(sharding_dim: int) -> list[Any]:
    """Three chunk specs on ``sharding_dim`` over ranks 0 to 3: in rank order, then starting at rank 2, then at 3."""
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    return [ChunkShardingSpec(dim=sharding_dim, placements=[_placement(r) for r in order])
            for order in ((0, 1, 2, 3), (2, 3, 0, 1), (3, 0, 1, 2))]


def generate_enumerable_sharding_specs_for_test() -> list[Any]:
    """One enumerable spec of a 10 x 10 tensor: its four 5 x 5 quarters on ranks 0 to 3 (down, then across)."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata

    corners = ((0, 0), (5, 0), (0, 5), (5, 5))
    return [EnumerableShardingSpec([ShardMetadata(shard_offsets=list(corner), shard_sizes=[5, 5],
                                                  placement=_placement(rank))
                                    for rank, corner in enumerate(corners)])]


def generate_local_weight_sharding_params_for_test(local_weight: torch.Tensor, sharded_dim: int, gpu_num: int,
                                                   spec: Any, rank: int) -> tuple[int, int]:
    """Where ``rank``'s shard of ``local_weight`` starts on ``sharded_dim`` and how long it is, under the chunk
    ``spec`` over ``gpu_num`` ranks (``torch.chunk``'s sizes, in the spec's placement order)."""
    size = local_weight.size(sharded_dim)
    split = -(-size // gpu_num)  # torch.chunk's chunk size
    start = 0
    chunk = 0
    for index, placement in enumerate(spec.placements):
        chunk = max(min(size, split * (index + 1)) - split * index, 0)
        if placement.rank() == rank:
            return start, chunk
        start += chunk
    return 0, chunk  # a rank the spec does not name: upstream's answer, the last chunk's size from 0


def clone_module_parameter(module: torch.nn.Module, param_name: str) -> torch.nn.Parameter:
    """A new parameter holding a detached copy of ``module``'s ``param_name``."""
    return torch.nn.Parameter(getattr(module, param_name).detach().clone())


def gen_binary_op_func(python_op: str, inplace: bool = False) -> Callable[[Any, Any], Any]:
    """``f(lhs, rhs)`` applying ``python_op``: a torch function's name (``"torch.add"``), or an operator (``"+"``,
    in place with ``inplace``: ``lhs += rhs``, returning ``lhs``)."""
    import operator

    if "torch" in python_op:
        function = eval(python_op, {"torch": torch})  # noqa: S307 - a test's own "torch.x" name
        return lambda lhs, rhs: function(lhs, rhs)
    names = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
             "@": "matmul", "&": "and_", "|": "or_", "^": "xor", "<<": "lshift", ">>": "rshift",
             "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
    if python_op not in names:
        raise ValueError(f"gen_binary_op_func({python_op!r}): an operator ({', '.join(names)}) or a torch function")
    if inplace:
        return getattr(operator, f"i{names[python_op].rstrip('_')}")
    return getattr(operator, names[python_op])
