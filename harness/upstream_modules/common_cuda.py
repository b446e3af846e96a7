"""``torch.testing._internal.common_cuda`` as distributed test files use it: the machine's CUDA flags."""
from __future__ import annotations

from harness.testing.requirements import flag

__all__ = ["TEST_CUDA", "TEST_MULTIGPU"]

TEST_CUDA: bool = flag("TEST_CUDA")
TEST_MULTIGPU: bool = flag("TEST_MULTIGPU")
