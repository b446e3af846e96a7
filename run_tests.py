#!/usr/bin/env python
"""Run this repository's tests with the harness's runner (``python -m harness``), with its folders and times file.

Examples::

    python run_tests.py                                  # everything in test_distributed/
    python run_tests.py --all                            # ... plus the harness's own tests in tests/
    python run_tests.py -i test_pipeline -k parity       # one module, tests whose id matches *parity*
    python run_tests.py --list --shard 1 2               # what CI machine 1 of 2 would run
    HYPOTHESIS_PROFILE=ci python run_tests.py --all -j 2 --junit-xml test-reports/junit.xml

Everything else is ``python -m harness`` (harness/runner/): one line per test, the summary ending in
``N passed, N failed, N skipped``, ``--shard I N`` by the durations in ``.ci/test-times.json``
(``--update-times`` rewrites it), ``--shuffle [SEED]``, JUnit XML, the exit codes (0 passed, 1 failed,
2 usage error, 5 no test ran, 130 Ctrl-C, 143 SIGTERM), and under ``torchrun`` rank 0 alone reporting.
``python run_tests.py --help`` lists every flag.

The rank processes are spawned and import this file again as ``__mp_main__``: everything that runs
lives under ``if __name__ == "__main__":``.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SUITE_DIR = "test_distributed"
HARNESS_TESTS_DIR = "tests"


def main(argv: list[str] | None = None) -> int:
    from harness.runner import Defaults, FolderSet, main as run

    return run(argv, Defaults(
        prog="run_tests.py",
        description=f"Run the distharness test suite ({SUITE_DIR}/, and the harness's own tests in "
                    f"{HARNESS_TESTS_DIR}/ on request) with one line per test, a summary, sharding over CI "
                    "machines and JUnit XML.",
        folders=(SUITE_DIR,),
        folder_sets=(
            FolderSet("--all", (SUITE_DIR, HARNESS_TESTS_DIR),
                      f"run {SUITE_DIR}/ and the harness's own tests in {HARNESS_TESTS_DIR}/"),
            FolderSet("--harness-tests", (HARNESS_TESTS_DIR,),
                      f"run only the harness's own tests in {HARNESS_TESTS_DIR}/ (not {SUITE_DIR}/)"),
        ),
        times_file=".ci/test-times.json",
        root=ROOT,
    ))


if __name__ == "__main__":
    sys.exit(main())
