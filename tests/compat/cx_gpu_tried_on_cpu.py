"""Tests that ask for GPUs, run on CPU for want of them, and fail there for a device reason the harness has no
words for: skips that say what was tried (HARNESS_DEVICE=cpu: failures)."""
import torch
import torch.distributed as dist

from harness import FSDPTest, MultiProcessTestCase, run_tests, skip_if_lt_x_gpu, with_comms


class TestTriedOnCpu(MultiProcessTestCase):
    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_is_cuda(self):
        t = torch.ones(1, device=self.device)
        self.assertTrue(t.is_cuda)  # CX-IS-CUDA

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_device_from_the_current_index(self):
        # on CPU, torch.cpu.current_device() is the string "cpu": device() refuses it as an index
        device = torch.device(self.device_type, torch.get_device_module(self.device_type).current_device())  # CX-INDEX
        dist.all_reduce(torch.ones(1, device=device))

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_passes_on_cpu(self):
        t = torch.ones(1, device=self.device)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2)

    @skip_if_lt_x_gpu(2)
    @with_comms
    def test_one_subtest_fails_on_cpu(self):
        self.run_subtests({"dim": [1, 2]}, self._one_subtest)

    def _one_subtest(self, dim):
        if dim == 2:
            raise ValueError("CX-SUB-ACCELERATOR only an accelerator takes dim 2")

    @with_comms
    def test_not_written_for_gpus(self):
        t = torch.ones(1, device=self.device)
        self.assertTrue(t.is_cuda)  # CX-NOT-ASKED: the same failure, in a test that asks for no GPU


class TestSizedByDevices(FSDPTest):
    @property
    def world_size(self):
        return min(2, torch.cuda.device_count())

    def test_value_error_only_an_accelerator_raises(self):
        raise ValueError("CX-ACCELERATOR-ONLY: expects an accelerator mesh")


if __name__ == "__main__":
    run_tests()
