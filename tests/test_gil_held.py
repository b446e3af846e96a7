"""A thread rank that holds the GIL for ever (tests/fixtures/fx_gil_held.py): no Python code runs in its process
after that, so neither the test's own timeout nor SIGTERM's handler can act there. The watchdog (faulthandler, which
needs no GIL) ends the process past the test's limit with every thread's stack, and the runner's thin parent stops a
runner process that does not end after SIGTERM; under every front end the run ends and nothing is left behind.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from tests._support import (PYTEST, REPO, RUN_TESTS, RUN_TIMEOUT, THE_RUNNER, TOKEN_VAR, UNITTEST, base_env,
                            under_each_front_end, wait_until_gone)

MOD = "tests.fixtures.fx_gil_held"
HELD = "test_holds_the_gil"


class _Checks:
    """Under every front end: the run ends (the watchdog), with the held thread's stack, and nothing left."""

    def test_the_run_ends_with_every_threads_stack(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertRegex(self.r.stderr, r"Timeout \(0:00:1\d[.\d]*\)!", self.r.describe())
        # the held thread's stack: the line of the fixture that never returns
        self.assertRegex(self.r.stderr, r'fx_gil_held\.py", line \d+ in test_holds_the_gil', self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _RunnerOnly:
    def test_the_thin_parent_names_the_test_and_why(self):
        out = self.r.output
        self.assertIn(f"the runner process ended (exit code 1) without reporting, in {MOD}.TestBGilHeld.{HELD} "
                      "(test 2 of 3)", out)
        self.assertIn("held the process past its time limit (2 s) and 10.2 s more, and its own timeout did not "
                      "stop it: a thread that holds the GIL", out)
        self.assertIn("the 1 after it did not run", out)
        self.assertIn(f"-k TestBGilHeld.{HELD}", out)
        self.assertEqual(self.r.stdout.rstrip().splitlines()[-1], "1 passed, 1 failed, 0 skipped", self.r.describe())


globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: _RunnerOnly, PYTEST: (), RUN_TESTS: (),
                                                      UNITTEST: ()},
                                      env={"HARNESS_TIMEOUT": "2"}, nightly_only=(PYTEST, RUN_TESTS, UNITTEST)))


class TestSigtermWhileTheGilIsHeld(unittest.TestCase):
    """SIGTERM to the runner while a thread of its runner process holds the GIL: that process cannot take it, so
    the thin parent stops it after its grace, with its stacks, names the test, and the run exits 143."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp(prefix="distharness-suite-")
        marker = os.path.join(cls.tmp, "holding")
        token = os.urandom(8).hex()
        env = base_env(TMPDIR=cls.tmp, FX_STARTED_MARKER=marker, HARNESS_TIMEOUT="240", **{TOKEN_VAR: token})
        proc = subprocess.Popen([sys.executable, "-m", "harness", MOD.replace(".", "/") + ".py"], cwd=REPO, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + RUN_TIMEOUT  # (a bound for a loaded machine, not a time asserted)
            while not os.path.exists(marker) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            cls.held = os.path.exists(marker)
            time.sleep(0.5)  # past the write, into the call that never returns
            proc.send_signal(signal.SIGTERM)
            cls.out, cls.err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        cls.rc = proc.returncode
        cls.left = wait_until_gone(token)
        cls.leftover_temp = sorted(n for n in os.listdir(cls.tmp) if n != "holding")
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def describe(self) -> str:
        return f"exit code {self.rc}\n--- stdout ---\n{self.out}\n--- stderr ---\n{self.err[-8000:]}"

    def test_the_run_is_terminated_and_says_where_it_was(self):
        self.assertTrue(self.held, "the fixture's thread never reached the held GIL\n" + self.describe())
        self.assertEqual(self.rc, 143, self.describe())
        self.assertIn(f"the runner process did not end within 10 s of SIGTERM; stopped it (every thread's Python stack "
                      f"is above, from faulthandler), in {MOD}.TestBGilHeld.{HELD} (test 2 of 3)", self.err)
        self.assertRegex(self.err, r'fx_gil_held\.py", line \d+ in test_holds_the_gil', self.describe())
        self.assertIsNone(re.search(r"^Timeout \(", self.err, re.M), "the watchdog, not the thin parent, ended it")

    def test_nothing_left_behind(self):
        self.assertEqual(self.left, {})
        self.assertEqual(self.leftover_temp, [])


if __name__ == "__main__":
    unittest.main()
