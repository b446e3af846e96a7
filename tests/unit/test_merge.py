"""Merging the ranks' results into one verdict: the root cause first, its peers in one line each."""
from __future__ import annotations

import unittest

from harness.shared.outcome import CRASHED, ERROR, FAILED, KILLED, PASSED, SKIPPED, TIMEOUT, RankResult, order_by_cause
from harness.judging.verdict import merge

TEST = "mod.TestX.test_y"
PEER = "RuntimeError", "[pair.cc:553] Connection closed by peer [127.0.0.1]:3510"


def result(rank: int, status: str = PASSED, exc: tuple[str, str] = ("", ""), arrived: float = 0.0,
           message: str = "", **more) -> RankResult:
    exc_type, message = exc if exc[0] else ("", message)
    tb = f"Traceback (most recent call last):\n  File \"t.py\", line 3, in test_y\n{exc_type}: {message}\n" \
        if exc_type else ""
    return RankResult(rank=rank, status=status, exc_type=exc_type, message=message, traceback=tb, arrived=arrived,
                      **more)


class TestRootCauseFirst(unittest.TestCase):
    def test_own_failure_beats_an_earlier_peer_echo(self):
        # rank 0 saw rank 1's failure first (a closed connection); rank 1's own assertion is the cause
        results = [result(0, ERROR, PEER, arrived=1.0), result(1, FAILED, ("AssertionError", "1 != 2"), arrived=2.0)]
        verdict = merge(TEST, results, 2, "cpu/gloo")
        self.assertEqual(verdict.status, FAILED)
        self.assertEqual(verdict.root_rank, 1)
        lines = verdict.text.splitlines()
        self.assertEqual(lines[0], f"{TEST} [rank 1/2] failed on cpu/gloo: AssertionError: 1 != 2")
        self.assertIn('  File "t.py", line 3, in test_y', verdict.text)
        self.assertEqual(lines[-2:], ["Other ranks:", f"  rank 0: {PEER[0]}: {PEER[1]} (after the root cause above)"])

    def test_the_first_own_failure_wins_among_several(self):
        results = [result(0, ERROR, ("ValueError", "late"), arrived=3.0),
                   result(1, ERROR, ("KeyError", "'early'"), arrived=1.0)]
        self.assertEqual(merge(TEST, results, 2, "cpu/gloo").root_rank, 1)

    def test_a_crash_is_the_cause_and_says_how_it_died(self):
        results = [result(0, KILLED, arrived=2.0, message="stopped (HARNESS_PEER_GRACE)"),
                   RankResult(rank=1, status=CRASHED, exitcode=-11, arrived=1.0, stack="File \"t.py\", line 9 in f")]
        verdict = merge(TEST, results, 2, "cpu/gloo")
        self.assertEqual((verdict.status, verdict.root_rank), (ERROR, 1))
        self.assertTrue(verdict.text.startswith(f"{TEST} [rank 1/2] died on cpu/gloo: killed by SIGSEGV (exit code -11)"))
        self.assertIn("Its last Python stack (faulthandler):", verdict.text)

    def test_a_hang_outside_a_collective_comes_before_one_inside(self):
        inside = RankResult(rank=0, status=TIMEOUT, message="timed out after 5 s", arrived=1.0,
                            stack='File "/x/torch/distributed/distributed_c10d.py", line 2 in all_reduce')
        outside = RankResult(rank=1, status=TIMEOUT, message="timed out after 5 s", arrived=2.0,
                             stack='File "t.py", line 7 in test_y')
        self.assertEqual([r.rank for r in order_by_cause([inside, outside])], [1, 0])
        verdict = merge(TEST, [inside, outside], 2, "cpu/gloo")
        self.assertEqual(verdict.root_rank, 1)
        self.assertIn("rank 0: timed out after 5 s; it was in all_reduce (distributed_c10d.py:2)", verdict.text)
        self.assertIn("rank 0 stack:", verdict.text)

    def test_the_root_causes_output_is_in_the_text_only_when_asked(self):
        results = [result(0), result(1, FAILED, ("AssertionError", "no"), output="hello\n")]
        self.assertIn("[rank 1] hello", merge(TEST, results, 2, "cpu/gloo").text)
        self.assertNotIn("hello", merge(TEST, results, 2, "cpu/gloo", with_output=False).text)


class TestPassAndSkip(unittest.TestCase):
    def test_every_rank_passed(self):
        verdict = merge(TEST, [result(0), result(1)], 2, "cpu/gloo")
        self.assertEqual((verdict.status, verdict.text, verdict.root_rank), (PASSED, "", None))

    def test_every_rank_skipped_for_one_reason(self):
        results = [result(r, SKIPPED, message="no GPU") for r in range(2)]
        self.assertEqual((merge(TEST, results, 2, "cpu/gloo").status, merge(TEST, results, 2, "cpu/gloo").text),
                         (SKIPPED, "no GPU"))

    def test_a_skip_on_part_of_the_world_says_so(self):
        verdict = merge(TEST, [result(0, SKIPPED, message="odd rank"), result(1)], 2, "cpu/gloo")
        self.assertEqual(verdict.status, SKIPPED)
        self.assertIn("skipped on rank 0 (odd rank) but ran and passed on rank 1", verdict.text)

    def test_a_skip_while_peers_wait_in_a_collective_is_an_error(self):
        results = [result(0, SKIPPED, message="not here", arrived=1.0),
                   result(1, KILLED, message="stopped (HARNESS_PEER_GRACE)", arrived=2.0)]
        verdict = merge(TEST, results, 2, "cpu/gloo")
        self.assertEqual((verdict.status, verdict.root_rank), (ERROR, 0))
        self.assertTrue(verdict.text.startswith(f"{TEST} [rank 0/2] skipped on cpu/gloo (not here) while rank 1 "
                                                "still waited for it"))


if __name__ == "__main__":
    unittest.main()
