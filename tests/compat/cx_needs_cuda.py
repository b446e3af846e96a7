"""Tests that hard-code CUDA, run on a CPU machine: skipped as "needs CUDA" (failures under HARNESS_DEVICE=cpu)."""
import torch
import torch.distributed as dist

from harness import MultiProcessTestCase, run_tests, with_comms


class TestNeedsCuda(MultiProcessTestCase):
    def test_cuda_tensor(self):
        torch.ones(2, device="cuda")  # CX-CUDA-TENSOR

    def test_pinned_memory(self):
        torch.empty(4, pin_memory=True)  # CX-PINNED

    @with_comms(backend="nccl")
    def test_nccl_alone(self):
        print("FIXTURE-NCCL-BODY-RAN")

    @with_comms
    def test_subtests(self):
        self.run_subtests({"device": ["cpu", "cuda"]}, self._sub)

    def _sub(self, device):
        t = torch.ones(1, device=device)  # CX-SUB-CUDA
        dist.all_reduce(t)
        print(f"CX-SUB-RAN rank={self.rank} device={device} sum={int(t.item())}")

    def test_real_failure(self):
        self.assertEqual(1, 2, "CX-REAL-FAILURE")


if __name__ == "__main__":
    run_tests()
