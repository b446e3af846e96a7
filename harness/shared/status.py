"""The one vocabulary of outcomes and exit codes, shared by the ranks, the test case and the runner."""
from __future__ import annotations

import enum

__all__ = ["Status", "ExitCode", "BAD"]


class Status(str, enum.Enum):
    """What happened to a test, a subtest or one rank of it. A ``str`` so results stay plain data."""

    PASSED = "passed"
    FAILED = "failed"  # an assertion failed
    ERROR = "error"  # something else was raised
    SKIPPED = "skipped"
    CRASHED = "crashed"  # the rank process died
    TIMEOUT = "timeout"  # the rank was still running at the test's timeout
    KILLED = "killed"  # stopped by the parent after another rank failed (HARNESS_PEER_GRACE)
    XFAIL = "xfail"  # failed under @expectedFailure
    XPASS = "xpass"  # passed under @expectedFailure
    INTERRUPTED = "interrupted"  # running when Ctrl-C or SIGTERM came: never a pass

    def __str__(self) -> str:
        return self.value


#: outcomes that make a run fail
BAD = (Status.FAILED, Status.ERROR, Status.CRASHED, Status.TIMEOUT, Status.KILLED, Status.XPASS, Status.INTERRUPTED)


class ExitCode(enum.IntEnum):
    """How a run of the runner (or a module's ``run_tests()``) ends."""

    OK = 0  # at least one test ran and none failed
    FAILED = 1  # a test failed or errored
    USAGE = 2  # the command line or a HARNESS_* variable was wrong
    NO_TESTS = 5  # nothing ran: nothing selected, or everything skipped (pytest's code)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM)
