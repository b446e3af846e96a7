"""Nothing outlives a run, however it ends: no process of its (template, rank) and no temporary folder.

Each test starts one run in a session of its own, with a TMPDIR of its own, ends it one way, waits for
the run's process to exit and then, at once (no sleep: the run must have waited for what it started),
asks the operating system whether any process of the run's process group is left (``killpg(pgid, 0)``,
which finds zombies too: a process signalled but never waited for) and lists the TMPDIR for the folders
of multiprocessing (``pymp-*``, where the template's socket is) and of the harness (``harness-*``).

The run's output goes to a file, not a pipe: a pipe's reader would wait for every process holding its
write end (the template among them), and so hide a template that outlives the run.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from tests._support import PYTEST_PLUGIN, REPO, RUN_TIMEOUT, TOKEN_VAR, base_env, nightly, processes_with_token

SLOW = "tests.fixtures.fx_slow"
QUICK = f"{SLOW}.TestAFirst"  # one 2-rank test that passes


class _Run:
    """One run of ``python -m <args>`` in its own session and TMPDIR; its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, wrapper: list[str] | None = None,
                 tmpdir: str | None = None):
        self.token = uuid.uuid4().hex
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="distharness-leftovers-")
        self.marker = os.path.join(self.tmpdir, "started")
        full = base_env(**{"HARNESS_TIMEOUT": "120", **(env or {})})
        full.update({TOKEN_VAR: self.token, "TMPDIR": self.tmpdir, "FX_STARTED_MARKER": self.marker})
        self.out = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([*(wrapper or []), sys.executable, "-m", *args], cwd=REPO, env=full,
                                     stdout=self.out, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def wait_for_the_slow_test(self) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not os.path.exists(self.marker):
            if self.proc.poll() is not None:
                raise AssertionError(f"the run ended before the slow test started\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the slow test never started\n{self.output()}")
            time.sleep(0.05)

    def wait(self) -> int:
        try:
            return self.proc.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the run did not end in {RUN_TIMEOUT} s\n{self.output()}") from None

    def output(self) -> str:
        self.out.seek(0)
        return self.out.read()[-8000:]

    def left_behind(self) -> tuple[bool, dict[int, str], list[str]]:
        """(a process of the run's group still exists, the run's live processes, its folders in TMPDIR)."""
        try:
            os.killpg(self.proc.pid, 0)
            group = True
        except ProcessLookupError:
            group = False
        folders = sorted(n for n in os.listdir(self.tmpdir) if n.startswith(("pymp-", "harness-")))
        return group, processes_with_token(self.token), folders

    def clean_up(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in processes_with_token(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        self.out.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class TestNothingLeftBehind(unittest.TestCase):
    def _start(self, args, env=None, wrapper=None, tmpdir=None) -> _Run:
        run = _Run(args, env, wrapper, tmpdir)
        self.addCleanup(run.clean_up)
        return run

    def _check(self, run: _Run, returncode: int) -> None:
        code = run.wait()
        group, processes, folders = run.left_behind()  # at once: the run must have waited for its own
        self.assertEqual(code, returncode, run.output())
        self.assertEqual(processes, {}, f"processes of the run alive after it returned\n{run.output()}")
        self.assertFalse(group, f"a process of the run's group (a zombie?) left after it returned\n{run.output()}")
        self.assertEqual(folders, [], f"temporary folders left in the run's TMPDIR\n{run.output()}")

    # -- a run that ends by itself, under each front end --

    def test_the_runner(self):
        self._check(self._start(["harness", QUICK]), 0)

    @nightly("the runner's and pytest's runs leave nothing (test_the_runner, test_pytest_plugin)")
    def test_run_tests(self):
        self._check(self._start([SLOW, "TestAFirst"]), 0)

    @nightly("the runner's and pytest's runs leave nothing")
    def test_plain_unittest(self):
        self._check(self._start(["unittest", QUICK]), 0)

    @nightly("a pytest run leaves nothing: tests.test_pytest_plugin.TestFailureUnderPytest.test_nothing_left_behind")
    def test_pytest_plugin(self):
        path = SLOW.replace(".", "/") + ".py::TestAFirst"
        self._check(self._start(["pytest", *PYTEST_PLUGIN, path, "-q", "-p", "no:cacheprovider"]), 0)

    def test_a_test_that_times_out(self):
        self._check(self._start(["harness", f"{SLOW}.TestBSlow"], env={"HARNESS_TIMEOUT": "3"}), 1)

    @nightly("a usage error ends the template (test_a_usage_error_after_collecting)")
    def test_listing_the_tests(self):
        # the test classes warm the template as they are collected; --list forks no rank from it
        self._check(self._start(["harness", "--list", SLOW]), 0)

    def test_a_usage_error_after_collecting(self):
        self._check(self._start(["harness", SLOW, "-i", "no_such_module"]), 2)

    # -- a run ended from outside while a test runs --

    @nightly("SIGTERM by tests.test_trust")
    def test_sigterm_to_the_runner(self):
        run = self._start(["harness", SLOW])
        run.wait_for_the_slow_test()
        run.proc.send_signal(signal.SIGTERM)
        self._check(run, 143)

    @nightly("SIGTERM to the runner (test_sigterm_to_the_runner) and Ctrl-C")
    def test_sigterm_to_the_runners_process_group(self):
        run = self._start(["harness", SLOW])
        run.wait_for_the_slow_test()
        os.killpg(run.proc.pid, signal.SIGTERM)
        self._check(run, 143)

    @nightly("SIGTERM to the runner (test_sigterm_to_the_runner)")
    def test_sigterm_to_run_tests(self):
        run = self._start([SLOW])
        run.wait_for_the_slow_test()
        run.proc.send_signal(signal.SIGTERM)
        self._check(run, 143)

    @nightly("SIGTERM to the runner (test_sigterm_to_the_runner)")
    def test_sigterm_to_plain_unittest(self):
        run = self._start(["unittest", SLOW])
        run.wait_for_the_slow_test()
        run.proc.send_signal(signal.SIGTERM)
        self._check(run, 143)

    @nightly("Ctrl-C by tests.test_trust and tests.test_template")
    def test_ctrl_c(self):
        run = self._start(["harness", SLOW])
        run.wait_for_the_slow_test()
        os.killpg(run.proc.pid, signal.SIGINT)
        self._check(run, 130)

    def test_sigkill_to_the_runner_then_a_next_run(self):
        # SIGKILL: nothing of the runner can clean up. Its runner process and ranks notice it is gone and
        # end; its temporary folder (named after its pid) is removed by the next run at the latest
        run = self._start(["harness", SLOW])
        run.wait_for_the_slow_test()
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait()
        from tests._support import wait_until_gone

        self.assertEqual(wait_until_gone(run.token), {}, "processes of a SIGKILLed run left")
        self._check(self._start(["harness", QUICK], tmpdir=run.tmpdir), 0)

    def test_the_runner_never_imports_torch(self):
        # the thin parent: collecting and running happen in a process forked from the template
        code = ("import sys; from harness.runner.cli import main; c = main([%r]); "
                "print('parent imported torch:', 'torch' in sys.modules); sys.exit(c)" % QUICK)
        tmpdir = tempfile.mkdtemp(prefix="distharness-leftovers-")
        self.addCleanup(shutil.rmtree, tmpdir, True)
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**base_env(), "TMPDIR": tmpdir},
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("parent imported torch: False", proc.stdout)

    @unittest.skipIf(shutil.which("timeout") is None, "no `timeout` command")
    @nightly("SIGTERM to the runner (test_sigterm_to_the_runner)")
    def test_timeout_command(self):
        # `timeout` ends its command on SIGALRM, exactly as when its time is up (SIGTERM to the command,
        # then to its process group), without this test guessing how long the run takes to start
        run = self._start(["harness", SLOW], wrapper=["timeout", "600"])
        run.wait_for_the_slow_test()
        run.proc.send_signal(signal.SIGALRM)
        self._check(run, 124)


if __name__ == "__main__":
    unittest.main()
