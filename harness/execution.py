"""One test in the parent: its world and placement, its hypothesis examples, the ranks' results as unittest outcomes.

``case.MultiProcessTestCase.run`` hands each test here (``run_in_pool``) or to ``torchrun`` (which
brings its own ranks); both describe the test with a :class:`TestRun` and call :func:`drive`, which
runs it once, or once per hypothesis example, and turns what the ranks sent back into unittest's
outcomes: subtests one by one, then the test itself, root cause first (``outcome.merge``).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
import unittest
from typing import Any, Callable

from harness import isolation
from harness import pool as pools
from harness import report
from harness.placement import Placement, choose_placement, gpu_count
from harness.config import Settings, settings
from harness.decorators import defined_at, gpus_needed, markers
from harness.errors import RankAbort, RankError, RankFailure, UsageError
from harness.fallback import (DEFAULT_GPUS, gpu_skip, needs_cuda, needs_nccl, pretend_device_count, test_line,
                              upstream_skip)
from harness.hypothesis_support import is_hypothesis_test, run_given
from harness.outcome import BAD, CRASHED, ERROR, FAILED, KILLED, SKIPPED, TIMEOUT, RankResult, merge, order_by_cause
from harness.rank import Task

__all__ = ["TestRun", "PoolRun", "run_in_pool", "drive", "world_size_for", "skip_if_nccl_alone"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


# ---- the world a test asks for -------------------------------------------------------------------


def _evaluate_world_size(test: Any, test_id: str) -> Any:
    try:
        ws = test.world_size
        if ws == -2 and getattr(test, "_harness_world_from_devices", False):
            import torch

            ws = torch.cuda.device_count()  # upstream's continuous tests: -2 means "one rank per GPU"
    except Exception as exc:
        raise UsageError(f"{test_id}: evaluating world_size raised {type(exc).__name__}: {exc}") from exc
    return ws


def _check_world_size(ws: Any, test_id: str, pretended: int | None) -> int:
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
        hint = ""
        if pretended is not None:
            hint = (f" (also with the device counts at {pretended}, as on a machine with enough GPUs, so it does not "
                    "come from a missing GPU); return the number of ranks the test needs")
        elif ws == 0:
            hint = " (return the number of ranks the test needs)"
        raise UsageError(f"{test_id}: world_size must be an int >= 1, got {ws!r}; a test that runs on no rank "
                         f"cannot pass{hint}")
    return ws


def world_size_for(test: Any, test_id: str, gpus_needed: int = 0, gpus: int | None = None) -> tuple[int, str]:
    """The world the test asks for, and a note when that differs from what this machine's counts give.

    Upstream tests size their world from the device count (``min(4, torch.cuda.device_count())``); on
    a machine with fewer GPUs than the test was written for that is 0 or 1. Then the test's world is
    taken as it would be on a machine with enough GPUs: ``skip_if_lt_x_gpu(x)``'s x, else
    ``fallback.DEFAULT_GPUS``. A world size of 0 that does not come from the device count stays an error.

    Example::

        world_size_for(test, "mod.TestX.test_y", gpus=0)   # (4, "world size 4 as on a machine with 4 GPUs ...")
    """
    gpus = gpu_count() if gpus is None else gpus
    want = gpus_needed or DEFAULT_GPUS
    ws = _evaluate_world_size(test, test_id)
    if gpus >= want:
        return _check_world_size(ws, test_id, None), ""
    with pretend_device_count(want):
        asked = _evaluate_world_size(test, test_id)
    if asked == ws:
        return _check_world_size(ws, test_id, want if ws == 0 else None), ""
    asked = _check_world_size(asked, test_id, want)
    return asked, (f"world size {asked} as on a machine with {want} GPUs (world_size follows the device count, "
                   f"{ws!r} on this machine)")


# ---- one test, as the parent runs it ------------------------------------------------------------


class TestRun:
    """One test in the parent: what :func:`drive` and the reporting need, whoever runs the ranks.

    ``gpus_for_world``: the GPUs "a machine with enough GPUs" has for this test (see world_size_for).
    A subclass sets ``placement`` (and adds how it runs the ranks).
    """

    __test__ = False  # not a test class, whatever pytest's name rules say
    placement: Placement

    def __init__(self, test: unittest.TestCase, gpus_for_world: int) -> None:
        self.test = test
        self.test_id = report.short_id(test)
        self.fn = getattr(type(test), test._testMethodName)
        self.conf: Settings = settings()
        self.world_size, self.world_note = world_size_for(test, self.test_id, gpus_for_world)
        self.module_file: str | None = getattr(sys.modules.get(type(test).__module__), "__file__", None)
        self.timeout = self.conf.timeout_for(getattr(test, "timeout", None), self.test_id)
        self.examples = 0
        self.started = time.monotonic()

    @property
    def fallback(self) -> bool:
        """On CPU only for want of GPUs: errors that mean "needs CUDA" become skips (HARNESS_DEVICE=cpu: failures)."""
        return self.placement.shortfall and self.placement.device_type == "cpu"

    @property
    def shared_fallback(self) -> bool:
        """On shared GPUs only for want of one GPU per rank: errors that mean "needs NCCL" become skips."""
        return self.placement.shortfall and self.placement.shared

    #: GPUs the test asks for with skip_if_lt_x_gpu (0: it names none)
    gpus_asked = 0

    def gpu_note(self) -> str:
        """On a failure of a test written for GPUs that ran on CPU, or on GPUs its ranks shared, for want of them:
        a line that says so, for the reader to know where to look ("" when the test did not ask for GPUs, or the
        placement was asked for)."""
        if not self.placement.shortfall or not (self.gpus_asked or self.world_note):
            return ""
        want = max(self.gpus_asked, self.world_size)
        why = f"skip_if_lt_x_gpu({self.gpus_asked})" if self.gpus_asked else "its world size follows the device count"
        found = gpu_count()
        if self.placement.shared:
            where = f"on {found} GPU{'s' if found != 1 else ''} its ranks shared over gloo (rank r on cuda:r % {found})"
            have = f"cuda:{found} and above do not exist here, and NCCL needs one GPU per rank"
        else:
            where = "on CPU/gloo"
            have = ("this machine has no GPU" if not found else
                    f"this machine has {found} GPU{'s' if found != 1 else ''}, which the ranks still see: cuda:{found} "
                    "and above do not exist there")
        return (f"Note: this test asks for {want} GPUs ({why}) and ran {where} for want of them ({have}). A test "
                f"written for GPUs can fail there where its run on {want} GPUs passes (a dtype the CPU kernel refuses, "
                f"a device named by index); run it where there are {want} GPUs, or set HARNESS_DEVICE=nccl to skip it "
                "here.")

    def with_gpu_note(self, text: str) -> str:
        """``text`` (a failure report) with :meth:`gpu_note` after its first line."""
        note = self.gpu_note()
        if not note:
            return text
        first, sep, rest = text.partition("\n")
        return f"{first}\n{note}" + (f"\n{rest}" if sep else "")

    def record(self, pids: list[int], reused: bool) -> None:
        """The test as it ran, for the runner's line and the pytest plugin (harness.report.records)."""
        report.record(report.TestRecord(self.test_id, self.world_size, self.placement.label if self.examples else "",
                                        self.placement.reason, time.monotonic() - self.started, pids, reused,
                                        self.examples))


def _default_threads(world_size: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, world_size))


class PoolRun(TestRun):
    """One test on this machine's reused rank processes (harness.pool)."""

    def __init__(self, test: unittest.TestCase) -> None:
        fn = getattr(type(test), test._testMethodName)
        gpus = gpus_needed(type(test), fn)
        super().__init__(test, gpus)
        self.gpus_asked = gpus
        self.placement = choose_placement(self.world_size, gpus, self.conf.device)
        if self.world_note:
            self.placement = dataclasses.replace(self.placement, reason=f"{self.world_note}; {self.placement.reason}")
        self.threads = self.conf.threads or _default_threads(self.world_size)
        self.reused = True
        self.pids: list[int] = []

    def run_once(self, kwargs: dict[str, Any] | None) -> list[RankResult]:
        """Send the test (with one hypothesis example's arguments, if any) to every rank; their results."""
        self.examples += 1
        key = (self.world_size, self.placement.kind)
        existing = pools._POOLS.get(key)
        if existing is None or existing.broken or not self.conf.reuse:
            self.reused = False
        pool = pools.get_pool(self.world_size, self.placement.kind, self.threads, self.conf)
        self.pids = pool.pids
        # Inside the pool's directory, so that ranks whose parent was killed remove them with it.
        temp_dir = tempfile.mkdtemp(prefix="test-", dir=pool.dir) if markers(self.fn)["temp_dir"] else None
        scratch = tempfile.mkdtemp(prefix="store-", dir=pool.dir)
        try:
            task = Task(module=type(self.test).__module__, module_file=self.module_file,
                        qualname=type(self.test).__qualname__, method=self.test._testMethodName,
                        device_type=self.placement.device_type, shared=self.placement.shared,
                        seed=self.conf.seed, kwargs=kwargs,
                        temp_dir=temp_dir, file_name=os.path.join(scratch, "store"), fresh_pg=pool.pg_suspect,
                        isolate=self.conf.env_changed != "off", world_size=self.world_size)
            pool.pg_suspect = False
            results = pool.run(task, self.timeout, self.conf.peer_grace)
            _settle_changes(self, pool, results)
            return results
        finally:
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
            if not self.conf.reuse:
                pools.discard_pool(pool)


def _settle_changes(run: PoolRun, pool: pools.RankPool, results: list[RankResult]) -> None:
    """A test left the ranks altered beyond repair: fresh ranks for the next test, and the test named in
    the run's summary (under HARNESS_ENV_CHANGED=fail, also a failure of this test)."""
    changes = isolation.world_changes(results)
    if not changes:
        return
    pools.discard_pool(pool)
    report.note_altered(run.test_id, changes)
    if run.conf.env_changed == "fail":
        isolation.fail_altering(results, changes)


def run_in_pool(test: unittest.TestCase) -> None:
    """The test body of ``MultiProcessTestCase.run`` in the parent: the test on this machine's ranks."""
    __tracebackhide__ = True
    run = PoolRun(test)
    try:
        if run.placement.skip:
            raise _skip(run, run.placement.skip)
        skip_if_nccl_alone(run)
        _note_fallback(run)
        drive(test, run, run.run_once)
    finally:
        run.record(run.pids, run.reused)


def skip_if_nccl_alone(run: TestRun) -> None:
    """A test that asks for NCCL and nothing else runs neither on CPU nor on shared GPUs (NCCL takes one GPU
    per rank): there for want of GPUs, a skip with the reason, never a silent run on gloo."""
    asked = markers(run.fn)["comms"]
    if not (isinstance(asked, str) and asked.strip().lower() == "nccl"):
        return
    if run.fallback:
        reason = f"needs CUDA: asks for backend='nccl' alone ({defined_at(run.fn)})"
    elif run.placement.shared and run.conf.device != "cpu":
        reason = (f"needs NCCL (one GPU per rank): asks for backend='nccl' alone and the placement is "
                  f"{run.placement.label} ({run.placement.reason}) ({defined_at(run.fn)})")
    else:
        return
    report.note_needs_cuda(run.test_id, reason)
    raise unittest.SkipTest(reason)


def _note_fallback(run: TestRun) -> None:
    """Remember tests that went to CPU or shared GPUs for want of GPUs; the run ends by saying so (never a silent skip)."""
    if run.placement.shortfall:
        report.note_fallback(run.placement.reason, run.test_id)


# ---- examples, and the ranks' results as unittest outcomes --------------------------------------


def drive(test: unittest.TestCase, run: TestRun,
          run_once: Callable[[dict[str, Any] | None], list[RankResult]]) -> None:
    """Run the test once, or once per hypothesis example, and report; the same for a pool and torchrun."""
    __tracebackhide__ = True
    if not is_hypothesis_test(run.fn):
        _report(test, run, run_once(None), None)
        return
    last: list[RankResult] = []

    def example(kwargs: dict[str, Any]) -> None:
        __tracebackhide__ = True
        last[:] = run_once(kwargs)
        _report(test, run, last, kwargs)

    try:
        run_given(run.fn, test, example)
    except RankAbort as abort:
        raise abort.error from None
    # Every example passed: show the last one's subtests (their skips and reasons) as subtests.
    _report_subtests(test, run, last, individually=True)


def _report(test: unittest.TestCase, run: TestRun, results: list[RankResult],
            example: dict[str, Any] | None) -> None:
    """Turn the ranks' results into unittest outcomes: subtests one by one, then the test itself."""
    __tracebackhide__ = True
    where = run.placement.label
    bad = [r for r in results if r.status in BAD]
    desync = bool(bad) and all(r.desync for r in bad)
    # A rank's output is printed once: the root cause's in its failure report, the others' here. Under
    # hypothesis every example's output is printed here (the reports of the examples hypothesis tries
    # while shrinking are never shown), and the report leaves it out.
    verdict = merge(run.test_id, results, run.world_size, where,
                    with_output=example is None or not run.conf.show_output)
    if run.conf.show_output:
        in_report = verdict.root_rank if verdict.status in (FAILED, ERROR) and not desync and example is None else None
        report.print_rank_output([r for r in results if r.rank != in_report])
    suffix = ""
    if example is not None:
        shown = ", ".join(f"{k}={v!r}" for k, v in example.items())
        suffix = (f"\n\nHypothesis example: {shown}\nReproduce it: put @example({shown}) above @given "
                  "(from hypothesis import example), or run with the same HYPOTHESIS_PROFILE (ci is derandomized).")
    sub_failures = _report_subtests(test, run, results, individually=example is None)
    if desync:
        # Stopped because one combination went wrong on one rank while its peers were inside it: that
        # combination's report (root cause first, then where each stuck rank was) says it all.
        if example is None:
            return
        raise RankAbort(RankError("\n\n".join(sub_failures) + suffix))
    if verdict.status == SKIPPED:
        raise _skip(run, verdict.text)
    if verdict.status in (FAILED, ERROR) and verdict.root_rank is not None:
        skip = _upstream_skip(results)
        if skip:
            raise _skip(run, skip)
        cuda = _needs_cuda(run, results[verdict.root_rank])
        if cuda:
            report.note_needs_cuda(run.test_id, cuda)
            raise unittest.SkipTest(cuda)
    if verdict.status in (FAILED, ERROR):
        text = run.with_gpu_note(verdict.text) + suffix
        error = RankFailure(text) if verdict.status == FAILED else RankError(text)
        if example is not None and any(r.status in (CRASHED, TIMEOUT, KILLED) for r in results):
            raise RankAbort(error)  # do not let hypothesis re-run a hang or crash to shrink it
        raise error
    if sub_failures:
        text = "\n\n".join(sub_failures) + suffix
        raise RankFailure(text)


def _subtest(test: Any, params: dict[str, Any]) -> Any:
    """unittest's subTest for one combination, named by its parameters (``msg`` is subTest's own argument)."""
    return test.subTest(**{("msg_" if k == "msg" else k): v for k, v in params.items()})


def _report_subtests(test: unittest.TestCase, run: TestRun, results: list[RankResult],
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
        label = per_rank[0][1].label
        bad = [(rank, s) for rank, s in per_rank if s.status in BAD]
        skipped = [(rank, s) for rank, s in per_rank if s.status == SKIPPED]
        text = None
        if bad or (skipped and stuck):
            as_results = [RankResult(rank=rank, status=s.status, exc_type=s.exc_type, message=s.message,
                                     traceback=s.traceback) for rank, s in per_rank]
            for res, (rank, _) in zip(as_results, per_rank):
                res.arrived = float(rank)
            if bad:
                root = order_by_cause(as_results)[0]
                cuda = _needs_cuda(run, root)
                if cuda:
                    report.note_needs_cuda(run.test_id, cuda)
                    if individually:
                        with _subtest(test, params):
                            test.skipTest(cuda)
                    continue
                lines = [f"{run.test_id} [rank {root.rank}/{run.world_size}] subtest ({label}) failed on "
                         f"{run.placement.label}: {root.one_line()}", "", root.traceback.rstrip()]
                error: Exception = RankFailure("") if root.status == FAILED else RankError("")
            else:
                root = next(r for r in as_results if r.status == SKIPPED)
                lines = [f"{run.test_id} [rank {root.rank}/{run.world_size}] skipped subtest ({label}) on "
                         f"{run.placement.label} ({root.message}) while rank "
                         f"{', '.join(str(r.rank) for r in stuck)} was still inside it: a combination must be "
                         "skipped on every rank or on none (decide before its first collective, the same way "
                         "on every rank)"]
                error = RankError("")
            others = [r for r in as_results if r is not root]
            if others or stuck:
                lines += ["", "Other ranks:"] + [f"  rank {r.rank}: {r.one_line()}" for r in others]
                lines += [f"  rank {r.rank}: never finished this combination: {r.one_line()}" for r in stuck]
            for r in stuck:
                if r.stack.strip():
                    lines += ["", f"rank {r.rank} stack (faulthandler):", r.stack.rstrip()]
            text = run.with_gpu_note("\n".join(lines))
            error.args = (text,)
        if not individually:
            if text:
                texts.append(text)
            continue
        with _subtest(test, params):
            if text:
                raise error
            if skipped and len(skipped) == len(per_rank):
                raise _skip(run, skipped[0][1].message)
    return texts


def _skip(run: TestRun, reason: str) -> unittest.SkipTest:
    """The skip to raise; one that means "needs a GPU or NCCL" is counted in the run's needs-CUDA line."""
    if gpu_skip(reason):
        report.note_needs_cuda(run.test_id, reason)
    return unittest.SkipTest(reason)


def _upstream_skip(results: list[RankResult]) -> str:
    """Every rank that did not pass left with one of upstream's skip exit codes: the skip's reason."""
    bad = [r for r in results if r.status in BAD]
    reasons = {upstream_skip(r.exc_type, r.message) for r in bad if not r.peer_effect}
    return reasons.pop() if len(reasons) == 1 and "" not in reasons else ""


def _needs_cuda(run: TestRun, root: RankResult) -> str:
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
