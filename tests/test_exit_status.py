"""A process's exit status, read by several threads at once (harness.parent.exit_status): each thread gets the
status the process ended with: a killed rank reads "killed by SIGKILL", never 255 nor "still running"."""
import subprocess
import sys
import unittest

from tests._support import REPO, base_env

_PROBE = """
import os, signal, sys, threading, time
from harness.parent import exit_status

ctx = exit_status.context(sys.argv[1])
for trial in range(int(sys.argv[2])):
    proc = ctx.Process(target=time.sleep, args=(60,))
    proc.start()
    seen = []

    def join():  # as a pool's stop joins a rank
        proc.join()
        seen.append(proc.exitcode)

    def look():  # as a watch polls one; Process.start in another thread polls every child the same way
        while proc.is_alive():
            pass
        seen.append(proc.exitcode)

    def start_another():
        other = ctx.Process(target=time.sleep, args=(0,))
        other.start()
        other.join()

    threads = [threading.Thread(target=f) for f in (join, join, join, look, look, start_another)]
    for t in threads:
        t.start()
    time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    for t in threads:
        t.join()
    print(sys.argv[1], trial, proc.exitcode, sorted(set(seen), key=str), flush=True)
"""


class TestAKilledProcessReadFromManyThreads(unittest.TestCase):
    def _check(self, method: str, trials: int) -> None:
        r = subprocess.run([sys.executable, "-c", _PROBE, method, str(trials)], cwd=REPO, env=base_env(),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), trials, r.stdout + r.stderr)
        for line in lines:
            self.assertTrue(line.endswith(" -9 [-9]"), f"every thread should read -9 (SIGKILL): {line}\n{r.stderr}")

    def test_forked_from_the_forkserver(self):
        self._check("forkserver", 10)

    def test_spawned(self):
        self._check("spawn", 5)

    def test_another_method_is_refused_naming_the_two(self):
        from harness.parent import exit_status

        with self.assertRaisesRegex(ValueError, "'fork'.*'forkserver' or 'spawn'"):
            exit_status.context("fork")


if __name__ == "__main__":
    unittest.main()
