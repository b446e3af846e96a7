"""Base-class members upstream tests touch: tests/compat/cx_members.py."""
import unittest

from tests._support import FixtureTestCase

MOD = "tests.compat.cx_members"


class TestMembers(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def test_outcome(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 6 tests")
        self.assertInReport("FAILED (failures=1, skipped=1)")

    def test_upstream_skip_exit_code_is_a_skip(self):
        self.assertMatchesReport(r"test_upstream_skip_exit_code \(.*\) \.\.\. skipped \"needs at least 2 CUDA devices "
                                 r"\(sys.exit\(77\) in the test: upstream's skip exit code\)\"")

    def test_spawn_processes_in_set_up_and_own_group_with_init_method(self):
        self.assertMatchesReport(rf"test_members \({MOD}\.TestAMembers\.test_members\) \.\.\. ")
        rows = self.r.rank_lines("OWNPG")
        self.assertEqual({(row["rank"], row["sum"], row["method"]) for row in rows},
                         {("0", "2", "file"), ("1", "2", "file")}, self.r.describe())

    def test_fsdp_members(self):
        self.assertEqual(sorted(row["rank"] for row in self.r.rank_lines("FSDPMEMBERS")), ["0", "1"])

    def test_init_manual_seed_for_rank_differs_per_rank(self):
        rows = self.r.rank_lines("SEEDS")
        self.assertEqual(len(rows), 4, self.r.describe())
        self.assertEqual({row["distinct"] for row in rows}, {"4"})

    def test_op_helpers_pass_on_a_right_op(self):
        self.assertEqual(sorted(row["rank"] for row in self.r.rank_lines("OPHELPERS")), ["0", "1", "2", "3"])

    def test_op_helper_fails_on_a_wrong_op(self):
        text = self.r.section("FAIL: test_op_helper_catches_a_wrong_op")
        self.assertIn("Scalars are not close", text)
        self.assertIn("Expected 28.0", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
