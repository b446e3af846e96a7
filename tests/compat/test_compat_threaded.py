"""Upstream's threaded classes run their ranks as threads of the test's process, and a thread that fails, raises in
perThreadSetUp, waits in a collective its peers never call, never returns, or calls another collective than they do, is reported
as a failing rank is: tests/compat/cx_threaded.py under the runner, run_tests() and pytest."""
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, under_each_front_end

MOD = "tests.compat.cx_threaded"
ID = "tests.compat.cx_threaded"


class _Checks:
    def test_passing_ones_pass_and_failing_ones_fail(self):
        self.assertNotEqual(self.r.returncode, 0, self.r.describe())
        for name in ("test_threads_share_module_state", "test_env_change_a", "test_env_change_b", "test_add"):
            self.assertNotRegex(self.r.output, rf"(FAIL|ERROR):? .*{name}\b")
        self.assertRegex(self.r.output, r"5 failed|failures=1, errors=4")

    def test_a_failing_thread_is_the_root_cause_and_its_peers_one_line_each(self):
        m = self.assertMatchesReport(r"test_fails_on_rank_2 \[rank 2/4\] failed on threads \(cpu\): "
                                     r"AssertionError: 1 != 2 : CX-THREAD-FAIL")
        after = self.r.output[m.end():]
        self.assertRegex(after, r"rank 0: .*left barrier .*rank 2 failed")

    def test_a_raise_in_per_thread_set_up_names_the_rank(self):
        self.assertMatchesReport(r"test_never_runs_on_rank_3 \[rank 3/4\] raised on threads \(cpu\): "
                                 r"RuntimeError: CX-SETUP-RAISES")
        self.assertMatchesReport(r"in perThreadSetUp")

    def test_a_hang_in_a_collective_names_the_collective_and_the_missing_rank(self):
        self.assertMatchesReport(r"test_hangs_in_a_collective \[rank [023]/4\] timed out on threads \(cpu\): .*timed out "
                                 r"after 3 s in all_reduce .*group rank\(s\) \[1\] never called it")

    def test_a_thread_stuck_outside_collectives_is_the_root_cause_with_its_stack(self):
        m = self.assertMatchesReport(r"test_rank_1_never_returns \[rank 1/4\] timed out on threads \(cpu\): timed out "
                                     r"after 3 s outside any collective")
        self.assertIn("CX-STUCK-HERE", self.r.output[m.end():], self.r.describe())
        self.assertRegex(self.r.output[m.end():], r"rank [023]: .*timed out after 3 s in all_reduce .*\[1\] never called it")

    def test_mismatched_collectives_are_named(self):
        self.assertMatchesReport(r"test_mismatched_collectives \[rank \d/4\] .*mismatched collectives: rank 0 called "
                                 r"broadcast, rank 1 called all_reduce")

    def test_a_thread_test_written_for_gpus_that_fails_on_cpu_says_so(self):
        if self.FRONT_END == PYTEST:  # -q shows no skip reason: the end-of-run notes count it
            self.assertMatchesReport(r"1 x asked for GPUs and failed when tried on CPU for want of them .*test_fails_on_cpu")
            return
        self.assertMatchesReport(r"needs 4 GPUs \(skip_if_lt_x_gpu\(2\)\); tried on CPU for want of them: rank \d: "
                                 r"AssertionError: CX-GPU-ONLY")

    def test_the_runner_line_says_threads(self):
        if self.FRONT_END == THE_RUNNER:
            self.assertRegex(self.r.output, r"PASS\s+tests\.compat\.cx_threaded\.TestAPasses\.test_env_change_b\s+threads")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _RunTestsOnly:
    """What the threads printed: a passing test's output is shown under run_tests() (the runner shows it only
    with --verbose, pytest not at all)."""

    def test_threads_run_in_the_test_process_and_share_its_module(self):
        rows = self.r.rank_lines("CX-THREADS")
        self.assertEqual(sorted(row["_rank"] for row in rows), ["0", "1", "2", "3"], self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 1)  # one process: threads
        self.assertEqual({row["sum"] for row in rows}, {"6"})

    def test_dtensor_op_base_runs_four_thread_ranks(self):
        rows = self.r.rank_lines("CX-DTENSOR")
        self.assertEqual({(row["ws"], row["local"]) for row in rows}, {("4", "1")}, self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 1)


globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: (), RUN_TESTS: _RunTestsOnly, PYTEST: ()},
                                      env={"HARNESS_SHOW_OUTPUT": "1"}))

if __name__ == "__main__":
    unittest.main()
