"""Upstream's threaded classes, run as threads: ones that pass, and ones that fail each way a thread rank can fail."""
import os
import threading

import torch
import torch.distributed as dist

from harness import DTensorOpTestBase, MultiThreadedTestCase, run_tests, skip_if_lt_x_gpu

SHARED = {}  # module state: the thread ranks of one test share it, as upstream's threads do


class _FourThreads(MultiThreadedTestCase):
    timeout = 3  # the hang below waits this long

    @property
    def world_size(self):
        return 4

    def setUp(self):
        super().setUp()
        self._spawn_threads()


class TestAPasses(_FourThreads):
    timeout = 60  # they pass: 3 s, the hangs' limit, is too little for a loaded machine's first collective

    def test_threads_share_module_state(self):
        if self.rank == 0:
            SHARED["from_rank_0"] = os.getpid()
        dist.barrier()
        t = torch.tensor([float(self.rank)])
        dist.all_reduce(t)
        self.assertEqual(SHARED["from_rank_0"], os.getpid())  # one process, one module
        self.assertEqual(t.item(), 6.0)
        print(f"CX-THREADS rank={self.rank} pid={os.getpid()} sum={int(t.item())}")

    def test_env_change_a(self):
        os.environ["CX_THREADED_LEAK"] = "set by test_env_change_a"

    def test_env_change_b(self):
        # the harness put the environment back after test_env_change_a, as it does for rank processes
        self.assertNotIn("CX_THREADED_LEAK", os.environ)


class TestBFails(_FourThreads):
    def test_fails_on_rank_2(self):
        if self.rank == 2:
            self.assertEqual(1, 2, "CX-THREAD-FAIL")
        dist.barrier()

    def test_hangs_in_a_collective(self):
        if self.rank != 1:
            dist.all_reduce(torch.ones(1))

    def test_mismatched_collectives(self):
        t = torch.ones(1)
        if self.rank == 0:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)


class TestCPerThreadSetUpRaises(_FourThreads):
    def perThreadSetUp(self):
        if self.rank == 3:
            raise RuntimeError("CX-SETUP-RAISES")

    def test_never_runs_on_rank_3(self):
        dist.barrier()


class TestEStuckOutsideCollectives(_FourThreads):
    timeout = 3

    def test_rank_1_never_returns(self):
        if self.rank == 1:
            threading.Event().wait(60)  # CX-STUCK-HERE: a thread cannot be killed; it is left behind
        dist.all_reduce(torch.ones(1))


class TestFWrittenForGpus(_FourThreads):
    timeout = 60

    @skip_if_lt_x_gpu(2)
    def test_fails_on_cpu(self):
        # upstream skips it without GPUs; the harness runs its threads on CPU, where it fails with the GPU note
        dist.barrier()
        if not torch.cuda.is_available():
            self.fail("CX-GPU-ONLY")


class TestDDTensorOps(DTensorOpTestBase):
    def test_add(self):
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = self.build_device_mesh()
        d = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        self.assertEqual((d + d).full_tensor(), torch.full((4, 4), 2.0))
        print(f"CX-DTENSOR rank={self.rank} pid={os.getpid()} ws={self.world_size} local={tuple(d.to_local().shape)[0]}")


if __name__ == "__main__":
    run_tests()
