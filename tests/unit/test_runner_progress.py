"""The runner process's progress file, as the thin parent reads it back (harness.runner.progress): what it says of a
runner process that ended without reporting, by what ended it. The file is written by the runner process's own
functions (test_started, and the watchdog's listener as harness.inprocess.watchdog.bounded calls it)."""
import os
import tempfile
import time
import unittest

from harness.runner import progress
from harness.runner.results import Counts


class TestWhatTheThinParentSays(unittest.TestCase):
    def setUp(self):
        folder = tempfile.mkdtemp(prefix="distharness-suite-")
        self.addCleanup(lambda: (os.path.exists(self.path) and os.unlink(self.path), os.rmdir(folder)))
        self.path = os.path.join(folder, "runner-progress")
        progress.keep_progress(self.path)
        self.addCleanup(progress.keep_progress, None)
        progress.test_started(2, 3, Counts(passed=1, failed=0, skipped=0), "m.TestB.test_b")

    def bound(self, kind: str, seconds_ago: float) -> None:
        """The watchdog's bound as its listener records it: armed ``seconds_ago`` for a limit of 2 s."""
        progress._watchdog((2.0, 12.2, time.time() - seconds_ago, kind))

    def test_a_crash_names_the_test_and_how_far_the_run_got(self):
        words, counts = progress.lost_runner("killed by SIGSEGV (exit code -11)", self.path, -11)
        self.assertIn("ended (killed by SIGSEGV (exit code -11)) without reporting, in m.TestB.test_b (test 2 of 3)",
                      words)
        self.assertIn("its Python stack, if it crashed, is above", words)
        self.assertIn("the 1 after it did not run", words)
        self.assertEqual(counts, "1 passed, 1 failed, 0 skipped")

    def test_the_watchdog_past_a_thread_ranks_bound_is_a_thread_that_holds_the_gil(self):
        self.bound("threads", 13.0)
        words, _ = progress.lost_runner("exit code 1", self.path, 1)
        self.assertIn("past its time limit (2 s) and 10.2 s more, and its own timeout did not stop it: a thread that "
                      "holds the GIL", words)

    def test_the_watchdog_past_a_local_tests_bound_is_its_only_timeout(self):
        self.bound("local", 13.0)
        words, _ = progress.lost_runner("exit code 1", self.path, 1)
        self.assertIn("past its time limit (2 s) and 10.2 s more: its simulated ranks run in the test's own thread, "
                      "where only the watchdog can stop them (raise the class's timeout or HARNESS_TIMEOUT", words)

    def test_exit_code_1_before_the_bound_is_not_the_watchdog(self):
        self.bound("threads", 1.0)  # the process ended on its own (sys.exit(1) in a test, say) long before
        words, _ = progress.lost_runner("exit code 1", self.path, 1)
        self.assertNotIn("watchdog", words)
        self.assertIn("what ended the process ended the run", words)

    def test_a_bound_called_off_is_forgotten(self):
        self.bound("threads", 13.0)
        progress._watchdog(None)  # the test ended in time
        words, _ = progress.lost_runner("exit code 1", self.path, 1)
        self.assertNotIn("watchdog", words)

    def test_a_runner_process_stopped_after_sigterm(self):
        words = progress.stuck_runner("SIGTERM", 10.0, self.path)
        self.assertIn("did not end within 10 s of SIGTERM; stopped it (every thread's Python stack is above, from "
                      "faulthandler), in m.TestB.test_b (test 2 of 3)", words)
        self.assertIn("-k TestB.test_b", words)


if __name__ == "__main__":
    unittest.main()
