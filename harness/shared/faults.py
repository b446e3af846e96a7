"""Faults on purpose, as data: what to do to which rank at which call, in which attempt, and how to say it.

A :class:`Fault` travels in the ``protocol.Task`` from the parent (which checked it: harness.parent.restarts)
to every rank (where harness.ranks.fault_trigger fires it) and comes back named in the verdict's words
(harness.judging.attempts). The public constructors (``kill``, ``delay``, ``raise_``, ``hang``, ``io_error``) are
here so that every side shares one vocabulary; users reach them as ``harness.faults``.
"""
from __future__ import annotations

import dataclasses
import errno as errno_names
from typing import Any

__all__ = ["Fault", "kill", "delay", "raise_", "hang", "io_error", "KINDS", "DISRUPTING", "ordinal",
           "attempt_env"]

#: the kinds of fault; the ones that end or break a rank's test (a delay only slows it)
KINDS = ("kill", "delay", "raise_", "hang", "io_error")
DISRUPTING = ("kill", "raise_", "hang", "io_error")

#: the variable torchrun sets in each worker to the number of times its agent restarted the workers
attempt_env = "TORCHELASTIC_RESTART_COUNT"


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` done to ``rank`` as it enters its ``nth`` call of ``op`` (None: any collective), in
    attempt ``attempt`` (0: the first run of the test), once. An ``io_error`` targets writes under ``path_glob``
    instead of a collective.

    Example::

        kill(1, op="all_reduce", nth=3)      # Fault(kind='kill', rank=1, op='all_reduce', nth=3)
    """

    kind: str
    rank: Any
    op: Any = None
    nth: Any = 1
    attempt: Any = 0
    seconds: Any = 0.0  # delay
    exc: Any = None  # raise_: an exception instance or class
    path_glob: Any = ""  # io_error
    after_bytes: Any = 0  # io_error: the bytes that still go through first
    errno: Any = errno_names.ENOSPC  # io_error

    def __str__(self) -> str:
        args = [f"rank={self.rank!r}"]
        if self.kind == "delay":
            args.append(f"seconds={self.seconds!r}")
        if self.kind == "raise_":
            args.append(f"exc={self.exc!r}")
        if self.kind == "io_error":
            args += [f"path_glob={self.path_glob!r}", f"after_bytes={self.after_bytes!r}",
                     f"errno={errno_names.errorcode.get(self.errno, self.errno) if isinstance(self.errno, int) else self.errno!r}"]
        else:
            args += [f"op={self.op!r}", f"nth={self.nth!r}"]
        if self.attempt != 0:
            args.append(f"attempt={self.attempt!r}")
        return f"{self.kind}({', '.join(args)})"

    @property
    def what(self) -> str:
        """The calls this fault counts, as a report says them ("all_reduce", "collectives")."""
        return "collectives" if self.op is None else str(self.op)


def kill(rank: int, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """SIGKILL ``rank`` as it enters its ``nth`` call of ``op`` (None: any collective).

    Example::

        @faults.inject(faults.kill(1, op="all_reduce", nth=3))
    """
    return Fault("kill", rank, op, nth, attempt)


def delay(rank: int, seconds: float, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """``rank`` sleeps ``seconds`` as it enters its ``nth`` call of ``op``, then makes the call.

    Example::

        @faults.inject(faults.delay(0, 2.0, op="barrier"))
    """
    return Fault("delay", rank, op, nth, attempt, seconds=seconds)


def raise_(rank: int, exc: BaseException | type[BaseException], op: str | None = None, nth: int = 1, *,
           attempt: int = 0) -> Fault:
    """``rank``'s ``nth`` call of ``op`` raises ``exc`` instead of running (an instance, or a class).

    Example::

        @faults.inject(faults.raise_(1, RuntimeError("link down"), op="all_gather_into_tensor"))
    """
    return Fault("raise_", rank, op, nth, attempt, exc=exc)


def hang(rank: int, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """``rank``'s ``nth`` call of ``op`` never returns (for watchdog and timeout code).

    Example::

        @faults.inject(faults.hang(1, op="barrier"))
    """
    return Fault("hang", rank, op, nth, attempt)


def io_error(rank: int, path_glob: str, after_bytes: int = 0, errno: int = errno_names.ENOSPC, *,
             attempt: int = 0) -> Fault:
    """A write by ``rank`` to a file whose path matches ``path_glob`` (``fnmatch``, on the absolute path) fails
    with ``OSError(errno)`` once ``after_bytes`` bytes went to such files: a full disk under a checkpoint writer.

    Example::

        @faults.inject(faults.io_error(1, "*.distcp", after_bytes=1024))
    """
    return Fault("io_error", rank, None, 1, attempt, path_glob=path_glob, after_bytes=after_bytes, errno=errno)


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th'."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
