"""The harness's exceptions: one root, usage errors that say how to fix them, and rank outcomes.

Their public home is ``harness.errors`` (and ``harness`` itself): reports and tracebacks name them
there, and that path stays when the modules behind it move.
"""
from __future__ import annotations

__all__ = ["HarnessError", "UsageError", "RankFailure", "RankError", "RankAbort", "NoTerminal", "StrictXPass"]


class HarnessError(Exception):
    """Root of every error the harness raises itself."""


class UsageError(HarnessError, ValueError):
    """A test or the environment asked for something the harness cannot do; the message says the fix."""


class RankFailure(HarnessError, AssertionError):
    """One or more ranks failed an assertion: unittest reports it as a failure."""


class RankError(HarnessError):
    """One or more ranks raised, crashed or hung: unittest reports it as an error."""


class StrictXPass(HarnessError, AssertionError):
    """A test under ``@pytest.mark.xfail(strict=True)`` that passed, outside pytest: a failure in pytest's words
    (``[XPASS(strict)] reason``); the runner reports it as an unexpected success (XPASS)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"[XPASS(strict)] {reason}")
        self.reason = reason


class NoTerminal(HarnessError):
    """A breakpoint in a rank of a run that has no terminal to open a prompt in: the test fails at once."""


class RankAbort(BaseException):
    """A crash or timeout inside a hypothesis example.

    It derives from BaseException so that hypothesis does not try to shrink by re-running a test that
    hangs or crashes (each try would cost a whole timeout); the case turns it back into a RankError.
    """

    def __init__(self, error: RankError):
        super().__init__(str(error))
        self.error = error


for _cls in (HarnessError, UsageError, RankFailure, RankError, RankAbort, NoTerminal, StrictXPass):
    _cls.__module__ = "harness.errors"  # the public path a report prints and a user catches them by
del _cls
