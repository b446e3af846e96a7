"""Tests that fail, raise, crash, segfault and hang: tests/fixtures/fx_fail.py under ``python -m unittest``.

The fixture's classes run in name order in one process, so the same run also shows how the rank pool
is kept after a failure and replaced after a crash or a hang.
"""
import unittest

from tests._support import SUBTEST_LINES, TRIAGE_ON, nightly, FixtureTestCase, fixture_line

MOD = "tests.fixtures.fx_fail"
FIX = "fx_fail.py"


class TestFailingRun(FixtureTestCase):
    ARGS = [MOD, "-v"]
    ENV = TRIAGE_ON  # on, as a user's run has it: its line is checked below

    def test_exit_code_and_summary(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 11 tests")
        self.assertInReport("FAILED (failures=3, errors=4, skipped=1)")

    def test_assertion_on_one_rank_reports_that_rank_first(self):
        text = self.r.section("FAIL: test_fail_on_rank1")
        first = text.splitlines()[0]
        self.assertIn(f"{MOD}.TestAFail.test_fail_on_rank1 [rank 1/2] failed on cpu/gloo: AssertionError: "
                      "2 != 3 : FIXTURE-ASSERT rank 1 disagrees", first)
        line = fixture_line("fx_fail", "FIXTURE-ASSERT")
        self.assertInReport(f'{FIX}", line {line}, in test_fail_on_rank1', text)
        self.assertInReport('self.assertEqual(1 + 1, 3, "FIXTURE-ASSERT rank 1 disagrees")', text)
        # the rank traceback starts at the test: no harness or unittest frames
        tb = text.split("Traceback (most recent call last):", 1)[1].split("\n\n", 1)[0]
        self.assertNotRegex(tb, r"harness[/\\]|unittest[/\\]case\.py")
        # the peer that was blocked in the collective: one line, after the root cause
        others = text.split("Other ranks:\n", 1)[1].rstrip("\n").splitlines()
        self.assertEqual(len(others), 1, text)
        self.assertTrue(others[0].startswith("  rank 0: "), text)
        self.assertIn("(after the root cause above)", others[0])

    def test_base_exception_is_an_error_not_a_lost_rank(self):
        text = self.r.section("ERROR: test_checkpoint_exception")
        self.assertRegex(text.splitlines()[0], r"\[rank [01]/2\] raised on cpu/gloo: "
                                               rf"{MOD}\.CheckpointException: FIXTURE-CKPT save failed on rank [01]")
        self.assertIn(f"line {fixture_line('fx_fail', 'FIXTURE-CKPT')}, in test_checkpoint_exception", text)
        self.assertRegex(text, r"Other ranks:\n  rank [01]: .*CheckpointException: FIXTURE-CKPT")

    def test_subtest_failure_and_skip_are_reported_per_combination(self):
        self.assertMatchesReport((rf"^\s+test_subtests \({MOD}\.TestCSubtests\.test_subtests\) \(a=1, b=4\) \.\.\. "
                                  if SUBTEST_LINES else "") + r"skipped 'FIXTURE-SUBSKIP not for b=4'$")
        if SUBTEST_LINES:
            self.assertMatchesReport(r"^\s+test_subtests \(.*\) \(a=2, b=3\) \.\.\. FAIL$")
        text = self.r.section("FAIL: test_subtests")
        self.assertIn("(a=2, b=3)", list(h for h in self.r.sections() if "test_subtests" in h)[0])
        self.assertRegex(text.splitlines()[0], r"\[rank [01]/2\] subtest \(a=2, b=3\) failed on cpu/gloo: "
                                               r"AssertionError: 12\.0 != -1\.0 : FIXTURE-SUBFAIL")
        self.assertIn(f"line {fixture_line('fx_fail', 'FIXTURE-SUBFAIL')}, in _check", text)
        # it fails every time, so triage (it ran after other tests in reused ranks) finds it the test's own
        self.assertIn("Triage: fails in fresh ranks too (alone): the test's own failure", text)
        # only the failing combination is a failure; the others passed or were skipped
        self.assertEqual([h for h in self.r.sections() if "test_subtests" in h],
                         [f"FAIL: test_subtests ({MOD}.TestCSubtests.test_subtests) (a=2, b=3)"])

    def test_temp_dir_removed_after_a_failing_test(self):
        text = self.r.section("FAIL: test_temp_dir_then_fail")
        self.assertIn("FIXTURE-TEMPFAIL", text)
        paths = {row["path"] for row in self.r.rank_lines("TEMPDIR")}
        self.assertEqual(len(paths), 1, self.r.describe())
        self.assertMatchesReport(rf"test_temp_dir_was_removed \({MOD}\.TestDTempDir\.test_temp_dir_was_removed\) "
                                 r"\.\.\. ok$")
        self.assertEqual({row["path"] for row in self.r.rank_lines("TEMPDIR-GONE")}, paths)

    def test_exit_reports_the_exit_code(self):
        text = self.r.section("ERROR: test_crash")
        self.assertIn(f"{MOD}.TestECrash.test_crash [rank 1/2] died on cpu/gloo: exit code 3", text.splitlines()[0])
        self.assertIn("The process died: exit code 3.", text)
        others = text.split("Other ranks:\n", 1)[1].rstrip("\n").splitlines()
        self.assertEqual(len(others), 1, text)
        self.assertTrue(others[0].startswith("  rank 0: "), text)

    def test_segfault_reports_the_signal_and_the_line(self):
        text = self.r.section("ERROR: test_segfault")
        self.assertIn(f"{MOD}.TestGSegfault.test_segfault [rank 0/2] died on cpu/gloo: killed by SIGSEGV "
                      "(exit code -11)", text.splitlines()[0])
        self.assertIn(f'{FIX}", line {fixture_line("fx_fail", "FIXTURE-SEGV")} in test_segfault', text)
        self.assertRegex(text, r"Other ranks:\n  rank 1: [^\n]+\n?$")

    def test_hang_reports_timeout_with_both_stacks(self):
        text = self.r.section("ERROR: test_hang")
        first = text.splitlines()[0]
        # the rank that never reached the collective is the cause; the one waiting in it comes second
        self.assertRegex(first, rf"{MOD}\.TestIHang\.test_hang \[rank 1/2\] timed out on cpu/gloo: "
                                r"timed out after \d+ s")
        sleep_line = fixture_line("fx_fail", "FIXTURE-SLEEP")
        reduce_line = fixture_line("fx_fail", "FIXTURE-ALLREDUCE")
        self.assertIn("it was in test_hang (", first)
        self.assertIn(f'{FIX}", line {sleep_line} in test_hang', text)
        self.assertRegex(text, r"Other ranks:\n  rank 0: timed out after \d+ s.*; it was in all_reduce")
        rank0 = text.split("rank 0 stack:", 1)[1]
        self.assertIn("in all_reduce", rank0)
        self.assertIn(f'{FIX}", line {reduce_line} in test_hang', rank0)

    def pids(self, test):
        rows = [row for row in self.r.rank_lines("PID") if row["test"] == test]
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1"], f"{test}\n{self.r.describe()}")
        return tuple(row["pid"] for row in sorted(rows, key=lambda row: row["rank"]))

    def test_pool_kept_after_failures_and_replaced_after_crash_segfault_hang(self):
        first = self.pids("fail")
        for test in ("baseexc", "subtests", "tempdir", "crash"):
            self.assertEqual(self.pids(test), first, test)  # a failing test does not cost a new pool
        after_crash = self.pids("aftercrash")
        self.assertTrue(set(after_crash).isdisjoint(first), "a crashed pool must be replaced")
        self.assertEqual(self.pids("segv"), after_crash)
        after_segv = self.pids("aftersegv")
        self.assertTrue(set(after_segv).isdisjoint(after_crash))
        self.assertEqual(self.pids("hang"), after_segv)
        self.assertTrue(set(self.pids("afterhang")).isdisjoint(after_segv), "a hung pool must be replaced")

    def test_next_test_passes_after_crash_segfault_and_hang(self):
        for name in ("test_after_crash", "test_after_segfault", "test_after_hang"):
            with self.subTest(name=name):
                self.assertMatchesReport(rf"^{name} \({MOD}\.\w+\.{name}\) \.\.\. ok$")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("timeouts by tests.test_failures.TestFailingRun")
class TestTimeoutFromEnvironment(FixtureTestCase):
    """HARNESS_TIMEOUT wins over the class's ``timeout`` attribute."""

    ARGS = [f"{MOD}.TestIHang", "-v"]
    ENV = {"HARNESS_TIMEOUT": "6"}  # longer than the class's 3 s, so the report tells which was used

    def test_env_timeout_used(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        text = self.r.section("ERROR: test_hang")
        self.assertRegex(text.splitlines()[0], r"\[rank 1/2\] timed out on cpu/gloo: timed out after [67] s")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
