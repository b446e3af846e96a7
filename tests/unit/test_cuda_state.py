"""Which CUDA errors leave a rank unusable, what is said of memory a test left, and the shared-GPU classifier."""
import unittest

from harness.ranks import cuda_state
from harness.judging.fallback import needs_cuda, needs_nccl
from harness.judging.verdict import world_changes
from harness.shared.outcome import ERROR, PASSED, RankResult


class TestSticky(unittest.TestCase):
    def test_cudas_sticky_errors_are_recognised_in_torchs_words(self):
        for text in ("RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors might be ...",
                     "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
                     "RuntimeError: CUDA error: unspecified launch failure",
                     "RuntimeError: CUDA error: misaligned address",
                     "RuntimeError: CUDA error: an illegal instruction was encountered",
                     "RuntimeError: CUDA error: uncorrectable ECC error encountered",
                     "RuntimeError: CUDA error: the launch timed out and was terminated",
                     "RuntimeError: NCCL error: unhandled cuda error (cudaErrorIllegalAddress)"):
            with self.subTest(text=text):
                self.assertTrue(cuda_state.is_sticky(text))

    def test_recoverable_errors_are_not_sticky(self):
        for text in ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 TiB",
                     "RuntimeError: CUDA error: invalid device ordinal",
                     "RuntimeError: Expected all tensors to be on the same device, but found at least two devices",
                     "AssertionError: Tensor-likes are not close!", ""):
            with self.subTest(text=text):
                self.assertEqual(cuda_state.is_sticky(text), "")

    def test_out_of_memory_is_recognised(self):
        self.assertTrue(cuda_state.is_out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"))
        self.assertFalse(cuda_state.is_out_of_memory("RuntimeError: CUDA error: device-side assert triggered"))

    def test_sizes_are_said_in_binary_units(self):
        self.assertEqual(cuda_state.describe_bytes(512), "512 bytes")
        self.assertEqual(cuda_state.describe_bytes(1536), "1.5 KiB")
        self.assertEqual(cuda_state.describe_bytes(64 * 2**20), "64.0 MiB")
        self.assertEqual(cuda_state.describe_bytes(3 * 2**40), "3072.0 GiB")

    def test_without_a_cuda_context_there_is_nothing_to_check(self):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.skipTest("this process has a CUDA context")
        self.assertEqual(cuda_state.before_test(), {})
        self.assertEqual(cuda_state.after_test({}, "RuntimeError: CUDA error: device-side assert triggered"), ("", []))


class TestTheParentReplacesTheRanks(unittest.TestCase):
    def test_a_broken_context_on_one_rank_is_a_change_of_the_world(self):
        broken = RankResult(rank=1, status=ERROR, cuda_broken="AcceleratorError: CUDA error: device-side assert",
                            altered=[cuda_state.broken_sentence("AcceleratorError: CUDA error: device-side assert")])
        changes = world_changes([RankResult(rank=0, status=PASSED), broken])
        self.assertEqual(changes, ["the CUDA context broken (AcceleratorError: CUDA error: device-side assert): a "
                                   "sticky CUDA error leaves the process unable to use the GPU, so every later test "
                                   "in it would fail (rank 1)"])


class TestNeedsNccl(unittest.TestCase):
    def test_errors_that_mean_one_gpu_per_rank_on_nccl(self):
        for exc_type, message in (
                ("DistBackendError", "NCCL error ... Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"),
                ("RuntimeError", "ProcessGroupGloo does not support reduce_scatter_tensor_coalesced"),
                ("RuntimeError", "No backend type associated with device type cuda")):
            with self.subTest(message=message):
                self.assertTrue(needs_nccl(exc_type, message))

    def test_ordinary_failures_are_not_blamed_on_the_placement(self):
        for exc_type, message in (("AssertionError", "Tensor-likes are not close!"),
                                  ("RuntimeError", "Expected all tensors to be on the same device"),
                                  ("torch.OutOfMemoryError", "CUDA out of memory")):
            with self.subTest(message=message):
                self.assertEqual(needs_nccl(exc_type, message), "")
                self.assertEqual(needs_cuda(exc_type, message), "")


if __name__ == "__main__":
    unittest.main()
