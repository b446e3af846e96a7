"""``multiprocessing`` contexts whose processes tell their exit status right to every thread that asks.

A forkserver child's exit status comes as 8 bytes on a pipe that the server then closes. ``multiprocessing``
reads them in ``Popen.poll`` without a lock, and every thread may call it: ``join``, ``is_alive`` and
``exitcode``, and ``Process.start`` in *any* thread, which polls every child of the process to forget the
ended ones. When two threads see the pipe ready at once, one reads the status and the other reads the end of
the pipe and writes 255 over it (CPython gh-130895; 4 threads joining one killed child read 255 in 50 of 50
tries on Python 3.11). A rank killed by SIGKILL, by a fault or by the run, then reads "exit code 255", and its
cause is lost. A sweep's points, a restart's next attempt and a runner's watch start processes in threads
while other threads watch theirs, so the harness meets it under load.

Here ``poll`` waits for the process outside a lock, then reads its status under one, once: every thread gets
the status the first one read. A spawned child's status comes from ``waitpid``, where the thread that loses
gets "still running" just after the child ended; it is read under the same lock.

    ctx = context("forkserver")
    proc = ctx.Process(target=work)
    proc.start()
"""
from __future__ import annotations

import multiprocessing.connection
import multiprocessing.context
import os
import threading
from multiprocessing import popen_forkserver, popen_spawn_posix
from typing import Any

__all__ = ["context"]


class _OnePoll:
    """A ``Popen`` mixin: its status read under a lock, once; a blocking poll waits outside the lock."""

    def __init__(self, process_obj: Any) -> None:
        self._status_lock = threading.Lock()
        super().__init__(process_obj)  # type: ignore[call-arg]

    def poll(self, flag: int = os.WNOHANG) -> int | None:
        if self.returncode is None and flag != os.WNOHANG:  # type: ignore[attr-defined]
            multiprocessing.connection.wait([self.sentinel])  # type: ignore[attr-defined]
        with self._status_lock:
            if self.returncode is None:  # type: ignore[attr-defined]
                return super().poll(flag)  # type: ignore[misc]
            return self.returncode  # type: ignore[attr-defined]


class _ForkServerPopen(_OnePoll, popen_forkserver.Popen):
    """forkserver's Popen, its status read once."""


class _SpawnPopen(_OnePoll, popen_spawn_posix.Popen):
    """spawn's Popen, its status read once."""


class _ForkServerProcess(multiprocessing.context.ForkServerProcess):
    """A forkserver process whose exit status every thread reads right (its class is pickled to the server)."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _ForkServerPopen(process_obj)


class _SpawnProcess(multiprocessing.context.SpawnProcess):
    """A spawned process whose exit status every thread reads right (its class is pickled to the child)."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _SpawnPopen(process_obj)


class _ForkServerContext(multiprocessing.context.ForkServerContext):
    Process = _ForkServerProcess


class _SpawnContext(multiprocessing.context.SpawnContext):
    Process = _SpawnProcess


_CONTEXTS = {"forkserver": _ForkServerContext(), "spawn": _SpawnContext()}


def context(method: str) -> multiprocessing.context.BaseContext:
    """``multiprocessing.get_context(method)`` ("forkserver" or "spawn"), its processes' exit status read right
    from any thread."""
    try:
        return _CONTEXTS[method]
    except KeyError:
        raise ValueError(f"start method {method!r}: the harness starts processes by 'forkserver' or 'spawn'") from None
