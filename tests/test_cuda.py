"""Reused ranks on a GPU are as trustworthy as fresh processes: tests/fixtures/fx_cuda.py, real CUDA work.

Runs on any machine with a GPU and is skipped, with the reason, elsewhere (the decisions behind it,
which errors are sticky and what is reported, have fast tests in tests/unit/test_cuda_state.py).
"""
import unittest

from tests._support import FixtureTestCase, base_env, gpus, run_fixture

MOD = "tests.fixtures.fx_cuda"


class _NeedsAGpu(FixtureTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        if gpus() < 1:
            raise unittest.SkipTest("needs a GPU: real CUDA work (a device-side assert, an out-of-memory error, "
                                    "memory left referenced, ranks sharing a GPU); this machine has none")
        super().setUpClass()

    def pids(self, test: str) -> set[str]:
        rows = [row for row in self.r.rank_lines("WHERE") if row["test"] == test]
        if not rows:
            self.fail(f"no WHERE line for {test}\n{self.r.describe()}")
        return {row["pid"] for row in rows}


class TestGpuStateBetweenTests(_NeedsAGpu):
    ARGS = [f"{MOD}.TestANccl", f"{MOD}.TestBSticky", f"{MOD}.TestCOom", f"{MOD}.TestDLeak", "-v"]
    ENV = {"HARNESS_DEVICE": "auto", "CUDA_VISIBLE_DEVICES": None}

    def test_world_size_one_runs_on_nccl(self):
        self.assertMatchesReport(rf"^test_all_reduce_on_nccl \({MOD}\.TestANccl\.test_all_reduce_on_nccl\) "
                                 r"\.\.\. ok$")

    def test_a_device_side_assert_fails_its_test_only(self):
        self.assertMatchesReport(rf"^test_2_device_side_assert \(.*\) \.\.\. (ERROR|FAIL)$")
        self.assertIn("device-side assert", self.r.section("test_2_device_side_assert"))
        for name in ("test_1_uses_cuda", "test_3_after_it", "test_4_after_it", "test_5_after_it"):
            with self.subTest(name=name):
                self.assertMatchesReport(rf"^{name} \({MOD}\.TestBSticky\.{name}\) \.\.\. ok$")

    def test_the_ranks_are_replaced_and_the_test_that_broke_the_context_is_named(self):
        self.assertNotEqual(self.pids("sticky-1"), self.pids("sticky-3"))
        self.assertEqual(self.pids("sticky-3"), self.pids("sticky-5"))
        self.assertMatchesReport(rf"harness: {MOD}\.TestBSticky\.test_2_device_side_assert altered the process: "
                                 r"the CUDA context broken \(.*device-side assert")

    def test_out_of_memory_is_not_sticky_and_the_next_test_starts_at_zero(self):
        self.assertIn("out of memory", self.r.section("test_1_out_of_memory"))
        self.assertMatchesReport(rf"^test_2_starts_at_zero \({MOD}\.TestCOom\.test_2_starts_at_zero\) \.\.\. ok$")
        self.assertEqual(self.pids("oom-1"), self.pids("oom-2"))  # the same ranks: nothing to replace
        [row] = [row for row in self.r.rank_lines("MEMORY") if row["test"] == "oom-2"]
        self.assertEqual((row["allocated"], row["peak"]), ("0", "0"), self.r.describe())

    def test_memory_left_referenced_is_named_with_its_size_and_not_inherited(self):
        self.assertMatchesReport(rf"harness: {MOD}\.TestDLeak\.test_1_keeps_a_tensor altered the process: CUDA "
                                 r"memory left referenced after the test: 64\.0 MiB on cuda:0")
        self.assertMatchesReport(rf"^test_2_starts_at_zero \({MOD}\.TestDLeak\.test_2_starts_at_zero\) \.\.\. ok$")
        self.assertNotEqual(self.pids("leak-1"), self.pids("leak-2"))
        [row] = [row for row in self.r.rank_lines("MEMORY") if row["test"] == "leak-2"]
        self.assertEqual((row["allocated"], row["peak"]), ("0", "0"), self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestRanksShareTheGpus(_NeedsAGpu):
    ARGS = [f"{MOD}.TestEShared", "-v"]
    ENV = {"HARNESS_DEVICE": "cuda-shared", "CUDA_VISIBLE_DEVICES": None}

    def test_collectives_and_fsdp2_run_on_cuda_tensors_over_gloo(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        for name in ("test_collectives_on_cuda_tensors", "test_fsdp2_trains",
                     "test_dtensor_full_tensor_and_redistribute", "test_every_collective_on_cuda_tensors"):
            with self.subTest(name=name):
                self.assertMatchesReport(rf"^{name} \({MOD}\.TestEShared\.{name}\) \.\.\. ok$")
        rows = [row for row in self.r.rank_lines("WHERE") if row["test"] == "shared"]
        self.assertEqual(sorted(row["rank"] for row in rows), ["0", "1", "2", "3"], self.r.describe())
        self.assertEqual({row["backend"] for row in rows}, {"gloo"})
        self.assertEqual({row["device"] for row in rows}, {f"cuda:{r % gpus()}" for r in range(4)})

    def test_a_test_that_asks_for_nccl_alone_is_skipped_with_the_reason(self):
        # unittest quotes the reason with " where it holds a ' (backend='nccl'), as this one does
        self.assertMatchesReport(r"^test_nccl_alone \(.*\) \.\.\. skipped [\"']needs NCCL \(one GPU per rank\): "
                                 r"asks for backend='nccl' alone and the placement is cuda-shared/gloo")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestTriedOnSharedGpus(_NeedsAGpu):
    """A test written for a GPU per rank, on fewer GPUs: upstream skips it; under auto the harness tries it on the
    GPUs the ranks share and, where it fails for that, reports the skip upstream would, saying what broke."""
    ARGS = [f"{MOD}.TestFTriedShared", "-v"]
    ENV = {"HARNESS_DEVICE": "auto", "CUDA_VISIBLE_DEVICES": None}

    @classmethod
    def setUpClass(cls) -> None:
        if gpus() >= 4:
            raise unittest.SkipTest("needs a machine with 1 to 3 GPUs: with 4 the test gets one GPU per rank")
        super().setUpClass()

    def test_a_failure_on_shared_gpus_is_the_skip_upstream_gives(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertMatchesReport(r"^test_a_gpu_per_rank \(.*\) \.\.\. skipped [\"']needs 4 GPUs \(skip_if_lt_x_gpu\(4\)\); "
                                 rf"tried on {gpus()} GPUs? its ranks shared for want of them: rank \d: ")
        self.assertMatchesReport(r"asked for GPUs and failed when tried on GPUs their ranks shared for want of them")

    def test_strict_cuda_shared_keeps_it_a_failure(self):
        run = run_fixture(self.ARGS, base_env(HARNESS_DEVICE="cuda-shared", CUDA_VISIBLE_DEVICES=None))
        self.assertNotEqual(run.returncode, 0, run.describe())
        self.assertRegex(run.output, r"test_a_gpu_per_rank \[rank \d/4\] (raised|failed) on cuda-shared/gloo")
        self.assertRegex(run.output, r"Note: this test asks for 4 GPUs \(skip_if_lt_x_gpu\(4\)\) and ran on")


if __name__ == "__main__":
    unittest.main()
