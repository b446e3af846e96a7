"""The runner process's progress file: the test it runs now, and the counts of those before it, so that the thin
parent can say what a runner process that died without reporting was doing (harness.runner.forked).

Only tests that run in the runner process itself can take it down: thread ranks, ranks simulated in one process
(local tensors), and tests without ranks; a rank that dies is its test's failure (harness.parent.pool)."""
from __future__ import annotations

from typing import Any

__all__ = ["keep_progress", "keeping", "test_started", "lost_runner"]

#: in a runner process: the file in which it keeps the test it runs (None: it keeps none)
_PATH: dict[str, str | None] = {"path": None}


def keep_progress(path: str | None) -> None:
    """In the runner process: keep the progress in ``path`` from now on (None: keep none)."""
    _PATH["path"] = path


def keeping() -> bool:
    """Whether this process keeps its progress (a runner process of the thin parent's)."""
    return _PATH["path"] is not None


def test_started(started: int, total: int, done: Any, test_id: str) -> None:
    """Test number ``started`` of ``total``, ``test_id``, begins; ``done``: the counts of the tests before it
    (harness.runner.results.Counts). Written over the last; only where :func:`keeping`."""
    try:
        with open(_PATH["path"] or "", "w") as f:
            f.write(f"{started}\t{total}\t{done.passed}\t{done.failed}\t{done.skipped}\t{test_id}\n")
    except OSError:
        pass


def lost_runner(how: str, progress: str | None) -> tuple[str, str]:
    """What to say of a runner process that ended (``how``: "killed by SIGSEGV (exit code -11)") without reporting,
    from its progress file: the words, and the summary line (the test it was running counted as failed).

    Example::

        lost_runner("killed by SIGSEGV (exit code -11)", path)
        # ('harness: the runner process ended (killed by SIGSEGV ...) without reporting, in m.TestB.test_b
        #   (test 2 of 3). ...', '1 passed, 1 failed, 0 skipped')
    """
    head = f"harness: the runner process ended ({how}) without reporting"
    try:
        with open(progress or "") as f:
            fields = f.read().rstrip("\n").split("\t", 5)
        started, total, passed, failed, skipped = (int(n) for n in fields[:5])
        test_id = fields[5]
    except (OSError, ValueError, IndexError):
        return head, "0 passed, 0 failed, 0 skipped"
    left = total - started
    counts = f"{passed} passed, {failed + 1} failed, {skipped} skipped"
    words = (f"{head}, in {test_id} (test {started} of {total}). That test ran in the runner process itself (thread "
             "ranks, ranks simulated in one process, or no ranks), and what ended the process ended the run: its "
             "Python stack, if it crashed, is above (faulthandler). The tests before it are reported above"
             + (f"; the {left} after it did not run." if left > 0 else ".")
             + f" Run it alone: the same command with -k {'.'.join(test_id.split('.')[-2:])}")
    return words, counts
