"""Tests written for GPUs that fail on CPU (where they ran for want of GPUs): the failure says so."""
import torch
import torch.distributed as dist

from harness import MultiProcessTestCase, run_tests, skip_if_lt_x_gpu, with_comms


class TestGpuWrittenFailures(MultiProcessTestCase):
    timeout = 120  # a bound for the fixture; the peer grace must end the hang long before

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_bf16_batch_norm(self):
        bn = torch.nn.BatchNorm1d(4)
        bn.weight.data = bn.weight.data.bfloat16()  # CUDA's kernel takes these; CPU's refuses
        bn.bias.data = bn.bias.data.bfloat16()
        bn(torch.randn(2, 4, device=self.device))  # CX-BF16-BN

    @with_comms
    def test_same_failure_not_written_for_gpus(self):
        bn = torch.nn.BatchNorm1d(4)
        bn.weight.data = bn.weight.data.bfloat16()
        bn.bias.data = bn.bias.data.bfloat16()
        bn(torch.randn(2, 4))

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_fails_then_waits_in_teardown(self):
        # rank 1 fails before the message rank 0 waits for; its tearDown then waits for rank 0: neither
        # would ever end. The failure reaches the parent as it happens, so the peer grace ends the test.
        t = torch.zeros(1)
        if self.rank == 1:
            self.addCleanup(dist.recv, torch.zeros(1), 0)  # waits for rank 0, which never sends
            raise RuntimeError("CX-RANK1-FAILED before sending")
        dist.recv(t, 1)


if __name__ == "__main__":
    run_tests()
