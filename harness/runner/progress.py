"""The runner process's progress file: the test it runs now, and the counts of those before it, so that the thin
parent can say what a runner process that died without reporting was doing (harness.runner.forked).

Only tests that run in the runner process itself can take it down: thread ranks, ranks simulated in one process
(local tensors), and tests without ranks; a rank that dies is its test's failure (harness.parent.pool). Those
tests can also hold it: a thread that keeps the GIL stops the process until the watchdog ends it
(harness.inprocess.watchdog, whose bound the file keeps too), or until the thin parent stops it after a signal
(:func:`stuck_runner`)."""
from __future__ import annotations

import time
from typing import Any

from harness.inprocess import watchdog

__all__ = ["keep_progress", "keeping", "test_started", "lost_runner", "stuck_runner"]

#: in a runner process: the file in which it keeps the test it runs (None: it keeps none), and that test's line
_PATH: dict[str, Any] = {"path": None, "line": "", "watchdog": None}


def keep_progress(path: str | None) -> None:
    """In the runner process: keep the progress in ``path`` from now on (None: keep none)."""
    _PATH["path"] = path
    if path is not None:
        watchdog.listen(_watchdog)


def _write() -> None:
    bound = _PATH["watchdog"]
    try:
        with open(_PATH["path"] or "", "w") as f:
            f.write(_PATH["line"] + ("watchdog\t" + "\t".join(map(str, bound)) + "\n" if bound is not None else ""))
    except OSError:
        pass


def _watchdog(state: Any) -> None:
    """The watchdog's bound on the running test: ``(limit, seconds, since, kind)``, or None once it ended in time."""
    _PATH["watchdog"] = state
    if _PATH["path"] is not None:
        _write()


def keeping() -> bool:
    """Whether this process keeps its progress (a runner process of the thin parent's)."""
    return _PATH["path"] is not None


def test_started(started: int, total: int, done: Any, test_id: str) -> None:
    """Test number ``started`` of ``total``, ``test_id``, begins; ``done``: the counts of the tests before it
    (harness.runner.results.Counts). Written over the last; only where :func:`keeping`."""
    _PATH["line"] = f"{started}\t{total}\t{done.passed}\t{done.failed}\t{done.skipped}\t{test_id}\n"
    _write()


def _read(progress: str | None) -> tuple[int, int, int, int, int, str, tuple[float, float, float, str] | None] | None:
    """The progress file's fields: started, total, passed, failed, skipped, test id, the watchdog's bound."""
    try:
        with open(progress or "") as f:
            lines = f.read().splitlines()
        fields = lines[0].split("\t", 5)
        started, total, passed, failed, skipped = (int(n) for n in fields[:5])
        bound = None
        if len(lines) > 1 and lines[1].startswith("watchdog\t"):
            kept = lines[1].split("\t")
            bound = (float(kept[1]), float(kept[2]), float(kept[3]), kept[4])
        return started, total, passed, failed, skipped, fields[5], bound
    except (OSError, ValueError, IndexError):
        return None


def lost_runner(how: str, progress: str | None, exitcode: int | None = None) -> tuple[str, str]:
    """What to say of a runner process that ended (``how``: "killed by SIGSEGV (exit code -11)") without reporting,
    from its progress file: the words, and the summary line (the test it was running counted as failed).
    ``exitcode`` 1 past the watchdog's bound: the watchdog ended it (harness.inprocess.watchdog).

    Example::

        lost_runner("killed by SIGSEGV (exit code -11)", path)
        # ('harness: the runner process ended (killed by SIGSEGV ...) without reporting, in m.TestB.test_b
        #   (test 2 of 3). ...', '1 passed, 1 failed, 0 skipped')
    """
    head = f"harness: the runner process ended ({how}) without reporting"
    read = _read(progress)
    if read is None:
        return head, "0 passed, 0 failed, 0 skipped"
    started, total, passed, failed, skipped, test_id, bound = read
    if exitcode == 1 and bound is not None and time.time() >= bound[2] + bound[1] - 1.0:
        past = f"The test held the process past its time limit ({bound[0]:g} s) and {bound[1] - bound[0]:g} s more"
        why = (past + (", and its own timeout did not stop it: a thread that holds the GIL and never lets it go (a "
                       "deadlock in C or C++ code) stops every Python thread." if bound[3] == "threads" else
                       ": its simulated ranks run in the test's own thread, where only the watchdog can stop them "
                       "(raise the class's timeout or HARNESS_TIMEOUT if it needs longer).")
               + " The watchdog (faulthandler) wrote every thread's Python stack above and ended the process.")
    else:
        why = ("That test ran in the runner process itself (thread ranks, ranks simulated in one process, or no "
               "ranks), and what ended the process ended the run: its Python stack, if it crashed, is above "
               "(faulthandler).")
    return _words(head, why, read), f"{passed} passed, {failed + 1} failed, {skipped} skipped"


def stuck_runner(signal_name: str, grace: float, progress: str | None) -> str:
    """What to say of a runner process that did not end within ``grace`` seconds of ``signal_name`` ("SIGTERM",
    "Ctrl-C"), which the thin parent then stopped: the words."""
    head = (f"harness: the runner process did not end within {grace:g} s of {signal_name}; stopped it (every "
            "thread's Python stack is above, from faulthandler)")
    read = _read(progress)
    if read is None:
        return head + "."
    why = ("A thread that holds the GIL and never lets it go (a deadlock in C or C++ code) stops every Python "
           "thread, the handler of the signal with them.")
    return _words(head, why, read)


def _words(head: str, why: str, read: tuple[Any, ...]) -> str:
    started, total, test_id = read[0], read[1], read[5]
    left = total - started
    return (f"{head}, in {test_id} (test {started} of {total}). {why} The tests before it are reported above"
            + (f"; the {left} after it did not run." if left > 0 else ".")
            + f" Run it alone: the same command with -k {'.'.join(test_id.split('.')[-2:])}")
