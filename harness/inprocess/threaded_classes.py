"""Upstream's multi-threaded base classes, ``MultiThreadedTestCase``, ``FSDPTestMultiThread``, ``DTensorOpTestBase``: each
rank a thread of the process that runs the test (their run: ``harness.inprocess.threaded``)."""
from __future__ import annotations

import unittest
from typing import Any

from harness.classes.case import MultiProcessTestCase

__all__ = ["MultiThreadedTestCase", "FSDPTestMultiThread", "DTensorOpTestBase"]


class MultiThreadedTestCase(MultiProcessTestCase):
    """Upstream's ``MultiThreadedTestCase``: each rank a thread of the process that runs the test (harness.inprocess.threaded).

    As upstream: ``setUp`` and ``tearDown`` run in the main thread (``self.rank`` is ``MAIN_THREAD_RANK``);
    ``setUp`` calling ``self._spawn_threads()`` starts one thread per rank, each with its own instance of
    the test and its own default group (an in-process group, harness.inprocess.threaded_pg), which runs
    ``perThreadSetUp``, the test method and ``perThreadTearDown``. The threads share the process: its
    modules, its one RNG (compare on one rank with ``assertEqualOnRank``). A thread that fails, hangs in a
    collective or calls another collective than its peers is reported as a failing rank is.

    Example::

        class TestCollectives(MultiThreadedTestCase):
            def setUp(self):
                super().setUp()
                self._spawn_threads()

            def test_broadcast(self):
                t = torch.tensor([self.rank])
                dist.broadcast(t, src=0)
                self.assertEqual(t.item(), 0)
    """

    #: the harness runs this class's tests in the process that runs the test, never on rank processes
    _harness_local = True
    _harness_threaded = True
    _harness_threaded_run: Any = None
    _harness_in_thread = False
    MAIN_THREAD_RANK = -1

    @property
    def world_size(self) -> int:
        return 4

    def setUp(self) -> None:
        super().setUp()
        if not self._harness_in_thread:
            self.rank = self.MAIN_THREAD_RANK
        self.threads: list[Any] = []

    def _spawn_threads(self) -> None:
        """Start the thread ranks (call it from ``setUp``); each runs ``perThreadSetUp``, the test, ``perThreadTearDown``."""
        from harness.inprocess.threaded import spawn_threads

        spawn_threads(self)

    def perThreadSetUp(self) -> None:
        pass

    def perThreadTearDown(self) -> None:
        pass

    def assertEqualOnRank(self, x: Any, y: Any, msg: Any = None, *, rank: int = 0) -> None:
        if self.rank == rank:
            self.assertEqual(x, y, msg)

    def assertNotEqualOnRank(self, x: Any, y: Any, msg: Any = None, *, rank: int = 0) -> None:
        if self.rank == rank:
            self.assertNotEqual(x, y, msg)

    def run(self, result: unittest.TestResult | None = None) -> unittest.TestResult | None:
        from harness.inprocess.threaded import run_threaded

        return run_threaded(self, result)


class FSDPTestMultiThread(MultiThreadedTestCase):
    """Upstream's ``FSDPTestMultiThread``: one thread rank per GPU, ``run_subtests``.

    On a machine with fewer GPUs than the class's ``world_size`` asks, the threads run on CPU with the
    ranks of a machine that has them (``skip_if_lt_x_gpu``'s number, else 4), as the harness's other classes.

    Example::

        class TestInit(FSDPTestMultiThread):
            @property
            def world_size(self):
                return 2

            def test_shard(self):
                fully_shard(model)
    """

    @property
    def world_size(self) -> int:
        import torch

        return torch.cuda.device_count()  # as upstream; on too few GPUs, the ranks of a machine with enough

    def setUp(self) -> None:
        super().setUp()
        self._spawn_threads()


class DTensorOpTestBase(MultiThreadedTestCase):
    """Upstream's ``DTensorOpTestBase``: 4 thread ranks with the default group up, ``build_device_mesh()``.

    Example::

        class TestOps(DTensorOpTestBase):
            def test_add(self):
                mesh = self.build_device_mesh()
                d = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
                self.assertEqual((d + d).full_tensor(), torch.full((4, 4), 2.0))
    """

    def setUp(self) -> None:
        super().setUp()
        self._spawn_threads()

    def build_device_mesh(self) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device_type, (self.world_size,))
