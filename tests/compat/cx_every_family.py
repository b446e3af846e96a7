"""One test of every class family, written as upstream's tests are: each picks its device the usual way
(``self.device_type``, ``get_devtype()``, ``torch.cuda.is_available()``) and its backend from the class, and
prints where it ran. On a machine without GPUs each runs on CPU over gloo, whether torch is the CPU build or a
CUDA build (which has NCCL compiled in): tests/compat/test_compat_every_family.py."""
import torch
import torch.distributed as dist
from torch.distributed._shard import sharded_tensor
from torch.distributed._shard.sharding_spec import ChunkShardingSpec
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard, distribute_tensor

from harness import (DistributedTestBase, DTensorContinuousTestBase, DTensorOpTestBase, DTensorTestBase,
                     DynamoDistributedMultiProcTestCase, DynamoDistributedSingleProcTestCase, FSDPTest,
                     FSDPTestContinuous, FSDPTestMultiThread, LocalDTensorTestBase, MultiProcContinuousTest,
                     MultiProcessTestCase, MultiThreadedTestCase, ShardedTensorTestBase, get_devtype, requires_nccl,
                     run_tests, with_comms)

DEVICE_TYPE = "cuda" if torch.cuda.is_available() else "cpu"  # upstream's module-level idiom


def _say(test, family, device, ws=None):
    """One line per rank: the family, where its tensors went, the default group's backend and an all-reduce's sum."""
    ws = dist.get_world_size() if ws is None else ws
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert int(t.item()) == ws, f"{family}: all_reduce gave {t.item()}, expected {ws}"
    print(f"FAMILY {family} rank={test.rank} device={t.device.type} backend={dist.get_backend()} sum={int(t.item())}")


class TestMultiProcess(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_family(self):
        _say(self, "MultiProcessTestCase", self.device_type)


class TestFSDP(FSDPTest):
    @property
    def world_size(self):
        return 2

    def test_family(self):
        model = fully_shard(torch.nn.Linear(4, 4, device=DEVICE_TYPE))
        model(torch.ones(2, 4, device=DEVICE_TYPE)).sum().backward()
        _say(self, "FSDPTest", DEVICE_TYPE)


class TestDTensor(DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    def test_family(self):
        mesh = self.build_device_mesh()
        full = torch.arange(8.0, device=self.device_type).reshape(4, 2)
        d = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(d.full_tensor(), full)
        _say(self, "DTensorTestBase", mesh.device_type)


class TestMultiProcContinuous(MultiProcContinuousTest):
    world_size = 2

    def test_family(self):
        _say(self, "MultiProcContinuousTest", self.device)


class TestDTensorContinuous(DTensorContinuousTestBase):
    world_size = 2

    def test_family(self):
        mesh = self.build_device_mesh()
        _say(self, "DTensorContinuousTestBase", mesh.device_type)


class TestFSDPContinuous(FSDPTestContinuous):
    world_size = 2

    def test_family(self):
        _say(self, "FSDPTestContinuous", get_devtype())


class TestShardedTensor(ShardedTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms(init_rpc=False)  # upstream's default backend: NCCL
    def test_family(self):
        spec = ChunkShardingSpec(dim=0, placements=["rank:0/cpu", "rank:1/cpu"])
        st = sharded_tensor.ones(spec, 4, 2)
        self.assertEqual(len(st.local_shards()), 1)
        _say(self, "ShardedTensorTestBase", "cpu")


class TestDistributedBase(DistributedTestBase):
    @property
    def world_size(self):
        return 2

    def test_family(self):
        device = get_devtype().type
        self.create_pg(device)
        _say(self, "DistributedTestBase", device)


class TestDynamoMultiProc(DynamoDistributedMultiProcTestCase):
    def test_family(self):
        device = torch.accelerator.current_accelerator(check_available=True)
        device = device.type if device is not None else "cpu"
        self.create_pg(device)
        f = torch.compile(lambda x: x + 1, backend="eager")
        self.assertEqual(f(torch.zeros(1)).item(), 1.0)
        _say(self, "DynamoDistributedMultiProcTestCase", device)


class TestDynamoSingleProc(DynamoDistributedSingleProcTestCase):
    def test_family(self):
        _say(self, "DynamoDistributedSingleProcTestCase", self.device)

    @requires_nccl()
    def test_nccl(self):
        print("NCCL-RAN")  # only where NCCL can run: a GPU, and torch built with it


class TestMultiThreaded(MultiThreadedTestCase):
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_threads()

    def test_family(self):
        _say(self, "MultiThreadedTestCase", DEVICE_TYPE)


class TestFSDPMultiThread(FSDPTestMultiThread):
    @property
    def world_size(self):
        return 2

    def test_family(self):
        model = fully_shard(torch.nn.Linear(4, 4))
        self.assertEqual(model.weight.to_local().shape, (2, 4))
        _say(self, "FSDPTestMultiThread", DEVICE_TYPE)


class TestDTensorOp(DTensorOpTestBase):
    @property
    def world_size(self):
        return 2

    def test_family(self):
        mesh = self.build_device_mesh()
        _say(self, "DTensorOpTestBase", mesh.device_type)


class TestLocalDTensor(LocalDTensorTestBase):  # upstream's default world of 4
    @with_comms
    def test_family(self):
        mesh = self.build_device_mesh()
        with self._get_local_tensor_mode():  # a class derived directly enters it itself, as upstream's
            full = torch.arange(8.0, device=self.device_type).reshape(4, 2)
            d = distribute_tensor(full, mesh, [Shard(0)])
            self.assertEqual(d.full_tensor(), full)
        print(f"FAMILY LocalDTensorTestBase device={mesh.device_type} backend={dist.get_backend()}")


if __name__ == "__main__":
    run_tests()
