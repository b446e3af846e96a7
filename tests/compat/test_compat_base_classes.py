"""Upstream base classes that had no counterpart, on real rank processes: tests/compat/cx_base_classes.py."""
import unittest

from tests._support import FixtureTestCase

MOD = "tests.compat.cx_base_classes"


class TestBaseClasses(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def test_all_pass(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("Ran 7 tests")

    def test_continuous_runs_with_a_group_and_its_backend(self):
        rows = self.r.rank_lines("CONT")
        self.assertEqual({(row["rank"], row["sum"], row["backend"]) for row in rows},
                         {("0", "2", "gloo"), ("1", "2", "gloo")}, self.r.describe())
        # the class's tests share the ranks' processes
        pids = {row["rank"]: row["pid"] for row in rows}
        self.assertEqual(pids, {row["rank"]: row["pid"] for row in self.r.rank_lines("CONT2")})

    def test_continuous_default_world_is_one_rank_per_gpu_of_a_machine_with_enough(self):
        rows = self.r.rank_lines("CONTDEV")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1", "2", "3"], self.r.describe())
        self.assertEqual({(row["ws"], row["dist"]) for row in rows}, {("4", "4")})

    def test_dtensor_continuous(self):
        self.assertEqual({row["mesh"] for row in self.r.rank_lines("DTCONT")}, {"4"}, self.r.describe())

    def test_multi_threaded_runs_per_thread_hooks_in_each_rank(self):
        self.assertEqual(sorted(row["rank"] for row in self.r.rank_lines("PERTHREADSETUP")), ["0", "1"])
        self.assertEqual(sorted(row["rank"] for row in self.r.rank_lines("PERTHREADTEARDOWN")), ["0", "1"])
        self.assertEqual({row["got"] for row in self.r.rank_lines("MT")}, {"5"}, self.r.describe())

    def test_fsdp_multi_thread_shards(self):
        self.assertEqual({row["local"] for row in self.r.rank_lines("FSDPMT")}, {"2x4"}, self.r.describe())

    def test_sharded_tensor_base(self):
        self.assertEqual({row["shards"] for row in self.r.rank_lines("ST")}, {"1"}, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
