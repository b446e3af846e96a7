"""Upstream's decorator arguments and behaviour: tests/compat/cx_decorators.py, cx_skip_on_plain_class.py."""
import unittest

from tests._support import FixtureTestCase

MOD = "tests.compat.cx_decorators"


class TestDecorators(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def test_outcome(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 8 tests")
        self.assertInReport("FAILED (errors=1)")

    def test_with_comms_eager_init_and_per_device_backend(self):
        rows = self.r.rank_lines("EAGER")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1"], self.r.describe())
        self.assertEqual({row["init"] for row in rows}, {"1"})
        self.assertEqual({row["sum"] for row in self.r.rank_lines("PERDEVICE")}, {"2"})

    def test_init_rpc_false_imports_and_runs_without_rpc(self):
        rows = self.r.rank_lines("NORPC")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1"], self.r.describe())
        self.assertEqual({(row["backend"], row["rpc"]) for row in rows}, {("gloo", "0")})

    def test_init_rpc_true_starts_rpc(self):
        got = {row["rank"]: row["got"] for row in self.r.rank_lines("RPC")}
        self.assertEqual(got, {"0": "10", "1": "11"}, self.r.describe())

    def test_temp_dir_without_a_group_is_per_rank(self):
        rows = self.r.rank_lines("OWNDIR")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1"], self.r.describe())
        paths = {row["rank"]: row["path"] for row in rows}
        self.assertNotEqual(paths["0"], paths["1"], "each rank must get its own directory without a group")
        self.assertEqual({row["init"] for row in rows}, {"0"})
        self.assertMatchesReport(r"test_own_dir_per_rank \(.*\) \.\.\. .*ok$|test_own_dir_per_rank \(.*\) \.\.\. ok")

    def test_temp_dir_with_a_group_is_shared(self):
        paths = {row["path"] for row in self.r.rank_lines("SHAREDDIR")}
        self.assertEqual(len(paths), 1, self.r.describe())

    def test_temp_dir_on_a_single_process_test(self):
        self.assertIn("PLAINDIR pid=", self.r.output, self.r.describe())
        self.assertRegex(self.r.output, r"PLAINDIR pid=\d+ exists=1")
        self.assertMatchesReport(r"test_temp_dir_single_process \(.*\) \.\.\. .*ok")

    def test_skip_if_lt_x_gpu_on_a_plain_test_case_is_an_error(self):
        text = self.r.section("ERROR: test_not_a_harness_test")
        self.assertIn(f"UsageError: {MOD}.TestDPlainTestCase.test_not_a_harness_test: @skip_if_lt_x_gpu(2) on a test "
                      "of TestDPlainTestCase, a class the harness does not run on ranks", text)
        self.assertNotIn("FIXTURE-PLAIN-RAN", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestSkipOnPlainClass(FixtureTestCase):
    ARGS = ["tests.compat.cx_skip_on_plain_class", "-v"]

    def test_import_fails_naming_the_class(self):
        self.assertNotEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("UsageError: @skip_if_lt_x_gpu(2) on class TestPlain, which the harness does not run on "
                            "ranks (its bases: TestCase)")
        self.assertNotRegex(self.r.output, r"\bOK\b")


if __name__ == "__main__":
    unittest.main()
