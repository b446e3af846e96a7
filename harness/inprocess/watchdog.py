"""The last bound on a test whose ranks live in this process: faulthandler's watchdog, which needs no GIL.

Thread ranks and simulated ranks run in the process that runs the test: the runner process, or the user's own
process under ``run_tests()``, pytest or unittest. Their time limit (harness.inprocess.threaded) is kept by the
main thread, and the main thread needs the GIL. A thread that holds the GIL and never lets it go stops every
Python thread, and with them the main thread's timeout, SIGTERM's handler and the run. A deadlock in C or C++
does this: a lock taken with the GIL held, waiting for a thread that waits for the GIL.

faulthandler's watchdog is a C thread that needs no GIL. :func:`bounded` arms it for one test, for the test's
limit and a margin (:func:`margin`: the time the test's own timeout needs to stop it and report). If the test runs past
that, the watchdog writes every thread's Python stack to stderr and ends the process with exit status 1. The
run's report ends there. Under the runner, the thin parent names the test and says why
(harness.runner.progress, which listens here).
"""
from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
from typing import Any, Callable, Iterator

__all__ = ["margin", "bounded", "keep_stderr", "listen"]


def margin(limit: float) -> float:
    """Seconds beyond a test's ``limit`` before the watchdog ends the process: its own timeout acts first, and
    reports (a thread rank's, after the limit: a second, then up to two for each rank released from a collective).

    Example::

        margin(300.0)   # 40.0
        margin(2.0)     # 10.2
    """
    return 10.0 + limit / 10.0


#: the stderr the watchdog writes to (the pytest plugin keeps the real one before pytest captures fd 2)
_STDERR: dict[str, int | None] = {"fd": None}
#: called with (limit, seconds, since, kind) when the watchdog is armed for a test, with None when it is called off
_LISTENERS: list[Callable[[Any], None]] = []
#: whether a test in this process holds the watchdog now (a nested bound leaves the outer one)
_ARMED: dict[str, bool] = {"on": False}


def keep_stderr(fd: int | None) -> None:
    """Write the watchdog's stacks to ``fd``, a copy of the real stderr (pytest's fd capture replaces fd 2);
    None: to stderr again."""
    _STDERR["fd"] = fd


def listen(callback: Callable[[Any], None]) -> None:
    """Call ``callback((limit, seconds, since, kind))`` when a test arms the watchdog for ``seconds`` (its ``limit``
    and the :func:`margin`; ``since``: ``time.time()``; ``kind``: :func:`bounded`'s), and
    ``callback(None)`` when it ends in time. Each callback is kept once."""
    if callback not in _LISTENERS:
        _LISTENERS.append(callback)


def _tell(state: Any) -> None:
    for callback in _LISTENERS:
        try:
            callback(state)
        except Exception:  # noqa: BLE001 - a listener that fails must not fail the test
            pass


def _stderr_fd() -> int | None:
    if _STDERR["fd"] is not None:
        return _STDERR["fd"]
    stream = sys.__stderr__
    try:
        fd = stream.fileno() if stream is not None else 2
        os.fstat(fd)
        return fd
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def bounded(limit: float, kind: str) -> Iterator[None]:
    """Within this block, a test that holds the process ``limit`` + :func:`margin` seconds ends it, with every
    thread's stack on stderr. ``kind``: ``"threads"`` (thread ranks, which keep a timeout of their own) or
    ``"local"`` (simulated ranks in the test's own thread: the watchdog is their only bound). A block inside
    another keeps the outer one's bound.

    Example::

        with watchdog.bounded(settings().timeout_for(None, test_id), "threads"):
            run_the_thread_ranks()
    """
    fd = _stderr_fd()
    if _ARMED["on"] or fd is None:
        yield
        return
    seconds = limit + margin(limit)
    faulthandler.dump_traceback_later(seconds, exit=True, file=fd)
    _ARMED["on"] = True
    _tell((limit, seconds, time.time(), kind))
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        _ARMED["on"] = False
        _tell(None)
