"""@faults.sweep run as a user runs it (tests/fixtures/fx_sweep.py): a sound resume survives every point, a resume
with a planted torn-save bug fails at exactly the points inside a save before its commit (each named as the fault
that replays it, which fails alone the same way) while one default inject misses it, a test without @restarts
fails at each point naming the injected kill, bad sweeps are usage errors before any rank starts, and nothing is
left behind. CI runs the fixture under the runner; run_tests(), pytest and plain unittest are the nightly tier.
"""
from __future__ import annotations

import re

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, UNITTEST, FixtureTestCase, nightly, under_each_front_end

MODULE = "tests.fixtures.fx_sweep"
#: the torn save's points: rank 1 killed entering the first barrier of a save (its shards written, no manifest)
TORN = {f"kill(rank=1, op='barrier', nth={2 * s + 1})" for s in range(3)}


class _Checks:
    def outcome(self, name: str) -> str:
        verdict = re.compile(r"^(FAIL|ERROR):|\.\.\. (FAIL|ERROR)$|^(\[\d+/\d+\] )?(FAIL|ERROR)\s|^(FAILED|ERROR) ")
        for line in self.r.output.splitlines():
            m = verdict.search(line)
            if m and re.search(rf"\b{name}\b", line):
                return "error" if "ERROR" in m.group(0) else "failed"
        return "passed"

    def failing_points(self, test: str) -> set[str]:
        """The failing points a sweep's report lists, for ``test``."""
        head = self.assertMatchesReport(rf"{test}: sweep kill\(rank=1[^\n]*points? failed")
        block = self.r.output[head.end():].split("Failing points, each the fault that replays it alone:\n", 1)[1]
        return {m.group(1) for m in re.finditer(r"^  (kill\([^)]*\)): ", block.split("\n\n", 1)[0], re.M)}

    def test_sound_resume_passes_every_point(self):
        self.assertEqual(self.outcome("test_sound_resume"), "passed", self.r.describe())
        self.assertInReport("sweep kill(rank=1): 9 points, all passed (rank 1 made 9 collectives (6 barrier, "
                            "3 all_reduce))")

    def test_torn_resume_fails_at_exactly_the_torn_points(self):
        self.assertEqual(self.outcome("test_torn_resume"), "failed", self.r.describe())
        self.assertInReport("sweep kill(rank=1): 3 of 9 points failed")
        self.assertEqual(self.failing_points("test_torn_resume"), TORN, self.r.describe())
        self.assertMatchesReport(r"kill\(rank=1, op='barrier', nth=3\): rank \d: FileNotFoundError: .*step-2/"
                                 r"manifest\.json")

    def test_a_failing_point_replays_alone_and_one_inject_misses_it(self):
        self.assertEqual(self.outcome("test_torn_resume_one_inject"), "passed", self.r.describe())
        self.assertIn(self.outcome("test_torn_resume_replayed"), ("failed", "error"), self.r.describe())
        self.assertMatchesReport(r"test_torn_resume_replayed \[rank \d/2\] raised on cpu/gloo: FileNotFoundError: "
                                 r".*step-2/manifest\.json")

    def test_without_restarts_every_point_fails_naming_the_kill(self):
        self.assertEqual(self.outcome("test_plain_no_restarts"), "failed", self.r.describe())
        self.assertInReport("sweep kill(rank=1, op='all_reduce'): 2 of 2 points failed")
        for nth in (1, 2):
            self.assertMatchesReport(rf"^  kill\(rank=1, op='all_reduce', nth={nth}\): the test did not survive it: "
                                     r"rank 1: killed by SIGKILL \(exit code -9\) \(the injected fault\); rank 0: ")
        report = self.r.output[self.r.output.index("test_plain_no_restarts: sweep kill(rank=1, op='all_reduce')"):]
        report = report[:report.index("=== point 1")]
        self.assertNotRegex(report, r"(?i)timed out|timeout|\bhung\b|stopped after|no fault explains")

    def test_bad_sweeps_are_usage_errors_before_any_rank(self):
        self.assertInReport("TestSweepUsage.test_hang: @faults.sweep hang(rank=1): a hang sweep is refused: at every "
                            "point the rank's peers would wait out the test's time limit")
        self.assertInReport("TestSweepUsage.test_rank_outside: @faults.sweep kill(rank=3): rank 3 is outside the "
                            "test's world of 2 ranks")
        self.assertInReport("unknown op 'all_reduc'; did you mean 'all_reduce'")
        self.assertInReport("@faults.sweep kill(rank=1, op='all_gather'): no point to sweep: rank 1 made no "
                            "all_gather (it made 1 all_reduce)")
        self.assertNotIn("RAN_ANYWAY", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


globals().update(under_each_front_end(MODULE, _Checks, {THE_RUNNER: (), RUN_TESTS: (), PYTEST: (), UNITTEST: ()},
                                      args={PYTEST: ["-s"]}))


class _ChaosChecks:
    """``--sweep "kill(rank=1)"`` over unmodified tests (tests/fixtures/fx_chaos.py)."""

    def test_a_plain_test_fails_at_each_point_naming_the_kill(self):
        self.assertInReport("TestChaos.test_plain: sweep kill(rank=1): 3 of 3 points failed (rank 1 made 3 "
                            "collectives (2 all_reduce, 1 barrier))")
        for op, nth in (("all_reduce", 1), ("all_reduce", 2), ("barrier", 1)):
            self.assertMatchesReport(rf"^  kill\(rank=1, op='{op}', nth={nth}\): the test did not survive it: rank 1: "
                                     r"killed by SIGKILL \(exit code -9\) \(the injected fault\); "
                                     r"rank 0: .*follows from it\); it has no @restarts")
        self.assertInReport("Replay one: -k TestChaos.test_plain --sweep \"kill(rank=1, op='all_reduce', nth=1)\"")
        self.assertNotRegex(self.r.output, r"(?i)timed out|\bTIMEOUT\b|\bhung\b|no fault explains")

    def test_a_resumable_test_survives_and_one_without_collectives_has_no_point(self):
        self.assertInReport("sweep kill(rank=1): 3 points, all passed (rank 1 made 3 collectives (3 all_reduce))")
        self.assertInReport("sweep kill(rank=1): 0 points (rank 1 made no collectives)")
        self.assertNotEqual(self.r.returncode, 0)

    def test_the_run_ends_leaving_nothing(self):
        self.check_nothing_left()


globals().update(under_each_front_end("tests.fixtures.fx_chaos", _ChaosChecks, {THE_RUNNER: (), PYTEST: ()},
                                      args={THE_RUNNER: ["--sweep", "kill(rank=1)"],
                                            PYTEST: ["--sweep", "kill(rank=1)"]}, suffix="Chaos"))


class TestBadSweepFlag(FixtureTestCase):
    """A --sweep that cannot run is a usage error before any test: exit code 2, no rank started."""

    RUNNER = "harness"
    ARGS = ["tests/fixtures/fx_chaos.py", "--sweep", "hang(rank=1)"]

    def test_hang_is_refused_with_the_reason(self):
        self.assertEqual(self.r.returncode, 2, self.r.describe())
        self.assertInReport("--sweep hang(rank=1): a hang sweep is refused: at every point the rank's peers would "
                            "wait out the test's time limit")
        self.check_nothing_left()


@nightly("tests/fixtures/fx_sweep.py's torn-save bug, run in CI by TestUnderTheRunner: the same checks on a save of "
         "json shards")
class TestTornDCPCheckpoint(FixtureTestCase):
    """The fifth scenario's FSDP2 + DCP training with a planted torn-checkpoint bug (tests/fixtures/fx_sweep_dcp.py):
    swept over DCP's save collectives of rank 1, it fails at every point inside a save before its commit (each
    save's plan gather and scatter, its commit gather) and passes where the save's .metadata is already written (its
    last broadcast); one default inject (rank 1's first collective, FSDP's) misses the bug."""

    RUNNER = "harness"
    ARGS = ["tests/fixtures/fx_sweep_dcp.py"]

    def test_the_torn_points_fail_and_the_committed_ones_pass(self):
        self.assertInReport("TestTornDCP.test_gather_object: sweep kill(rank=1, op='gather_object'): 4 of 4 points "
                            "failed")
        self.assertInReport("TestTornDCP.test_scatter_object_list: sweep kill(rank=1, op='scatter_object_list'): 2 of 2 "
                            "points failed")
        self.assertMatchesReport(r"kill\(rank=1, op='gather_object', nth=3\): rank \d: .*CheckpointException")
        self.assertInReport("sweep kill(rank=1, op='broadcast_object_list'): 2 points, all passed")
        self.assertMatchesReport(r"PASS\s+tests\.fixtures\.fx_sweep_dcp\.TestTornDCP\.test_one_default_inject\b")
        self.check_nothing_left()
