"""Reused ranks start each test as a fresh process would: tests/fixtures/fx_state.py under unittest and pytest.

What the harness puts back (environment, logging, warnings, torch flags, torch.compile state, signals,
a fork that returns) costs nothing: the same two rank processes run every test. What it cannot put
back (a replaced torch function, a thread, a child process, a half-destroyed process group) gets
the ranks replaced after the test that did it, and the test named at the end of the run.
"""
import re
import unittest

from tests._support import nightly, FixtureTestCase, fixture_line

MOD = "tests.fixtures.fx_state"
RESTORED = ["TestREnviron", "TestRLoggingWarnings", "TestRStdout", "TestRTorchFlags", "TestRCompile", "TestRSignals",
            "TestRFork", "TestRSubtestParams"]
DETECTED = ["TestUChild", "TestUGroup", "TestUReplace", "TestUThread"]


def pids(run, test):
    rows = [row for row in run.rank_lines("PID") if row["test"] == test]
    if sorted(row["rank"] for row in rows) != ["0", "1"]:
        raise AssertionError(f"{test}: expected one PID line per rank\n{run.describe()}")
    return tuple(row["pid"] for row in sorted(rows, key=lambda row: row["rank"]))


class TestRestoredStateKeepsTheRanks(FixtureTestCase):
    # TestFFrames last, in the same run: a failure's locals (test_1's error) are gone when the next test starts
    ARGS = [f"{MOD}.{name}" for name in RESTORED] + [f"{MOD}.TestFFrames", "-v"]

    def test_every_test_sees_a_fresh_process(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())  # TestFFrames.test_1 fails on purpose
        self.assertInReport(f"Ran {2 * len(RESTORED) + 2} tests")
        self.assertInReport("FAILED (errors=1)")

    def test_a_failed_tests_locals_are_freed_before_the_next_test_in_the_same_ranks(self):
        """A failure's traceback holds the test's frames: what they held (on a GPU, the tensors an out-of-memory
        error left in the test's frame) must not reach the next test, nor count as memory the test left
        referenced (which would replace the ranks)."""
        self.assertMatchesReport(rf"^test_1_fails_holding_memory \(.*\) \.\.\. ERROR$")
        self.assertMatchesReport(rf"^test_2_its_locals_are_gone \({MOD}\.TestFFrames\.test_2_its_locals_are_gone\) "
                                 r"\.\.\. ok$")
        self.assertEqual(sorted(row["rank"] for row in self.r.rank_lines("FX-STATE-FREED")), ["0", "1"],
                         self.r.describe())

    def test_one_pair_of_ranks_runs_every_test(self):
        rows = self.r.rank_lines("PID")
        self.assertEqual(len(rows), 4 * len(RESTORED), self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 2, self.r.describe())
        self.assertNotIn("altered the process", self.r.output)

    def test_output_of_a_test_after_one_that_replaced_sys_stdout_is_shown(self):
        self.assertEqual(sorted(row["_rank"] for row in self.r.rank_lines("FX-STATE-VISIBLE")), ["0", "1"],
                         self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("restoring by TestRestoredStateKeepsTheRanks")
class TestLeaksWithoutRestore(FixtureTestCase):
    """HARNESS_ENV_CHANGED=off restores nothing: the fixture's checks do see a leak (and triage, which would
    give the environment test the fresh ranks' pass, is off: this shows reuse itself)."""

    ARGS = [f"{MOD}.TestREnviron", f"{MOD}.TestRSignals", "-v"]
    ENV = {"HARNESS_ENV_CHANGED": "off", "HARNESS_TRIAGE": "0"}

    def test_the_next_test_inherits_the_changes(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (failures=2)")
        self.assertIn("'FX_STATE_MODE' unexpectedly found", self.r.section("FAIL: test_2_sees_a_fresh_environment"))
        self.assertIn("is not <function _on_sigterm", self.r.section("FAIL: test_2_sees_default_handlers"))


class TestUnrestorableStateReplacesTheRanks(FixtureTestCase):
    ARGS = [f"{MOD}.{name}" for name in DETECTED] + ["-v"]

    def test_every_test_passes(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport(f"Ran {2 * len(DETECTED)} tests")

    def test_ranks_are_replaced_after_each_altering_test(self):
        for kind in ("child", "group", "replace", "thread"):
            before, after = pids(self.r, f"{kind}-1"), pids(self.r, f"{kind}-2")
            self.assertTrue(set(before).isdisjoint(after), f"{kind}: {before} then {after}\n{self.r.describe()}")

    def test_the_run_names_each_test_and_what_it_left(self):
        head = f"harness: {MOD}."
        tail = r"; ranks restarted \(HARNESS_ENV_CHANGED=fail makes it a failure\)$"
        self.assertMatchesReport(re.escape(f"{head}TestUReplace.test_1_spies_on_all_reduce altered the process: "
                                           "torch.distributed.all_reduce replaced") + tail)
        self.assertMatchesReport(re.escape(f"{head}TestUThread.test_1_starts_a_poller altered the process: "
                                           "thread 'fx-poller' left running") + tail)
        self.assertMatchesReport(re.escape(f"{head}TestUChild.test_1_starts_a_server_and_leaves_it altered the "
                                           "process: child process `sh -c sleep 2; while true; do echo "
                                           "FX-STATE-CHILD-OUTPUT; sleep 0.2; done`")
                                 + re.escape(" left running; killed, with any processes it started") + tail)
        self.assertMatchesReport(re.escape(f"{head}TestUGroup.test_1_destroys_the_group_on_rank_0 altered the "
                                           "process: the default process group destroyed on rank 0 only") + tail)
        self.assertEqual(self.r.output.count("altered the process"), len(DETECTED), self.r.describe())

    def test_a_child_left_running_never_writes_into_a_later_test(self):
        self.assertEqual(sorted(row["_rank"] for row in self.r.rank_lines("FX-STATE-CHILD-DONE")), ["0", "1"])
        self.assertNotIn("FX-STATE-CHILD-OUTPUT\n", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestFailEnvChanged(FixtureTestCase):
    """HARNESS_ENV_CHANGED=fail (run_tests.py --fail-env-changed): the altering test fails, for CI."""

    ARGS = [f"{MOD}.TestUReplace", f"{MOD}.TestUThread", "-v"]
    ENV = {"HARNESS_ENV_CHANGED": "fail"}

    def test_the_altering_tests_fail_and_the_next_ones_pass(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (failures=2)")
        self.assertMatchesReport(r"test_2_sees_the_real_all_reduce .* \.\.\. ok")
        self.assertMatchesReport(r"test_2_has_no_poller .* \.\.\. ok")

    def test_the_failure_names_the_test_the_rank_and_what_was_left(self):
        text = self.r.section("FAIL: test_1_spies_on_all_reduce")
        self.assertRegex(text.splitlines()[0], rf"{MOD}\.TestUReplace\.test_1_spies_on_all_reduce \[rank [01]/2\] "
                                               r"failed on cpu/gloo: EnvChanged: the test left the process altered: "
                                               r"torch\.distributed\.all_reduce replaced; ranks restarted$")
        self.assertIn("Put back what the test changes", text)
        self.assertIn("thread 'fx-poller' left running", self.r.section("FAIL: test_1_starts_a_poller"))

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("hang stacks by tests.test_failures")
class TestStacksAfterATestTookTheSignals(FixtureTestCase):
    """A passing test that took SIGUSR1 and disabled faulthandler: a later hang still shows every stack."""

    ARGS = [f"{MOD}.TestZHang", "-v"]

    def test_hang_report_has_both_stacks(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=1)")
        text = self.r.section("ERROR: test_2_hangs")
        self.assertRegex(text.splitlines()[0], rf"{MOD}\.TestZHang\.test_2_hangs \[rank 1/2\] timed out on cpu/gloo")
        self.assertIn(f'fx_state.py", line {fixture_line("fx_state", "FX-STATE-SLEEP")} in test_2_hangs', text)
        rank0 = text.split("rank 0 stack:", 1)[1]
        self.assertIn("in all_reduce", rank0)
        self.assertIn(f'fx_state.py", line {fixture_line("fx_state", "FX-STATE-ALLREDUCE")} in test_2_hangs', rank0)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("the same isolation under the runner")
class TestUnderPytest(FixtureTestCase):
    RUNNER = "pytest"
    ARGS = ["tests/fixtures/fx_state.py::TestUReplace", "-p", "no:cacheprovider", "-v"]

    def test_the_run_ends_by_naming_the_altering_test(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("2 passed")
        self.assertInReport(f"harness: {MOD}.TestUReplace.test_1_spies_on_all_reduce altered the process: "
                            "torch.distributed.all_reduce replaced; ranks restarted")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestBadSetting(FixtureTestCase):
    ARGS = [f"{MOD}.TestREnviron.test_2_sees_a_fresh_environment", "-v"]
    ENV = {"HARNESS_ENV_CHANGED": "sometimes"}

    def test_the_setting_is_refused_with_the_choices(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("UsageError: HARNESS_ENV_CHANGED='sometimes' is not one of warn, fail, off")
        self.assertEqual(self.r.rank_lines("PID"), [])


if __name__ == "__main__":
    unittest.main()
