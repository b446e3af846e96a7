"""``run_tests()``: the ``__main__`` of a test module, as upstream's ``run_tests``."""
from __future__ import annotations

import sys
import unittest
from typing import Any

__all__ = ["run_tests"]


def run_tests(argv: list[str] | None = None) -> None:
    """Run the calling module's tests with unittest and exit non-zero when any failed.

    Example::

        if __name__ == "__main__":
            run_tests()
    """
    from harness.shared import launcher
    from harness.parent.run import Run

    run = Run()
    run.warm()
    if not launcher.launched():
        from harness.parent import template

        template.tell()  # the calling module, imported by now, says what the template should import too

    class Runner(unittest.TextTestRunner):
        resultclass = _Result

        def _makeResult(self) -> unittest.TextTestResult:
            return run.attach(super()._makeResult())

        def run(self, test: Any) -> unittest.TestResult:
            from harness.parent.pytest_marks import honoured

            with honoured(test):  # pytest's marks and outcomes, where pytest is importable
                return super().run(test)

    try:
        if launcher.launched():
            from harness.torchrun.job import main_module_entry

            main_module_entry(argv, Runner)
        else:
            unittest.main(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                          testRunner=Runner)
    finally:  # unittest.main exits: the run's notes come after its summary, on stderr (rank 0's under torchrun)
        run.close()
        if launcher.launched_rank() == 0:
            run.notes.say()


class _Result(unittest.TextTestResult):
    """unittest's text result, and what the harness says at the end of the run about tests it did not run
    itself: classes still on upstream's harness, skips for want of a GPU or NCCL (the run's notes)."""

    harness_run: Any = None

    def startTest(self, test: unittest.TestCase) -> None:
        self.harness_run.notes.test_class_seen(test)
        super().startTest(test)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self.harness_run.notes.skip_seen(test, reason)
