"""torchrun mode: each torchrun process is one rank, rank 0 reports for all; one node and two "nodes"."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

from tests._support import nightly, REPO, base_env, fixture_line, gpus, unittest_names

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# the fixture module tests/test_trust.py runs on reused ranks; here each torchrun process is one rank
FX = "fx_between_ranks"
MOD = f"tests.fixtures.{FX}"
SCRIPT = f"tests/fixtures/{FX}.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(tmpdir: str) -> list[str]:
    """The harness's folders a job left in its TMPDIR (there should be none)."""
    return sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-"))


def _env(tmpdir: str, **extra: str | None) -> dict[str, str]:
    """The environment of a torchrun job; the GPUs are hidden (base_env) unless ``CUDA_VISIBLE_DEVICES=None``."""
    env = base_env(**extra)
    env["TMPDIR"] = tmpdir
    env["PYTHONPATH"] = REPO
    env["OMP_NUM_THREADS"] = "1"
    return env


class TorchrunCase(unittest.TestCase):
    maxDiff = None

    def setUp(self) -> None:
        self.tmpdir = tempfile.mkdtemp(prefix="distharness-torchrun-")
        self.addCleanup(shutil.rmtree, self.tmpdir, True)

    def run_cmd(self, cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
        out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        out.stdout, out.stderr = unittest_names(out.stdout), unittest_names(out.stderr)
        return out

    def assertNothingLeft(self) -> None:
        self.assertEqual(_leftovers(self.tmpdir), [])


class TestPlainTestsUnderTorchrun(TorchrunCase):
    """``python -m harness`` under torchrun: a plain TestCase runs in every launched process; rank 0 reports how it
    ended in each, and says so when the processes no longer run the same tests."""

    def launch(self, **env: str) -> str:
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "harness", SCRIPT, "-k", "TestIn"],
                           _env(self.tmpdir, HARNESS_TIMEOUT="60", **env), timeout=120)
        self.assertNothingLeft()
        return out.stdout + out.stderr + f"\n[exit code {out.returncode}]"

    def test_a_failure_in_another_launched_process_is_the_tests_failure(self):
        text = self.launch()
        self.assertRegex(text, r"FAIL +\S+TestInEachProcess\.test_fails_in_launched_rank_1 ")
        self.assertIn("FAIL: tests.fixtures.fx_between_ranks.TestInEachProcess.test_fails_in_launched_rank_1 "
                      "[launched rank 1]", text)
        self.assertIn("failed on launched rank 1 of 2 (the test runs in each launched process; rank 0: passed)", text)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "EACH-PROCESS")}', text)
        self.assertEqual(text.count("2 passed, 1 failed, 0 skipped"), 1, text)  # rank 0 alone reports

    @nightly("the same exchange under the runner by test_a_failure_in_another_launched_process_is_the_tests_failure, and "
             "under run_tests() by TestStandalone")
    def test_under_pytest_rank_0s_report_fails_it_too(self):
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "pytest", "-q", "-p",
                            "no:cacheprovider", SCRIPT, "-k", "TestInEachProcess"], _env(self.tmpdir), timeout=120)
        text = out.stdout + out.stderr
        # each launched process prints pytest's report: both say 1 failed, rank 0's with rank 1's traceback
        self.assertEqual(text.count("1 failed, 1 passed"), 2, text)
        self.assertIn("TestInEachProcess::test_fails_in_launched_rank_1 [launched rank 1]\nfailed on launched rank 1 "
                      "of 2 (the test runs in each launched process; rank 0: passed)", text)
        self.assertNothingLeft()

    @nightly("the exchange itself by test_a_failure_in_another_launched_process_is_the_tests_failure")
    def test_processes_that_part_ways_are_named_at_once(self):
        # rank 1's setUpClass fails, so it skips a test rank 0 runs: rank 0 says so at that test, without waiting
        # for an outcome that never comes, and the run goes on to its end
        text = self.launch(FX_PART="1")
        self.assertIn("launched rank 1 ended tests.fixtures.fx_between_ranks.TestInEachProcess."
                      "test_fails_in_launched_rank_1 where rank 0 ended tests.fixtures.fx_between_ranks."
                      "TestInAClassSetUpThatFailsOnRank1.test_only_where_set_up: the launched processes no longer run "
                      "the same tests", text)
        # the set-up's own error, as rank 1 raised it, in rank 0's report (the job's)
        self.assertIn("what raised in launched rank 1's process is below\n\nsetUpClass (tests.fixtures.fx_between_ranks."
                      "TestInAClassSetUpThatFailsOnRank1) on launched rank 1:\nTraceback", text)
        self.assertIn("RuntimeError: set-up fails on rank 1", text)
        self.assertIn("[exit code 1]", text)

    @nightly("the parting of plain tests by test_processes_that_part_ways_are_named_at_once; the store's keys by "
             "tests.unit.test_job_store")
    def test_a_class_on_the_ranks_whose_set_up_failed_on_one_rank_is_no_pass(self):
        # rank 1 goes on to TestZStillWorks, whose all_reduce meets rank 0's in TestOnRanks...: the same collectives,
        # so the bodies "pass"; the results say which test each rank ran, and the job stops there
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "harness", SCRIPT, "-k",
                            "TestOnRanksAfter", "-k", "TestZStillWorks"], _env(self.tmpdir, HARNESS_TIMEOUT="60",
                                                                                FX_PART="1"), timeout=120)
        self.assertNothingLeft()
        text = out.stdout + out.stderr
        self.assertRegex(text, r"ERROR +\S+TestOnRanksAfterASetUpThatFailsOnRank1\.test_on_ranks ")
        self.assertIn("launched rank 1 ran tests.fixtures.fx_between_ranks.TestZStillWorks.test_after_all_that where "
                      "rank 0 ran tests.fixtures.fx_between_ranks.TestOnRanksAfterASetUpThatFailsOnRank1.test_on_ranks: "
                      "the launched processes no longer run the same tests", text)
        self.assertIn("RuntimeError: set-up of the ranks' class fails on rank 1", text)
        # the next test of the job's ranks does not run on processes that parted
        self.assertRegex(text, r"SKIP +\S+TestZStillWorks\.test_after_all_that +.*the job cannot go on: the launched "
                               r"processes no longer run the same tests")
        self.assertNotEqual(out.returncode, 0)


@nightly("placement under torchrun: the same choose_placement the unit tests check")
class TestPlacementUnderTorchrun(TorchrunCase):
    """The launched world chooses its placement for the node's local ranks, as the pool does for a test."""

    def launch(self, **env: str | None) -> str:
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT,
                            "-v", "TestLaunched.test_a_all_reduce"], _env(self.tmpdir, **env))
        self.assertNothingLeft()
        return out.stdout + out.stderr + f"\n[exit code {out.returncode}]"

    def test_one_gpu_per_rank_asked_for_on_a_node_without_gpus_skips_with_the_reason(self):
        text = self.launch(HARNESS_DEVICE="nccl", CUDA_VISIBLE_DEVICES="")  # no GPU seen by the job, on any machine
        self.assertIn("skipped 'needs 2 GPUs, found 0 (HARNESS_DEVICE=nccl: one GPU per rank) on this node'", text)
        self.assertIn("[exit code 0]", text)

    def test_local_ranks_share_the_nodes_gpus_over_gloo(self):
        if gpus() < 1:
            self.skipTest("needs a GPU: two local ranks on this node's GPUs; this machine has none")
        # cuda-shared: shared even where the node has two GPUs; on a one-GPU node auto does the same
        text = self.launch(HARNESS_DEVICE="cuda-shared", CUDA_VISIBLE_DEVICES=None)
        rows = re.findall(r"\[rank (\d)\] LAUNCHED rank=\d pid=\d+ sum=(\d+) device=(\w+) at=(\S+) backend=(\w+)",
                          text)
        self.assertEqual(sorted(r[0] for r in rows), ["0", "1"], text)
        self.assertEqual({(r[1], r[2], r[4]) for r in rows}, {("3", "cuda", "gloo")}, text)
        self.assertEqual({r[3] for r in rows}, {f"cuda:{r % gpus()}" for r in range(2)}, text)
        self.assertIn("[exit code 0]", text)

    def test_auto_on_a_node_with_fewer_gpus_than_local_ranks_is_not_refused_by_nccl(self):
        if gpus() != 1:
            self.skipTest(f"needs exactly one GPU (two local ranks on it under auto); this machine has {gpus()}")
        text = self.launch(HARNESS_DEVICE="auto", CUDA_VISIBLE_DEVICES=None)
        self.assertNotIn("Duplicate GPU detected", text)
        self.assertRegex(text, r"LAUNCHED rank=\d pid=\d+ sum=3 device=cuda at=cuda:0 backend=gloo")
        self.assertIn("[exit code 0]", text)


class TestStandalone(TorchrunCase):
    """torchrun --standalone --nproc-per-node 2 <fixture module>, and -m unittest."""

    #: one job for these tests of the module's own run_tests(): the rules of the pool, each checked on a job of
    #: launched ranks (the job goes on after each; the subtest that ends the job has one of its own below: how
    #: many of its combinations error depends on when rank 0 is stopped, which a shared summary cannot pin)
    JOB = ["TestLaunched", "TestNeedsFour", "TestNeedsARestart", "TestFirstFailure", "TestIDifferentCombinations",
           "TestInEachProcess", "TestOwnWorldAfterTheJobs"]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.job_dir = tempfile.mkdtemp(prefix="distharness-torchrun-")
        out = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT, "-v", *cls.JOB], cwd=REPO,
                             env=_env(cls.job_dir), capture_output=True, text=True, timeout=300)
        cls.job = (out.returncode, unittest_names(out.stdout + out.stderr), _leftovers(cls.job_dir))
        shutil.rmtree(cls.job_dir, ignore_errors=True)

    def test_rank0_reports_for_every_rank(self):
        # The module's own __main__ (harness.run_tests): under torchrun rank 0 alone prints.
        code, text, left = self.job
        self.assertNotEqual(code, 0, text)  # tests fail on rank 1
        # Rank 0 alone prints the report: each test appears once.
        self.assertEqual(text.count("test_a_all_reduce (__main__.TestLaunched"), 1, text)
        # Both ranks ran, in different processes, and their output came back to rank 0.
        rows = re.findall(r"\[rank (\d)\] LAUNCHED rank=(\d) pid=(\d+) sum=(\d+) device=cpu", text)
        self.assertEqual(sorted(r[0] for r in rows), ["0", "1"], text)
        self.assertEqual(len({r[2] for r in rows}), 2)
        self.assertTrue(all(r[3] == "3" for r in rows))
        # The failure on rank 1 is reported by rank 0, with rank 1's traceback.
        self.assertIn("TestLaunched.test_b_fails_on_rank_1 [rank 1/2] failed", text)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "FAIL-RANK1")}', text)
        self.assertIn("only rank 1 disagrees", text)
        self.assertIn("rank 0: passed", text)
        # One temp dir, the same path on both ranks.
        paths = set(re.findall(r"TEMPDIR rank=\d path=(\S+)", text))
        self.assertEqual(len(paths), 1, text)
        self.assertFalse(os.path.exists(paths.pop()))
        self.assertIn("needs world size 4, torchrun launched 2 ranks", text)
        # a kill with no torchrun restart left would end the job, and every test after it with it: skipped, saying so
        self.assertIn("kill(rank=1, op='all_reduce', nth=1) would end this torchrun job, which has no restart left "
                      "(--max-restarts 0, attempt 0); run torchrun with --max-restarts 1", text)
        # Each rank's failure takes its place in the order through the store (RankResult.arrived), as a pool's
        # parent stamps them: rank 1 failed 2 s before rank 0, so it comes first, though its number is higher.
        self.assertRegex(text, r"TestFirstFailure\.test_rank_1_fails_first \[rank 1/2\] failed on \S+: "
                               r"AssertionError: FIRST on rank 1")
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "FIRST-FAILURE")}', text)
        self.assertIn("rank 0: AssertionError: LATER on rank 0", text)
        self.assertRegex(text, r"Ran 11 tests .*\n\nFAILED \(failures=3, errors=1, skipped=2\)")
        self.assertEqual(left, [])

    def test_a_plain_test_that_fails_in_one_launched_process_fails_in_rank_0s_report(self):
        # a plain TestCase runs in every launched process on its own: rank 0's report is the job's, so a failure
        # in rank 1's process is reported there, with rank 1's traceback, not hidden behind rank 0's pass
        code, text, _ = self.job
        self.assertIn("test_passes_in_each (__main__.TestInEachProcess.test_passes_in_each) ... ok", text)
        self.assertIn("__main__.TestInEachProcess.test_fails_in_launched_rank_1 [launched rank 1]: failed", text)
        self.assertIn("failed on launched rank 1 of 2 (the test runs in each launched process; rank 0: passed)", text)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "EACH-PROCESS")}', text)

    def test_a_plain_test_makes_its_own_group_after_the_jobs_tests(self):
        # the job's tests keep their default group from test to test; a plain test after them finds none, as without
        # the harness, and its own init_process_group() on torchrun's env:// works
        code, text, _ = self.job
        self.assertIn("test_own_world (__main__.TestOwnWorldAfterTheJobs.test_own_world) ... ok", text)
        self.assertEqual(sorted(re.findall(r"OWN-WORLD rank=(\d) sum=2", text)), ["0", "1"], text)

    def test_hang_ends_the_job_with_stacks(self):
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "unittest", "-v",
                            f"{MOD}.TestZHang"], _env(self.tmpdir, FX_HANG="1"), timeout=240)
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        self.assertIn("TestZHang.test_hang [rank 1/2] timed out", text)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "HANG-LINE")} in test_hang', text)
        self.assertRegex(text, r"rank 0: timed out after 4 s .*it was in barrier")
        self.assertIn("ending the job", text)

    def collectives_job(self, test: str) -> str:
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "-m", "unittest", "-v",
                            f"{MOD}.TestYCollectives.{test}"], _env(self.tmpdir, FX_COLLECTIVES="1"), timeout=240)
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        return text

    @nightly("the subgroup's name in the pool by tests.test_collectives.TestCollectivesReport"
             ".test_subgroup_root_cause_is_the_missing_broadcast; the rule under torchrun by TestPeerLeftUnderTorchrun")
    def test_collectives_section_names_the_rank_that_never_called_a_subgroup_collective(self):
        # the member that never called the broadcast is the root cause, not the peer's "Connection closed by peer"
        # (under `python -m unittest` every rank prints its report; rank 0's is the one a runner shows)
        text = self.collectives_job("test_a_subgroup_broadcast")
        self.assertIn("TestYCollectives.test_a_subgroup_broadcast [rank 0/2] ended its test (passed) on cpu/gloo "
                      'without a collective rank 1 waited in: rank 0 never called #2 broadcast(float32[4]) on group '
                      '[0, 1] (name "1"): its last was #1', text)
        self.assertNothingLeft()

    @nightly("TestDesyncUnderTorchrun: rank 0 decides from the ranks' recorders that they can never meet and reports where they part")
    def test_collectives_section_in_rank_0s_report_of_a_hang(self):
        text = self.collectives_job("test_b_different_ops")
        # rank 0's watchdog reports both ranks' last collectives, before the stacks; both ranks are blocked in
        # collectives that can never meet, so it does so at once (harness.torchrun.desync), not at the timeout
        self.assertIn("[rank 1/2] was killed on cpu/gloo: can never meet the other ranks", text)
        self.assertNotIn("timed out", text)
        self.assertIn("rank 0: last called #2 all_gather(float32[4]) on the default group, unfinished", text)
        self.assertIn("rank 1: last called #2 all_reduce(float32[5]) on the default group, unfinished", text)
        self.assertIn("first difference: #2, different ops", text)
        self.assertLess(text.index("first difference: #2"), text.index("(faulthandler)"))
        self.assertLess(text.index("first difference: #2"), text.index("ending the job"))

    def test_subtest_failing_while_peer_in_collective_ends_within_the_peer_grace(self):
        # run_subtests' ranks meet through torchrun's store, not the test's group: rank 1's combination
        # raised while rank 0 waits for it in all_reduce, and the job ends after HARNESS_PEER_GRACE
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT,
                            "-v", "TestASubtestFailsWhilePeerInCollective"], _env(self.tmpdir, HARNESS_PEER_GRACE="3"))
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        self.assertIn("TestASubtestFailsWhilePeerInCollective.test_desync [rank 1/2] subtest (step=2) failed on "
                      "cpu/gloo: ValueError: FIXTURE-DESYNC rank 1 cannot build step 2", text)
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "FIXTURE-DESYNC-RAISE")}, in _step', text)
        self.assertIn("rank 0 never finished subtest (step=2) within HARNESS_PEER_GRACE (3 s) after it raised "
                      "here", text)
        self.assertNotIn("timed out", text)
        self.assertLess(text.index("DESYNC rank 1 cannot build"), text.index("never finished subtest"))
        # the combination before it ran on both ranks, and none after it
        self.assertEqual(sorted(re.findall(r"\[rank (\d)\] STEP rank=\d step=(\d)", text)), [("0", "1"), ("1", "1")],
                         text)
        self.assertNothingLeft()

    def test_ranks_that_ran_different_combinations_are_stopped_as_in_a_pool(self):
        # The meeting follows the pool's rule (protocol.meeting_call): a rank that left the test while its
        # peer waits at a meeting stops the peer at once, not at the test's timeout.
        code, text, left = self.job
        self.assertIn("[rank 0/2] raised on cpu/gloo: harness.errors.HarnessError: rank 1 left the test", text)
        self.assertIn("give run_subtests the same config on every rank", text)
        self.assertNotIn("timed out", text)
        self.assertEqual(left, [])

    @nightly("the same rule in a pool by tests.compat.test_compat_teardown_order; the job's wait for every body by test_subtest_failing_while_peer_in_collective_ends_within_the_peer_grace")
    def test_no_teardown_before_every_rank_ended_the_body(self):
        # tests/compat/cx_teardown_order.py: a FileStore on self.file_name removed in tearDown, and probes that look
        # for a peer's tearDown or cleanup marker, each rank a torchrun process
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "tests/compat/cx_teardown_order.py",
                            "-v", "TestFileStoreRemovedInTearDown", "TestTearDownWaits", "TestCleanupWaits",
                            "TestContinuousTearDownWaits"], _env(self.tmpdir, CX_TEARDOWN_RUNS="5"))
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertRegex(text, r"Ran 14 tests .*\n\nOK")
        self.assertNotIn("CX-EARLY-TEARDOWN", text)
        self.assertNothingLeft()


class TestDesyncUnderTorchrun(TorchrunCase):
    """Every launched rank blocked in collectives that can never meet: rank 0 decides from the ranks' flight
    recorders (through the store) and the job ends at once with the pool's report, not at HARNESS_TIMEOUT=60;
    a slow rank and ranks inside one long matching collective, run first in the same job, pass."""

    def test_a_desync_ends_at_once_and_slow_ranks_pass(self):
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "4", "tests/fixtures/fx_desync.py", "-v",
                            "TestESlowRank", "TestHLongCollective", "TestADifferentOps"],
                           _env(self.tmpdir, HARNESS_TIMEOUT="60", HARNESS_THREADS="1"), timeout=240)
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        self.assertRegex(text, r"test_slow_rank \(__main__\.TestESlowRank\.test_slow_rank\) \.\.\. ok\n")
        self.assertRegex(text, r"test_long_collective \(__main__\.TestHLongCollective\.test_long_collective\) "
                               r"\.\.\. ok\n")
        self.assertIn("fx_desync.TestADifferentOps.test_different_ops [rank 2/4] was killed on cpu/gloo: can never meet "
                      "the other ranks: #2 on the default group, different ops: broadcast(float32[4]) on rank 2; "
                      "all_reduce(float32[4]) on ranks 0, 1, 3; every rank was blocked in a collective, so the test "
                      "was stopped at once, not at its timeout; it was in broadcast", text)
        self.assertIn("rank 2: last called #2 broadcast(float32[4]) on the default group, unfinished", text)
        self.assertIn("rank 0: stopped at once with rank 2, whose collective can never meet the others'", text)
        self.assertIn(f'fx_desync.py", line {fixture_line("fx_desync", "FIXTURE-BROADCAST")}', text)
        self.assertIn("ending the job (a rank blocked in a collective cannot run another test)", text)
        self.assertNotIn("timed out", text)
        self.assertNothingLeft()


class TestPeerLeftUnderTorchrun(TorchrunCase):
    """A rank whose body ended while its peer waits in a collective it never called (tests/fixtures/fx_peer_left.py):
    the waiting rank is stopped after HARNESS_PEER_GRACE with the pool's report, not at HARNESS_TIMEOUT=60, and
    the job, which cannot go on, ends saying why; a peer slower than the grace, run first, passes."""

    def job(self, left: int, *classes: str) -> str:
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "tests/fixtures/fx_peer_left.py", "-v",
                            *classes], _env(self.tmpdir, HARNESS_TIMEOUT="60", HARNESS_PEER_GRACE="2",
                                                        FX_LEFT_RANK=str(left)), timeout=240)
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        self.assertNotIn("timed out", text)
        self.assertNothingLeft()
        return text

    def assertPeerLeft(self, text: str, left: int) -> None:
        waiting = 1 - left
        self.assertIn(f"fx_peer_left.TestAPeerLeft.test_peer_left [rank {left}/2] ended its test (passed) on cpu/gloo "
                      f"without a collective rank {waiting} waited in: rank {left} never called #2 "
                      "all_reduce(float32[2]) on the default group: its last was #1", text)
        self.assertRegex(text, rf"rank {waiting}, which waited in it: still running [\d.]+ s after rank {left} passed "
                               r"without calling #2 all_reduce\(float32\[2\]\) on the default group; stopped "
                               r"\(HARNESS_PEER_GRACE\); it was in all_reduce")
        self.assertIn(f'fx_peer_left.py", line {fixture_line("fx_peer_left", "FIXTURE-PEER-LEFT-ALLREDUCE")}', text)

    @nightly("the rule and its words in a pool by tests.test_collectives (a peer that never called #2); the job's wait "
             "for a peer's body under torchrun by TestStandalone.test_subtest_failing_while_peer_in_collective_ends_"
             "within_the_peer_grace")
    def test_rank_0_left_waiting_ends_the_job_and_a_slow_peer_passes(self):
        text = self.job(1, "TestBSlowPeer", "TestAPeerLeft")
        self.assertRegex(text, r"test_slow_peer \(__main__\.TestBSlowPeer\.test_slow_peer\) \.\.\. ok\n")
        self.assertPeerLeft(text, 1)
        self.assertIn("ending the job (a rank left inside a collective that a peer never joins cannot run another "
                      "test)", text)

    @nightly("the same rule with rank 0 left waiting (test_rank_0_left_waiting_ends_the_job_and_a_slow_peer_passes, "
             "itself nightly: see there)")
    def test_rank_1_left_waiting_skips_the_rest_saying_why(self):
        text = self.job(0, "TestAPeerLeft", "TestBSlowPeer")
        self.assertPeerLeft(text, 0)
        self.assertIn("test_slow_peer (__main__.TestBSlowPeer.test_slow_peer) ... skipped 'the job cannot go on: "
                      "fx_peer_left.TestAPeerLeft.test_peer_left left rank 1 inside a collective, and a launched rank "
                      "cannot be replaced'", text)


@nightly("a crash in the pool (tests.test_failures); torchrun's reports by TestStandalone")
class TestCrashUnderTorchrun(TorchrunCase):
    def test_crash_ends_the_job_and_names_the_test(self):
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", SCRIPT,
                            "-v", "TestZCrash"], _env(self.tmpdir, FX_CRASH="1"), timeout=240)
        text = out.stdout + out.stderr
        self.assertNotEqual(out.returncode, 0, text)
        self.assertIn(f"torchrun stopped the job while {FX}.TestZCrash.test_a_crash was running; rank(s) [1]",
                      text)
        # rank 1's own Python stack, from faulthandler, names the line that crashed
        self.assertIn(f'{FX}.py", line {fixture_line(FX, "CRASH-LINE")} in test_a_crash', text)
        self.assertIn("SIGSEGV", text)
        self.assertNotIn("NEVER-RUNS", text)


@nightly("torchrun's reports by TestStandalone")
class TestRunnerUnderTorchrun(TorchrunCase):
    """run_tests.py under torchrun: one report, one JUnit file, from rank 0."""

    def test_run_tests_py(self):
        junit = os.path.join(self.tmpdir, "junit.xml")
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "run_tests.py",
                            "-i", "test_fully_shard_checkpoint", "-k", "root_fully_shard", "--junit-xml", junit],
                           _env(self.tmpdir))
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertEqual(text.count("1 passed, 0 failed, 0 skipped"), 1, text)
        with open(junit) as f:
            self.assertIn("test_state_dict_save_load_root_fully_shard", f.read())


@nightly("one node's job by TestStandalone")
class TestTwoNodes(TorchrunCase):
    """Two torchrun invocations, --nnodes 2, c10d rendezvous on 127.0.0.1: two "nodes" on one machine."""

    def test_two_nodes(self):
        port = _free_port()
        common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"distharness-{port}"]
        args = [SCRIPT, "-v", "TestLaunched.test_a_all_reduce", "TestLaunched.test_d_same_example"]
        env = _env(self.tmpdir)
        nodes = [subprocess.Popen([*TORCHRUN, *common, "--node-rank", str(i), *args], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
        outputs = []
        for node in nodes:
            try:
                outputs.append(node.communicate(timeout=300)[0])
            except subprocess.TimeoutExpired:
                node.kill()
                outputs.append(node.communicate()[0])
        text = "\n".join(outputs)
        self.assertEqual([n.returncode for n in nodes], [0, 0], text)
        # Exactly one node hosts rank 0 and prints the report, with both ranks' output in it.
        reports = [o for o in outputs if "Ran 2 tests" in o]
        self.assertEqual(len(reports), 1, text)
        self.assertRegex(reports[0], r"\[rank 0\] LAUNCHED rank=0 .* sum=3")
        self.assertRegex(reports[0], r"\[rank 1\] LAUNCHED rank=1 .* sum=3")
        self.assertIn("OK", reports[0])


if __name__ == "__main__":
    unittest.main()
