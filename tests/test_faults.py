"""Faults on purpose and @restarts, run as a user runs them (tests/fixtures/fx_faults.py): a world resumes after
rank 1 is killed at its 3rd all_reduce, a survivor that expects its peer's death passes, a fault that never fires
fails saying so, a real failure under @restarts(2) runs once, bad faults are usage errors before any rank starts,
and nothing is left behind. CI runs the fixture under the runner; pytest and plain unittest are the nightly tier.
"""
from __future__ import annotations

import re

from tests._support import PYTEST, THE_RUNNER, UNITTEST, under_each_front_end

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
