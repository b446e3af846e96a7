"""A ported file in which one class still derives from upstream's base (as `harness.port` left
FSDPTestContinuous before it mapped it), beside the same test on the harness's FSDPTestContinuous."""
import torch
import torch.distributed as dist
from torch.testing._internal.common_fsdp import FSDPTestContinuous as UpstreamFSDPTestContinuous

from harness import FSDPTestContinuous, run_tests


class TestStillUpstream(UpstreamFSDPTestContinuous):
    world_size = 2

    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"UPSTREAM-RAN rank={self.rank}")


class TestOnHarness(FSDPTestContinuous):
    world_size = 2

    def test_all_reduce(self):
        self.run_subtests({"device": ["cpu", "cuda"]}, self._sub)

    def _sub(self, device):
        t = torch.ones(1, device=device)  # CX-UP-CUDA
        dist.all_reduce(t)
        print(f"HARNESS-RAN rank={self.rank} device={device} sum={int(t.item())} backend={dist.get_backend()}")


if __name__ == "__main__":
    run_tests()
