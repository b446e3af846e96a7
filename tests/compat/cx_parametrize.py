"""parametrize / instantiate_parametrized_tests / subtest on every class family, with the other decorators."""
import unittest

import torch
import torch.distributed as dist
from hypothesis import given, strategies as st

from harness import (DTensorOpTestBase, DTensorTestBase, FSDPTest, FSDPTestContinuous, LocalDTensorTestBase,
                     MultiProcessTestCase, instantiate_parametrized_tests, parametrize, run_tests, skip_if_lt_x_gpu,
                     subtest, with_comms, with_temp_dir)


@instantiate_parametrized_tests
class TestARanks(MultiProcessTestCase):
    @with_comms
    @parametrize("n", [1, 3])
    def test_sum(self, n):
        t = torch.full((1,), float(n))
        dist.all_reduce(t)
        print(f"SUM rank={self.rank} n={n} got={int(t.item())}")

    @parametrize("dtype", [torch.float32, torch.bfloat16])
    @parametrize("flag", [False, True], name_fn=lambda flag: "on" if flag else "off")
    @with_comms
    @with_temp_dir
    def test_stacked(self, dtype, flag):
        print(f"STACKED rank={self.rank} name={self._testMethodName} dtype={dtype} flag={flag} "
              f"tmp={int(bool(self.temp_dir))}")

    @skip_if_lt_x_gpu(2)
    @parametrize("x, y", [subtest((1, 2), name="double"),
                          subtest((1, 3), name="fails", decorators=[unittest.expectedFailure])])
    @with_comms
    def test_sub(self, x, y):
        print(f"SUB rank={self.rank} name={self._testMethodName} device={self.device_type}")
        self.assertEqual(y, 2 * x)

    @with_comms
    @parametrize("k", [1, 2])
    @given(seed=st.integers(0, 3))
    def test_given(self, k, seed):
        t = torch.tensor([float(seed)])
        dist.broadcast(t, 0)
        self.assertEqual(int(t.item()), seed)
        print(f"GIVEN rank={self.rank} k={k} seed={seed}")

    @given(seed=st.integers(0, 3))
    @parametrize("fn", [len, lambda x: x])
    @with_comms
    def test_given_outer(self, fn, seed):
        print(f"GIVENOUTER rank={self.rank} fn={fn.__name__} seed={seed}")


class TestBFSDP(FSDPTest):
    @parametrize("world", ["a", "b"])
    def test_fsdp(self, world):
        print(f"FSDP rank={self.rank} world={world} pg={int(dist.is_initialized())}")


instantiate_parametrized_tests(TestBFSDP)


@instantiate_parametrized_tests
class TestCContinuous(FSDPTestContinuous):
    @classmethod
    def _world_size(cls):
        return 2

    @parametrize("p", [0.5])
    def test_cont(self, p):
        print(f"CONT rank={self.rank} p={p}")


@instantiate_parametrized_tests
class TestDThreads(DTensorOpTestBase):
    @property
    def world_size(self):
        return 2

    @parametrize("m", [2, 4])
    def test_threads(self, m):
        t = torch.ones(1) * m
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2 * m)
        print(f"THREADS rank={self.rank} m={m}")


@instantiate_parametrized_tests
class TestELocal(LocalDTensorTestBase):
    @property
    def world_size(self):
        return 2

    @with_comms
    @parametrize("m", [5])
    def test_local(self, m):
        print(f"LOCAL m={m} ws={self.world_size}")


if __name__ == "__main__":
    run_tests()
