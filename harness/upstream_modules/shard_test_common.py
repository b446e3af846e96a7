"""``torch.testing._internal.distributed._shard.test_common``: ``SimpleMegatronLM``, the two-layer model the
sharding-plan tests shard."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.upstream_modules.common_utils import torch_release

__all__ = ["SimpleMegatronLM"]


def _local(weight: Any) -> Any:
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    return weight.local_tensor() if isinstance(weight, ShardedTensor) else weight


class SimpleMegatronLM(nn.Module):
    """``fc1`` (``nn.Linear(*linear_size[0])``), GELU, ``fc2`` (``nn.Linear(*linear_size[1])``), in ``dtype``. As
    the installed release's, a ``rank`` puts both layers on device ``rank``: ``cuda:<rank>`` to torch 2.14,
    ``torch.device(rank)`` (that index of the current accelerator) from 2.15. Without the device that raises,
    which the harness reports as a test that needs CUDA.

    Example::

        model = SimpleMegatronLM([[17, 12], [12, 29]])
        model(torch.randn(4, 17)).shape      # torch.Size([4, 29])
    """

    def __init__(self, linear_size: Any, rank: int | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(*linear_size[0], dtype=dtype)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(*linear_size[1], dtype=dtype)
        if rank is not None:
            device = torch.device(rank) if torch_release() >= (2, 15) else torch.device("cuda", rank)
            self.fc1.to(device)
            self.fc2.to(device)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gelu(self.fc1(inp)))

    def get_weights(self) -> tuple[Any, Any]:
        """The two weights, each rank's local shard where a weight is a ``ShardedTensor``."""
        return _local(self.fc1.weight), _local(self.fc2.weight)

    def get_biases(self) -> tuple[Any, Any]:
        return self.fc1.bias, self.fc2.bias

    def get_weight_grads(self) -> tuple[Any, Any]:
        return self.fc1.weight.grad, self.fc2.weight.grad

    def get_bias_grads(self) -> tuple[Any, Any]:
        return self.fc1.bias.grad, self.fc2.bias.grad
