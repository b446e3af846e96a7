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
    unittest.main(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
