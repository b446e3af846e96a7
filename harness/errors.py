"""The harness's exceptions, public: ``HarnessError`` (the root), ``UsageError``, ``RankFailure``, ``RankError``, ``NoTerminal`` (a breakpoint
in a rank with no terminal to open its prompt in), and ``StrictXPass`` (a strict pytest xfail that passed, outside pytest).

Example::

    from harness.errors import RankFailure
"""
from __future__ import annotations

from harness.shared.errors import HarnessError, NoTerminal, RankAbort, RankError, RankFailure, StrictXPass, UsageError

__all__ = ["HarnessError", "UsageError", "RankFailure", "RankError", "RankAbort", "NoTerminal", "StrictXPass"]
