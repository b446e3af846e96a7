"""The test classes (``MultiProcessTestCase``, ``FSDPTest``, ``DTensorTestBase``); in a rank, their body runs."""
from __future__ import annotations

import functools
import os
import sys
import unittest
from typing import Any, Callable

from harness.testing.assertions import DistributedAssertions
from harness.testing.decorators import markers
from harness.shared.errors import UsageError
from harness.shared.placement import Placement
from harness.shared.protocol import Task
from harness.parent.run import Run, run_for

__all__ = ["MultiProcessTestCase", "FSDPTest", "DTensorTestBase"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


#: the test this rank runs now (the last one bound): helpers called with only a rank, such as upstream's
#: ``_dynamo_dist_per_rank_init(rank, world_size)``, find its rendezvous file through it
_bound: "MultiProcessTestCase | None" = None


def bound_test() -> "MultiProcessTestCase | None":
    """The test this rank process runs now; None outside a rank."""
    return _bound


class MultiProcessTestCase(DistributedAssertions):
    """A TestCase whose test methods run once in each of ``world_size`` rank processes.

    In a rank, ``self.rank``, ``self.world_size``, ``self.device_type`` ("cuda" or "cpu"),
    ``self.device``, ``self.backend``, ``self.file_name`` (a FileStore path for tests that make their
    own process group) and, with ``@with_temp_dir``, ``self.temp_dir`` are set. ``setUp`` and
    ``tearDown`` run in every rank around the body.

    Example::

        class TestAllReduce(MultiProcessTestCase):
            @property
            def world_size(self) -> int:
                return 4

            @with_comms
            def test_sum(self):
                t = torch.ones(1, device=self.device) * self.rank
                dist.all_reduce(t)
                self.assertEqual(t.item(), sum(range(self.world_size)))
    """

    #: seconds one test may run; HARNESS_TIMEOUT, when set, wins (see harness.shared.config)
    timeout: float | None = None
    #: FSDPTest sets this: every test gets the default process group without @with_comms
    _harness_auto_comms = False
    #: the harness runs this class's tests on ranks (skip_if_lt_x_gpu checks it)
    _harness_test_class = True

    rank: int = -1
    temp_dir: str | None = None
    file_name: str | None = None
    #: how many times the world was started again for this test (@restarts; torchrun's TORCHELASTIC_RESTART_COUNT)
    restart_count: int = 0
    _harness_device_type: str | None = None
    _harness_placement: Placement | None = None  # where the rank runs: its RankContext's (harness.ranks.task)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        from harness.parent import template

        # A module of harness tests is being imported: its ranks will be wanted soon. Not for the harness's own
        # classes, one made once its module is imported (in a function: ranks only find the module's own
        # classes), or one that runs in this process (harness.inprocess.local).
        module = sys.modules.get(cls.__module__)
        importing = cls.__module__ == "__main__" or getattr(getattr(module, "__spec__", None), "_initializing", False)
        if importing and not (cls.__module__.startswith("harness.") or getattr(cls, "_harness_local", False)):
            template.warm()

    @property
    def world_size(self) -> int:
        return 2

    @property
    def device_type(self) -> str:
        if self._harness_device_type is None:
            raise UsageError(f"{self.id()}: device_type is only known inside a rank (in the test body, setUp or tearDown)")
        return self._harness_device_type

    @property
    def device(self) -> Any:
        import torch

        if self.device_type == "cuda":
            # the GPU the harness put this rank on: cuda:r % G in a pool, LOCAL_RANK's under torchrun
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    @property
    def backend(self) -> str:
        """The placement's backend: NCCL with one GPU per rank; gloo on CPU and on GPUs the ranks share."""
        if self._harness_placement is None:
            raise UsageError(f"{self.id()}: backend is only known inside a rank (in the test body, setUp or tearDown)")
        return self._harness_placement.backend

    def _harness_asked_backend(self) -> str | None:
        """The backend this class asks for by overriding ``backend`` (upstream style, in the test's words);
        None: it does not, and the placement's is taken as it is."""
        if type(self).backend is MultiProcessTestCase.__dict__["backend"]:
            return None
        return self.backend

    @property
    def process_group(self) -> Any:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise UsageError(f"{self.id()} [rank {self.rank}]: no process group; decorate the test with @with_comms "
                             "or derive from FSDPTest, which sets one up for every test")
        return dist.distributed_c10d._get_default_group()

    def run_subtests(self, subtest_config: dict[str, list[Any]], test_fn: Any, *args: Any, **kwargs: Any) -> None:
        """See :func:`harness.run_subtests`."""
        from harness.testing.subtests import run_subtests

        run_subtests(self, subtest_config, test_fn, *args, **kwargs)

    # ---- in a rank -------------------------------------------------------------------------------

    def _harness_unbind(self) -> None:
        """The test is over: no module global keeps it (nor, through its cleanups and its failure's traceback,
        the tensors its frames held) into the next test."""
        global _bound
        if _bound is self:
            _bound = None

    def _harness_bind(self, rank: int, task: Task, placement: Placement) -> None:
        """Make this instance the test on ``rank``, as ``task`` asks, where the rank runs (its ``placement``)."""
        global _bound
        _bound = self
        self.rank = rank
        self._harness_placement = placement
        self._harness_device_type = placement.device_type
        self.temp_dir = task.temp_dir
        self.file_name = task.file_name
        self.restart_count = task.attempt
        self._harness_in_rank = True
        if task.world_size:
            _pin_world_size(self, task.world_size)
        if task.temp_dir:
            fn = getattr(type(self), task.method)
            if not (markers(fn)["comms"] or self._harness_auto_comms):
                # Upstream's with_temp_dir gives each rank its own directory when no process group is up
                # (nothing to broadcast one path with); writers that assume that must not share one.
                self.temp_dir = os.path.join(task.temp_dir, f"rank{rank}")
                os.makedirs(self.temp_dir, exist_ok=True)

    # ---- upstream's MultiProcessTestCase members that ported tests touch ---------------------------

    #: the parent's rank in upstream's harness; a rank here is 0..world_size-1 and the parent runs no body
    MAIN_PROCESS_RANK = -1

    @property
    def destroy_pg_upon_exit(self) -> bool:
        """Upstream destroys the group after each test unless this is False; the harness keeps its own group
        for the next test and removes any group a test made itself, whatever this says."""
        return True

    @property
    def init_method(self) -> str:
        """``file://`` rendezvous for tests that make their own group, as upstream's ``FSDPTest.init_method``."""
        return f"file://{self.file_name}"

    def _spawn_processes(self) -> None:
        """Upstream's setUp calls this to start the ranks; here the parent already did, so it does nothing."""

    def _start_processes(self, proc: Any = None) -> None:
        """As ``_spawn_processes``: nothing to do inside a rank."""

    def _current_test_name(self) -> str:
        return self._testMethodName

    def is_master(self) -> bool:
        return self.rank == 0

    # ---- in the parent ---------------------------------------------------------------------------

    _harness_in_rank = False

    def run(self, result: unittest.TestResult | None = None) -> unittest.TestResult | None:
        if self._harness_in_rank:
            return super().run(result)
        from harness.parent.testrun import run_test

        name = self._testMethodName
        method = getattr(self, name)
        run = run_for(result)  # the entry point's run (settings, ranks, notes), else the process's default run
        from harness.judging.notes import short_id

        run.notes.harness_ran(short_id(self))  # this run() won in the MRO, whatever upstream base is there too
        _count_decorator_skip(self, method, run)

        @functools.wraps(method)
        def dispatch() -> None:
            __tracebackhide__ = True
            run_test(self, run, result)

        # The parent runs no setUp/tearDown (they belong to the ranks) and calls `dispatch` as the test.
        # Whatever the instance held under those names (pytest sets the test method on the instance and
        # deletes it afterwards) is put back as it was.
        missing = object()
        saved = {attr: self.__dict__.get(attr, missing) for attr in ("setUp", "tearDown", name)}
        self.setUp = self.tearDown = _nothing  # type: ignore[method-assign]
        setattr(self, name, dispatch)
        try:
            return super().run(result)
        finally:
            for attr, value in saved.items():
                if value is missing:
                    self.__dict__.pop(attr, None)
                else:
                    self.__dict__[attr] = value


def _nothing() -> None:
    pass


def _count_decorator_skip(test: MultiProcessTestCase, method: Any, run: Run) -> None:
    """A skip decorator on the test or its class (upstream's ``requires_nccl()``, ``skipIf(not TEST_CUDA, ...)``)
    skips before any rank runs: count it in the needs-CUDA line when its reason means a GPU or NCCL."""
    from harness.judging.notes import short_id
    from harness.judging.report import count_skip
    from harness.judging.verdict import skipped

    for holder in (type(test), method):
        if getattr(holder, "__unittest_skip__", False):
            test_id = short_id(test)
            count_skip(run.notes, test_id, skipped(test_id, str(getattr(holder, "__unittest_skip_why__", "") or "")))
            return


_PINNED: dict[tuple[type, int], type] = {}


def _pin_world_size(test: MultiProcessTestCase, world_size: int) -> None:
    """Make ``self.world_size`` in a rank say the parent's number, whatever the class computes it from.

    A ``world_size`` property that reads the device count would give 0 in a rank on a CPU machine; the
    instance becomes an instance of a subclass (same name, same id) whose ``world_size`` is the number.
    """
    cls = type(test)
    key = (cls, world_size)
    pinned = _PINNED.get(key)
    if pinned is None:
        pinned = type(cls.__name__, (cls,), {"world_size": world_size, "__module__": cls.__module__,
                                             "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
        _PINNED[key] = pinned
    test.__class__ = pinned


class FSDPTest(MultiProcessTestCase):
    """Upstream's FSDPTest: every test runs with the default process group up; ``self.process_group``.

    Example::

        class TestParity(FSDPTest):
            def test_parity(self):
                self.run_subtests({"use_orig_params": [False, True]}, self._test_parity)
    """

    _harness_auto_comms = True

    @property
    def destroy_pg_upon_exit(self) -> bool:
        return False

    def _check_cpu_offload(self, fsdp_model: Any, cpu_offload: Any) -> None:
        self.assertEqual(cpu_offload, fsdp_model.cpu_offload)

    def _check_backward_prefetch(self, fsdp_model: Any, backward_prefetch: Any) -> None:
        self.assertEqual(backward_prefetch, fsdp_model.backward_prefetch)

    def _check_forward_prefetch(self, fsdp_model: Any, forward_prefetch: Any) -> None:
        self.assertEqual(forward_prefetch, fsdp_model.forward_prefetch)


class DTensorTestBase(MultiProcessTestCase):
    """Upstream's DTensorTestBase: 4 ranks by default, ``@with_comms`` tests, ``build_device_mesh()``.

    Example::

        class TestMesh(DTensorTestBase):
            @with_comms
            def test_mesh(self):
                mesh = self.build_device_mesh()
                self.assertEqual(mesh.size(), self.world_size)
    """

    @property
    def world_size(self) -> int:
        return 4

    def build_device_mesh(self) -> Any:
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device_type, (self.world_size,))

    def init_pg(self, *args: Any, **kwargs: Any) -> None:
        """Upstream calls this from with_comms; here the harness has already made (or kept) the group."""
        import torch.distributed as dist

        if not dist.is_initialized():
            raise UsageError(f"{self.id()}: init_pg() needs @with_comms on the test; the harness owns the group")

    def destroy_pg(self, *args: Any, **kwargs: Any) -> None:
        """The harness keeps the group for the next test and tears it down itself; nothing to do."""

    @property
    def is_local_tensor_enabled(self) -> bool:
        return False

    def init_manual_seed_for_rank(self) -> None:
        """Each rank its own seed (its rank), as upstream."""
        import torch

        torch.manual_seed(self.rank)

    def _test_op_on_dtensor(self, op_call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """``op_call`` on DTensors must give, as a full tensor, what it gives on their full tensors."""
        from torch.distributed.tensor import DTensor
        from torch.utils._pytree import tree_flatten, tree_map

        def full(value: Any) -> Any:
            return value.full_tensor().detach().clone() if isinstance(value, DTensor) else value

        expected, _ = tree_flatten(op_call(*tree_map(full, args), **tree_map(full, kwargs)))
        got, _ = tree_flatten(op_call(*args, **kwargs))
        self.assertEqual(expected, [d.full_tensor() for d in got])

    def _test_op(self, mesh: Any, op_call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """``op_call`` on every sharding of its tensor arguments (Replicate, or Shard on a dimension at least
        as long as the mesh) must give, as a full tensor, what it gives on the plain tensors."""
        import itertools

        import torch
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        from torch.utils._pytree import tree_flatten, tree_unflatten

        expected = op_call(*args, **kwargs)
        flat, spec = tree_flatten((args, kwargs))
        choices = []
        for value in flat:
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                choices.append([Replicate()] + [Shard(d) for d in range(value.dim()) if value.size(d) >= mesh.size()])
            else:
                choices.append([None])
        for combination in itertools.product(*choices):
            converted = [v if p is None else distribute_tensor(v, mesh, [p]) for v, p in zip(flat, combination)]
            d_args, d_kwargs = tree_unflatten(converted, spec)
            self.assertEqual(op_call(*d_args, **d_kwargs).full_tensor(), expected)
