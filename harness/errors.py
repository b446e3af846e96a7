"""The harness's exceptions, public: ``HarnessError`` (the root), ``UsageError``, ``RankFailure``, ``RankError``.

Example::

    from harness.errors import RankFailure
"""
from __future__ import annotations

from harness.shared.errors import HarnessError, RankAbort, RankError, RankFailure, UsageError

__all__ = ["HarnessError", "UsageError", "RankFailure", "RankError", "RankAbort"]
