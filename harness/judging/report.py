"""A verdict rendered in the parent: unittest's outcomes for the test and its subtests, and the run's notes told.

harness.judging.verdict decides (a :class:`~harness.judging.verdict.Verdict`, as data); this module only renders it, the
way pytest's ``TestReport`` is rendered by its terminal reporter: the ranks' output printed, each
``run_subtests`` combination as a unittest subtest, then the test's own outcome raised (``SkipTest``,
``RankFailure``, ``RankError``), and a skip that means "needs a GPU or NCCL" counted in the run's notes.
"""
from __future__ import annotations

import sys
import unittest
from typing import Any

from harness.judging import report_text
from harness.shared.errors import RankAbort, RankError, RankFailure
from harness.judging.notes import Notes
from harness.shared import pytest_outcomes
from harness.shared.outcome import ERROR, FAILED, SKIPPED, XFAIL
from harness.judging.verdict import NEEDS_CUDA, NEEDS_NCCL, SubtestVerdict, Verdict

__all__ = ["report", "report_subtests", "count_skip", "print_rank_output"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


def report(test: unittest.TestCase, verdict: Verdict, notes: Notes) -> None:
    """Render ``verdict`` as unittest's outcomes: output, subtests one by one, then the test itself (raises)."""
    __tracebackhide__ = True
    print_rank_output(verdict.shown)
    if verdict.individually:
        report_subtests(test, verdict, notes)
    else:  # under a hypothesis example: the failures are in the test's report; the needs-CUDA skips are counted
        for sub in verdict.subtests:
            if sub.skip in (NEEDS_CUDA, NEEDS_NCCL):
                count_skip(notes, verdict.test_id, sub)
    if verdict.status == SKIPPED:
        count_skip(notes, verdict.test_id, verdict)
        raise unittest.SkipTest(verdict.reason)
    if verdict.status == XFAIL:  # a rank called pytest.xfail(): pytest's own outcome, which every front end reads
        pytest_outcomes.raise_xfail(verdict.reason)
    if verdict.status in (FAILED, ERROR):
        error = RankFailure(verdict.text) if verdict.status == FAILED else RankError(verdict.text)
        error.exc_types = verdict.root_types  # the root cause's exception classes: an xfail mark's raises= reads them
        if verdict.abort:
            raise RankAbort(error)  # do not let hypothesis re-run a hang or crash to shrink it
        raise error


def report_subtests(test: unittest.TestCase, verdict: Verdict, notes: Notes) -> None:
    """Each ``run_subtests`` combination of ``verdict`` as a unittest subtest, named by its parameters."""
    __tracebackhide__ = True
    for sub in verdict.subtests:
        with _subtest(test, sub.params):
            if sub.status in (FAILED, ERROR):
                raise RankFailure(sub.text) if sub.status == FAILED else RankError(sub.text)
            if sub.status == SKIPPED:
                count_skip(notes, verdict.test_id, sub)
                test.skipTest(sub.reason)


def count_skip(notes: Notes, test_id: str, skip: Verdict | SubtestVerdict) -> None:
    """A skip (of the test or of one subtest) that means "needs a GPU or NCCL" goes in the run's needs-CUDA line."""
    if skip.gpu:
        notes.needs_cuda_for(test_id, skip.reason, fallback=skip.skip == NEEDS_CUDA)


def _subtest(test: Any, params: dict[str, Any]) -> Any:
    """unittest's subTest for one combination, named by its parameters (``msg`` is subTest's own argument)."""
    return test.subTest(**{("msg_" if k == "msg" else k): v for k, v in params.items()})


def print_rank_output(outputs: list[tuple[int, str]]) -> None:
    """Each rank's output as one block, so lines from different ranks never interleave."""
    text = report_text.rank_outputs(outputs)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
