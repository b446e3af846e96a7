"""Base-class members upstream tests touch: _spawn_processes, MAIN_PROCESS_RANK, init_method, DTensor helpers."""
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from harness import DTensorTestBase, FSDPTest, MultiProcessTestCase, run_tests, with_comms


class TestAMembers(MultiProcessTestCase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()  # upstream's setUp starts the ranks here; in a rank it does nothing

    def test_members(self):
        self.assertEqual(self.MAIN_PROCESS_RANK, -1)
        self.assertTrue(self.destroy_pg_upon_exit)
        self.assertEqual(self._current_test_name(), "test_members")
        # a test that makes its own group, as upstream's do with self.init_method
        dist.init_process_group("gloo", init_method=self.init_method, rank=self.rank, world_size=self.world_size)
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"OWNPG rank={self.rank} sum={int(t.item())} method={self.init_method.split(':')[0]}")


    def test_upstream_skip_exit_code(self):
        import sys

        sys.exit(77)  # upstream's TEST_SKIPS["multi-gpu-2"].exit_code


class TestBFSDPMembers(FSDPTest):
    def test_fsdp_members(self):
        self.assertFalse(self.destroy_pg_upon_exit)
        print(f"FSDPMEMBERS rank={self.rank}")


class TestCDTensorHelpers(DTensorTestBase):
    @with_comms
    def test_seed_for_rank(self):
        self.init_manual_seed_for_rank()
        got = [None] * self.world_size
        dist.all_gather_object(got, torch.rand(1).item())
        print(f"SEEDS rank={self.rank} distinct={len(set(got))}")

    @with_comms
    def test_op_helpers(self):
        mesh = self.build_device_mesh()
        self._test_op(mesh, torch.add, torch.arange(8.0).reshape(4, 2), torch.ones(4, 2))
        a = distribute_tensor(torch.arange(16.0).reshape(4, 4), mesh, [Shard(0)])
        self._test_op_on_dtensor(torch.mul, a, 2)
        print(f"OPHELPERS rank={self.rank}")

    @with_comms
    def test_op_helper_catches_a_wrong_op(self):
        mesh = self.build_device_mesh()

        def wrong(x):  # right on a plain tensor, wrong on a sharded one: each shard is summed on its own
            return x.sum() if not isinstance(x, DTensor) else DTensor.from_local(x.to_local().sum().reshape(()),
                                                                                  mesh, [Replicate()])

        self._test_op(mesh, wrong, torch.arange(8.0))


if __name__ == "__main__":
    run_tests()
