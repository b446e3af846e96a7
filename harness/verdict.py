"""The ranks' results of one test, judged: unittest's outcomes for the test and its subtests, in the parent.

:func:`report` is the one place rank results become unittest outcomes, for a spawned pool and for
torchrun alike: subtests one by one, then the test itself, root cause first. It decides (pass, skip,
fail, error; a needs-CUDA skip for a test on CPU for want of GPUs) and takes every text it shows from
``harness.outcome``. It writes no globals: what the run will say at its end goes to the run's notes.
:func:`world_changes` is the world's half of isolation: what the ranks of one test left altered.
"""
from __future__ import annotations

import sys
import unittest
from typing import Any, Protocol

from harness.config import Settings
from harness.errors import RankAbort, RankError, RankFailure
from harness.fallback import gpu_skip, needs_cuda, needs_nccl, test_line, upstream_skip
from harness.notes import Notes
from harness.outcome import (BAD, CRASHED, ERROR, FAILED, KILLED, SKIPPED, TIMEOUT, RankResult, env_changed_failure,
                             example_note, merge, order_by_cause, prefixed, subtest_report)
from harness.placement import Placement

__all__ = ["Judged", "report", "report_subtests", "skip", "fails", "world_changes", "fail_altering",
           "print_rank_output"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


class Judged(Protocol):
    """What the verdict needs to know of the test it judges (``harness.testrun.TestRun`` has it)."""

    test_id: str
    world_size: int
    placement: Placement
    conf: Settings
    notes: Notes  # the run's: where the needs-CUDA skips are counted
    module_file: str | None

    @property
    def fallback(self) -> bool:
        """On CPU only for want of GPUs: errors that mean "needs CUDA" become skips."""

    @property
    def shared_fallback(self) -> bool:
        """On shared GPUs only for want of one GPU per rank: errors that mean "needs NCCL" become skips."""

    def annotate(self, text: str) -> str:
        """``text`` (a failure report) with the notes that go under its first line: a test written for GPUs
        that ran without them, what triage found when the failure was checked in fresh ranks."""


def report(test: unittest.TestCase, run: Judged, results: list[RankResult],
           example: dict[str, Any] | None) -> None:
    """Turn the ranks' results into unittest outcomes: subtests one by one, then the test itself (raises)."""
    __tracebackhide__ = True
    bad = [r for r in results if r.status in BAD]
    desync = bool(bad) and all(r.desync for r in bad)
    show_output = run.conf.show_output
    # A rank's output is printed once: the root cause's in its failure report, the others' here. Under
    # hypothesis every example's output is printed here (the reports of the examples hypothesis tries
    # while shrinking are never shown), and the report leaves it out.
    verdict = merge(run.test_id, results, run.world_size, run.placement.label,
                    with_output=example is None or not show_output)
    if show_output:
        in_report = verdict.root_rank if verdict.status in (FAILED, ERROR) and not desync and example is None else None
        print_rank_output([r for r in results if r.rank != in_report])
    suffix = "" if example is None else "\n\n" + example_note(example)
    sub_failures = report_subtests(test, run, results, individually=example is None)
    if desync:
        # Stopped because one combination went wrong on one rank while its peers were inside it: that
        # combination's report (root cause first, then where each stuck rank was) says it all.
        if example is None:
            return
        raise RankAbort(RankError("\n\n".join(sub_failures) + suffix))
    if verdict.status == SKIPPED:
        raise skip(run, verdict.text)
    if verdict.status in (FAILED, ERROR) and verdict.root_rank is not None:
        why = _upstream_skip(results)
        if why:
            raise skip(run, why)
        cuda = _needs_cuda(run, results[verdict.root_rank])
        if cuda:
            run.notes.needs_cuda_for(run.test_id, cuda)
            raise unittest.SkipTest(cuda)
    if verdict.status in (FAILED, ERROR):
        text = run.annotate(verdict.text) + suffix
        error = RankFailure(text) if verdict.status == FAILED else RankError(text)
        if example is not None and any(r.status in (CRASHED, TIMEOUT, KILLED) for r in results):
            raise RankAbort(error)  # do not let hypothesis re-run a hang or crash to shrink it
        raise error
    if sub_failures:
        raise RankFailure("\n\n".join(sub_failures) + suffix)


def _subtest(test: Any, params: dict[str, Any]) -> Any:
    """unittest's subTest for one combination, named by its parameters (``msg`` is subTest's own argument)."""
    return test.subTest(**{("msg_" if k == "msg" else k): v for k, v in params.items()})


def report_subtests(test: unittest.TestCase, run: Judged, results: list[RankResult],
                    individually: bool) -> list[str]:
    """Report each combination as a unittest subtest; returns failure texts when not reporting individually."""
    __tracebackhide__ = True
    count = max((len(r.subtests) for r in results), default=0)
    texts = []
    for i in range(count):
        per_rank = [(r.rank, r.subtests[i]) for r in results if len(r.subtests) > i]
        # ranks stopped inside this combination (still in one of its collectives when a peer was done)
        stuck = [r for r in results if len(r.subtests) <= i and r.status in (KILLED, TIMEOUT) and not r.at_meeting]
        params = per_rank[0][1].params
        bad = [(rank, s) for rank, s in per_rank if s.status in BAD]
        skipped = [(rank, s) for rank, s in per_rank if s.status == SKIPPED]
        text = None
        if bad or (skipped and stuck):
            as_results = [RankResult(rank=rank, status=s.status, exc_type=s.exc_type, message=s.message,
                                     traceback=s.traceback, arrived=float(rank)) for rank, s in per_rank]
            root = order_by_cause(as_results)[0] if bad else next(r for r in as_results if r.status == SKIPPED)
            cuda = _needs_cuda(run, root) if bad else ""
            if cuda:
                run.notes.needs_cuda_for(run.test_id, cuda)
                if individually:
                    with _subtest(test, params):
                        test.skipTest(cuda)
                continue
            text = run.annotate(subtest_report(run.test_id, run.world_size, run.placement.label,
                                                    per_rank[0][1].label, root, as_results, stuck))
            error: Exception = RankFailure(text) if root.status == FAILED else RankError(text)
        if not individually:
            if text:
                texts.append(text)
            continue
        with _subtest(test, params):
            if text:
                raise error
            if skipped and len(skipped) == len(per_rank):
                raise skip(run, skipped[0][1].message)
    return texts


def skip(run: Judged, reason: str) -> unittest.SkipTest:
    """The skip to raise; one that means "needs a GPU or NCCL" is counted in the run's needs-CUDA line."""
    if gpu_skip(reason):
        run.notes.needs_cuda_for(run.test_id, reason)
    return unittest.SkipTest(reason)


def fails(run: Judged, results: list[RankResult]) -> bool:
    """The verdict on ``results`` is a failure, of the test or of one of its subtests: not a pass, and not a
    skip (upstream's skip codes, a test that hard-codes CUDA on CPU for want of GPUs). harness.triage
    checks exactly these in fresh ranks.
    """
    bad = [r for r in results if r.status in BAD]
    if bad:
        return not (_upstream_skip(results) or _needs_cuda(run, order_by_cause(bad)[0]))
    for r in results:
        for s in r.subtests:
            if s.status in BAD and not _needs_cuda(run, RankResult(rank=r.rank, status=s.status, exc_type=s.exc_type,
                                                                    message=s.message, traceback=s.traceback)):
                return True
    return False


def _upstream_skip(results: list[RankResult]) -> str:
    """Every rank that did not pass left with one of upstream's skip exit codes: the skip's reason."""
    bad = [r for r in results if r.status in BAD]
    reasons = {upstream_skip(r.exc_type, r.message) for r in bad if not r.peer_effect}
    return reasons.pop() if len(reasons) == 1 and "" not in reasons else ""


def _needs_cuda(run: Judged, root: RankResult) -> str:
    """The skip reason when a test on CPU (or shared GPUs) for want of GPUs failed because it hard-codes CUDA
    (or NCCL), else ""."""
    if root.status not in (FAILED, ERROR):
        return ""
    if run.fallback and needs_cuda(root.exc_type, root.message):
        what = "CUDA"
    elif run.shared_fallback and needs_nccl(root.exc_type, root.message):
        what = "NCCL (one GPU per rank)"
    else:
        return ""
    where = test_line(root.traceback, run.module_file)
    return f"needs {what}: {root.one_line()}" + (f" ({where})" if where else "")


def print_rank_output(results: list[RankResult]) -> None:
    """Each rank's output as one block, so lines from different ranks never interleave."""
    blocks = [prefixed(r.rank, r.output) for r in sorted(results, key=lambda r: r.rank) if r.output.strip()]
    if blocks:
        sys.stdout.write("\n".join(blocks) + "\n")
        sys.stdout.flush()


# ---- what the ranks of one test left altered ------------------------------------------------------


def world_changes(results: list[RankResult]) -> list[str]:
    """What the ranks of one test left altered, one sentence each, ranks named where not all did.

    ``results`` are the ranks' RankResults: their ``altered`` lists (harness.isolation, harness.cuda_state),
    and ``default_group`` (whether the harness's default process group was still there after the test)
    that only the world as a whole can judge: destroyed on some ranks and kept on others, the next test
    would hang in it.
    """
    ranks = sorted(r.rank for r in results)
    by_text: dict[str, list[int]] = {}
    for r in results:
        for text in r.altered or []:
            by_text.setdefault(text, []).append(r.rank)
    changes = [text if sorted(who) == ranks else f"{text} (rank{'s' if len(who) > 1 else ''} "
               f"{', '.join(map(str, sorted(who)))})" for text, who in by_text.items()]
    kept = [r.rank for r in results if r.default_group is True]
    gone = [r.rank for r in results if r.default_group is False]
    if kept and gone:
        changes.append(f"the default process group destroyed on rank{'s' if len(gone) > 1 else ''} "
                       f"{', '.join(map(str, gone))} only")
    return changes


def fail_altering(results: list[RankResult], changes: list[str], then: str = "ranks restarted") -> None:
    """HARNESS_ENV_CHANGED=fail: the ranks that left the process altered fail the test (if it passed);
    ``then``: what became of the ranks (``World.left_altered``)."""
    culprits = [r for r in results if r.altered or r.default_group is False] or results
    for r in culprits:
        env_changed_failure(r, changes, then)
