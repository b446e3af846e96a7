"""``torch.testing._internal.common_dist_composable``: the composable APIs' test models (``UnitModule``,
``CompositeModel``, ``UnitParamModule``, ``CompositeParamModel``, ``FakeSequential``, ``NestedSequentialModel``),
with upstream's submodule names, shapes and order of initialization (the same seed draws the same weights)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["UnitModule", "CompositeModel", "UnitParamModule", "CompositeParamModel", "FakeSequential",
           "NestedSequentialModel"]


def _linear(n_in: int, n_out: int, device: Any, bias: bool = True) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=bias, device=device)


class UnitModule(nn.Module):
    """``l1`` -> ``seq`` (ReLU, Linear, ReLU) -> ``l2``, all 100 wide."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.l1 = _linear(100, 100, device)
        self.seq = nn.Sequential(nn.ReLU(), _linear(100, 100, device), nn.ReLU())
        self.l2 = _linear(100, 100, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.seq(self.l1(x)))


class CompositeModel(nn.Module):
    """``l1`` -> ``u1`` -> ``u2`` (two :class:`UnitModule`) -> ``l2``."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.l1 = _linear(100, 100, device)
        self.u1 = UnitModule(device)
        self.u2 = UnitModule(device)
        self.l2 = _linear(100, 100, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.u2(self.u1(self.l1(x))))


class UnitParamModule(nn.Module):
    """``l`` -> ``seq`` -> matrix product with the 100 x 100 parameter ``p``."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.l = _linear(100, 100, device)  # noqa: E741 - upstream's name
        self.seq = nn.Sequential(nn.ReLU(), _linear(100, 100, device), nn.ReLU())
        self.p = nn.Parameter(torch.randn((100, 100), device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self.seq(self.l(x)), self.p)


class CompositeParamModel(nn.Module):
    """``l`` -> ``u1`` -> ``u2`` -> matrix product with ``p``; a persistent 100 x 100 buffer ``buffer``."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.l = _linear(100, 100, device)  # noqa: E741 - upstream's name
        self.u1 = UnitModule(device)
        self.u2 = UnitModule(device)
        self.p = nn.Parameter(torch.randn((100, 100), device=device))
        self.register_buffer("buffer", torch.randn((100, 100), device=device), persistent=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self.u2(self.u1(self.l(x))), self.p)


class FakeSequential(nn.Module):
    """Runs its modules in order like ``nn.Sequential``, but holds them in a plain list: they are not its
    submodules, so a wrap policy keyed on ``nn.Sequential`` does not see it (upstream's nesting trick)."""

    def __init__(self, *modules: nn.Module) -> None:
        super().__init__()
        self._module_sequence = list(modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self._module_sequence:
            x = module(x)
        return x


class NestedSequentialModel(nn.Module):
    """``seq1`` -> ``lin`` -> ``seq2``, sequences nested in :class:`FakeSequential` to tell traversal orders
    apart: 1 wide in, 4 wide out. Upstream's class defines ``forward`` inside ``__init__`` by mistake, so it
    cannot be called; this one can (the parameters are the same)."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.seq1 = nn.Sequential(
            _linear(1, 1, device),
            FakeSequential(_linear(1, 1, device), nn.ReLU(), FakeSequential(_linear(1, 1, device)), nn.ReLU()),
            _linear(1, 2, device),
        )
        self.lin = _linear(2, 2, device)
        self.seq2 = nn.Sequential(
            nn.ReLU(),
            _linear(2, 3, device),
            FakeSequential(_linear(3, 2, device, bias=False), _linear(2, 4, device, bias=False)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq2(self.lin(self.seq1(x)))
