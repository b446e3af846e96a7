"""parametrize, instantiate_parametrized_tests and subtest as a user runs them: tests/compat/cx_parametrize.py under
run_tests(), the runner (its -k selecting generated names) and pytest. Every class family gets upstream's generated
names, each generated test runs its own values on every rank, and the other decorators still apply."""
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, under_each_front_end

MOD = "tests.compat.cx_parametrize"

# what instantiate_parametrized_tests makes of the fixture's tests, by class (upstream's names)
GENERATED = {
    "TestARanks": ["test_sum_n_1", "test_sum_n_3", "test_stacked_float32_off", "test_stacked_float32_on",
                   "test_stacked_bfloat16_off", "test_stacked_bfloat16_on", "test_sub_double", "test_sub_fails",
                   "test_given_k_1", "test_given_k_2", "test_given_outer_fn0", "test_given_outer_fn1"],
    "TestBFSDP": ["test_fsdp_world_a", "test_fsdp_world_b"],
    "TestCContinuous": ["test_cont_p_0_5"],
    "TestDThreads": ["test_threads_m_2", "test_threads_m_4"],
    "TestELocal": ["test_local_m_5"],
}


class _AllRan:
    """Checks of a run of the whole fixture."""

    def test_every_generated_name_ran_and_no_template_did(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        for cls, names in GENERATED.items():
            for name in names:
                self.assertRegex(self.r.output, rf"{cls}\W+{name}\b|{name} \(\S*{cls}", self.r.describe())
        for template in ("test_sum", "test_stacked", "test_sub", "test_given", "test_fsdp", "test_threads"):
            self.assertNotRegex(self.r.output, rf"[.:]{template} |[.:]{template}$|^{template} ", self.r.describe())

    def test_a_subtest_that_asks_for_gpus_and_fails_on_cpu_is_a_skip_counted_as_needing_cuda(self):
        # test_sub_fails: skip_if_lt_x_gpu(2) on the template, expectedFailure from subtest(decorators=); on CPU its
        # assertion fails, and a test that asks for GPUs and fails on CPU is a skip (upstream skips it there)
        self.assertRegex(self.r.output, r"needs 2 GPUs \(skip_if_lt_x_gpu\(2\)\); tried on CPU for want of them: "
                                        r"rank \d: AssertionError: 3 != 2", self.r.describe())
        self.assertRegex(self.r.output, r"1 test needs CUDA, skipped \(a GPU or NCCL was missing\): "
                                        r"\S*cx_parametrize\.TestARanks\.test_sub_fails")


class _RankLines:
    """What each generated test printed on its ranks (run_tests() shows a passing test's output)."""

    def test_each_generated_test_ran_its_own_values_on_every_rank(self):
        rows = self.r.rank_lines("SUM")
        self.assertEqual(sorted((row["_rank"], row["n"], row["got"]) for row in rows),
                         [("0", "1", "2"), ("0", "3", "6"), ("1", "1", "2"), ("1", "3", "6")], self.r.describe())

    def test_stacked_decorators_name_the_top_ones_part_first_and_keep_the_temp_dir(self):
        rows = self.r.rank_lines("STACKED")
        self.assertEqual(sorted({(row["name"], row["dtype"], row["flag"]) for row in rows}),
                         [("test_stacked_bfloat16_off", "torch.bfloat16", "False"),
                          ("test_stacked_bfloat16_on", "torch.bfloat16", "True"),
                          ("test_stacked_float32_off", "torch.float32", "False"),
                          ("test_stacked_float32_on", "torch.float32", "True")], self.r.describe())
        self.assertEqual({row["tmp"] for row in rows}, {"1"})
        self.assertEqual(len(rows), 8)  # 4 generated tests x 2 ranks

    def test_given_runs_its_examples_in_each_generated_test(self):
        rows = self.r.rank_lines("GIVEN")
        self.assertEqual({row["k"] for row in rows}, {"1", "2"}, self.r.describe())
        self.assertEqual({row["_rank"] for row in rows}, {"0", "1"})
        self.assertEqual({row["fn"] for row in self.r.rank_lines("GIVENOUTER")}, {"len", "<lambda>"})

    def test_every_class_family(self):
        self.assertEqual({(row["_rank"], row["world"], row["pg"]) for row in self.r.rank_lines("FSDP")},
                         {(r, w, "1") for r in "01" for w in "ab"}, self.r.describe())
        self.assertEqual({row["p"] for row in self.r.rank_lines("CONT")}, {"0.5"})
        self.assertEqual({(row["_rank"], row["m"]) for row in self.r.rank_lines("THREADS")},
                         {(r, m) for r in "01" for m in ("2", "4")})
        self.assertInReport("LOCAL m=5 ws=2")


class _SelectedByK:
    """``python -m harness cx_parametrize.py -k test_stacked_float32_on -k '*TestDThreads.test_threads_m_4'``."""

    def test_k_selects_generated_names_only(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("2 tests from 1 modules")
        self.assertRegex(self.r.output, r"PASS\s+tests\.compat\.cx_parametrize\.TestARanks\.test_stacked_float32_on\s")
        self.assertRegex(self.r.output, r"PASS\s+tests\.compat\.cx_parametrize\.TestDThreads\.test_threads_m_4\s+threads")
        for other in ("test_stacked_float32_off", "test_stacked_bfloat16_on", "test_threads_m_2", "test_sum_n_1"):
            self.assertNotIn(other, self.r.output)
        self.assertInReport("2 passed, 0 failed, 0 skipped")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _PytestSummary:
    def test_pytest_counts_the_generated_tests(self):
        self.assertRegex(self.r.output, r"17 passed, 1 skipped", self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _RunTestsSummary:
    def test_run_tests_counts_the_generated_tests(self):
        self.assertInReport("Ran 18 tests")
        self.assertInReport("OK (skipped=1)")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


_K = ["-k", "test_stacked_float32_on", "-k", "*TestDThreads.test_threads_m_4"]


class _NoChecks:
    pass


globals().update(under_each_front_end(MOD, _NoChecks, {RUN_TESTS: (_AllRan, _RankLines, _RunTestsSummary),
                                                       PYTEST: (_AllRan, _PytestSummary),
                                                       THE_RUNNER: _SelectedByK},
                                      args={THE_RUNNER: _K, PYTEST: ["-rA"]}))

if __name__ == "__main__":
    unittest.main()
