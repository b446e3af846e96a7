"""The rank pool across runs: fresh processes per test on request, two runs at once, a killed parent."""
import os
import signal
import subprocess
import sys
import time
import unittest

from tests._support import (nightly, REPO, FixtureTestCase, base_env, end_run, finish_fixture, processes_with_token,
                            start_fixture, suite_modules, wait_until_gone)

PASS = "tests.fixtures.fx_pass"


class TestNoReuse(FixtureTestCase):
    """HARNESS_REUSE=0: every test gets new rank processes, as upstream."""

    ARGS = [f"{PASS}.TestBPids.test_pid", f"{PASS}.TestCFSDP", "-v"]
    ENV = {"HARNESS_REUSE": "0"}

    def test_fresh_processes_per_test(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        by_class = {}
        for row in self.r.rank_lines("PID"):
            by_class.setdefault(row["class"], set()).add(row["pid"])
        self.assertEqual(set(by_class), {"B", "C"}, self.r.describe())
        self.assertEqual(len(by_class["B"]), 2)
        self.assertTrue(by_class["B"].isdisjoint(by_class["C"]))

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("two runs in one process by tests.test_runs")
class TestTwoRunsAtOnce(unittest.TestCase):
    def test_both_pass(self):
        args = [f"{PASS}.TestAPass", f"{PASS}.TestBPids.test_pid", "-v"]
        started = time.monotonic()
        first = start_fixture(args)
        second = start_fixture(args)
        runs = [finish_fixture(*first, started), finish_fixture(*second, started)]
        for run in runs:
            self.assertEqual(run.returncode, 0, run.describe())
            self.assertIn("Ran 4 tests", run.stderr)
            self.assertEqual(run.leftover_processes, {})
            self.assertEqual(run.leftover_temp, [])
        pids = [{row["pid"] for row in run.rank_lines("PID")} for run in runs]
        self.assertTrue(pids[0] and pids[1] and pids[0].isdisjoint(pids[1]))
        temps = [{row["path"] for row in run.rank_lines("TEMPDIR")} for run in runs]
        self.assertTrue(temps[0] and temps[1] and temps[0].isdisjoint(temps[1]))


class TestParentKilled(unittest.TestCase):
    """A SIGKILLed parent cannot clean up: its ranks must notice and exit by themselves."""

    def test_ranks_exit_when_the_parent_is_killed(self):
        env = base_env(HARNESS_TIMEOUT="120")
        proc, token, tmpdir = start_fixture(["tests.fixtures.fx_fail.TestIHang", "-v"], env)
        try:
            deadline = time.monotonic() + 120
            ranks = {}
            while time.monotonic() < deadline and proc.poll() is None:
                ranks = {pid: cmd for pid, cmd in processes_with_token(token).items() if pid != proc.pid}
                if len(ranks) >= 2 and os.listdir(tmpdir):  # both ranks started and the pool exists
                    break
                time.sleep(0.2)
            self.assertIsNone(proc.poll(), "the fixture ended before it could be killed")
            self.assertGreaterEqual(len(ranks), 2, ranks)
            time.sleep(1.0)  # let the test reach its sleep / all_reduce
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            left = wait_until_gone(token, grace=15)
            self.assertEqual(left, {}, "rank processes outlived their killed parent")
            # The ranks remove the pool's directory (stores, output, the test's temp dir) as they go.
            left_dirs = sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-"))
            self.assertEqual(left_dirs, [], [list(os.walk(os.path.join(tmpdir, d))) for d in left_dirs])
        finally:
            end_run(proc, token, tmpdir)


    def test_killed_while_its_ranks_start(self):
        # Killed the moment its pool's folder exists: the ranks the template was forking never run (their start
        # pipe is closed), so the template, the run's last process, removes the folder (busy machines hit this).
        proc, token, tmpdir = start_fixture(["tests.fixtures.fx_fail.TestIHang", "-v"], base_env(HARNESS_TIMEOUT="120"))
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and not any(
                    n.startswith("harness-w") for n in os.listdir(tmpdir)):
                time.sleep(0.001)
            self.assertIsNone(proc.poll(), "the fixture ended before it could be killed")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            self.assertEqual(wait_until_gone(token, grace=15), {}, "processes outlived their killed parent")
            self.assertEqual(sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-")), [])
        finally:
            end_run(proc, token, tmpdir)


@nightly("unittest's discovery by tests.unit.test_suite_layout; the fixtures are named fx_* and cx_*, which "
         "setup.cfg's python_files (test_*.py) never matches")
class TestSuiteCollection(unittest.TestCase):
    """The fixture modules are not tests of this suite for pytest (for unittest: tests/unit/test_suite_layout.py)."""

    def test_pytest_collects_only_test_modules(self):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "tests"], cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        ids = [line for line in out.stdout.splitlines() if "::" in line]
        files = {i.split("::", 1)[0].removesuffix(".py").replace("/", ".") for i in ids}
        self.assertEqual(files, suite_modules(), out.stdout)  # every test module, and no fixture


if __name__ == "__main__":
    unittest.main()
