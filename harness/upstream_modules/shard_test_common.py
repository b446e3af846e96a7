"""``torch.testing._internal.distributed._shard.test_common``: ``SimpleMegatronLM``, the two-layer model
(linear, GELU, linear) that the sharding-plan tests shard with their specs."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

__all__ = ["SimpleMegatronLM"]


class SimpleMegatronLM(nn.Module):
    """``fc1`` (``linear_size[0]``: in, out), GELU, ``fc2`` (``linear_size[1]``), of ``dtype``; with ``rank`` given,
    both layers go to that device (``torch.device(rank)``: the accelerator of that index).

    Example::

        model = SimpleMegatronLM([[17, 12], [12, 29]])
        model(torch.rand(4, 17)).shape       # torch.Size([4, 29])
    """

    def __init__(self, linear_size: Any, rank: int | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(*linear_size[0], dtype=dtype)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(*linear_size[1], dtype=dtype)
        if rank is not None:
            for layer in (self.fc1, self.fc2):
                layer.to(torch.device(rank))

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gelu(self.fc1(inp)))

    @staticmethod
    def _local(weight: Any) -> Any:
        from torch.distributed._shard.sharded_tensor import ShardedTensor

        return weight.local_tensor() if isinstance(weight, ShardedTensor) else weight

    def get_weights(self) -> tuple[Any, Any]:
        """The two weights, each its local shard where it is a ShardedTensor."""
        return self._local(self.fc1.weight), self._local(self.fc2.weight)

    def get_biases(self) -> tuple[Any, Any]:
        return self.fc1.bias, self.fc2.bias

    def get_weight_grads(self) -> tuple[Any, Any]:
        return self.fc1.weight.grad, self.fc2.weight.grad

    def get_bias_grads(self) -> tuple[Any, Any]:
        return self.fc1.bias.grad, self.fc2.bias.grad
