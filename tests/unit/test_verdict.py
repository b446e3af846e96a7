"""The verdict (harness.verdict): the ranks' results of one test, as data, become unittest's outcomes.

No process runs here: the results are made by hand, as a pool or torchrun would send them back, and
judged for a test described by a plain object (what ``verdict.Judged`` asks of ``testrun.TestRun``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import unittest

from harness import verdict
from harness.config import settings
from harness.errors import RankError, RankFailure
from harness.notes import Notes
from harness.outcome import ERROR, FAILED, KILLED, PASSED, SKIPPED, RankResult, SubtestOutcome
from harness.placement import Placement

TEST = "mod.TestX.test_y"


@dataclasses.dataclass
class Judged:
    """What the verdict is told of a test: the fields and methods of ``verdict.Judged``."""

    placement: Placement
    test_id: str = TEST
    world_size: int = 2
    notes: Notes = dataclasses.field(default_factory=Notes)
    module_file: str | None = None
    fallback: bool = False
    shared_fallback: bool = False

    def __post_init__(self) -> None:
        self.conf = dataclasses.replace(settings(), show_output=False)

    def annotate(self, text: str) -> str:
        return text


def cpu(shortfall: bool = False) -> Placement:
    return Placement("cpu", 2, "HARNESS_DEVICE=cpu", shortfall=shortfall)


def failed(rank: int, message: str = "1 != 2", **more) -> RankResult:
    return RankResult(rank=rank, status=FAILED, exc_type="AssertionError", message=message,
                      traceback=f"Traceback (most recent call last):\nAssertionError: {message}\n", **more)


def _case() -> unittest.TestCase:
    """The test the verdict reports on (made here, so that discovery does not collect it)."""

    class TestX(unittest.TestCase):
        def test_y(self) -> None:
            pass

    return TestX("test_y")


class TestTheTestsOutcome(unittest.TestCase):
    def setUp(self) -> None:
        self.case = _case()

    def test_every_rank_passed_is_a_pass_and_each_ranks_output_is_printed_once(self):
        judged = Judged(cpu())
        judged.conf = dataclasses.replace(judged.conf, show_output=True)
        results = [RankResult(0, PASSED, output="step 1\n"), RankResult(1, PASSED, output="step 1\nstep 2\n")]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertIsNone(verdict.report(self.case, judged, results, None))
        self.assertEqual(out.getvalue(), "[rank 0] step 1\n[rank 1] step 1\n[rank 1] step 2\n")
        self.assertEqual(judged.notes.needs_cuda, {})

    def test_a_failing_rank_is_a_failure_that_names_it(self):
        with self.assertRaises(RankFailure) as caught:
            verdict.report(self.case, Judged(cpu()), [RankResult(0, PASSED), failed(1)], None)
        self.assertTrue(str(caught.exception).startswith(f"{TEST} [rank 1/2] failed on cpu/gloo: AssertionError"))

    def test_skipped_on_every_rank_is_a_skip(self):
        results = [RankResult(r, SKIPPED, message="not today") for r in range(2)]
        with self.assertRaisesRegex(unittest.SkipTest, "not today"):
            verdict.report(self.case, Judged(cpu()), results, None)

    def test_needs_cuda_on_cpu_for_want_of_gpus_is_a_skip_counted_in_the_runs_notes(self):
        judged = Judged(cpu(shortfall=True), fallback=True)
        results = [RankResult(r, ERROR, exc_type="AssertionError", message="Torch not compiled with CUDA enabled")
                   for r in range(2)]
        with self.assertRaisesRegex(unittest.SkipTest, "^needs CUDA: AssertionError: Torch not compiled"):
            verdict.report(self.case, judged, results, None)
        self.assertEqual(list(judged.notes.needs_cuda), [TEST])

    def test_the_same_error_on_cpu_asked_for_is_an_error(self):
        results = [RankResult(r, ERROR, exc_type="AssertionError", message="Torch not compiled with CUDA enabled")
                   for r in range(2)]
        with self.assertRaises(RankError):
            verdict.report(self.case, Judged(cpu()), results, None)

    def test_a_failing_example_says_how_to_reproduce_it(self):
        with self.assertRaises(RankFailure) as caught:
            verdict.report(self.case, Judged(cpu()), [failed(0), RankResult(1, PASSED)], {"seed": 7})
        self.assertIn("Hypothesis example: seed=7\nReproduce it: put @example(seed=7) above @given",
                      str(caught.exception))


class TestSubtests(unittest.TestCase):
    def test_a_failed_combination_is_reported_root_first_and_the_rest_pass(self):
        ok, bad = SubtestOutcome({"x": 1}, PASSED), SubtestOutcome({"x": 2}, FAILED, "AssertionError", "no",
                                                                   "AssertionError: no\n")
        results = [RankResult(0, PASSED, subtests=[ok, bad]), RankResult(1, PASSED, subtests=[ok, ok])]
        texts = verdict.report_subtests(_case(), Judged(cpu()), results, individually=False)
        self.assertEqual(len(texts), 1)
        self.assertTrue(texts[0].startswith(f"{TEST} [rank 0/2] subtest (x=2) failed on cpu/gloo: AssertionError: "
                                            "no"), texts[0])
        self.assertIn("  rank 1: passed", texts[0])

    def test_a_skip_on_one_rank_while_the_other_is_inside_the_combination_is_an_error(self):
        skipped = SubtestOutcome({"x": 1}, SKIPPED, message="no GPU")
        results = [RankResult(0, PASSED, subtests=[skipped]),
                   RankResult(1, KILLED, message="still running 5.0 s after ...", at_meeting=False)]
        texts = verdict.report_subtests(_case(), Judged(cpu()), results, individually=False)
        self.assertIn("skipped subtest (x=1) on cpu/gloo (no GPU) while rank 1 was still inside it", texts[0])


class TestWorldChanges(unittest.TestCase):
    """How the parent words what the ranks left: ranks named only where not all of them did it."""

    def result(self, rank, altered=(), group=None):
        return RankResult(rank=rank, status=PASSED, altered=list(altered), default_group=group)

    def test_nothing_left(self):
        self.assertEqual(verdict.world_changes([self.result(0, group=True), self.result(1, group=True)]), [])
        self.assertEqual(verdict.world_changes([self.result(0, group=False), self.result(1, group=False)]), [])

    def test_the_same_on_every_rank_names_no_rank(self):
        spy = "torch.distributed.all_reduce replaced"
        self.assertEqual(verdict.world_changes([self.result(0, [spy]), self.result(1, [spy])]), [spy])

    def test_some_ranks_are_named(self):
        thread = "thread 'poller' left running"
        results = [self.result(0, [thread]), self.result(1), self.result(2, [thread]), self.result(3)]
        self.assertEqual(verdict.world_changes(results), [f"{thread} (ranks 0, 2)"])
        self.assertEqual(verdict.world_changes(results[1:]), [f"{thread} (rank 2)"])

    def test_default_group_destroyed_on_some_ranks(self):
        results = [self.result(0, group=False), self.result(1, group=True), self.result(2, group=False)]
        self.assertEqual(verdict.world_changes(results), ["the default process group destroyed on ranks 0, 2 only"])

    def test_what_only_some_ranks_left_names_them_and_fail_fails_only_those(self):
        results = [RankResult(0, PASSED, altered=["a thread left running"]), RankResult(1, PASSED)]
        changes = verdict.world_changes(results)
        self.assertEqual(changes, ["a thread left running (rank 0)"])
        verdict.fail_altering(results, changes, "the launched ranks went on with it")
        self.assertEqual((results[0].status, results[1].status), (FAILED, PASSED))
        self.assertEqual(results[0].message, "the test left the process altered: a thread left running (rank 0); "
                                             "the launched ranks went on with it")


if __name__ == "__main__":
    unittest.main()
