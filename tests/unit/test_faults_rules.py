"""Faults on purpose, the pure parts: the op table, the checks before any rank starts (harness.parent.restarts),
one attempt judged and the faults that never fired (harness.judging.attempts), the interception in this process.

No rank process runs here; the interception test wraps torch.distributed's functions in this process and calls
them on a one-rank gloo group of its own.
"""
from __future__ import annotations

import os
import tempfile
import unittest

from harness import faults, restarts
from harness.errors import UsageError
from harness.judging import attempts
from harness.parent.restarts import check, plan_of
from harness.ranks import collective_calls
from harness.shared.outcome import CRASHED, ERROR, FAILED, KILLED, PASSED, RankResult
from harness.testing.decorators import markers

TEST = "mod.TestX.test_y"


def fired(index: int, rank: int, where: str = "at its 3rd all_reduce") -> dict:
    return {"index": index, "rank": rank, "where": where, "counts": {}, "total": 0}


class TestOpTable(unittest.TestCase):
    def test_aliases_are_the_users_names(self):
        self.assertEqual(collective_calls.user_name("all_gather_single"), "all_gather_into_tensor")
        self.assertEqual(collective_calls.user_name("reduce_scatter_single"), "reduce_scatter_tensor")
        self.assertEqual(collective_calls.user_name("all_gather_tensor"), "all_gather_into_tensor")
        self.assertIsNone(collective_calls.user_name("get_rank"))

    def test_every_users_name_is_a_torch_function(self):
        import torch.distributed as dist

        for name in set(collective_calls.OPS.values()):
            self.assertTrue(callable(getattr(dist, name, None)), name)


class TestChecks(unittest.TestCase):
    def refused(self, fault, restarts_=0, world=2) -> str:
        with self.assertRaises(UsageError) as caught:
            check([fault], restarts_, TEST, world)
        return str(caught.exception)

    def test_bad_faults_name_the_test_the_fault_and_the_fix(self):
        self.assertEqual(self.refused(faults.kill(2, op="all_reduce")),
                         f"{TEST}: kill(rank=2, op='all_reduce', nth=1): rank 2 is outside the test's world of 2 "
                         "ranks; name a rank from 0 to 1")
        self.assertIn("unknown op 'allreduce'; did you mean 'all_reduce'", self.refused(faults.kill(0, op="allreduce")))
        self.assertIn("nth=0: nth counts the calls from 1", self.refused(faults.hang(0, nth=0)))
        self.assertIn("give it @restarts(2) or more", self.refused(faults.kill(0, attempt=2), restarts_=1))
        self.assertIn("is not an exception", self.refused(faults.raise_(0, "boom")))
        self.assertIn("a delay is a number of seconds", self.refused(faults.delay(0, -1)))
        self.assertIn("path_glob=''", self.refused(faults.io_error(0, "")))

    def test_good_faults_pass(self):
        check([faults.kill(1, op="all_gather_single", nth=4), faults.io_error(0, "*.distcp"),
               faults.raise_(0, RuntimeError, op=None), faults.kill(0, attempt=1)], 1, TEST, 2)

    def test_marks_stack_in_any_order_and_drawn_faults_join(self):
        a, b = faults.kill(1, op="barrier"), faults.delay(0, 0.1)

        @faults.inject(a)
        @restarts(2)
        @faults.inject(b)
        def test(self):
            pass

        marks = markers(test)
        self.assertEqual(marks["restarts"], 2)
        self.assertEqual(sorted(map(str, marks["faults"])), sorted(map(str, [a, b])))
        drawn = faults.hang(1, op="broadcast")
        self.assertEqual(plan_of(marks, {"fault": drawn, "n": 3})[-1], drawn)

    def test_decorators_refuse_what_is_not_theirs(self):
        with self.assertRaises(UsageError):
            faults.inject("kill")
        with self.assertRaises(UsageError):
            restarts(-1)
        with self.assertRaises(UsageError):
            faults.inject(lambda self: None)


class TestOneAttempt(unittest.TestCase):
    plan = [faults.kill(1, op="all_reduce", nth=3)]

    def test_a_killed_rank_and_its_peers_errors_are_not_failures(self):
        a = attempts.judge_attempt(self.plan, 0, [RankResult(0, ERROR, "RuntimeError", "Connection closed by peer"),
                                                  RankResult(1, CRASHED, exitcode=-9)], [fired(0, 1)])
        self.assertTrue(a.disrupted)
        self.assertEqual((list(a.taken), list(a.follows), a.unexplained), ([1], [0], []))
        self.assertEqual([r.status for r in a.results], [PASSED, PASSED])

    def test_a_survivors_assertion_is_the_tests_own(self):
        a = attempts.judge_attempt(self.plan, 0, [RankResult(0, FAILED, "AssertionError", "1 != 2"),
                                                  RankResult(1, CRASHED, exitcode=-9)], [fired(0, 1)])
        self.assertEqual(a.unexplained, [0])

    def test_a_crash_no_fault_fired_for_is_unexplained(self):
        a = attempts.judge_attempt(self.plan, 0, [RankResult(0, KILLED, message="stopped"),
                                                  RankResult(1, CRASHED, exitcode=-9)], [])
        self.assertFalse(a.disrupted)
        self.assertEqual(a.unexplained, [0, 1])

    def test_a_caught_raise_does_not_restart(self):
        plan = [faults.raise_(0, ConnectionError("x"), op="all_reduce")]
        a = attempts.judge_attempt(plan, 0, [RankResult(0, PASSED), RankResult(1, PASSED)], [fired(0, 0)])
        self.assertFalse(a.disrupted)

    def test_never_fired_says_what_the_rank_made(self):
        plan = [faults.kill(1, op="all_reduce", nth=10)]
        faults_seen = {"counts": {"all_reduce": 1}, "total": 1, "fired": [], "seen": {0: 1}}
        a = attempts.judge_attempt(plan, 0, [RankResult(0, PASSED), RankResult(1, PASSED, faults=faults_seen)], [])
        self.assertEqual(attempts.never_fired(plan, [a], 0),
                         ["kill(rank=1, op='all_reduce', nth=10) never fired: rank 1 made 1 all_reduce"])

    def test_a_later_attempt_that_never_started(self):
        plan = [faults.kill(1, attempt=1)]
        a = attempts.judge_attempt(plan, 0, [RankResult(0, PASSED), RankResult(1, PASSED)], [])
        self.assertIn("attempt 1 never started (the test ran 1 attempt; the world starts again only after a fault "
                      "kills or fails a rank)", attempts.never_fired(plan, [a], 1)[0])


class TestInterception(unittest.TestCase):
    """The wrapped functions in this process, on a one-rank gloo group: by the user's name, once per call."""

    def test_calls_are_seen_by_the_users_name_and_inner_calls_are_not_counted(self):
        import torch
        import torch.distributed as dist

        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1)
            seen: list[str] = []
            original = dist.all_reduce
            try:
                collective_calls.install(seen.append)
                dist.all_reduce(torch.ones(1))
                dist.all_gather_object([None], {"a": 1})
                dist.barrier()
                out = torch.empty(1)
                dist.all_gather_into_tensor(out, torch.ones(1))
            finally:
                collective_calls.uninstall()
                dist.destroy_process_group()
            self.assertEqual(seen, ["all_reduce", "all_gather_object", "barrier", "all_gather_into_tensor"])
            self.assertIs(dist.all_reduce, original)
