"""Upstream base classes with no counterpart before: each runs its tests on real rank processes."""
import os

import torch
import torch.distributed as dist
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed.fsdp import fully_shard

from harness import (DTensorContinuousTestBase, FSDPTestMultiThread, MultiProcContinuousTest, MultiThreadedTestCase,
                     ShardedTensorTestBase, run_tests, with_comms)


def _say(test, tag, **extra):
    more = " ".join(f"{k}={v}" for k, v in extra.items())
    print(f"{tag} rank={test.rank} ws={test.world_size} pid={os.getpid()} {more}".rstrip())


class TestAContinuous(MultiProcContinuousTest):
    world_size = 2

    @classmethod
    def backend_str(cls):
        return "gloo"

    def test_one(self):
        t = torch.ones(1)
        dist.all_reduce(t, group=self.pg)
        _say(self, "CONT", sum=int(t.item()), backend=dist.get_backend())

    def test_two(self):
        _say(self, "CONT2")


class TestBContinuousPerDevice(MultiProcContinuousTest):
    # world_size left at upstream's -2: one rank per GPU, as on a machine with enough of them
    def test_default_world(self):
        _say(self, "CONTDEV", dist=dist.get_world_size())


class TestCDTensorContinuous(DTensorContinuousTestBase):
    def test_mesh(self):
        mesh = self.build_device_mesh()
        _say(self, "DTCONT", mesh=mesh.size())


class TestDMultiThreaded(MultiThreadedTestCase):
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_threads()

    def perThreadSetUp(self):
        print(f"PERTHREADSETUP rank={self.rank}")

    def perThreadTearDown(self):
        print(f"PERTHREADTEARDOWN rank={self.rank}")

    def test_broadcast(self):
        t = torch.tensor([self.rank + 5])
        dist.broadcast(t, src=0)
        self.assertEqualOnRank(t.item(), 5)
        self.assertEqualOnRank(t.item(), 5, rank=1)
        _say(self, "MT", got=t.item())


class TestEFSDPMultiThread(FSDPTestMultiThread):
    @property
    def world_size(self):
        return 2

    def test_fully_shard(self):
        model = torch.nn.Linear(4, 4)
        fully_shard(model)
        _say(self, "FSDPMT", local="x".join(map(str, model.weight.to_local().shape)))


class TestFShardedTensor(ShardedTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms(init_rpc=False, backend="gloo")
    def test_sharded_tensor(self):
        spec = ChunkShardingSpec(dim=0, placements=["rank:0/cpu", "rank:1/cpu"])
        torch.manual_seed(0)
        st1 = sharded_tensor.rand(spec, 4, 2)
        torch.manual_seed(0)
        st2 = sharded_tensor.rand(spec, 4, 2)
        self.assert_sharded_tensor_equal(st1, st2)
        _say(self, "ST", shards=len(st1.local_shards()))


if __name__ == "__main__":
    run_tests()
