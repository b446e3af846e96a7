"""Upstream's other distributed base classes on reused rank processes: the continuous classes and the sharded-tensor one.

(The multi-threaded ones run as threads: ``harness.inprocess.threaded_classes``.)
"""
from __future__ import annotations

import datetime
from typing import Any

from harness.classes.case import DTensorTestBase, FSDPTest, MultiProcessTestCase
from harness.shared.errors import UsageError

__all__ = ["MultiProcContinuousTest", "DTensorContinuousTestBase", "FSDPTestContinuous", "ShardedTensorTestBase",
           "check_sharded_parity"]



class _ContinuousMixin:
    """What upstream's continuous tests expect: a group for every test, ``world_size = -2`` for one rank per GPU."""

    # Upstream starts one set of processes per class for speed; every harness class already reuses its
    # ranks, so these classes only keep upstream's names and defaults. One difference: a failure does
    # not skip the class's remaining tests (upstream's "poison pill"); each test gets a clean group.
    world_size: int = -2  # type: ignore[assignment]
    timeout: Any = datetime.timedelta(seconds=120)
    _harness_auto_comms = True
    _harness_world_from_devices = True

    @classmethod
    def backend_str(cls) -> str | None:
        """Override to ask for a backend (e.g. "gloo"); None: the device's default."""
        return None

    @classmethod
    def opts(cls, high_priority_stream: bool = False) -> Any:
        return None

    @property
    def backend(self) -> str:
        asked = type(self).backend_str()
        if asked:
            return asked
        return MultiProcessTestCase.backend.fget(self)  # type: ignore[attr-defined]

    @property
    def pg(self) -> Any:
        return self.process_group  # type: ignore[attr-defined]


class MultiProcContinuousTest(_ContinuousMixin, MultiProcessTestCase):
    """Upstream's ``MultiProcContinuousTest``: every test runs with the default group up; ``self.pg``.

    ``world_size = -2`` (the default) means one rank per GPU; on a machine without enough GPUs the test
    runs on CPU/gloo with the ranks of a machine that has them (``skip_if_lt_x_gpu``'s number, else 4).

    Example::

        class TestOps(MultiProcContinuousTest):
            world_size = 2

            def test_all_reduce(self):
                t = torch.ones(1)
                dist.all_reduce(t, group=self.pg)
                self.assertEqual(t.item(), 2.0)
    """


class DTensorContinuousTestBase(_ContinuousMixin, DTensorTestBase):  # type: ignore[misc]
    """Upstream's ``DTensorContinuousTestBase``: ``DTensorTestBase``'s helpers with a group for every test.

    Example::

        class TestRedistribute(DTensorContinuousTestBase):
            def test_replicate(self):
                mesh = self.build_device_mesh()
                ...
    """


class FSDPTestContinuous(_ContinuousMixin, FSDPTest):  # type: ignore[misc]
    """Upstream's ``FSDPTestContinuous``: ``FSDPTest``'s helpers with a group for every test, on reused ranks.

    ``world_size`` defaults to one rank per GPU (upstream's ``DEVICE_COUNT``); on a machine without enough
    GPUs the test runs on CPU/gloo with the ranks of a machine that has them (``skip_if_lt_x_gpu``'s
    number, else 4). Upstream's barriers around each test are not needed: every test gets a clean group.

    Example::

        class TestGradAcc(FSDPTestContinuous):
            @property
            def world_size(self):
                return 2

            def test_grad_acc(self):
                self.run_subtests({"use_orig_params": [False, True]}, self._test_grad_acc)
    """


class ShardedTensorTestBase(MultiProcessTestCase):
    """Upstream's ``ShardedTensorTestBase``: 4 ranks, ``init_pg`` / ``init_rpc`` / ``init_comms``.

    Use it with ``harness.with_comms(init_rpc=False, backend="gloo")`` as upstream's sharded-tensor
    ``with_comms``; the harness makes the group.

    Example::

        class TestSave(ShardedTensorTestBase):
            @with_comms(init_rpc=False, backend="gloo")
            def test_save(self):
                ...
    """

    @property
    def world_size(self) -> int:
        return 4

    def init_pg(self, backend: str = "nccl") -> None:
        """Make the default group (a test without ``@with_comms`` that makes its own)."""
        import torch.distributed as dist

        if dist.is_initialized():
            return
        if backend not in ("nccl", "gloo", "mpi", "hccl", "xccl"):
            raise UsageError(f"{self.id()}: init_pg(backend={backend!r}): use one of nccl, gloo, mpi, hccl, xccl")
        dist.init_process_group(backend=self._harness_placement.backend_for(backend),
                                world_size=self.world_size,
                                rank=self.rank, init_method=f"file://{self.file_name}")

    def init_rpc(self) -> None:
        from torch.distributed import rpc

        options = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{self.file_name}.rpc")
        if self.device_type == "cuda":
            import torch

            gpus = max(1, torch.cuda.device_count())  # ranks that share GPUs: rank r is on cuda:r % gpus
            mine = self.rank % gpus
            for rank in range(self.world_size):
                if rank != self.rank:
                    options.set_device_map(f"worker{rank}", {mine: rank % gpus})
        rpc.init_rpc(name=f"worker{self.rank:d}", rank=self.rank, world_size=self.world_size,
                     rpc_backend_options=options)

    def init_comms(self, init_rpc: bool = True, backend: str = "nccl") -> None:
        if init_rpc:
            self.init_rpc()
        self.init_pg(backend=backend)

    def destroy_comms(self, destroy_rpc: bool = True) -> None:
        import torch.distributed as dist
        from torch.distributed import rpc

        dist.barrier()
        if destroy_rpc:
            rpc.shutdown()
        dist.destroy_process_group()

    def assert_sharded_tensor_equal(self, st1: Any, st2: Any) -> None:
        """Two ShardedTensors: the same local shards, metadata and sharding spec."""
        shards1, shards2 = st1.local_shards(), st2.local_shards()
        self.assertEqual(len(shards1), len(shards2))
        for a, b in zip(shards1, shards2):
            self.assertEqual(a.tensor, b.tensor)
            self.assertEqual(a.metadata, b.metadata)
        self.assertEqual(st1.metadata(), st2.metadata())
        self.assertEqual(st1.sharding_spec(), st2.sharding_spec())
        if _has_rrefs(st1) or _has_rrefs(st2):  # made with init_rrefs=True (under RPC)
            self.assertEqual(len(st1.remote_shards()), len(st2.remote_shards()))


def _has_rrefs(st: Any) -> bool:
    try:
        st.remote_shards()
    except RuntimeError:
        return False
    return True


def check_sharded_parity(test: Any, replicated_module: Any, sharded_module: Any,
                         prefixes_to_ignore: tuple[str, ...] = ()) -> None:
    """Each parameter (and gradient) of an FSDP2-sharded module equals the replicated one, sharded alike.

    Example::

        check_sharded_parity(self, ref_model, model)
    """
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    replicated = list(replicated_module.named_parameters())
    sharded = list(sharded_module.named_parameters())
    test.assertEqual(len(replicated), len(sharded), "the modules have different numbers of parameters")
    for (name, param), (sharded_name, sharded_param) in zip(replicated, sharded):
        for prefix in prefixes_to_ignore:
            sharded_name = sharded_name.replace(prefix, "")
        test.assertEqual(name, sharded_name)
        test.assertIsInstance(sharded_param, DTensor)
        mesh, placements = sharded_param.device_mesh, sharded_param.placements
        if tuple(placements) == (Shard(0), Shard(0)):
            raise AssertionError("FSDP's (Shard(0), Shard(0)) layout differs from distribute_tensor(); "
                                 "check_sharded_parity cannot compare it")
        test.assertEqual(sharded_param.to_local(), distribute_tensor(param, mesh, placements).to_local())
        if param.grad is None:
            test.assertIsNone(sharded_param.grad)
            continue
        test.assertIsInstance(sharded_param.grad, DTensor)
        test.assertEqual(sharded_param.grad.to_local(), distribute_tensor(param.grad, mesh, placements).to_local())
