"""Faults between reused ranks are reported by their root cause, fast, and nothing is lost or left behind.

The TestA..TestZStillWorks classes of tests/fixtures/fx_between_ranks.py under ``python -m unittest``: subtests
and skips that leave a peer inside a collective, unittest's cleanup and tearDown semantics in the ranks, 50 MB
of output, an exception that does not pickle. tests/fixtures/fx_slow.py: Ctrl-C and SIGTERM while a test runs.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

from tests._support import REPO, RUN_TIMEOUT, TOKEN_VAR, FixtureTestCase, base_env, fixture_line, nightly, wait_until_gone

FX = "fx_between_ranks"
MOD = f"tests.fixtures.{FX}"
# the fixture's classes for reused ranks, in the order they run: the last one checks the ranks still work
CLASSES = ["TestASubtestFailsWhilePeerInCollective", "TestBSubtestSkippedOnOneRank", "TestCSkipOnOneRank",
           "TestDCleanupsWhenSetUpFails", "TestECleanupFails", "TestFBodyAndTearDownFail", "TestGHugeOutput",
           "TestHUnpicklableMessage", "TestIDifferentCombinations", "TestJSlowPeerSkipsToo", "TestZStillWorks"]


class TestFaultsBetweenRanks(FixtureTestCase):
    ARGS = [f"{MOD}.{name}" for name in CLASSES] + ["-v"]
    # three tests leave a peer inside a collective: each waits the grace, which the checks name, not its length
    ENV = {"HARNESS_PEER_GRACE": "2"}

    def test_counts(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("Ran 11 tests")
        self.assertInReport(f"test_after_all_that ({MOD}.TestZStillWorks.test_after_all_that) ... ok")

    def test_failing_combination_while_peer_in_collective(self):
        text = self.r.section("test_desync")
        head = text.splitlines()[0]
        # the root cause first: the rank, the combination, the exception, the line
        self.assertIn(f"{MOD}.TestASubtestFailsWhilePeerInCollective.test_desync [rank 1/2] subtest (step=2) "
                      "failed on cpu/gloo: ValueError: FIXTURE-DESYNC rank 1 cannot build step 2", head)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "FIXTURE-DESYNC-RAISE")}, in _step', text)
        # then the stuck rank: where it was, and its stack; stopped by the peer grace, not the timeout
        self.assertRegex(text, r"rank 0: never finished this combination: still running [\d.]+ s after rank 1's "
                               r"subtest \(step=2\) failed; stopped \(HARNESS_PEER_GRACE\); it was in all_reduce")
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "FIXTURE-DESYNC-ALLREDUCE")} in _step', text)
        self.assertNotIn("timed out", self.r.output)
        self.assertLess(text.index("FIXTURE-DESYNC rank 1"), text.index("rank 0 stack"))
        # the combination before it ran on both ranks
        steps = {(row["rank"], row["step"]) for row in self.r.rank_lines("STEP")}
        self.assertEqual(steps, {("0", "1"), ("1", "1")}, self.r.describe())

    def test_skipped_combination_while_peer_in_collective_is_an_error(self):
        text = self.r.section("test_skip_desync")
        self.assertIn("ERROR: test_skip_desync", [h for h in self.r.sections() if "test_skip_desync" in h][0])
        self.assertIn("[rank 0/2] skipped subtest (dtype='float16') on cpu/gloo (FIXTURE-SUBSKIP rank 0 has no "
                      "float16 kernel) while rank 1 was still inside it", text)
        self.assertIn("it was in all_reduce", text)
        self.assertIn(f'line {fixture_line(FX, "FIXTURE-SUBSKIP-ALLREDUCE")} in _step', text)

    def test_skip_on_one_rank_while_peer_in_collective_is_an_error(self):
        text = self.r.section("ERROR: test_skip_one_rank")
        self.assertIn("[rank 1/2] skipped on cpu/gloo (FIXTURE-SKIP rank 1 lacks a feature) while rank 0 still "
                      "waited for it: a test must skip on every rank or on none", text)
        self.assertIn(f'line {fixture_line(FX, "FIXTURE-SKIP-ALLREDUCE")} in test_skip_one_rank', text)

    def test_a_skip_waits_for_a_slow_peer_that_skips_too(self):
        # rank 1 reached the test after the grace had run out since rank 0 skipped it, then skipped it too: rank 1
        # waited for nothing rank 0 left undone, so no grace stopped it and the test is skipped, not an error
        self.assertInReport(f"test_skipped_on_every_rank ({MOD}.TestJSlowPeerSkipsToo.test_skipped_on_every_rank) ... "
                            "skipped 'FIXTURE-SLOW-SKIP not on this machine'")

    def test_cleanups_run_when_setup_fails(self):
        text = self.r.section("ERROR: test_never_runs")
        self.assertIn("RuntimeError: FIXTURE-SETUP-FAILS", text)
        ranks = {row["rank"] for row in self.r.rank_lines("CLEANUP-RAN")}
        self.assertEqual(ranks, {"0", "1"}, self.r.describe())
        self.assertNotIn("BODY-RAN", self.r.output)

    def test_failing_cleanup_is_an_error(self):
        text = self.r.section("ERROR: test_cleanup_fails")
        self.assertIn("OSError: FIXTURE-CLEANUP-FAILS could not close the file", text)

    def test_body_failure_and_teardown_error_both_reported(self):
        text = self.r.section("FAIL: test_body_fails")
        self.assertIn("AssertionError: 1 != 2 : FIXTURE-BODY-FAILS", text)
        self.assertIn("RuntimeError: FIXTURE-TEARDOWN-FAILS", text)

    def test_output_bounded_by_bytes_and_printed_once(self):
        # each rank printed 50 MB; the whole run's output stays small
        self.assertLess(len(self.r.output), 1_000_000, "rank output was not bounded")
        text = self.r.section("FAIL: test_prints_50_mb")
        self.assertIn("[rank 0] FIXTURE-OUTPUT-FIRST-LINE", text)
        self.assertIn("[rank 0] FIXTURE-OUTPUT-LAST-LINE", text)
        self.assertRegex(text, r"\[rank 0\] \.\.\. \d+ bytes of output not shown")
        # rank 0's output is in its report and nowhere else; rank 1's (it passed) is printed once after the test
        self.assertEqual(self.r.output.count("[rank 0] FIXTURE-OUTPUT-FIRST-LINE"), 1)
        self.assertEqual(self.r.output.count("[rank 1] FIXTURE-OUTPUT-LAST-LINE"), 1)

    def test_unpicklable_exception_message_reaches_the_report(self):
        text = self.r.section("ERROR: test_unpicklable")
        self.assertRegex(text, r"\[rank [01]/2\] raised on cpu/gloo")
        self.assertIn("FIXTURE-UNPICKLABLE the real error", text)
        self.assertNotIn("exit code", text)

    def test_ranks_that_ran_different_combinations(self):
        text = self.r.section("ERROR: test_ranks_disagree_on_the_config")
        self.assertIn("[rank 0/2] raised on cpu/gloo: harness.errors.HarnessError: rank 1 left the test", text)
        self.assertIn("give run_subtests the same config on every rank", text)
        self.assertNotIn("timed out", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("a rank left waiting by a peer whose body ended, stopped after the grace in a pool, by "
         "tests.test_collectives.TestCollectivesReport ('rank 1 never called #2 all_reduce'); slow ranks never cut "
         "short, by tests.test_desync; the same fixture under torchrun by tests.test_torchrun.TestPeerLeftUnderTorchrun")
class TestPeerLeft(FixtureTestCase):
    """tests/fixtures/fx_peer_left.py in a pool, HARNESS_TIMEOUT=60: rank 1's body ended while rank 0 waits in a
    collective rank 1 never called (stopped after HARNESS_PEER_GRACE, not at the timeout); a peer slower than the
    grace passes. tests.test_torchrun.TestPeerLeftUnderTorchrun: the same under torchrun."""

    ARGS = ["tests.fixtures.fx_peer_left", "-v"]
    ENV = {"HARNESS_TIMEOUT": "60", "HARNESS_PEER_GRACE": "2"}  # (the slow peer sleeps the grace and 2 s more)

    def test_the_rank_left_waiting_is_stopped_after_the_grace(self):
        text = self.r.section("ERROR: test_peer_left")
        self.assertIn("fx_peer_left.TestAPeerLeft.test_peer_left [rank 1/2] ended its test (passed) on cpu/gloo without "
                      "a collective rank 0 waited in: rank 1 never called #2 all_reduce(float32[2]) on the default "
                      "group: its last was #1", text)
        self.assertRegex(text, r"rank 0, which waited in it: still running [\d.]+ s after rank 1 passed without "
                               r"calling #2 all_reduce\(float32\[2\]\) on the default group; stopped "
                               r"\(HARNESS_PEER_GRACE\)")
        self.assertNotIn("timed out", self.r.output)

    def test_a_peer_slower_than_the_grace_passes(self):
        self.assertInReport("test_slow_peer (tests.fixtures.fx_peer_left.TestBSlowPeer.test_slow_peer) ... ok")
        self.assertEqual(self.r.returncode, 1, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestInterrupts(unittest.TestCase):
    """Ctrl-C and SIGTERM while a test runs: reported interrupted, ranks stopped, nothing left, 130 / 143."""

    def interrupt(self, sig: int, whole_group: bool, runner: list[str], sigint_ignored: bool = False) -> dict:
        """Run ``runner`` (fx_slow), send ``sig`` once its slow test started; ``sigint_ignored``: start the run
        with SIGINT ignored, as a shell without job control starts a background job (and as a runner process
        once passed it on to every process its tests started)."""
        outside = tempfile.mkdtemp(prefix="distharness-suite-")  # the marker and the JUnit XML
        self.addCleanup(shutil.rmtree, outside, True)
        tmp = os.path.join(outside, "tmp")  # the run's TMPDIR: nothing of the run may stay there
        os.mkdir(tmp)
        marker = os.path.join(outside, "started")
        token = os.urandom(8).hex()
        # no server folder elsewhere: a run looks for a server's socket in TMPDIR (and must create nothing there)
        env = base_env(FX_STARTED_MARKER=marker, TMPDIR=tmp, XDG_RUNTIME_DIR=None, **{TOKEN_VAR: token})
        junit = os.path.join(outside, "junit.xml")
        cmd = [sys.executable, *runner] + (["--junit-xml", junit] if runner[0] == "run_tests.py" else [])
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True,
                                preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored
                                else None)
        try:
            deadline = time.monotonic() + RUN_TIMEOUT  # (a bound for a loaded machine, not a time asserted)
            while not os.path.exists(marker):
                self.assertIsNone(proc.poll(), "the run ended before the slow test started")
                self.assertLess(time.monotonic(), deadline, "the slow test never started")
                time.sleep(0.1)
            with open(marker) as f:
                temp_dir = f.read()
            self.assertTrue(os.path.isdir(temp_dir))
            if whole_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        left = wait_until_gone(token)
        leftovers = sorted(os.listdir(tmp))
        xml = None
        if os.path.exists(junit):
            xml = ET.parse(junit).getroot()
        return {"rc": proc.returncode, "out": out, "err": err, "left": left, "temp": leftovers,
                "temp_dir_exists": os.path.exists(temp_dir), "xml": xml}

    def check_clean(self, run: dict) -> None:
        self.assertEqual(run["left"], {}, "rank processes still alive")
        self.assertEqual(run["temp"], [], "left in the run's TMPDIR")
        self.assertFalse(run["temp_dir_exists"], "the test's with_temp_dir directory was left behind")

    def check_runner_report(self, run: dict, why: str) -> None:
        out = run["out"]
        self.assertRegex(out, r"\[2/3\] INTR\s+tests\.fixtures\.fx_slow\.TestBSlow\.test_still_running")
        self.assertNotRegex(out, r"PASS\s+tests\.fixtures\.fx_slow\.TestBSlow")
        self.assertIn(f"{why} while this test was running", out)
        self.assertEqual(out.rstrip().splitlines()[-1], "1 passed, 1 failed, 0 skipped", out)
        case = [c for c in run["xml"].iter("testcase") if c.get("name") == "test_still_running"]
        self.assertEqual(len(case), 1)
        error = case[0].find("error")
        self.assertIsNotNone(error, "the interrupted test is not an error in the JUnit XML")
        self.assertEqual(error.get("type"), "Interrupted")

    def test_ctrl_c_to_the_process_group(self):
        run = self.interrupt(signal.SIGINT, True, ["run_tests.py", "tests.fixtures.fx_slow"])
        self.assertEqual(run["rc"], 130, run["out"] + run["err"])
        self.check_runner_report(run, "interrupted (Ctrl-C)")
        self.check_clean(run)

    @nightly("SIGTERM to the parent only, and Ctrl-C to the process group")
    def test_sigterm_to_the_process_group(self):
        run = self.interrupt(signal.SIGTERM, True, ["run_tests.py", "tests.fixtures.fx_slow"])
        self.assertEqual(run["rc"], 143, run["out"] + run["err"])
        self.check_runner_report(run, "terminated (SIGTERM)")
        self.check_clean(run)

    def test_sigterm_to_the_parent_only(self):
        run = self.interrupt(signal.SIGTERM, False, ["run_tests.py", "tests.fixtures.fx_slow"])
        self.assertEqual(run["rc"], 143, run["out"] + run["err"])
        self.check_clean(run)

    def test_ctrl_c_with_jobs_stops_every_worker(self):
        # started with SIGINT ignored: the -j parent and its workers take Ctrl-C all the same, as the thin
        # parent does (before, they waited for a KeyboardInterrupt Python never raised: the run hung)
        run = self.interrupt(signal.SIGINT, True, ["run_tests.py", "tests.fixtures.fx_slow", "-j", "2"],
                             sigint_ignored=True)
        self.assertEqual(run["rc"], 130, run["out"] + run["err"])
        self.assertRegex(run["out"], r"j\d \[\d/\d\] INTR\s+tests\.fixtures\.fx_slow\.TestBSlow\.test_still_running")
        self.assertIn("interrupted (Ctrl-C) while this test was running", run["out"])
        self.check_clean(run)

    @nightly("Ctrl-C with jobs (test_ctrl_c_with_jobs_stops_every_worker)")
    def test_sigterm_to_the_parent_only_with_jobs_stops_every_worker(self):
        run = self.interrupt(signal.SIGTERM, False, ["run_tests.py", "tests.fixtures.fx_slow", "-j", "2"])
        self.assertEqual(run["rc"], 143, run["out"] + run["err"])
        self.assertIn("terminated (SIGTERM) while this test was running", run["out"])
        case = [c for c in run["xml"].iter("testcase") if c.get("name") == "test_still_running"]
        self.assertEqual(len(case), 1, run["out"])
        self.assertEqual(case[0].find("error").get("type"), "Interrupted")
        self.check_clean(run)

    def test_a_process_a_test_starts_takes_ctrl_c(self):
        # the runner process (where a test that is not a rank's runs) leaves no ignored SIGINT to the processes
        # its tests start: a `python -m harness` a test runs must stop on Ctrl-C (it once hung in this suite)
        proc = subprocess.run([sys.executable, "-m", "harness", "tests.fixtures.fx_ctrl_c"], cwd=REPO,
                              env=base_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("1 passed, 0 failed", proc.stdout)

    @nightly("SIGTERM to the parent only")
    def test_sigterm_under_plain_unittest(self):
        run = self.interrupt(signal.SIGTERM, True, ["-m", "unittest", "tests.fixtures.fx_slow"])
        self.assertEqual(run["rc"], 143, run["out"] + run["err"])
        self.check_clean(run)


if __name__ == "__main__":
    unittest.main()
