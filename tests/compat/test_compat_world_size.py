"""World sizes from the device count run the world the test asks for: tests/compat/cx_world_size.py."""
import unittest

from tests._support import FixtureTestCase

MOD = "tests.compat.cx_world_size"


class TestWorldSizeFromDeviceCount(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def _ranks(self, tag):
        rows = self.r.rank_lines(tag)
        return sorted(int(row["_rank"]) for row in rows), {(row["ws"], row["dist"]) for row in rows}

    def test_cuda_count_with_skip_if_lt_x_gpu_runs_its_x_ranks(self):
        ranks, sizes = self._ranks("CUDACOUNT")
        self.assertEqual(ranks, [0, 1], self.r.describe())
        self.assertEqual(sizes, {("2", "2")}, "self.world_size in the ranks must say the parent's number")

    def test_device_module_count_without_a_number_runs_four(self):
        ranks, sizes = self._ranks("DEVMODCOUNT")
        self.assertEqual(ranks, [0, 1, 2, 3], self.r.describe())
        self.assertEqual(sizes, {("4", "4")})

    def test_skip_if_lt_x_gpu_on_the_class(self):
        ranks, sizes = self._ranks("ACCELCOUNT")
        self.assertEqual(ranks, [0, 1], self.r.describe())
        self.assertEqual(sizes, {("2", "2")})

    def test_the_report_says_why(self):
        self.assertInReport("world size 2 as on a machine with 2 GPUs (world_size follows the device count, "
                            "0 on this machine)")
        self.assertInReport("world size 4 as on a machine with 4 GPUs (world_size follows the device count, "
                            "1 on this machine)")

    def test_zero_on_purpose_stays_an_error(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=1)")
        text = self.r.section("ERROR: test_zero")
        self.assertIn(f"UsageError: {MOD}.TestDZeroOnPurpose.test_zero: world_size must be an int >= 1, got 0", text)
        self.assertIn("also with the device counts at 4", text)
        self.assertNotIn("FIXTURE-RAN-WITH-ZERO", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestWorldSizeUnderDeviceCuda(FixtureTestCase):
    """HARNESS_DEVICE=nccl without GPUs (hidden): the world the test asks for is named in the skip, not a 0 error."""

    ARGS = [f"{MOD}.TestACudaCount", "-v"]
    ENV = {"HARNESS_DEVICE": "nccl"}

    def test_skipped_with_the_asked_world(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("skipped 'needs 2 GPUs, found 0 (HARNESS_DEVICE=nccl: one GPU per rank)'")
        self.assertEqual(self.r.rank_lines("CUDACOUNT"), [])


if __name__ == "__main__":
    unittest.main()
