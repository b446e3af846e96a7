"""The harness's exceptions, public: ``HarnessError`` (the root), ``UsageError``, ``RankFailure``, ``RankError``, and ``NoTerminal`` (a breakpoint
in a rank with no terminal to open its prompt in).

Example::

    from harness.errors import RankFailure
"""
from __future__ import annotations

from harness.shared.errors import HarnessError, NoTerminal, RankAbort, RankError, RankFailure, UsageError

__all__ = ["HarnessError", "UsageError", "RankFailure", "RankError", "RankAbort", "NoTerminal"]
