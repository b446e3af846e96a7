"""``torch.testing._internal.distributed.checkpoint_utils`` as distributed test files use it: ``with_temp_dir``."""
from __future__ import annotations

from harness.testing.decorators import with_temp_dir

__all__ = ["with_temp_dir"]
