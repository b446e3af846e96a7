"""``--watch`` and ``--serve`` as a person uses them: on a pseudo-terminal, saving files, pressing Ctrl-C.

Each test has its own TMPDIR and token (tests._support); after it no process of the run may be alive and
no harness folder left. Timeouts are generous (a loaded machine); no test asserts a time (speed is
measured by tools/bench_start.py).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from tests._support import nightly, REPO, RUN_TIMEOUT, TOKEN_VAR, base_env, processes_with_token, wait_until_gone

try:
    import pexpect
except ImportError:  # the test extra installs it
    pexpect = None

WAIT = 240

TEST_FILE = """
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, with_comms


class TestSaved(MultiProcessTestCase):
    @with_comms
    def test_sum(self):
        t = torch.ones(2)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((2,), EXPECTED))

    def test_other(self):
        DURING_THE_ROUND
"""


class _Project(unittest.TestCase):
    """A project folder of its own (one test file), a TMPDIR and a token of its own."""

    def setUp(self) -> None:
        self.token = uuid.uuid4().hex
        self.tmpdir = tempfile.mkdtemp(prefix="distharness-watch-")
        self.project = os.path.join(self.tmpdir, "project")
        os.mkdir(self.project)
        self.save(2.0)
        # bytecode written and read as a user's run does (base_env turns it off for the other tests)
        self.env = base_env(PYTHONPATH=REPO, HARNESS_THREADS="1", PYTHONDONTWRITEBYTECODE=None)
        self.env.update({TOKEN_VAR: self.token, "TMPDIR": self.tmpdir})
        self.addCleanup(self._end)

    #: every save's modification time lies in this one second, a millisecond after the last: a watch that compares
    #: the times sees each save, and Python's bytecode cache (whole seconds and the size) would see none of them
    #: (each version of the file has the same size): the window of two saves within a second, made certain
    SECOND = 1_700_000_000

    def save(self, expected: float, then: float | None = None) -> None:
        """Save test_saved.py with ``expected``; ``then``: its test_other saves it again, with ``then``, while
        the round that runs it goes on (as a user who saves during a round)."""
        path = os.path.join(self.project, "test_saved.py")
        during = "pass"
        if then is not None:
            again = TEST_FILE.replace("EXPECTED", repr(then)).replace("DURING_THE_ROUND", "pass")
            during = (f"if self.rank == 0: import os; open(__file__ + '.tmp', 'w').write({again!r}); "
                      "os.replace(__file__ + '.tmp', __file__)")
        with open(path + ".tmp", "w") as f:
            f.write(TEST_FILE.replace("EXPECTED", repr(expected)).replace("DURING_THE_ROUND", during))
        os.replace(path + ".tmp", path)  # as editors save: whole
        self.saves = getattr(self, "saves", 0) + 1
        os.utime(path, ns=(self.SECOND * 10**9, self.SECOND * 10**9 + self.saves * 1_000_000))

    def _end(self) -> None:
        for pid in wait_until_gone(self.token, grace=1.0):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def left_folders(self) -> list[str]:
        return sorted(n for n in os.listdir(self.tmpdir) if n.startswith(("harness-", "pymp-")))


@unittest.skipIf(pexpect is None, "pexpect is not installed (pip install -e .[test])")
class TestWatch(_Project):
    def test_a_save_that_breaks_then_one_that_fixes_then_ctrl_c(self):
        # started with SIGINT ignored, as a shell without job control starts a background job (a suite run in
        # the background once hung here): Ctrl-C between rounds ends the watch all the same
        term = pexpect.spawn(sys.executable, ["-m", "harness", "--watch", "test_saved.py"], cwd=self.project,
                             env=self.env, encoding="utf-8", codec_errors="replace", timeout=WAIT,
                             dimensions=(50, 200), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        self.addCleanup(term.close, True)
        term.expect(r"PASS\s+test_saved\.TestSaved\.test_sum")
        term.expect("waiting for a save")
        self.save(3.0)  # breaks test_sum (within the same second, of the same size): that module runs again
        term.expect(r"round 2: test_saved\.py saved")
        term.expect(r"FAIL\s+test_saved\.TestSaved\.test_sum")
        term.expect(r"0 passed, 1 failed|1 passed, 1 failed")
        term.expect("waiting for a save")
        self.save(2.0, then=3.0)  # fixes it; and while round 3 runs, test_other saves a version that breaks it
        term.expect(r"round 3: test_saved\.py saved")
        term.expect(r"\[1/2\] PASS\s+test_saved\.TestSaved\.test_sum")  # last round's failure first
        term.expect("2 passed, 0 failed")
        term.expect(r"round 4: test_saved\.py saved")  # the save made during round 3 starts the next one
        term.expect(r"FAIL\s+test_saved\.TestSaved\.test_sum")
        term.expect("1 passed, 1 failed")
        term.expect("waiting for a save")
        term.sendintr()
        term.expect(pexpect.EOF)
        term.close()
        self.assertEqual(term.exitstatus, 1)  # the last round's
        self.assertEqual(wait_until_gone(self.token, grace=5.0), {}, "processes of the watch left after Ctrl-C")
        self.assertEqual(self.left_folders(), [])

    @nightly("Ctrl-C between rounds by test_a_save_that_breaks_then_one_that_fixes_then_ctrl_c")
    def test_ctrl_c_during_a_round(self):
        term = pexpect.spawn(sys.executable, ["-m", "harness", "--watch", "test_saved.py"], cwd=self.project,
                             env=self.env, encoding="utf-8", codec_errors="replace", timeout=WAIT)
        self.addCleanup(term.close, True)
        term.expect("waiting for a save")
        with open(os.path.join(self.project, "test_saved.py"), "a") as f:
            f.write("\n\nclass TestSlow(MultiProcessTestCase):\n    def test_slow(self):\n"
                    "        import time\n        print('slow started', flush=True)\n        time.sleep(60)\n")
        term.expect(r"round 2")
        time.sleep(3)
        term.sendintr()
        term.expect(pexpect.EOF)
        term.close()
        self.assertEqual(term.exitstatus, 130, term.before)
        self.assertEqual(wait_until_gone(self.token, grace=5.0), {})
        self.assertEqual(self.left_folders(), [])


@nightly("the server is the watch's runner process behind a socket; --watch on a pty by TestWatch")
class TestServer(_Project):
    def serve(self, *extra: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "harness", "--serve", *extra], cwd=self.project, env=self.env,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("server started", proc.stdout)
        folder = os.path.join(self.tmpdir, f"distharness-servers-{os.getuid()}")
        (info,) = [f for f in os.listdir(folder) if f.endswith(".json")]
        with open(os.path.join(folder, info)) as f:
            self.server_pid = json.load(f)["pid"]
        self.addCleanup(self._stop_server)
        return folder

    def _stop_server(self) -> None:
        try:
            os.kill(self.server_pid, signal.SIGTERM)
        except OSError:
            pass

    def run_(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=self.project, env={**self.env, **env},
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)

    def served(self) -> int:
        """How many runs the server has taken (it logs one line each)."""
        folder = os.path.join(self.tmpdir, f"distharness-servers-{os.getuid()}")
        count = 0
        for name in os.listdir(folder):
            if name.endswith(".log"):
                with open(os.path.join(folder, name)) as f:
                    count += f.read().count("ran for pid")
        return count

    def test_runs_through_the_server_give_a_cold_runs_verdicts(self):
        self.save(3.0)
        cold = self.run_("--no-server", "test_saved.py")
        self.serve("--idle", "60")
        warm = self.run_("test_saved.py")
        self.assertEqual(self.served(), 1)
        lines = lambda out: sorted(l.split()[1] + " " + l.split()[2] for l in out.splitlines()
                                   if l.startswith("[") and "/" in l.split()[0])
        self.assertEqual(lines(warm.stdout), lines(cold.stdout))
        self.assertEqual((warm.returncode, cold.returncode), (1, 1))
        self.assertEqual(warm.stdout.splitlines()[-1], cold.stdout.splitlines()[-1])

    def test_ci_no_server_and_another_environment_do_not_use_it(self):
        self.serve("--idle", "60")
        self.assertEqual(self.run_("test_saved.py", CI="true").returncode, 0)
        self.assertEqual(self.run_("--no-server", "test_saved.py").returncode, 0)
        self.assertEqual(self.run_("test_saved.py", HARNESS_TIMEOUT="77").returncode, 0)
        self.assertEqual(self.served(), 0)
        self.assertEqual(self.run_("test_saved.py").returncode, 0)
        self.assertEqual(self.served(), 1)

    def test_a_stale_socket_is_not_used(self):
        folder = self.serve("--idle", "60")
        os.kill(self.server_pid, signal.SIGKILL)
        time.sleep(0.5)
        proc = self.run_("test_saved.py")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual([f for f in os.listdir(folder) if f.endswith(".sock")], [])

    def test_a_client_killed_mid_run_leaves_no_rank_and_the_server_ends_when_idle(self):
        with open(os.path.join(self.project, "test_saved.py"), "a") as f:
            f.write("\n\nclass TestSlow(MultiProcessTestCase):\n    def test_slow(self):\n"
                    "        import time\n        print('slow', flush=True)\n        time.sleep(120)\n")
        self.serve("--idle", "4")
        before = set(processes_with_token(self.token))
        client = subprocess.Popen([sys.executable, "-m", "harness", "test_saved.py", "-k", "slow"], cwd=self.project,
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + WAIT
        while len(processes_with_token(self.token)) < len(before) + 3:  # the runner process and its ranks
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)
        time.sleep(1)
        client.kill()
        client.wait()
        client.stdout.close()
        deadline = time.monotonic() + 30
        while set(processes_with_token(self.token)) - before - {client.pid}:
            self.assertLess(time.monotonic(), deadline, processes_with_token(self.token))
            time.sleep(0.2)
        # idle for 4 s: the server ends with its template, and leaves nothing
        self.assertEqual(wait_until_gone(self.token, grace=60.0), {})
        self.assertEqual(self.left_folders(), [])

    @unittest.skipUnless(os.getuid() == 0, "needs root to act as a second user")
    def test_another_user_is_refused(self):
        folder = self.serve("--idle", "60")
        (sock,) = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".sock")]
        code = ("import os, socket, sys; os.setgid(65534); os.setuid(65534); s = socket.socket(socket.AF_UNIX); "
                f"\ntry:\n  s.connect({sock!r}); print('connected')\nexcept OSError as e: print('refused', e)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertIn("refused", proc.stdout, proc.stdout + proc.stderr)


if __name__ == "__main__":
    unittest.main()
