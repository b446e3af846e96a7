"""Upstream's ``DistributedTestBase`` and its dynamo classes (``DynamoDistributedMultiProcTestCase``,
``DynamoDistributedSingleProcTestCase``): the multi-process ones on the harness's reused ranks."""
from __future__ import annotations

import os
import tempfile
import unittest
from typing import Any

from harness.classes.case import MultiProcessTestCase
from harness.shared.config import settings
from harness.shared.errors import UsageError
from harness.shared.placement import choose_placement
from harness.testing.assertions import TestCase

__all__ = ["DistributedTestBase", "DynamoDistributedMultiProcTestCase", "DynamoDistributedSingleProcTestCase"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


class DistributedTestBase(MultiProcessTestCase):
    """Upstream's ``DistributedTestBase``: the test makes its own group with ``self.create_pg(device)``
    (``self.backend(device)`` picks the backend); the harness tears it down after the test, and the rank
    goes on to the next test. Where the ranks run on CPU for want of GPUs, ``backend("cuda")`` is gloo.

    Example::

        class TestAllReduce(DistributedTestBase):
            def test_sum(self):
                pg = self.create_pg("cpu")
                t = torch.ones(1)
                dist.all_reduce(t, group=pg)
    """

    def backend(self, device: str) -> str:  # type: ignore[override]  # upstream's: a method of the device
        if "cuda" in str(device) and self._harness_placement is not None and "nccl" in self._harness_placement.backend:
            return "nccl"
        for accelerator, name in (("hpu", "hccl"), ("xpu", "xccl")):
            if accelerator in str(device):
                return name
        return "gloo"

    def _harness_asked_backend(self) -> str | None:
        return None  # ``backend`` is a method of the device here, not a class-wide choice

    def create_pg(self, device: str, world_size: int | None = None) -> Any:
        """Make the default process group for ``device`` on this rank (a FileStore rendezvous), and return it."""
        import torch
        import torch.distributed as dist

        if self.file_name is None:
            raise UsageError(f"{self.id()}: create_pg() runs inside a rank (in the test body or setUp)")
        size = self.world_size if world_size is None else world_size
        backend = self.backend(device)
        store = dist.FileStore(self.file_name, size)
        dist.init_process_group(backend=backend, world_size=size, rank=self.rank, store=store)
        if backend in ("nccl", "xccl"):
            accelerator = torch.accelerator.current_accelerator()
            torch.accelerator.set_device_index(torch.device(accelerator.type, torch.cuda.current_device()
                                                            if accelerator.type == "cuda" else self.rank))
        return dist.distributed_c10d._get_default_group()

    def rank_to_device(self, device: str) -> dict[int, list[int]]:
        import torch

        count = max(1, torch.get_device_module(device).device_count())
        return {i: [i % count] for i in range(self.world_size)}


class DynamoDistributedMultiProcTestCase(DistributedTestBase):
    """Upstream's dynamo multi-process class: one rank per accelerator (on fewer, the world a machine with
    enough would have, on CPU). Between two tests a rank's dynamo caches and counters are reset when the
    test compiled anything (``docs/isolation.md``), as a fresh process would have them."""

    @property
    def world_size(self) -> int:
        import torch

        return torch.accelerator.device_count()


class DynamoDistributedSingleProcTestCase(TestCase):
    """Upstream's single-process dynamo class: a world of one rank for the whole class (``setUpClass``),
    on a GPU over NCCL where there is one (``harness.shared.placement``, as every class), else on CPU over
    gloo (a CUDA build of torch on a machine without GPUs too); ``self.rank``, ``self.device``,
    ``self.device_ids``. Dynamo is reset before and after each test.

    Example::

        class TestCompileDDP(DynamoDistributedSingleProcTestCase):
            def test_ddp(self):
                model = DDP(nn.Linear(4, 4).to(self.device), device_ids=self.device_ids)
    """

    rank = 0
    device = "cpu"
    device_ids: list[int] | None = None
    _harness_store_dir: str | None = None

    @classmethod
    def setUpClass(cls) -> None:
        import torch.distributed as dist

        super().setUpClass()
        # Where a world of one runs, from the GPUs there are (not from the accelerator torch was built for: a
        # CUDA build on a machine without GPUs has NCCL compiled in, and NCCL refuses to start without a GPU).
        placement = choose_placement(1, 0, settings().device)
        if placement.skip:
            raise unittest.SkipTest(placement.skip)
        cls.rank = 0
        cls.device = f"{placement.device_type}:{cls.rank}"
        cls.device_ids = None if placement.device_type == "cpu" else [cls.rank]
        cls._harness_store_dir = tempfile.mkdtemp(prefix="harness-single-proc-")
        store = dist.FileStore(os.path.join(cls._harness_store_dir, "store"), 1)
        dist.init_process_group(placement.backend, rank=0, world_size=1, store=store)

    @classmethod
    def tearDownClass(cls) -> None:
        import shutil

        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        if cls._harness_store_dir:
            shutil.rmtree(cls._harness_store_dir, ignore_errors=True)
        super().tearDownClass()

    def setUp(self) -> None:
        super().setUp()
        _reset_dynamo()

    def tearDown(self) -> None:
        _reset_dynamo()
        super().tearDown()


def _reset_dynamo() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
