"""One test in the parent: its world size and placement, its world of ranks, its hypothesis examples.

``case.MultiProcessTestCase.run`` hands each test here (:func:`run_test`) with the run it belongs to
(harness.parent.run). A :class:`TestRun` describes the test; the run's worlds (harness.shared.world: a spawned pool,
or torchrun's launched ranks) place it and give it ranks; :func:`drive` runs it once, or once per
hypothesis example. Each run's results go with the facts the parent knows (where it ran, what the ranks
were left with, what triage found) to ``harness.judging.verdict.judge``, and the verdict to ``harness.judging.report``,
which renders it as unittest's outcomes.
"""
from __future__ import annotations

import dataclasses
import sys
import time
import unittest
from typing import Any, Callable

from harness.judging import analysis
from harness.parent import relay, restarts, sweep
from harness.shared.output import bounded_output
from harness.judging import report, triage, verdict
from harness.shared.config import Settings
from harness.testing.decorators import defined_at, gpus_needed, markers
from harness.parent.drawn import drawn_world
from harness.shared.errors import RankAbort, UsageError
from harness.judging.fallback import DEFAULT_GPUS, pretend_device_count
from harness.parent.hypothesis_support import is_hypothesis_test, own_deadline, run_given
from harness.judging.notes import Notes, TestRecord, short_id
from harness.shared.outcome import PASSED, RankResult
from harness.shared.placement import Placement, gpu_count
from harness.shared.protocol import Task
from harness.parent.run import Run
from harness.judging.verdict import Facts, Verdict

__all__ = ["TestRun", "run_test", "drive", "world_size_for"]

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
    if type(ws).__module__.startswith("hypothesis."):  # a strategy: the world is drawn per example, in @given
        raise UsageError(f"{test_id}: world_size is a hypothesis strategy ({ws!r}); draw the world in the test's "
                         "@given instead (@given(world=world_sizes(1, 8)) from harness.strategies), and keep "
                         "world_size an int: each example then runs in a world of the size it drew")
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
    """One test in the parent, in one run: its world size and placement, and the facts its verdict needs.

    Example::

        run = TestRun(test, Run())
        verdict = run.run_once(None)     # harness.judging.verdict.Verdict: status, root cause, report lines
    """

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(self, test: unittest.TestCase, run: Run, result: Any = None) -> None:
        self.test = test
        self.run = run
        self.result = result  # unittest's result object: a test that triage finds guilty fails there
        self.triage_line = ""  # what triage found (the failure's report and the runner's line say it)
        self.triage_settled = False  # a failure of this test was found to be its own (or flaky): not again
        self.notes: Notes = run.notes
        self.test_id = short_id(test)
        self.fn = getattr(type(test), test._testMethodName)
        worlds = run.worlds
        conf: Settings = run.settings
        self.conf = conf if worlds.reports else dataclasses.replace(conf, show_output=False)
        #: GPUs the test asks for with skip_if_lt_x_gpu (0: it names none)
        self.gpus_asked = gpus_needed(type(test), self.fn)
        self.world_size, self.world_note = world_size_for(test, self.test_id, worlds.enough_gpus(self.gpus_asked))
        self.placement: Placement = worlds.place(self.world_size, self.gpus_asked, self.conf, self.world_note)
        #: the world size and placement the class asks for; an example that draws its world runs in another
        self.asked = (self.world_size, self.placement, self.world_note)
        self._placed: dict[int, Placement] = {}  # the placement of each world size drawn, decided once
        self.drawn = False  # the last example drew its world size
        self.filtered = ""  # why the last example drawn was filtered out (a world these worlds cannot run)
        self.ranks_seconds = 0.0  # the slowest rank's time in the last run (its test, not the world's start)
        self.module_file: str | None = getattr(sys.modules.get(type(test).__module__), "__file__", None)
        self.timeout = self.conf.timeout_for(getattr(test, "timeout", None), self.test_id)
        self.examples = 0
        self.started = time.monotonic()
        self.reused = True
        self.pids: list[int] = []
        self.picture: analysis.Picture | None = None  # the last failing run's ranks x collectives
        self.marks = markers(self.fn)
        #: @restarts(n)'s n (0: none); with faults, their names and every attempt, as the reports say them
        self.restarts: int = self.marks["restarts"] or 0
        self.fault_names = ""
        self.fault_attempts: list[str] = []

    def facts(self, **more: Any) -> Facts:
        """What the parent knows of this test beside its ranks' results (``more``: what one run of it added)."""
        return Facts(self.test_id, self.world_size, self.placement, self.module_file, self.gpus_asked,
                     bool(self.world_note), gpu_count() if self.placement.shortfall or self.placement.shared else 0,
                     triage=self.triage_line, drawn=self.drawn, seed=self.conf.seed if self.drawn else None, **more)

    def enter_world(self, kwargs: dict[str, Any] | None) -> str:
        """Make the example's world this test's: the size its values draw (harness.parent.drawn), else the class's.
        Returns why these worlds cannot run it ("" when they can)."""
        size = drawn_world(kwargs, self.test_id) if kwargs else None
        self.drawn = size is not None
        if size is None:
            self.world_size, self.placement, self.world_note = self.asked
            return self.run.worlds.skip(self.world_size)
        if size not in self._placed:
            self._placed[size] = self.run.worlds.place(size, self.gpus_asked, self.conf)
        self.world_size, self.placement, self.world_note = size, self._placed[size], ""
        return self.run.worlds.skip(size) or self.placement.skip

    def run_once(self, kwargs: dict[str, Any] | None) -> Verdict:
        """Send the test (with one hypothesis example's arguments, if any) to every rank; their verdict."""
        worlds = self.run.worlds
        if kwargs is not None:
            why = self.enter_world(kwargs)
            if why and self.drawn:
                # Filtered: a drawn world these worlds cannot run (torchrun launched another size) is not an
                # example of this test here; hypothesis draws another.
                from hypothesis import reject

                self.filtered = why
                reject()
            if why:
                return verdict.skipped(self.test_id, why, verdict.PLACEMENT)
        self.examples += 1
        swept, given_by = sweep.sweep_of(self)
        if swept is not None:
            why = self.sweep_skip(swept, given_by)
            if why:
                return verdict.skipped(self.test_id, why)
            return sweep.run_sweep(self, kwargs, swept, given_by)
        plan = restarts.plan_of(self.marks, kwargs)
        if plan:
            restarts.check(plan, self.restarts, self.test_id, self.world_size)
            return restarts.run_attempts(self, kwargs, plan, self.restarts)
        world, reused = worlds.world(self.world_size, self.placement, self.conf)
        self.reused = self.reused and reused
        self.pids = world.pids
        if kwargs is not None:
            kwargs = world.same_example(kwargs, self.test_id)
        with world.test_files(bool(self.marks["temp_dir"])) as (temp_dir, file_name):
            attempt = restarts.launched_attempt() if not worlds.replaceable else 0
            task = self.task(world, kwargs, temp_dir, file_name, attempt=attempt,
                             faults=[] if self.marks["restarts"] is not None else None)
            results = world.run(task, self.conf.peer_grace)
        # Every rank sees the same results, so under torchrun every rank rebuilds the group alike.
        world.pg_suspect = any(r.is_bad for r in results)
        world.history.append(triage.Ran(task, self.test))
        changes = verdict.world_changes(results)
        altered: dict[str, Any] = {}
        if changes:  # what only fresh ranks undo: named in the run's summary (HARNESS_ENV_CHANGED=fail: a failure)
            then = world.left_altered(results)
            self.notes.altered_by(self.test_id, changes, then)
            altered = {"altered": tuple(changes), "then": then, "fail_altered": self.conf.env_changed == "fail"}
        elif (len(world.history) > 1 and self.conf.triage and not self.triage_settled
              and not any(relay.user_stopped(r.exc_type) for r in results)
              and not relay.was_debugged(self.test_id)
              and not getattr(self.test, "_harness_xfail", False)  # a failure expected (pytest's xfail): not checked
              and verdict.judge(results, self.facts()).fails):
            results = self.triage(world, task, world.history[:-1], results)  # the tests these ranks ran before it
        worlds.done_with(world, self.conf)
        self.ranks_seconds = max((r.duration for r in results), default=0.0)
        if any(r.is_bad for r in results):
            self.picture = picture_of(results, self.world_size)
        return verdict.judge(results, self.facts(**altered), kwargs, self.conf.show_output)

    def sweep_skip(self, swept: Any, given_by: str) -> str:
        """Why this test is not swept here ("" when it is); a sweep that cannot run as written is a UsageError."""
        if not self.run.worlds.replaceable:
            return (f"{'@faults.sweep' if given_by == sweep.TEST else '--sweep'} {swept}: a sweep runs each point "
                    "in fresh ranks, and torchrun's launched ranks cannot be replaced; run it under the runner, "
                    "pytest or unittest")
        return sweep.check(swept, given_by, self.restarts, self.test_id, self.world_size)

    def picture_from(self, results: list[RankResult]) -> analysis.Picture:
        """A failing run's ranks and collectives as data (the HTML report's picture), for this test's world."""
        return picture_of(results, self.world_size)

    def task(self, world: Any, kwargs: dict[str, Any] | None, temp_dir: str | None, file_name: str,
             **more: Any) -> Task:
        """The test as every rank of ``world`` runs it (``more``: the faults, the attempt and their log)."""
        return Task(module=type(self.test).__module__, module_file=self.module_file,
                    qualname=type(self.test).__qualname__, method=self.test._testMethodName,
                    seed=self.conf.seed, kwargs=kwargs, temp_dir=temp_dir, file_name=file_name,
                    fresh_pg=world.pg_suspect, isolate=self.conf.env_changed != "off",
                    world_size=self.world_size, timeout=self.timeout, test_id=self.test_id,
                    debug=world.debug_address(), post_mortem=self.conf.pdb,
                    debugpy=self.conf.ide_port, **more)

    def triage(self, world: Any, task: Task, earlier: list[triage.Ran], results: list[RankResult]
               ) -> list[RankResult]:
        """The test failed in ranks that ran ``earlier`` first: check it in fresh ranks (harness.judging.triage).
        Returns the results the verdict judges: the fresh ranks' when an earlier test caused the failure."""
        worlds = self.run.worlds
        left = self.conf.triage_budget - self.notes.triage_seconds
        if left <= 0:
            self.triage_line = (f"not checked in fresh ranks: the run's triage budget (HARNESS_TRIAGE_BUDGET="
                                f"{self.conf.triage_budget:g} s) is spent")
            self.triage_settled = True
            return results
        if not worlds.replaceable:
            self.triage_line = ("not checked in fresh ranks: these ranks cannot be replaced (torchrun launched them); "
                                "run the test alone to see whether it fails on its own")
            self.triage_settled = True
            return results
        finding = triage.check(task, earlier, results,
                               lambda: worlds.fresh(self.world_size, self.placement, self.conf),
                               lambda again: verdict.judge(again, self.facts()).fails, self.conf.peer_grace, left)
        self.notes.triage(finding)
        self.triage_line = finding.line()
        if finding.kind != triage.POLLUTED:
            self.triage_settled = True
            return results
        # Fresh processes pass it: that is the verdict. What made it fail is named as having altered the
        # process, and these ranks, which still carry it, are replaced before the next test.
        change = (f"left state behind that made {self.test_id} fail in the ranks after it (it passes in fresh "
                  "ranks; found by triage)")
        then = world.left_altered(results)
        for ran in finding.culprits:
            self.notes.altered_by(ran.task.test_id, [change], then)
            if self.conf.env_changed == "fail":
                self._fail_later(ran.test, f"{ran.task.test_id} {change} (HARNESS_ENV_CHANGED=fail)")
        return finding.fresh or results

    def _fail_later(self, test: Any, text: str) -> None:
        """Fail ``test``, which already ran, in the run's result (unittest's, or the runner's); the pytest plugin
        fails the session instead (an item that is over cannot be failed there)."""
        result = getattr(self.result, "wrapped_result", self.result)  # under pytest's marks (parent.pytest_marks)
        if isinstance(result, unittest.TestResult):
            from harness.shared.errors import RankFailure

            try:
                raise RankFailure(text)
            except RankFailure:
                result.addFailure(test, sys.exc_info())

    def record(self) -> None:
        """The test as it ran, for the runner's line and the pytest plugin (the run's notes, by test id)."""
        self.notes.record(TestRecord(self.test_id, self.world_size, self.placement.label if self.examples else "",
                                     self.placement.reason, time.monotonic() - self.started, self.pids,
                                     self.reused, self.examples, self.triage_line, self.picture,
                                     self.fault_names, list(self.fault_attempts)))


def _unsatisfied(exc: BaseException) -> bool:
    """Hypothesis gave up because every example was filtered out (Unsatisfiable, or the filter health check)."""
    from hypothesis.errors import FailedHealthCheck, Unsatisfiable

    return isinstance(exc, (Unsatisfiable, FailedHealthCheck))


def picture_of(results: list[RankResult], world_size: int) -> analysis.Picture:
    """A failing run's ranks and collectives as data (what the HTML report draws), each text bounded."""
    def cut(text: str) -> str:  # a rank's output may hold what is not UTF-8 (surrogates): replaced, never raised
        return bounded_output(text.encode("utf-8", "replace"))

    said = {r.rank: {"status": r.status, "line": r.one_line(), "error": cut(r.traceback or r.message),
                     "stack": cut(r.stack), "output": cut(r.output)} for r in results}
    dumps = {r.rank: r.collectives for r in results if r.collectives is not None}
    return analysis.picture(dumps, said, world_size)


def run_test(test: unittest.TestCase, run: Run, result: Any = None) -> None:
    """The test body of ``MultiProcessTestCase.run`` in the parent: the test on the run's ranks (``result``:
    unittest's result object, where triage fails an earlier test it finds guilty)."""
    __tracebackhide__ = True
    testrun = TestRun(test, run, result)
    try:
        # A hypothesis test's examples may draw their world: whether these worlds run it is decided per example.
        world_skip = "" if is_hypothesis_test(testrun.fn) else run.worlds.skip(testrun.world_size)
        skip = verdict.before_run(testrun.facts(), world_skip, markers(testrun.fn)["comms"], defined_at(testrun.fn))
        if skip is not None:
            report.report(test, skip, testrun.notes)
        else:  # before any rank starts: a fault that can never fire, or a sweep that cannot run, is the user's mistake
            if testrun.marks["faults"]:
                restarts.check(testrun.marks["faults"], testrun.restarts, testrun.test_id, testrun.world_size)
            swept, given_by = sweep.sweep_of(testrun)
            if swept is not None and testrun.run.worlds.replaceable and not is_hypothesis_test(testrun.fn):
                sweep.check(swept, given_by, testrun.restarts, testrun.test_id, testrun.world_size)
        if testrun.placement.shortfall:  # the run ends by saying so: never a silent move to CPU
            testrun.notes.fallback(testrun.test_id, testrun.placement.device_type == "cpu", testrun.placement.reason)
        drive(test, testrun, testrun.run_once)
    finally:
        testrun.record()


def drive(test: unittest.TestCase, testrun: TestRun, run_once: Callable[[dict[str, Any] | None], Verdict]) -> None:
    """Run the test once, or once per hypothesis example, and report each verdict (harness.judging.report)."""
    __tracebackhide__ = True
    if not is_hypothesis_test(testrun.fn):
        report.report(test, run_once(None), testrun.notes)
        return
    testrun.run.worlds.start_examples(testrun.fn)
    last: list[Verdict] = []

    deadline = own_deadline(testrun.fn)

    def example(kwargs: dict[str, Any]) -> None:
        __tracebackhide__ = True
        last[:] = [run_once(kwargs)]
        if deadline is not None and last[0].status == PASSED and testrun.ranks_seconds > deadline:
            last[0] = verdict.over_deadline(last[0], kwargs, testrun.facts(), testrun.ranks_seconds, deadline)
        report.report(test, last[0], testrun.notes)

    try:
        run_given(testrun.fn, test, example, testrun.run.hypothesis_profile)
    except RankAbort as abort:
        raise abort.error from None
    except Exception as exc:
        if testrun.filtered and not testrun.examples and _unsatisfied(exc):
            raise unittest.SkipTest(f"every world hypothesis drew was filtered out ({testrun.filtered}): a drawn "
                                    "world runs only where these ranks can run it") from None
        raise
    # Every example passed: show the last one's subtests (their skips and reasons) as subtests.
    if last:
        report.report_subtests(test, last[0], testrun.notes)
