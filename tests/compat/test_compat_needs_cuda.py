"""Tests that hard-code CUDA are skipped as "needs CUDA" on a CPU fallback: tests/compat/cx_needs_cuda.py."""
import unittest

from tests._support import SUBTEST_LINES, FixtureTestCase, fixture_line, nightly

MOD = "tests.compat.cx_needs_cuda"
# What .cuda() and pin_memory() say with no GPU to see: a CPU build (AssertionError: Torch not compiled with
# CUDA enabled; pin_memory=True requires ...), a CUDA build without a driver (Found no NVIDIA driver ...) or
# with its GPUs hidden (No CUDA GPUs are available; torch 2.11 and later with a driver: AcceleratorError: CUDA error: no
# CUDA-capable device is detected).
CPU_ONLY = (r"Torch not compiled with CUDA enabled|pin_memory=True|Found no NVIDIA driver|No CUDA GPUs are available|"
            r"no CUDA-capable device is detected|"
            r"no pinned memory allocator|Cannot access accelerator device")
NO_CUDA = rf"(AssertionError|RuntimeError|AcceleratorError): [^']*({CPU_ONLY})[^']*"


class TestNeedsCudaSkipped(FixtureTestCase):
    ARGS = [MOD, "-v"]

    def test_cuda_tensor_is_a_skip_with_the_line(self):
        self.assertMatchesReport(rf"test_cuda_tensor \({MOD}\.TestNeedsCuda\.test_cuda_tensor\) \.\.\. skipped 'needs CUDA: "
                                 rf"{NO_CUDA} \(cx_needs_cuda.py:{fixture_line(MOD, 'CX-CUDA-TENSOR')}\)'")

    def test_pinned_memory_is_a_skip(self):
        self.assertMatchesReport(rf"test_pinned_memory \(.*\) \.\.\. skipped 'needs CUDA: {NO_CUDA} "
                                 rf"\(cx_needs_cuda.py:{fixture_line(MOD, 'CX-PINNED')}\)'")

    def test_nccl_alone_is_a_skip_before_the_body(self):
        self.assertMatchesReport(r"test_nccl_alone \(.*\) \.\.\. skipped \"needs CUDA: asks for backend='nccl' alone "
                                 r"\(cx_needs_cuda.py:\d+\)\"")
        self.assertNotIn("FIXTURE-NCCL-BODY-RAN", self.r.output)

    def test_only_the_cuda_subtest_is_skipped(self):
        self.assertMatchesReport((r"^\s+test_subtests \(.*\) \(device='cuda'\) \.\.\. " if SUBTEST_LINES else "")
                                 + rf"skipped 'needs CUDA: "
                                 rf"{NO_CUDA} \(cx_needs_cuda.py:{fixture_line(MOD, 'CX-SUB-CUDA')}\)'$")
        self.assertNotRegex(self.r.output, r"\(device='cpu'\) \.\.\. (skipped|FAIL|ERROR)")
        # the cpu combination ran on both ranks, its all_reduce over both; the cuda one never got past its tensor
        rows = self.r.rank_lines("CX-SUB-RAN")
        self.assertEqual(sorted((row["_rank"], row["device"], row["sum"]) for row in rows),
                         [("0", "cpu", "2"), ("1", "cpu", "2")], self.r.describe())

    def test_a_real_failure_stays_a_failure(self):
        text = self.r.section("FAIL: test_real_failure")
        self.assertIn("CX-REAL-FAILURE", text)
        self.assertEqual(self.r.returncode, 1)
        self.assertInReport("FAILED (failures=1, skipped=4)")

    def test_summary_line_counts_them(self):
        self.assertInReport("harness: 4 tests need CUDA, skipped (a GPU or NCCL was missing): "
                            f"{MOD}.TestNeedsCuda.test_cuda_tensor, "
                            f"{MOD}.TestNeedsCuda.test_nccl_alone, {MOD}.TestNeedsCuda.test_pinned_memory, "
                            f"{MOD}.TestNeedsCuda.test_subtests\n"
                            "harness:   4 x hard-code CUDA, ran on CPU for want of GPUs (HARNESS_DEVICE=cpu makes them "
                            f"failures): {MOD}.TestNeedsCuda.test_cuda_tensor, {MOD}.TestNeedsCuda.test_nccl_alone, "
                            f"{MOD}.TestNeedsCuda.test_pinned_memory and 1 more")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("the strict rule (HARNESS_DEVICE=cpu: a failure, not a skip) by tests.compat.test_compat_gpu_tried_on_cpu."
         "TestStrictUnderDeviceCpu and tests.unit.test_verdict")
class TestNeedsCudaUnderDeviceCpu(FixtureTestCase):
    """HARNESS_DEVICE=cpu asked for CPU on purpose: what fails is reported as failing."""

    ARGS = [MOD, "-v"]
    ENV = {"HARNESS_DEVICE": "cpu"}

    def test_failures_not_skips(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertNotIn("needs CUDA", self.r.output)
        self.assertRegex(self.r.section(": test_cuda_tensor"), CPU_ONLY)
        self.assertRegex(self.r.section(": test_pinned_memory"), CPU_ONLY)
        self.assertRegex(self.r.section("test_subtests"), CPU_ONLY)
        # a bare "nccl" becomes gloo on CPU (docs/placement.md's rule); the body runs
        self.assertIn("FIXTURE-NCCL-BODY-RAN", self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
