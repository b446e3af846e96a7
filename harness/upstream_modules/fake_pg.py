"""``torch.testing._internal.distributed.fake_pg`` as distributed test files use it: ``FakeStore`` for torch's
``fake`` process group (importing it registers the backend, as upstream's module does)."""
from __future__ import annotations

from harness.testing.fake_store import FakeStore

__all__ = ["FakeStore"]
