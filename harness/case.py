"""``MultiProcessTestCase`` and friends: in the parent, hand a test to the ranks and report what comes back."""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import time
import unittest
from typing import Any, Callable

from harness import isolation
from harness import pool as pools
from harness import report
from harness.assertions import DistributedAssertions
from harness.comms import choose_placement
from harness.config import settings
from harness.decorators import defined_at, gpus_needed, markers
from harness.errors import RankAbort, RankError, RankFailure, UsageError
from harness.hypothesis_support import is_hypothesis_test, run_given
from harness.outcome import BAD, CRASHED, ERROR, FAILED, KILLED, PASSED, SKIPPED, TIMEOUT, RankResult, merge, order_by_cause
from harness.rank import Task

__all__ = ["MultiProcessTestCase", "FSDPTest", "DTensorTestBase"]

# Frames of this module are hidden from unittest's tracebacks: a failure shows the rank's traceback.
__unittest = True


def _default_threads(world_size: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, world_size))


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

    #: seconds one test may run; HARNESS_TIMEOUT, when set, wins (see harness.config)
    timeout: float | None = None
    #: FSDPTest sets this: every test gets the default process group without @with_comms
    _harness_auto_comms = False
    #: the harness runs this class's tests on ranks (skip_if_lt_x_gpu checks it)
    _harness_test_class = True

    rank: int = -1
    temp_dir: str | None = None
    file_name: str | None = None
    _harness_device_type: str | None = None

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
            return torch.device("cuda", self.rank % max(1, torch.cuda.device_count()))
        return torch.device("cpu")

    @property
    def backend(self) -> str:
        return "nccl" if self.device_type == "cuda" else "gloo"

    @property
    def process_group(self) -> Any:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise UsageError(f"{self.id()} [rank {self.rank}]: no process group; decorate the test with @with_comms "
                             "or derive from FSDPTest, which sets one up for every test")
        return dist.distributed_c10d._get_default_group()

    def run_subtests(self, subtest_config: dict[str, list[Any]], test_fn: Any, *args: Any, **kwargs: Any) -> None:
        """See :func:`harness.run_subtests`."""
        from harness.subtests import run_subtests

        run_subtests(self, subtest_config, test_fn, *args, **kwargs)

    # ---- in a rank -------------------------------------------------------------------------------

    def _harness_bind(self, rank: int, task: Task, device_type: str) -> None:
        self.rank = rank
        self._harness_device_type = device_type
        self.temp_dir = task.temp_dir
        self.file_name = task.file_name
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
        from harness import torchrun

        name = self._testMethodName
        method = getattr(self, name)
        body = torchrun.run_as_launched_rank if torchrun.launched() else _run_in_pool

        @functools.wraps(method)
        def dispatch() -> None:
            __tracebackhide__ = True
            body(self)

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


def _evaluate_world_size(test: MultiProcessTestCase, test_id: str) -> Any:
    try:
        ws = test.world_size
        if ws == -2 and getattr(test, "_harness_world_from_devices", False):
            import torch

            ws = torch.cuda.device_count()  # upstream's continuous tests: -2 means "one rank per GPU"
    except Exception as exc:
        raise UsageError(f"{test_id}: evaluating world_size raised {type(exc).__name__}: {exc}") from exc
    return ws


def _check_world_size(ws: Any, test_id: str, pretended: int | None) -> int:
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
        hint = ""
        if pretended is not None:
            hint = (f" (also with the device counts at {pretended}, as on a machine with enough GPUs, so it does not "
                    "come from a missing GPU); return the number of ranks the test needs")
        elif ws == 0:
            hint = " (return the number of ranks the test needs)"
        raise UsageError(f"{test_id}: world_size must be an int >= 1, got {ws!r}; a test that runs on no rank "
                         f"cannot pass{hint}")
    return ws


def _world_size(test: MultiProcessTestCase, test_id: str, gpus_needed: int = 0,
                gpus: int | None = None) -> tuple[int, str]:
    """The world the test asks for, and a note when that differs from what this machine's counts give.

    Upstream tests size their world from the device count (``min(4, torch.cuda.device_count())``); on
    a machine with fewer GPUs than the test was written for that is 0 or 1. Then the test's world is
    taken as it would be on a machine with enough GPUs: ``skip_if_lt_x_gpu(x)``'s x, else
    ``fallback.DEFAULT_GPUS``. A world size of 0 that does not come from the device count stays an error.
    """
    from harness.comms import gpu_count
    from harness.fallback import DEFAULT_GPUS, pretend_device_count

    gpus = gpu_count() if gpus is None else gpus
    want = gpus_needed or DEFAULT_GPUS
    ws = _evaluate_world_size(test, test_id)
    if gpus >= want:
        return _check_world_size(ws, test_id, None), ""
    with pretend_device_count(want):
        asked = _evaluate_world_size(test, test_id)
    if asked == ws:
        return _check_world_size(ws, test_id, want if ws == 0 else None), ""
    asked = _check_world_size(asked, test_id, want)
    return asked, (f"world size {asked} as on a machine with {want} GPUs (world_size follows the device count, "
                   f"{ws!r} on this machine)")


class _PoolRun:
    """One test in the parent: its placement, its pool, its temp dir, its examples."""

    def __init__(self, test: MultiProcessTestCase):
        self.test = test
        self.test_id = report.short_id(test)
        self.fn = getattr(type(test), test._testMethodName)
        self.conf = settings()
        gpus = gpus_needed(type(test), self.fn)
        self.world_size, note = _world_size(test, self.test_id, gpus)
        self.placement = choose_placement(self.world_size, gpus, self.conf.device)
        if note:
            self.placement = dataclasses.replace(self.placement, reason=f"{note}; {self.placement.reason}")
        # On CPU only for want of GPUs: errors that mean "needs CUDA" become skips (HARNESS_DEVICE=cpu: failures).
        self.fallback = self.conf.device == "auto" and self.placement.device_type == "cpu"
        self.module_file = getattr(sys.modules.get(type(test).__module__), "__file__", None)
        self.timeout = self.conf.timeout_for(getattr(test, "timeout", None), self.test_id)
        self.threads = self.conf.threads or _default_threads(self.world_size)
        self.examples = 0
        self.reused = True
        self.pids: list[int] = []

    def run_once(self, kwargs: dict[str, Any] | None) -> list[RankResult]:
        self.examples += 1
        key = (self.world_size, self.placement.device_type)
        existing = pools._POOLS.get(key)
        if existing is None or existing.broken or not self.conf.reuse:
            self.reused = False
        pool = pools.get_pool(self.world_size, self.placement.device_type, self.threads, self.conf.start_timeout)
        self.pids = pool.pids
        # Inside the pool's directory, so that ranks whose parent was killed remove them with it.
        temp_dir = tempfile.mkdtemp(prefix="test-", dir=pool.dir) if markers(self.fn)["temp_dir"] else None
        scratch = tempfile.mkdtemp(prefix="store-", dir=pool.dir)
        try:
            module_file = getattr(sys.modules.get(type(self.test).__module__), "__file__", None)
            task = Task(module=type(self.test).__module__, module_file=module_file,
                        qualname=type(self.test).__qualname__, method=self.test._testMethodName,
                        device_type=self.placement.device_type, seed=self.conf.seed, kwargs=kwargs,
                        temp_dir=temp_dir, file_name=os.path.join(scratch, "store"), fresh_pg=pool.pg_suspect,
                        isolate=self.conf.env_changed != "off", world_size=self.world_size)
            pool.pg_suspect = False
            results = pool.run(task, self.timeout, self.conf.peer_grace)
            _settle_changes(self, pool, results)
            return results
        finally:
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)
            if not self.conf.reuse:
                pools.discard_pool(pool)


def _settle_changes(run: _PoolRun, pool: pools.RankPool, results: list[RankResult]) -> None:
    """A test left the ranks altered beyond repair: fresh ranks for the next test, and the test named in
    the run's summary (under HARNESS_ENV_CHANGED=fail, also a failure of this test)."""
    changes = isolation.world_changes(results)
    if not changes:
        return
    pools.discard_pool(pool)
    report.note_altered(run.test_id, changes)
    if run.conf.env_changed == "fail":
        isolation.fail_altering(results, changes)


def _run_in_pool(test: MultiProcessTestCase) -> None:
    __tracebackhide__ = True
    started = time.monotonic()
    run = _PoolRun(test)
    try:
        if run.placement.skip:
            raise unittest.SkipTest(run.placement.skip)
        _skip_nccl_alone(run)
        _note_fallback(run)
        drive(test, run, run.run_once)
    finally:
        report.record(report.TestRecord(run.test_id, run.world_size, run.placement.label if run.examples else "",
                                        run.placement.reason, time.monotonic() - started, run.pids, run.reused,
                                        run.examples))


def _skip_nccl_alone(run: Any) -> None:
    """A test that asks for NCCL and nothing else cannot run on CPU: on CPU for want of GPUs, a skip."""
    asked = markers(run.fn)["comms"]
    if run.fallback and isinstance(asked, str) and asked.strip().lower() == "nccl":
        reason = f"needs CUDA: asks for backend='nccl' alone ({defined_at(run.fn)})"
        report.note_needs_cuda(run.test_id, reason)
        raise unittest.SkipTest(reason)


def _note_fallback(run: _PoolRun) -> None:
    """Remember tests that went to CPU for want of GPUs; the run ends by saying so (never a silent skip)."""
    if run.placement.device_type == "cpu" and run.conf.device == "auto":
        report.note_fallback(run.placement.reason, run.test_id)


def drive(test: MultiProcessTestCase, run: Any,
          run_once: Callable[[dict[str, Any] | None], list[RankResult]]) -> None:
    """Run the test once, or once per hypothesis example, and report; the same for a pool and torchrun."""
    __tracebackhide__ = True
    if not is_hypothesis_test(run.fn):
        _report(test, run, run_once(None), None)
        return
    last: list[RankResult] = []

    def example(kwargs: dict[str, Any]) -> None:
        __tracebackhide__ = True
        last[:] = run_once(kwargs)
        _report(test, run, last, kwargs)

    try:
        run_given(run.fn, test, example)
    except RankAbort as abort:
        raise abort.error from None
    # Every example passed: show the last one's subtests (their skips and reasons) as subtests.
    _report_subtests(test, run, last, individually=True)


def _report(test: MultiProcessTestCase, run: _PoolRun, results: list[RankResult],
            example: dict[str, Any] | None) -> None:
    """Turn the ranks' results into unittest outcomes: subtests one by one, then the test itself."""
    __tracebackhide__ = True
    where = run.placement.label
    bad = [r for r in results if r.status in BAD]
    desync = bool(bad) and all(r.desync for r in bad)
    # A rank's output is printed once: the root cause's in its failure report, the others' here. Under
    # hypothesis every example's output is printed here (the reports of the examples hypothesis tries
    # while shrinking are never shown), and the report leaves it out.
    verdict = merge(run.test_id, results, run.world_size, where,
                    with_output=example is None or not run.conf.show_output)
    if run.conf.show_output:
        in_report = verdict.root_rank if verdict.status in (FAILED, ERROR) and not desync and example is None else None
        report.print_rank_output([r for r in results if r.rank != in_report])
    suffix = ""
    if example is not None:
        shown = ", ".join(f"{k}={v!r}" for k, v in example.items())
        suffix = (f"\n\nHypothesis example: {shown}\nReproduce it: put @example({shown}) above @given "
                  "(from hypothesis import example), or run with the same HYPOTHESIS_PROFILE (ci is derandomized).")
    sub_failures = _report_subtests(test, run, results, individually=example is None)
    if desync:
        # Stopped because one combination went wrong on one rank while its peers were inside it: that
        # combination's report (root cause first, then where each stuck rank was) says it all.
        if example is None:
            return
        raise RankAbort(RankError("\n\n".join(sub_failures) + suffix))
    if verdict.status == SKIPPED:
        raise unittest.SkipTest(verdict.text)
    if verdict.status in (FAILED, ERROR) and verdict.root_rank is not None:
        skip = _upstream_skip(results)
        if skip:
            raise unittest.SkipTest(skip)
        cuda = _needs_cuda(run, results[verdict.root_rank])
        if cuda:
            report.note_needs_cuda(run.test_id, cuda)
            raise unittest.SkipTest(cuda)
    if verdict.status in (FAILED, ERROR):
        text = verdict.text + suffix
        error = RankFailure(text) if verdict.status == FAILED else RankError(text)
        if example is not None and any(r.status in (CRASHED, TIMEOUT, KILLED) for r in results):
            raise RankAbort(error)  # do not let hypothesis re-run a hang or crash to shrink it
        raise error
    if sub_failures:
        text = "\n\n".join(sub_failures) + suffix
        raise RankFailure(text)


def _report_subtests(test: MultiProcessTestCase, run: _PoolRun, results: list[RankResult],
                     individually: bool) -> list[str]:
    """Report each combination as a unittest subtest; returns failure texts when not reporting individually."""
    __tracebackhide__ = True
    count = max((len(r.subtests) for r in results), default=0)
    texts = []
    for i in range(count):
        per_rank = [(r.rank, r.subtests[i]) for r in results if len(r.subtests) > i]
        # ranks stopped inside this combination (still in one of its collectives when a peer was done)
        stuck = [r for r in results if len(r.subtests) <= i and r.status in (KILLED, TIMEOUT) and not r.at_meeting]
        params = per_rank[0][1].params
        label = per_rank[0][1].label
        bad = [(rank, s) for rank, s in per_rank if s.status in BAD]
        skipped = [(rank, s) for rank, s in per_rank if s.status == SKIPPED]
        text = None
        if bad or (skipped and stuck):
            as_results = [RankResult(rank=rank, status=s.status, exc_type=s.exc_type, message=s.message,
                                     traceback=s.traceback) for rank, s in per_rank]
            for res, (rank, _) in zip(as_results, per_rank):
                res.arrived = float(rank)
            if bad:
                root = order_by_cause(as_results)[0]
                cuda = _needs_cuda(run, root)
                if cuda:
                    report.note_needs_cuda(run.test_id, cuda)
                    if individually:
                        with test.subTest(**{("msg_" if k == "msg" else k): v for k, v in params.items()}):
                            test.skipTest(cuda)
                    continue
                lines = [f"{run.test_id} [rank {root.rank}/{run.world_size}] subtest ({label}) failed on "
                         f"{run.placement.label}: {root.one_line()}", "", root.traceback.rstrip()]
                error: Exception = RankFailure("") if root.status == FAILED else RankError("")
            else:
                root = next(r for r in as_results if r.status == SKIPPED)
                lines = [f"{run.test_id} [rank {root.rank}/{run.world_size}] skipped subtest ({label}) on "
                         f"{run.placement.label} ({root.message}) while rank "
                         f"{', '.join(str(r.rank) for r in stuck)} was still inside it: a combination must be "
                         "skipped on every rank or on none (decide before its first collective, the same way "
                         "on every rank)"]
                error = RankError("")
            others = [r for r in as_results if r is not root]
            if others or stuck:
                lines += ["", "Other ranks:"] + [f"  rank {r.rank}: {r.one_line()}" for r in others]
                lines += [f"  rank {r.rank}: never finished this combination: {r.one_line()}" for r in stuck]
            for r in stuck:
                if r.stack.strip():
                    lines += ["", f"rank {r.rank} stack (faulthandler):", r.stack.rstrip()]
            text = "\n".join(lines)
            error.args = (text,)
        if not individually:
            if text:
                texts.append(text)
            continue
        with test.subTest(**{("msg_" if k == "msg" else k): v for k, v in params.items()}):
            if text:
                raise error
            if skipped and len(skipped) == len(per_rank):
                test.skipTest(skipped[0][1].message)
    return texts


def _upstream_skip(results: list[RankResult]) -> str:
    """Every rank that did not pass left with one of upstream's skip exit codes: the skip's reason."""
    from harness.fallback import upstream_skip

    bad = [r for r in results if r.status in BAD]
    reasons = {upstream_skip(r.exc_type, r.message) for r in bad if not r.peer_effect}
    return reasons.pop() if len(reasons) == 1 and "" not in reasons else ""


def _needs_cuda(run: Any, root: RankResult) -> str:
    """The skip reason when a test on CPU for want of GPUs failed because it hard-codes CUDA, else ""."""
    if not getattr(run, "fallback", False) or root.status not in (FAILED, ERROR):
        return ""
    from harness.fallback import needs_cuda, test_line

    if not needs_cuda(root.exc_type, root.message):
        return ""
    where = test_line(root.traceback, getattr(run, "module_file", None))
    return f"needs CUDA: {root.one_line()}" + (f" ({where})" if where else "")


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
