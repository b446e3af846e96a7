"""The verdict (harness.judging.verdict): the ranks' results and the parent's facts in, one Verdict (data) out;
harness.judging.report renders it as unittest's outcomes and tells the run's notes.

No process runs here: the results are made by hand, as a pool or torchrun would send them back.
"""
from __future__ import annotations

import contextlib
import io
import unittest

from harness.judging import report, verdict
from harness.errors import RankAbort, RankError, RankFailure
from harness.judging.notes import Notes, TestRecord
from harness.shared.outcome import ERROR, FAILED, KILLED, PASSED, SKIPPED, TIMEOUT, RankResult, SubtestOutcome
from harness.shared.placement import Placement, choose_placement
from harness.judging.verdict import NEEDS_CUDA, NEEDS_NCCL, OWN, PLACEMENT, TRIED_ON_CPU, UPSTREAM, Facts, judge

TEST = "mod.TestX.test_y"
NO_CUDA = ("AssertionError", "Torch not compiled with CUDA enabled")


def cpu(shortfall: bool = False) -> Placement:
    return Placement("cpu", 2, "HARNESS_DEVICE=cpu", shortfall=shortfall)


def facts(placement: Placement | None = None, **more) -> Facts:
    return Facts(TEST, 2, placement or cpu(), **more)


def failed(rank: int, message: str = "1 != 2", **more) -> RankResult:
    return RankResult(rank=rank, status=FAILED, exc_type="AssertionError", message=message,
                      traceback=f"Traceback (most recent call last):\nAssertionError: {message}\n", **more)


def errors(exc: tuple[str, str], ranks: int = 2) -> list[RankResult]:
    return [RankResult(r, ERROR, exc_type=exc[0], message=exc[1]) for r in range(ranks)]


def _case() -> unittest.TestCase:
    """The test the verdict reports on (made here, so that discovery does not collect it)."""

    class TestX(unittest.TestCase):
        def test_y(self) -> None:
            pass

    return TestX("test_y")


class TestJudge(unittest.TestCase):
    def test_every_rank_passed(self):
        v = judge([RankResult(0, PASSED), RankResult(1, PASSED)], facts())
        self.assertEqual((v.status, v.lines, v.root_rank, v.skip, v.fails), (PASSED, [], None, "", False))

    def test_a_failing_rank_is_the_root_cause_and_the_head_names_it(self):
        v = judge([RankResult(0, PASSED), failed(1)], facts())
        self.assertEqual((v.status, v.root_rank, v.fails), (FAILED, 1, True))
        self.assertEqual(v.lines[0], f"{TEST} [rank 1/2] failed on cpu/gloo: AssertionError: 1 != 2")

    def test_the_head_says_the_placements_label(self):
        shared = Placement("cuda", 2, "why", shared=True, gpus=1)
        v = judge([failed(0), RankResult(1, PASSED)], facts(shared))
        self.assertIn(" failed on cuda-shared/gloo: ", v.lines[0])

    def test_skipped_on_every_rank_is_the_tests_own_skip(self):
        v = judge([RankResult(r, SKIPPED, message="not today") for r in range(2)], facts())
        self.assertEqual((v.status, v.skip, v.reason, v.gpu, v.fails), (SKIPPED, OWN, "not today", False, False))
        gpu = judge([RankResult(r, SKIPPED, message="Need at least 2 CUDA devices") for r in range(2)], facts())
        self.assertTrue(gpu.gpu)  # counted in the run's needs-CUDA line

    def test_needs_cuda_on_cpu_for_want_of_gpus_is_a_needs_cuda_skip(self):
        v = judge(errors(NO_CUDA), facts(cpu(shortfall=True)))
        self.assertEqual((v.status, v.skip, v.gpu, v.fails), (SKIPPED, NEEDS_CUDA, True, False))
        self.assertTrue(v.reason.startswith("needs CUDA: AssertionError: Torch not compiled"), v.reason)

    def test_the_same_error_on_cpu_asked_for_is_an_error(self):
        v = judge(errors(NO_CUDA), facts())
        self.assertEqual((v.status, v.skip, v.fails), (ERROR, "", True))

    def test_needs_nccl_on_shared_gpus_for_want_of_them_is_a_needs_nccl_skip(self):
        shared = Placement("cuda", 2, "why", shared=True, gpus=1, shortfall=True)
        v = judge(errors(("DistBackendError", "Duplicate GPU detected : rank 0 and rank 1")), facts(shared))
        self.assertEqual((v.status, v.skip, v.gpu), (SKIPPED, NEEDS_NCCL, True))
        self.assertTrue(v.reason.startswith("needs NCCL (one GPU per rank): DistBackendError"), v.reason)

    def test_upstreams_skip_exit_code_is_a_skip_of_its_kind(self):
        v = judge(errors(("SystemExit", "75")), facts())
        self.assertEqual((v.status, v.skip), (SKIPPED, UPSTREAM))
        self.assertTrue(v.reason.startswith("needs at least 1 CUDA device (sys.exit(75)"), v.reason)

    def test_a_failing_example_says_how_to_reproduce_it_and_a_hang_aborts_shrinking(self):
        v = judge([failed(0), RankResult(1, PASSED)], facts(), example={"seed": 7})
        self.assertFalse(v.individually)
        self.assertEqual(v.lines[-1].splitlines()[0], "Hypothesis example: seed=7")
        self.assertIn("\n\nHypothesis example: seed=7\nReproduce it: put @example(seed=7) above @given", v.text)
        self.assertFalse(v.abort)
        hung = judge([failed(0), RankResult(1, TIMEOUT, message="timed out")], facts(), example={"seed": 7})
        self.assertTrue(hung.abort)
        # a peer killed after the grace, stuck in a collective the failing rank never reached: shrunk as usual
        stuck = judge([failed(0), RankResult(1, KILLED, message="killed after the peer grace")], facts(),
                      example={"seed": 7})
        self.assertEqual((stuck.status, stuck.root_rank, stuck.abort), (FAILED, 0, False))

    def test_notes_go_under_the_head_line(self):
        # HARNESS_DEVICE=cuda-shared: shared on purpose, so a failure (with the note), not a skip
        shared = Placement("cuda", 2, "HARNESS_DEVICE=cuda-shared", shared=True, gpus=1, shortfall=False)
        v = judge([failed(0), RankResult(1, PASSED)], facts(shared, gpus_asked=2, gpus_found=1,
                                                            triage="fails in fresh ranks too"))
        self.assertTrue(v.lines[0].startswith(f"{TEST} [rank 0/2] failed on cuda-shared/gloo"), v.lines[0])
        self.assertTrue(v.lines[1].startswith("Note: this test asks for 2 GPUs (skip_if_lt_x_gpu(2)) and ran on "
                                              "1 GPU its ranks shared"), v.lines[1])
        self.assertEqual(v.lines[2], "Triage: fails in fresh ranks too")
        self.assertEqual(judge([failed(0), RankResult(1, PASSED)], facts(cpu(shortfall=True))).lines[1], "")

    def test_a_test_that_asks_for_gpus_and_fails_on_cpu_for_want_of_them_is_a_skip_saying_what_was_tried(self):
        for asked in ({"gpus_asked": 2}, {"sized_by_devices": True}):
            v = judge([failed(0), RankResult(1, PASSED)], facts(cpu(shortfall=True), **asked))
            self.assertEqual((v.status, v.skip, v.gpu), (SKIPPED, TRIED_ON_CPU, True), v.lines)
            self.assertRegex(v.reason, r"^needs 2 GPUs \((skip_if_lt_x_gpu\(2\)|its world size follows the device "
                                       r"count)\); tried on CPU for want of them: rank 0: AssertionError: 1 != 2")
        # on the GPUs the ranks share for want of one each (auto): the same rule, the same kind of skip
        shared = choose_placement(4, 4, "auto", gpus=1, nccl=True)
        v = judge([RankResult(0, PASSED), RankResult(1, ERROR, exc_type="RuntimeError", message="weight is on cuda:0, "
                   "different from other tensors on cpu")], Facts(TEST, 4, shared, gpus_asked=4, gpus_found=1))
        self.assertEqual((v.status, v.skip, v.gpu), (SKIPPED, TRIED_ON_CPU, True), v.lines)
        self.assertEqual(v.reason, "needs 4 GPUs (skip_if_lt_x_gpu(4)); tried on 1 GPU its ranks shared for want of "
                                   "them: rank 1: RuntimeError: weight is on cuda:0, different from other tensors on cpu")
        # HARNESS_DEVICE=cuda-shared asked for it: a failure, with the note that it asks for more GPUs
        strict = choose_placement(4, 4, "cuda-shared", gpus=1, nccl=True)
        v = judge([RankResult(0, PASSED), RankResult(1, ERROR, exc_type="RuntimeError", message="weight is on cuda:0")],
                  Facts(TEST, 4, strict, gpus_asked=4, gpus_found=1))
        self.assertEqual(v.status, ERROR, v.lines)
        self.assertTrue(v.lines[1].startswith("Note: this test asks for 4 GPUs (skip_if_lt_x_gpu(4)) and ran on 1 GPU "
                                              "its ranks shared"), v.lines)
        # CPU asked for (HARNESS_DEVICE=cpu: no shortfall), or no GPU asked for: a failure
        self.assertEqual(judge([failed(0), RankResult(1, PASSED)], facts(cpu(), gpus_asked=2)).status, FAILED)
        self.assertEqual(judge([failed(0), RankResult(1, PASSED)], facts(cpu(shortfall=True))).status, FAILED)

    def test_leaving_the_process_altered_fails_the_ranks_that_did_when_asked_and_only_in_the_verdict(self):
        results = [RankResult(0, PASSED, altered=["a thread left running"]), RankResult(1, PASSED)]
        changes = tuple(verdict.world_changes(results))
        self.assertEqual(changes, ("a thread left running (rank 0)",))
        warned = judge(results, facts(altered=changes, then="ranks restarted"))
        self.assertEqual(warned.status, PASSED)
        v = judge(results, facts(altered=changes, then="the launched ranks went on with it", fail_altered=True))
        self.assertEqual((v.status, v.root_rank), (FAILED, 0))
        self.assertEqual(v.lines[0], f"{TEST} [rank 0/2] failed on cpu/gloo: EnvChanged: the test left the process "
                                     "altered: a thread left running (rank 0); the launched ranks went on with it")
        self.assertEqual([r.status for r in results], [PASSED, PASSED])  # the ranks' results are data: untouched


class TestSubtests(unittest.TestCase):
    ok = SubtestOutcome({"x": 1}, PASSED)
    bad = SubtestOutcome({"x": 2}, FAILED, "AssertionError", "no", "AssertionError: no\n")

    def test_a_failed_combination_is_reported_root_first_and_the_test_itself_passes(self):
        results = [RankResult(0, PASSED, subtests=[self.ok, self.bad]), RankResult(1, PASSED, subtests=[self.ok, self.ok])]
        v = judge(results, facts())
        self.assertEqual((v.status, [s.status for s in v.subtests], v.fails), (PASSED, [PASSED, FAILED], True))
        text = v.subtests[1].text
        self.assertTrue(text.startswith(f"{TEST} [rank 0/2] subtest (x=2) failed on cpu/gloo: AssertionError: no"), text)
        self.assertIn("  rank 1: passed", text)

    def test_under_an_example_the_failed_combinations_fail_the_test(self):
        results = [RankResult(0, PASSED, subtests=[self.bad]), RankResult(1, PASSED, subtests=[self.ok])]
        v = judge(results, facts(), example={"n": 1})
        self.assertEqual(v.status, FAILED)
        self.assertTrue(v.text.startswith(f"{TEST} [rank 0/2] subtest (x=2) failed"), v.text)

    def test_a_skip_on_one_rank_while_the_other_is_inside_the_combination_is_an_error(self):
        skipped = SubtestOutcome({"x": 1}, SKIPPED, message="no GPU")
        results = [RankResult(0, PASSED, subtests=[skipped]),
                   RankResult(1, KILLED, message="still running 5.0 s after ...", at_meeting=False)]
        sub = judge(results, facts()).subtests[0]
        self.assertEqual(sub.status, ERROR)
        self.assertIn("skipped subtest (x=1) on cpu/gloo (no GPU) while rank 1 was still inside it", sub.text)

    def test_a_combination_that_needs_cuda_is_a_needs_cuda_skip(self):
        cuda = SubtestOutcome({"x": 1}, ERROR, *NO_CUDA, "")
        sub = judge([RankResult(r, PASSED, subtests=[cuda]) for r in range(2)], facts(cpu(shortfall=True))).subtests[0]
        self.assertEqual((sub.status, sub.skip, sub.gpu), (SKIPPED, NEEDS_CUDA, True))


class TestBeforeRun(unittest.TestCase):
    def test_the_placements_skip_and_the_worlds_are_placement_skips(self):
        nccl = choose_placement(2, 0, "nccl", gpus=0, nccl=False)
        v = verdict.before_run(Facts(TEST, 2, nccl))
        self.assertEqual((v.status, v.skip, v.reason, v.gpu), (SKIPPED, PLACEMENT, nccl.skip, True))
        self.assertEqual(verdict.before_run(facts(), world_skip="needs world size 4").skip, PLACEMENT)
        self.assertIsNone(verdict.before_run(facts()))

    def test_nccl_alone_is_skipped_where_the_placement_is_there_for_want_of_gpus(self):
        v = verdict.before_run(facts(cpu(shortfall=True)), asked_backend="nccl", defined_at="t.py:3")
        self.assertEqual((v.skip, v.reason), (NEEDS_CUDA, "needs CUDA: asks for backend='nccl' alone (t.py:3)"))
        shared = Placement("cuda", 2, "why", shared=True, gpus=1, shortfall=True)
        self.assertEqual(verdict.before_run(facts(shared), asked_backend="NCCL").skip, NEEDS_NCCL)
        self.assertIsNone(verdict.before_run(facts(), asked_backend="nccl"))  # HARNESS_DEVICE=cpu: it runs on gloo
        self.assertIsNone(verdict.before_run(facts(cpu(shortfall=True)), asked_backend="cpu:gloo,cuda:nccl"))


class TestReport(unittest.TestCase):
    """harness.judging.report renders a Verdict; it decides nothing."""

    def setUp(self) -> None:
        self.case = _case()
        self.notes = Notes()

    def test_a_pass_raises_nothing_and_a_failure_raises_its_text(self):
        report.report(self.case, judge([RankResult(0, PASSED), RankResult(1, PASSED)], facts()), self.notes)
        with self.assertRaises(RankFailure) as caught:
            report.report(self.case, judge([RankResult(0, PASSED), failed(1)], facts()), self.notes)
        self.assertTrue(str(caught.exception).startswith(f"{TEST} [rank 1/2] failed on cpu/gloo: AssertionError"))
        with self.assertRaises(RankError):
            report.report(self.case, judge(errors(NO_CUDA), facts()), self.notes)

    def test_every_rank_passed_prints_each_ranks_output_once_in_rank_order(self):
        results = [RankResult(1, PASSED, output="step 1\nstep 2\n"), RankResult(0, PASSED, output="step 1\n")]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            report.report(self.case, judge(results, facts(), show_output=True), self.notes)
        self.assertEqual(out.getvalue(), "[rank 0] step 1\n[rank 1] step 1\n[rank 1] step 2\n")
        self.assertEqual(self.notes.needs_cuda, {})

    def test_a_hang_under_an_example_aborts(self):
        v = judge([failed(0), RankResult(1, TIMEOUT, message="timed out")], facts(), example={"seed": 7})
        with self.assertRaises(RankAbort):
            report.report(self.case, v, self.notes)

    def test_a_needs_cuda_skip_is_counted_in_the_notes_as_the_harnesss_kind(self):
        v = judge(errors(NO_CUDA), facts(cpu(shortfall=True)))
        with self.assertRaisesRegex(unittest.SkipTest, "^needs CUDA: AssertionError: Torch not compiled"):
            report.report(self.case, v, self.notes)
        self.assertEqual(list(self.notes.needs_cuda), [TEST])
        self.assertIn("hard-code CUDA, ran on CPU for want of GPUs", self.notes.needs_cuda_lines()[1])

    def test_a_skip_that_does_not_mean_a_gpu_is_not_counted(self):
        with self.assertRaisesRegex(unittest.SkipTest, "not today"):
            report.report(self.case, judge([RankResult(r, SKIPPED, message="not today") for r in range(2)], facts()),
                          self.notes)
        self.assertEqual(self.notes.needs_cuda, {})

    def test_subtests_are_reported_one_by_one(self):
        ok, bad = TestSubtests.ok, TestSubtests.bad
        v = judge([RankResult(0, PASSED, subtests=[ok, bad]), RankResult(1, PASSED, subtests=[ok, ok])], facts())
        result = unittest.TestResult()

        class Probe(unittest.TestCase):
            def test_y(inner) -> None:
                report.report(inner, v, self.notes)

        Probe("test_y").run(result)
        self.assertEqual(len(result.failures), 1)
        self.assertIn("subtest (x=2) failed", result.failures[0][1])


class TestNotes(unittest.TestCase):
    def test_a_record_is_found_by_test_id_once(self):
        notes = Notes()
        notes.record(TestRecord("m.T.a", 2, "cpu/gloo", "why", 1.0, [1], False))
        notes.record(TestRecord("m.T.b", 4, "cpu/gloo", "why", 1.0, [1], False))
        self.assertEqual(notes.take_record("m.T.a").world_size, 2)
        self.assertIsNone(notes.take_record("m.T.a"))  # taken: a later test of that id finds its own
        self.assertEqual(notes.take_record("m.T.b").world_size, 4)
        self.assertEqual([r.test_id for r in notes.records], ["m.T.a", "m.T.b"])

    def test_the_fallback_lines_say_where_from_the_placements_kind(self):
        notes = Notes()
        notes.fallback("m.T.a", True, "needs 4 GPUs, found 0: ran on CPU/gloo")
        notes.fallback("m.T.b", False, "needs 4 GPUs, found 1 (NCCL needs one GPU per rank): 4 ranks share 1 GPU")
        self.assertEqual(notes.fallback_lines(), [
            "1 test(s) ran on CPU/gloo, not GPUs (needs 4 GPUs, found 0): m.T.a; HARNESS_DEVICE=nccl would skip them "
            "instead",
            "1 test(s) ran on shared GPUs over gloo, not one GPU per rank on NCCL (needs 4 GPUs, found 1 (NCCL needs "
            "one GPU per rank): 4 ranks share 1 GPU): m.T.b; HARNESS_DEVICE=nccl would skip them instead"])

    def test_a_reason_that_reads_like_the_harnesss_is_grouped_by_its_kind_not_its_words(self):
        notes = Notes()
        notes.needs_cuda_for("m.T.a", "needs CUDA: my own words")  # a test's own skip: its words
        self.assertEqual(notes.needs_cuda_lines()[1], "  1 x needs CUDA: my own words: m.T.a")


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


if __name__ == "__main__":
    unittest.main()
