"""Desyncs that end the test at once (tests/fixtures/fx_desync.py under ``python -m unittest``, 4 ranks).

When every rank is blocked in a collective and their flight recorders show that the collectives can never
meet (different ops, sizes, dtypes, or a group a member never joined), the pool stops the test as soon as two
looks agree, with the usual report; the test's timeout (60 s here) never comes into it. Ranks merely slow, or
inside a matching collective, pass.
"""
import unittest

from tests._support import FixtureTestCase, fixture_line

MOD = "tests.fixtures.fx_desync"
FIX = "fx_desync.py"
AT_ONCE = "every rank was blocked in a collective, so the test was stopped at once, not at its timeout"


class TestDesyncEndsAtOnce(FixtureTestCase):
    ARGS = [MOD, "-v"]
    ENV = {"HARNESS_TIMEOUT": "60", "HARNESS_THREADS": "1"}

    def test_exit_code_and_summary(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 8 tests")
        self.assertInReport("FAILED (errors=4)")

    def test_different_ops(self):
        text = self.r.section("ERROR: test_different_ops")
        self.assertIn(f"{MOD}.TestADifferentOps.test_different_ops [rank 2/4] was killed on cpu/gloo: can never meet "
                      "the other ranks: #2 on the default group, different ops: broadcast(float32[4]) on rank 2; "
                      f"all_reduce(float32[4]) on ranks 0, 1, 3; {AT_ONCE}; it was in broadcast", text.splitlines()[0])
        self.assertIn("rank 2: last called #2 broadcast(float32[4]) on the default group, unfinished", text)
        self.assertLess(text.index("Collectives, per process group"), text.index("(faulthandler)"))
        self.assertIn("rank 0: stopped at once with rank 2, whose collective can never meet the others'", text)
        self.assertIn(f'{FIX}", line {fixture_line("fx_desync", "FIXTURE-BROADCAST")}', text)
        self.assertNotIn("timed out", text)

    def test_different_sizes(self):
        text = self.r.section("ERROR: test_different_shapes")
        # gloo may let some ranks out of the mismatched all_reduce (they pass): rank 1 is the odd one either way
        self.assertIn("[rank 1/4] was killed on cpu/gloo: can never meet the other ranks: #1 on the default group, "
                      "different sizes: all_reduce(float32[5]) on rank 1; all_reduce(float32[4]) on ranks",
                      text.splitlines()[0])
        self.assertIn(AT_ONCE, text.splitlines()[0])
        self.assertIn(f'{FIX}", line {fixture_line("fx_desync", "FIXTURE-SHAPE")}', text)
        self.assertNotIn("timed out", text)

    def test_different_dtypes(self):
        # gloo may abort a rank on the bytes it did not expect (then the peer grace ends the others), or leave
        # every rank waiting (then they are stopped at once): the report names the difference, never a timeout
        text = self.r.section("ERROR: test_different_dtypes")
        self.assertRegex(text, r"first difference: #1, different dtypes: .*all_reduce\(float64\[4\]\) on rank 3")
        self.assertNotIn("timed out", text)

    def test_a_subgroup_never_joined(self):
        text = self.r.section("ERROR: test_subgroup_never_joined")
        self.assertIn(f"{MOD}.TestDSubgroupNeverJoined.test_subgroup_never_joined [rank 0/4] was killed on cpu/gloo: "
                      "can never meet the other ranks: rank 0 waits in #1 all_reduce(float32[4]) on group [0, 1] "
                      '(name "1"), which rank 1 never called (it waits in #1 all_reduce(float32[4]) on the default '
                      f"group); {AT_ONCE}", text.splitlines()[0])
        self.assertIn('  group [0, 1] (name "1"):', text)
        self.assertIn(f'{FIX}", line {fixture_line("fx_desync", "FIXTURE-PAIR")}', text)
        self.assertNotIn("timed out", text)

    def test_slow_ranks_are_never_cut_short(self):
        for cls, name in (("TestESlowRank", "test_slow_rank"), ("TestFSlowAfterAsync", "test_slow_after_async"),
                          ("TestGSlowSubgroup", "test_slow_subgroup"), ("TestHLongCollective", "test_long_collective")):
            self.assertMatchesReport(rf"^{name} \({MOD}\.{cls}\.{name}\) \.\.\. ok$")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
