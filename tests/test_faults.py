"""Faults on purpose and @restarts, run as a user runs them (tests/fixtures/fx_faults.py): a world resumes after
rank 1 is killed at its 3rd all_reduce, a survivor that expects its peer's death passes, a fault that never fires
fails saying so, a real failure under @restarts(2) runs once, bad faults are usage errors before any rank starts,
and nothing is left behind. CI runs the fixture under the runner; pytest, plain unittest and torchrun (its own
--max-restarts) are the nightly tier.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests._support import PYTEST, REPO, THE_RUNNER, UNITTEST, base_env, nightly, under_each_front_end

MODULE = "tests.fixtures.fx_faults"
TEST = "tests.fixtures.fx_faults.TestFaults"


class _Checks:
    def outcome(self, name: str) -> str:
        """passed, or failed / error, for one test of the fixture as this front end's own lines say it."""
        verdict = re.compile(r"^(FAIL|ERROR):|\.\.\. (FAIL|ERROR)$|^(\[\d+/\d+\] )?(FAIL|ERROR)\s|^(FAILED|ERROR) ")
        for line in self.r.output.splitlines():
            m = verdict.search(line)
            if m and re.search(rf"\b{name}\b", line):
                return "error" if "ERROR" in m.group(0) else "failed"
        return "passed"

    def test_resume_after_kill_passes(self):
        # the fixture asserts restart_count == 1, TORCHELASTIC_RESTART_COUNT == "1" and rank 1's progress (2 steps)
        self.assertEqual(self.outcome("test_resume_after_kill"), "passed", self.r.describe())
        self.assertInReport(f"{TEST}.test_resume_after_kill: faults: kill(rank=1, op='all_reduce', nth=3) fired in "
                            "attempt 0 on rank 1 at its 3rd all_reduce; restarted 1 time"
                            if self.FRONT_END != THE_RUNNER else
                            "faults: kill(rank=1, op='all_reduce', nth=3) fired in attempt 0 on rank 1 at its 3rd "
                            "all_reduce; restarted 1 time")

    def test_survivor_passes(self):
        self.assertEqual(self.outcome("test_survivor_expects_death"), "passed", self.r.describe())

    def test_never_fired_fails_saying_so(self):
        self.assertEqual(self.outcome("test_never_fires"), "failed", self.r.describe())
        self.assertInReport("kill(rank=1, op='all_reduce', nth=10) never fired: rank 1 made 1 all_reduce")

    def test_real_failure_runs_once(self):
        self.assertEqual(self.outcome("test_real_failure_runs_once"), "failed", self.r.describe())
        self.assertInReport("AssertionError: 1 != 0 : a real failure on rank 1")
        self.assertIn("REAL rank=1 restart_count=0", self.r.output)
        self.assertNotIn("restart_count=1 ", re.sub(r"ATTEMPT.*", "", self.r.output))

    def test_hang_and_io_error_restart_and_pass(self):
        # a hang ends at the test's 6 s limit, a timeout the fault explains; a failed write (ENOSPC) is rank 1's error
        self.assertEqual(self.outcome("test_hang_restarts"), "passed", self.r.describe())
        self.assertEqual(self.outcome("test_io_error_restarts"), "passed", self.r.describe())

    def test_caught_raise_passes(self):
        self.assertEqual(self.outcome("test_raise_caught"), "passed", self.r.describe())

    def test_bad_faults_are_usage_errors_before_any_rank(self):
        self.assertInReport("TestFaultUsage.test_rank_outside: kill(rank=5, op='all_reduce', nth=1): rank 5 is "
                            "outside the test's world of 2 ranks; name a rank from 0 to 1")
        self.assertInReport("unknown op 'all_reduc'; did you mean 'all_reduce'")
        self.assertInReport("nth=0: nth counts the calls from 1")
        self.assertNotIn("RAN_ANYWAY", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


globals().update(under_each_front_end(MODULE, _Checks, {THE_RUNNER: (), PYTEST: (), UNITTEST: ()},
                                      args={PYTEST: ["-s"]}))


@nightly("faults and restarts on the pool: TestUnderTheRunner")
class TestUnderTorchrun(unittest.TestCase):
    """``torchrun --max-restarts 1``: the kill fires in the job's attempt 0, torchrun restarts the job, and its
    attempt 1 resumes from the same temp_dir with restart_count 1 (the fixture asserts both)."""

    def test_resume_after_kill_under_torchrun(self):
        tmpdir = tempfile.mkdtemp(prefix="distharness-torchrun-")
        self.addCleanup(shutil.rmtree, tmpdir, True)
        env = base_env()
        env.update(TMPDIR=tmpdir, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                              "--max-restarts", "1", "tests/fixtures/fx_faults.py", "-v",
                              "TestFaults.test_resume_after_kill"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertIn("ATTEMPT rank=1 restart_count=1 env=1 start=2", text)
        self.assertIn("kill(rank=1, op='all_reduce', nth=3) was due in attempt 0 of this torchrun job", text)
        # the test's temp_dir is gone; what a killed attempt's workers leave (their scratch folders) is torchrun's
        self.assertEqual([n for n in os.listdir(tmpdir) if n.startswith("harness-restarts-")], [])
