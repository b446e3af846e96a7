"""Upstream's DistributedTestBase and dynamo classes as a user runs them: tests/compat/cx_dynamo_classes.py under
the runner, pytest and plain unittest (run_tests() ends as the runner does; each run costs the suite a fixture run). create_pg makes the test's group on the reused ranks, a
parametrized test of an abstract nested class runs on its concrete subclass, and a test that needs NCCL is a skip
counted among the tests that need CUDA."""
import unittest

from tests._support import PYTEST, THE_RUNNER, UNITTEST, nccl_skip_reason, under_each_front_end

MOD = "tests.compat.cx_dynamo_classes"


class _Checks:
    def test_passes_with_two_skips(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertRegex(self.r.output, r"OK \(skipped=2\)|5 passed, 2 skipped|5 passed, 0 failed, 2 skipped",
                         self.r.describe())

    def test_generated_names_of_the_concrete_subclass(self):
        for name in ("test_compiled_steps_1", "test_compiled_steps_2"):
            self.assertRegex(self.r.output, rf"TestBCPU\W+{name}\b|{name} \(\S*TestBCPU", self.r.describe())
        self.assertNotRegex(self.r.output, r"DeviceTest\W+test_compiled")  # the abstract class runs nothing

    def test_skip_reasons_are_upstreams(self):
        self.assertRegex(self.r.output, r"test_odd.*Skipped due to odd world size\.|Skipped due to odd world size\.",
                         self.r.describe())
        self.assertInReport(nccl_skip_reason())  # upstream's words on a CPU build; a CUDA build has NCCL, no GPU

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _RankLines:
    """Plain unittest shows a passing test's output."""

    def test_create_pg_makes_a_group_on_every_rank(self):
        rows = self.r.rank_lines("CREATEPG")
        self.assertEqual(sorted(row["_rank"] for row in rows), ["0", "1", "2"], self.r.describe())
        self.assertEqual({(row["sum"], row["backend"]) for row in rows}, {("3", "gloo")})

    def test_dist_debug_levels_each_in_turn(self):
        self.assertEqual({row["seen"] for row in self.r.rank_lines("LEVELS")}, {"OFF,DETAIL"}, self.r.describe())

    def test_compiled_tests_run_their_steps(self):
        self.assertEqual(sorted((row["_rank"], row["steps"], row["sum"]) for row in self.r.rank_lines("DYNAMO")),
                         [("0", "1", "4"), ("0", "2", "4"), ("1", "1", "4"), ("1", "2", "4")], self.r.describe())
        self.assertNotIn("ODD-RAN", self.r.output)
        self.assertNotIn("NCCL-RAN", self.r.output)

    def test_single_process_class_has_a_world_of_one(self):
        self.assertRegex(self.r.output, r"SINGLE device=cpu\S* ws=1 sum=1", self.r.describe())


class _CountedAsNeedingCuda:
    """The front ends with an end-of-run hook count the NCCL skip among the tests that need CUDA."""

    def test_the_nccl_skip_needs_cuda(self):
        self.assertRegex(self.r.output, r"1 test needs CUDA, skipped \(a GPU or NCCL was missing\): "
                                        r"\S*cx_dynamo_classes\.TestCSingle\.test_nccl", self.r.describe())


globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: _CountedAsNeedingCuda,
                                                     PYTEST: _CountedAsNeedingCuda,
                                                     UNITTEST: _RankLines},
                                      args={PYTEST: ["-rs"]}))

if __name__ == "__main__":
    unittest.main()
