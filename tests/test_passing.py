"""Tests that pass and skip, run with ``python -m unittest`` as a user would: tests/fixtures/fx_pass.py."""
import os
import unittest

from tests._support import SUBTEST_LINES, FixtureTestCase, nightly

MOD = "tests.fixtures.fx_pass"


class TestPassingRun(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def test_exit_code_and_summary(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("Ran 10 tests")
        self.assertInReport("OK (skipped=3)")

    def test_each_test_passes(self):
        for name in ("test_all_reduce", "test_temp_dir", "test_zz_temp_dir_was_removed", "test_pid",
                     "test_needs_four_gpus", "test_process_group", "test_build_device_mesh"):
            with self.subTest(name=name):
                self.assertMatchesReport(rf"^{name} \({MOD}\.\w+\.{name}\) \.\.\. ok$")

    def test_setup_and_teardown_run_in_every_rank(self):
        setups = {(row["_rank"], row["rank"], row["pid"]) for row in self.r.rank_lines("SETUP")}
        teardowns = {(row["_rank"], row["rank"], row["pid"]) for row in self.r.rank_lines("TEARDOWN")}
        bodies = {(row["_rank"], row["rank"], row["pid"]) for row in self.r.rank_lines("PID")
                  if row["class"] == "A"}
        self.assertEqual({s[0] for s in setups}, {"0", "1"}, self.r.describe())
        self.assertTrue(all(s[0] == s[1] for s in setups))
        self.assertLessEqual(bodies, setups)  # setUp ran in the same process as the body
        self.assertEqual(setups, teardowns)
        self.assertNotIn(str(os.getpid()), {s[2] for s in setups})

    def test_temp_dir_is_shared_and_removed(self):
        rows = self.r.rank_lines("TEMPDIR")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1"], self.r.describe())
        paths = {row["path"] for row in rows}
        self.assertEqual(len(paths), 1, f"ranks got different temp dirs: {paths}")
        self.assertIn("harness-", paths.pop())
        gone = self.r.rank_lines("TEMPDIR-GONE")
        self.assertEqual(sorted(row["rank"] for row in gone), ["0", "1"], self.r.describe())

    def test_pool_reused_across_classes_of_one_world_size(self):
        by_class = {}
        for row in self.r.rank_lines("PID"):
            by_class.setdefault(row["class"], {})[row["rank"]] = row["pid"]
        self.assertEqual(set(by_class), {"A", "B", "C"}, self.r.describe())
        self.assertEqual(by_class["A"], by_class["B"])
        self.assertEqual(by_class["A"], by_class["C"])  # FSDPTest, same world size: same processes
        self.assertNotEqual(by_class["A"]["0"], by_class["A"]["1"])

    def test_fsdp_test_has_process_group(self):
        self.assertMatchesReport(rf"test_process_group \({MOD}\.TestCFSDP\.test_process_group\) \.\.\. ok")

    def test_dtensor_mesh_on_four_ranks(self):
        rows = self.r.rank_lines("MESH")
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1", "2", "3"], self.r.describe())
        self.assertEqual({row["size"] for row in rows}, {"4"})

    def test_gpu_test_runs_on_cpu_without_gpus(self):
        # the fixture's GPUs are hidden (base_env): skip_if_lt_x_gpu(4) on 2 ranks runs on CPU
        rows = self.r.rank_lines("GPU4")
        self.assertEqual({row["device"] for row in rows}, {"cpu"}, self.r.describe())

    def test_skip_reasons(self):
        self.assertInReport("test_skip_all (tests.fixtures.fx_pass.TestESkip.test_skip_all) ... skipped "
                            "'FIXTURE-SKIP-ALL not on this build'")
        m = self.assertMatchesReport(r"test_skip_one_rank \(.*\) \.\.\. skipped '(.*)'$")
        self.assertIn("skipped on rank 1 (FIXTURE-SKIP-RANK1 only rank 1 lacks it)", m.group(1))
        self.assertIn("ran and passed on rank 0", m.group(1))

    def test_subtest_skipped_by_skip_subtest(self):
        self.assertMatchesReport((r"^\s+test_subtests_pass \(.*\) \(a=2, b=3\) \.\.\. " if SUBTEST_LINES else "")
                                 + r"skipped 'FIXTURE-SUBSKIP a=2 unsupported'$")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestDeviceSelection(FixtureTestCase):
    """HARNESS_DEVICE=nccl (one GPU per rank) on a machine without GPUs: skipped with the reason, no pool
    started. The GPUs are hidden from the run (CUDA_VISIBLE_DEVICES=""), so it holds on any machine."""

    ARGS = [f"{MOD}.TestBPids", f"{MOD}.TestDMesh", "-v"]
    ENV = {"HARNESS_DEVICE": "nccl", "CUDA_VISIBLE_DEVICES": ""}

    def test_skipped_with_gpu_count(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport(f"test_pid ({MOD}.TestBPids.test_pid) ... skipped 'needs 2 GPUs, found 0 "
                            "(HARNESS_DEVICE=nccl: one GPU per rank)'")
        # skip_if_lt_x_gpu(4) on a world of 2, and DTensorTestBase's 4 ranks
        self.assertInReport(f"test_needs_four_gpus ({MOD}.TestBPids.test_needs_four_gpus) ... skipped "
                            "'needs 4 GPUs, found 0")
        self.assertInReport("test_build_device_mesh (tests.fixtures.fx_pass.TestDMesh.test_build_device_mesh) "
                            "... skipped 'needs 4 GPUs, found 0")
        self.assertInReport("OK (skipped=3)")
        self.assertEqual(self.r.rank_lines("PID"), [])

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("a placement's skip before any rank starts, end to end, by TestDeviceSelection; HARNESS_DEVICE=cuda's "
         "words with no GPU by tests.unit.test_placement")
class TestCudaWithoutAGpu(FixtureTestCase):
    """HARNESS_DEVICE=cuda takes NCCL or shared GPUs; with no GPU at all (hidden), every test is skipped so."""

    ARGS = [f"{MOD}.TestBPids", "-v"]
    ENV = {"HARNESS_DEVICE": "cuda", "CUDA_VISIBLE_DEVICES": ""}

    def test_skipped_for_want_of_any_gpu(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport(f"test_pid ({MOD}.TestBPids.test_pid) ... skipped 'needs a GPU, found none "
                            "(HARNESS_DEVICE=cuda)'")
        self.assertEqual(self.r.rank_lines("PID"), [])


if __name__ == "__main__":
    unittest.main()
