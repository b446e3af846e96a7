"""Upstream's newest idioms, as upstream writes them: a DTensorTestBase class and its local-tensor twin made by
create_local_tensor_test_class, a class whose MRO mixes upstream's LocalDTensorTestBase with the harness's
DTensorTestBase (what an older harness.port left), and skips that mean "needs a GPU" in several wordings."""
import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.testing._internal.distributed._tensor.common_dtensor import (
    LocalDTensorTestBase as UpstreamLocalDTensorTestBase,
)

from harness import DTensorTestBase, create_local_tensor_test_class, run_tests, with_comms


class TestShards(DTensorTestBase):
    @with_comms
    def test_shard_and_gather(self):
        mesh = self.build_device_mesh()
        full = torch.arange(16.0).reshape(8, 2)
        d = distribute_tensor(full, mesh, [Shard(0)])
        self.assertEqual(d.full_tensor(), full)
        self.assertEqual(d.redistribute(mesh, [Replicate()]).to_local(), full)
        print(f"CX-LOCAL pid={os.getpid()} rank_type={type(self.rank).__name__} ws={self.world_size} "
              f"backend={dist.get_backend()} local_rows={d.to_local().shape[0]}")

    @with_comms
    def test_wrong_on_purpose(self):
        mesh = self.build_device_mesh()
        d = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        self.assertEqual(d.full_tensor().sum().item(), 17.0)  # CX-LOCAL-FAIL: 16, on every rank

    def test_not_enough_cuda(self):
        self.skipTest("Not enough CUDA devices")  # upstream's own words, in a @parametrize("device") test

    def test_gpu_wording(self):
        self.skipTest("this test wants a GPU with bf16")  # words no list of upstream's phrasings has

    def test_flaky_on_rocm(self):
        self.skipTest("flaky on ROCm")  # not about a missing GPU: not counted

    def test_needs_zstandard(self):
        self.skipTest("needs zstandard")  # not about a GPU: not counted

    @with_comms
    def test_subtests(self):
        self.run_subtests({"device": ["cpu", "cuda"]}, self._sub)

    def _sub(self, device):
        t = torch.ones(2, device=device)  # CX-LOCAL-CUDA
        self.assertEqual(t.sum().item(), 2.0)


TestShardsWithLocalTensor = create_local_tensor_test_class(
    TestShards,
    skipped_tests=["test_needs_zstandard"],
)

# What harness.port made of upstream's twin before it mapped create_local_tensor_test_class: upstream's
# LocalDTensorTestBase first, the harness's DTensorTestBase after it.
TestMixed = type("TestMixed", (UpstreamLocalDTensorTestBase, DTensorTestBase),
                 {"test_world": lambda self: print(f"CX-MIXED pid={os.getpid()}"), "__module__": __name__})


if __name__ == "__main__":
    run_tests()
