"""Ranks that part ways in their collectives: tests/fixtures/fx_collectives.py under ``python -m unittest``.

The report says, before the stacks, each rank's last collective per process group and where the ranks
differ; a rank that ended its test while a peer waits for it in a collective, or in a group's creation,
ends the test within the peer grace, and is the root cause.
"""
import unittest

from tests._support import nightly, FixtureTestCase, fixture_line

MOD = "tests.fixtures.fx_collectives"
FIX = "fx_collectives.py"


class TestCollectivesReport(FixtureTestCase):
    ARGS = [MOD, "-v"]
    ENV = {"HARNESS_PEER_GRACE": "2", "HARNESS_THREADS": "1"}

    def test_exit_code_and_summary(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 7 tests")
        self.assertInReport("FAILED (errors=4)")

    def test_passing_tests_show_nothing_new(self):
        self.assertMatchesReport(rf"^test_passing \({MOD}\.TestAPassing\.test_passing\) \.\.\. ok$")
        self.assertMatchesReport(rf"^test_after \({MOD}\.TestFAfter\.test_after\) \.\.\. ok$")
        # a rank slow to make a group of its own while its peer waits in a collective is no desync
        self.assertMatchesReport(rf"^test_slow_group_of_one \({MOD}\.TestGGroupOfOne\.test_slow_group_of_one\) "
                                 r"\.\.\. ok$")
        self.assertEqual(self.r.output.count("Collectives, per process group"), 4, self.r.describe())

    def test_different_ops_at_the_same_collective(self):
        text = self.r.section("ERROR: test_different_ops")
        # both ranks wait in collectives that can never meet: stopped at once, not at the class's timeout
        self.assertIn("[rank 1/2] was killed on cpu/gloo: can never meet the other ranks: #3 on the default group, "
                      "different ops: all_gather(float32[4]) on rank 0; all_reduce(float32[5]) on rank 1; every rank "
                      "was blocked in a collective, so the test was stopped at once", text.splitlines()[0])
        self.assertNotIn("timed out", text)
        section = text.split("Collectives, per process group", 1)[1]
        self.assertLess(text.index("Collectives, per process group"), text.index("(faulthandler)"),
                        "the collectives come before the stacks")
        self.assertIn("rank 0: last called #3 all_gather(float32[4]) on the default group, unfinished", section)
        self.assertIn("rank 1: last called #3 all_reduce(float32[5]) on the default group, unfinished", section)
        self.assertIn("first difference: #3, different ops: all_gather(float32[4]) on rank 0; "
                      "all_reduce(float32[5]) on rank 1", section)
        self.assertIn(f'{FIX}", line {fixture_line("fx_collectives", "FIXTURE-GATHER")}', text)

    def test_a_collective_one_rank_never_calls_ends_within_the_grace(self):
        text = self.r.section("ERROR: test_never_called")
        self.assertIn(f"{MOD}.TestCNeverCalled.test_never_called [rank 1/2] ended its test (passed) on cpu/gloo "
                      "without a collective rank 0 waited in: rank 1 never called #2 all_reduce(float32[3]) on the "
                      "default group: its last was #1", text.splitlines()[0])
        self.assertIn("rank 0: last called #2 all_reduce(float32[3]) on the default group, unfinished", text)
        self.assertIn("rank 1: last called #1 all_reduce(float32[4]) on the default group, ended", text)
        # stopped by the peer grace, not by the class's 120 s timeout
        self.assertRegex(text, r"rank 0, which waited in it: still running [\d.]+ s after rank 1 passed without "
                               r"calling #2 all_reduce\(float32\[3\]\) on the default group; stopped "
                               r"\(HARNESS_PEER_GRACE\)")
        self.assertNotIn("timed out", text)
        self.assertIn(f'{FIX}", line {fixture_line("fx_collectives", "FIXTURE-ALONE")} in test_never_called', text)

    def test_subgroup_root_cause_is_the_missing_broadcast(self):
        text = self.r.section("ERROR: test_subgroup_broadcast")
        first = text.splitlines()[0]
        self.assertIn(f"{MOD}.TestDSubgroup.test_subgroup_broadcast [rank 0/2] ended its test (passed) on cpu/gloo "
                      "without a collective rank 1 waited in: rank 0 never called #2 broadcast(float32[4]) on group "
                      '[0, 1] (name "1"): its last was #1', first)
        self.assertNotIn("Connection closed", first)
        self.assertIn('  group [0, 1] (name "1"):', text)
        self.assertIn('rank 1: last called #2 broadcast(float32[4]) on group [0, 1] (name "1")', text)
        # rank 1's own error comes after, as what followed from it
        self.assertLess(text.index("first difference"), text.index("rank 1, which waited in it:"))
        self.assertIn(f'{FIX}", line {fixture_line("fx_collectives", "FIXTURE-BCAST")}', text)

    def test_waiting_in_group_creation_ends_within_the_grace(self):
        text = self.r.section("ERROR: test_group_creation")
        self.assertIn("[rank 0/2] was killed on cpu/gloo: still running", text.splitlines()[0])
        self.assertIn("after rank 1 passed while rank 0 was creating process group [0, 1], which rank 1 joins; "
                      "stopped (HARNESS_PEER_GRACE)", text.splitlines()[0])
        self.assertNotIn("timed out", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("the recorder on by TestCollectivesReport")
class TestRecorderOff(FixtureTestCase):
    """``TORCH_FR_BUFFER_SIZE=0``: torch records nothing, the report has no section and says what it did before."""

    ARGS = [f"{MOD}.TestBDifferentOps", "-v"]
    ENV = {"TORCH_FR_BUFFER_SIZE": "0", "HARNESS_THREADS": "1"}

    def test_no_section(self):
        text = self.r.section("ERROR: test_different_ops")
        self.assertIn("timed out after", text.splitlines()[0])
        self.assertNotIn("Collectives, per process group", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
