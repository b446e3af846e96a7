"""Sweeps, the pure parts: the fault written on a command line (parse_sweep), @faults.sweep's marks, the checks
before any rank starts (harness.parent.sweep.check), a point named as the call it fired at and judged
(harness.judging.sweeps). No rank process runs here."""
from __future__ import annotations

import unittest

from harness import faults, restarts
from harness.errors import UsageError
from harness.judging import attempts, sweeps
from harness.parent import sweep
from harness.shared.faults import Sweep, parse_sweep, replay
from harness.shared.outcome import CRASHED, ERROR, PASSED, RankResult
from harness.testing.decorators import markers

TEST = "mod.TestX.test_y"


class TestWritten(unittest.TestCase):
    def test_the_forms_a_command_line_gives(self):
        self.assertEqual(parse_sweep("kill(rank=1)"), Sweep("kill", 1))
        self.assertEqual(parse_sweep("kill(1, 'all_reduce')"), Sweep("kill", 1, "all_reduce"))
        self.assertIs(parse_sweep("kill(rank=every_rank)").rank, faults.every_rank)
        self.assertEqual(parse_sweep("kill(rank=[0, 1], op='barrier', nth=2)"), Sweep("kill", (0, 1), "barrier", 2))
        self.assertEqual(parse_sweep("delay(1, 0.5)").seconds, 0.5)
        self.assertEqual(repr(parse_sweep("raise_(rank=0, exc=ConnectionError('x'))").exc), "ConnectionError('x')")
        self.assertEqual(str(parse_sweep("kill(rank=faults.every_rank, op='all_reduce')")),
                         "kill(rank=faults.every_rank, op='all_reduce')")

    def test_a_wrong_one_says_how_to_write_it(self):
        for text, words in [("kil(rank=1)", "unknown fault 'kil'"), ("kill()", "give the rank to sweep"),
                            ("kill(rank=x)", "rank= must be a literal"), ("1 +", "not a fault"),
                            ("raise_(rank=0, exc=os.error)", "exc must be a built-in exception"),
                            ("kill(rank=1, when=2)", "argument 'when' unknown")]:
            with self.subTest(text), self.assertRaises(UsageError) as caught:
                parse_sweep(text)
            self.assertIn(words, str(caught.exception))


class TestMarks(unittest.TestCase):
    def test_the_sweep_is_a_mark_that_stacks(self):
        @faults.sweep(faults.kill, rank=[0, 1], op="barrier")
        @restarts(1)
        def test(self): ...

        marks = markers(test)
        self.assertEqual((marks["sweep"], marks["restarts"]), (Sweep("kill", (0, 1), "barrier"), 1))
        self.assertEqual(markers(faults.sweep(faults.kill(1, op="barrier", nth=3))(lambda self: None))["sweep"],
                         Sweep("kill", 1, "barrier", 3))

    def test_bad_marks_are_usage_errors(self):
        for call, words in [(lambda: faults.sweep(faults.kill), "give the rank to sweep"),
                            (lambda: faults.sweep(print, rank=1), "unknown fault"),
                            (lambda: faults.sweep(faults.kill, rank=1, when=3), "unknown argument(s) when")]:
            with self.subTest(words), self.assertRaises(UsageError) as caught:
                call()
            self.assertIn(words, str(caught.exception))


class TestChecks(unittest.TestCase):
    def refused(self, spec: Sweep, given_by: str = sweep.TEST, world: int = 2) -> str:
        with self.assertRaises(UsageError) as caught:
            sweep.check(spec, given_by, 1, TEST, world)
        return str(caught.exception)

    def test_what_cannot_run_is_refused_naming_the_test(self):
        self.assertIn(f"{TEST}: @faults.sweep hang(rank=1): a hang sweep is refused", self.refused(Sweep("hang", 1)))
        self.assertIn("io_error fails writes, not collectives", self.refused(Sweep("io_error", 1)))
        self.assertIn("rank 3 is outside the test's world of 2 ranks", self.refused(Sweep("kill", 3)))
        self.assertIn("unknown op 'all_reduc'", self.refused(Sweep("kill", 1, "all_reduc")))
        self.assertIn("a rank named twice", self.refused(Sweep("kill", (1, 1))))
        self.assertIn("nth=0", self.refused(Sweep("kill", 1, None, 0)))

    def test_the_runs_sweep_skips_a_world_without_its_rank(self):
        self.assertIn("this test's world has 2 ranks (no rank 3): not swept",
                      sweep.check(Sweep("kill", 3), sweep.RUN, 0, TEST, 2))
        self.assertEqual(sweep.check(Sweep("kill", faults.every_rank), sweep.RUN, 0, TEST, 4), "")
        self.assertEqual(Sweep("kill", faults.every_rank).ranks(3), [0, 1, 2])


class TestPoints(unittest.TestCase):
    def test_a_point_is_named_by_the_call_it_fired_at(self):
        fault = Sweep("kill", 1).point(1, None, 5)
        entry = {"index": 0, "rank": 1, "where": "at its 5th collectives (gather_object)", "op": "gather_object",
                 "counts": {"all_reduce": 3, "gather_object": 2}, "total": 5}
        self.assertEqual(replay(sweeps.fired_as(fault, [entry], 0)), "kill(rank=1, op='gather_object', nth=2)")
        self.assertEqual(sweeps.fired_as(fault, [], 0), fault)

    def test_a_test_that_does_not_survive_its_fault_fails_the_point(self):
        fault = Sweep("kill", 1).point(1, "all_reduce", 1)
        entry = {"index": 0, "rank": 1, "where": "at its 1st all_reduce", "op": "all_reduce",
                 "counts": {"all_reduce": 1}, "total": 1}
        results = [RankResult(0, ERROR, "RuntimeError", "Connection closed by peer"), RankResult(1, CRASHED, exitcode=-9)]
        attempt = attempts.judge_attempt([fault], 0, results, [entry])
        judged = type("J", (), {"verdict": type("V", (), {"fails": False, "lines": [], "root_rank": None})()})()
        point = sweeps.point_of(1, fault, 0, [attempt], judged, [], ["  -> passed (no restart left: ...)"], 0.1, 0,
                                TEST)
        self.assertFalse(point.passed)
        self.assertIn("the test did not survive it: rank 1: killed by SIGKILL (exit code -9) (the injected fault); "
                      "rank 0: RuntimeError: Connection closed by peer (follows from it); it has no @restarts",
                      point.line)
        self.assertIn("  -> the point failed: the test did not survive the fault", point.lines)
        survived = [RankResult(0, PASSED), RankResult(1, PASSED)]
        again = attempts.judge_attempt([fault], 1, survived, [])
        self.assertTrue(sweeps.point_of(1, fault, 0, [attempt, again], judged, [], [], 0.1, 1, TEST).passed)
