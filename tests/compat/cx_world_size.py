"""World sizes written upstream's way, from the device count (0 or 1 on a CPU machine)."""
import torch
import torch.distributed as dist

from harness import FSDPTest, MultiProcessTestCase, run_tests, skip_if_lt_x_gpu, with_comms

device_type = torch.device("cpu")  # what upstream's get_devtype() gives on a CPU build


def _say(test, tag):
    print(f"{tag} rank={test.rank} ws={test.world_size} dist={dist.get_world_size()} cls={type(test).__name__}")


class TestACudaCount(FSDPTest):
    @property
    def world_size(self):
        return min(4, torch.cuda.device_count())

    @skip_if_lt_x_gpu(2)
    def test_two_gpus(self):
        _say(self, "CUDACOUNT")
        self.assertEqual(dist.get_world_size(), self.world_size)


class TestBDeviceModuleCount(MultiProcessTestCase):
    @property
    def world_size(self):
        return min(8, torch.get_device_module(device_type).device_count())

    @with_comms
    def test_no_gpu_number(self):
        _say(self, "DEVMODCOUNT")


@skip_if_lt_x_gpu(2)
class TestCAcceleratorCountOnClass(MultiProcessTestCase):
    @property
    def world_size(self):
        return torch.accelerator.device_count()

    @with_comms
    def test_class_mark(self):
        _say(self, "ACCELCOUNT")


class TestDZeroOnPurpose(MultiProcessTestCase):
    @property
    def world_size(self):
        return 0  # not from a device count: an error whatever the machine

    def test_zero(self):
        print("FIXTURE-RAN-WITH-ZERO")


if __name__ == "__main__":
    run_tests()
