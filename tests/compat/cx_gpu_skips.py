"""Skips that mean "needs a GPU or NCCL", in upstream's own words and the harness's: all are counted."""
import unittest

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import requires_nccl
from torch.testing._internal.common_distributed import skip_if_lt_x_gpu as upstream_skip_if_lt_x_gpu

from harness import MultiProcessTestCase, run_tests, skip_subtest, with_comms


class TestGpuSkips(MultiProcessTestCase):
    @requires_nccl()  # upstream's decorator: skips in the parent when this torch has no NCCL
    @with_comms
    def test_requires_nccl(self):
        print(f"NCCL-BODY rank={self.rank}")

    @upstream_skip_if_lt_x_gpu(2)  # left upstream's: the ranks leave with sys.exit(77)
    def test_upstream_skip_code(self):
        print(f"UPSTREAM-GPU-BODY rank={self.rank}")

    def test_skip_in_upstream_words(self):
        self.skipTest("Need at least 4 CUDA devices")

    @with_comms
    def test_subtest_skip(self):
        self.run_subtests({"offload": [False, True]}, self._sub)

    def _sub(self, offload):
        if offload and self.device_type == "cpu":
            skip_subtest("needs an accelerator: CPU offload")
        t = torch.ones(1)
        dist.all_reduce(t)

    def test_small_world(self):
        self.skipTest("Skipped due to small world size.")  # not about GPUs: not counted


class TestPlain(unittest.TestCase):
    @unittest.skipIf(True, "CUDA not available")
    def test_cuda_only(self):
        pass


if __name__ == "__main__":
    run_tests()
