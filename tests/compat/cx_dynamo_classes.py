"""Upstream's DistributedTestBase and dynamo classes, as real files use them (nested abstract class, create_pg)."""
import abc

import torch
import torch.distributed as dist

from harness import (DistributedTestBase, DynamoDistributedMultiProcTestCase, DynamoDistributedSingleProcTestCase,
                     instantiate_parametrized_tests, parametrize, requires_nccl, run_tests, skip_if_lt_x_gpu,
                     skip_if_odd_worldsize, with_dist_debug_levels)


class TestACreatePg(DistributedTestBase):
    @property
    def world_size(self):
        return 3

    def test_create_pg(self):
        pg = self.create_pg("cpu")
        t = torch.ones(1)
        dist.all_reduce(t, group=pg)
        print(f"CREATEPG rank={self.rank} sum={int(t.item())} backend={self.backend('cuda')}")

    @skip_if_odd_worldsize
    def test_odd(self):
        print("ODD-RAN")

    def test_debug_levels(self):
        self.create_pg("cpu")
        seen = []

        @with_dist_debug_levels(levels=["OFF", "DETAIL"])
        def body():
            seen.append(str(dist.get_debug_level()).rpartition(".")[2])

        body()
        print(f"LEVELS rank={self.rank} seen={','.join(seen)}")


class AbstractTest:
    @instantiate_parametrized_tests
    class DeviceTest(abc.ABC, DynamoDistributedMultiProcTestCase):
        @property
        @abc.abstractmethod
        def _device(self): ...

        @property
        def world_size(self):
            return 2

        @parametrize("steps", [1, 2])
        def test_compiled(self, steps):
            dist.init_process_group("gloo", init_method=f"file://{self.file_name}", rank=self.rank,
                                    world_size=self.world_size)
            f = torch.compile(lambda x: x * 2, backend="eager")
            for _ in range(steps):
                t = f(torch.ones(1, device=self._device))
            dist.all_reduce(t)
            print(f"DYNAMO rank={self.rank} steps={steps} sum={int(t.item())}")


class TestBCPU(AbstractTest.DeviceTest):
    @property
    def _device(self):
        return torch.device("cpu")


class TestCSingle(DynamoDistributedSingleProcTestCase):
    def test_single(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"SINGLE device={self.device} ws={dist.get_world_size()} sum={int(t.item())}")

    @requires_nccl()
    def test_nccl(self):
        print("NCCL-RAN")


if __name__ == "__main__":
    run_tests()
