"""``run_tests()``: the ``__main__`` of a test module, as upstream's ``run_tests``."""
from __future__ import annotations

import sys
import unittest

__all__ = ["run_tests"]


def run_tests(argv: list[str] | None = None) -> None:
    """Run the calling module's tests with unittest and exit non-zero when any failed.

    Example::

        if __name__ == "__main__":
            run_tests()
    """
    from harness import torchrun

    if torchrun.launched():
        torchrun.main_module_entry(argv)
        return
    unittest.main(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                  testRunner=_Runner)


class _Result(unittest.TextTestResult):
    """unittest's text result, and what the harness says at the end of the run about tests it did not run
    itself: classes still on upstream's harness, skips for want of a GPU or NCCL (harness.report)."""

    def startTest(self, test: unittest.TestCase) -> None:
        from harness import report

        report.note_test_class(test)
        super().startTest(test)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        from harness import report

        super().addSkip(test, reason)
        report.note_skip(test, reason)


class _Runner(unittest.TextTestRunner):
    resultclass = _Result
