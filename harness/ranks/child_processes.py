"""Inside a rank: child processes a test left running, found through /proc and killed with all they started.

A process a test started and did not wait for (a server, a ``Popen`` never waited on) outlives the test:
it may print into a later test's output, hold a port, or write files a later test reads. This is not
state to record and put back (``harness.ranks.isolation``), but processes to end: :func:`running` lists the
rank's children before a test, :func:`kill_left` kills every newer child after it, with the processes
it started, and returns a sentence for each. A child that already ended is reaped silently, and the
children a library keeps as a cache (torch.compile's compile workers) are left alone.

Linux only (``/proc/<pid>/task/<tid>/children``); elsewhere no child is found.
"""
from __future__ import annotations

import os
import signal
import time

__all__ = ["running", "kill_left"]

# Child processes a library keeps as a cache, neither reported nor killed: torch.compile's compile workers
# (they end with their parent).
_LIBRARY_CHILDREN = (os.path.join("_inductor", "compile_worker"),)


def running() -> set[int]:
    """The pids of this process's children now (what :func:`kill_left` compares with after the test)."""
    return set(_children(os.getpid()))


def kill_left(before: set[int]) -> list[str]:
    """Kill every child of this process not in ``before``, and all it started; one sentence per child killed.

    Example::

        before = running()
        subprocess.Popen(["sleep", "60"])
        kill_left(before)    # ["child process `sleep 60` left running; killed, with any processes it started"]
    """
    left = []
    own_cmd = _process_info(os.getpid())[1]
    for pid in _children(os.getpid()):
        if pid in before:
            continue
        state, cmd = _process_info(pid)
        if state in ("", "Z", "X"):
            _reap(pid)  # it ended; only its exit status was left to collect
            continue
        if any(marker in cmd for marker in _LIBRARY_CHILDREN):
            continue
        tree = [pid] + _descendants(pid)
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        _reap(pid)
        shown = "a fork of this rank" if cmd == own_cmd else f"`{cmd[:80]}{'...' if len(cmd) > 80 else ''}`"
        # how many it had started varies from moment to moment (and from rank to rank): not part of the text
        left.append(f"child process {shown} left running; killed, with any processes it started")
    return left


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (any of its threads); zombies included."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue  # the thread ended, or a kernel without /proc/<pid>/task/<tid>/children
    return pids


def _process_info(pid: int) -> tuple[str, str]:
    """(state letter, command line) of a process; ("", "") when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError):
        return "", ""
    return state, cmd


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


def _reap(pid: int) -> None:
    deadline = time.monotonic() + 2.0
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # reaped already (the test's Popen object, or SIGCHLD ignored)
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.01)
