"""Upstream's decorator arguments: with_comms(eager_init=, backend=, init_rpc=), with_temp_dir without a group."""
import os
import unittest

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed import rpc

from harness import (DTensorTestBase, MultiProcessTestCase, ShardedTensorTestBase, run_tests, skip_if_lt_x_gpu,
                     with_comms, with_temp_dir)


def _plus(a, b):
    return a + b


class TestAWithComms(DTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms(eager_init=True)
    def test_eager_init(self):
        print(f"EAGER rank={self.rank} init={int(dist.is_initialized())} backend={dist.get_backend()}")

    @with_comms(backend="cpu:gloo,cuda:nccl")
    def test_backend_per_device(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"PERDEVICE rank={self.rank} sum={int(t.item())}")


class TestBShardedComms(ShardedTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms(init_rpc=False, backend="gloo")
    def test_no_rpc(self):
        print(f"NORPC rank={self.rank} backend={dist.get_backend()} rpc={int(rpc.api._is_current_rpc_agent_set())}")

    @with_comms(init_rpc=True, backend="gloo")
    def test_rpc(self):
        peer = f"worker{(self.rank + 1) % self.world_size}"
        got = rpc.rpc_sync(peer, _plus, args=(self.rank, 10))
        print(f"RPC rank={self.rank} got={got}")


class TestCTempDirNoGroup(MultiProcessTestCase):
    @with_temp_dir
    def test_own_dir_per_rank(self):
        # DCP's no_dist writers each write a full checkpoint: in one shared directory they would race.
        state = {"w": torch.full((4,), float(self.rank))}
        dcp.save(state, checkpoint_id=self.temp_dir, no_dist=True)
        loaded = {"w": torch.zeros(4)}
        dcp.load(loaded, checkpoint_id=self.temp_dir, no_dist=True)
        self.assertEqual(loaded["w"], torch.full((4,), float(self.rank)))
        print(f"OWNDIR rank={self.rank} path={self.temp_dir} init={int(dist.is_initialized())}")

    @with_comms
    @with_temp_dir
    def test_shared_dir_with_group(self):
        print(f"SHAREDDIR rank={self.rank} path={self.temp_dir}")


class TestDPlainTestCase(unittest.TestCase):
    @skip_if_lt_x_gpu(2)
    def test_not_a_harness_test(self):
        print("FIXTURE-PLAIN-RAN")


class TestEPlainTempDir(unittest.TestCase):
    @with_temp_dir
    def test_temp_dir_single_process(self):
        # no ranks: the decorator itself makes the directory, as upstream's does without a group
        print(f"PLAINDIR pid={os.getpid()} exists={int(os.path.isdir(self.temp_dir))}")


if __name__ == "__main__":
    run_tests()
