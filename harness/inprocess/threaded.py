"""Upstream's threaded classes run as upstream runs them: each rank a thread of the process that runs the test.

``MultiThreadedTestCase`` and its kin (harness.inprocess.threaded_classes) run here, not on rank processes: unittest's own
run of the test in this process (``setUp`` and ``tearDown`` in the main thread), and inside it, where
``setUp`` calls ``self._spawn_threads()``, one thread per rank, each with its own instance of the test,
its own default group over :mod:`harness.inprocess.threaded_pg`, ``perThreadSetUp``, the test method and
``perThreadTearDown``. The main thread's test method joins them; each thread's outcome becomes an
``outcome.RankResult`` and the verdict and report are the harness's own (``verdict.judge``,
``report.report``): the failing rank first, the collective it was in, the others in a line each.

A thread that never ends cannot be stopped: after the test's timeout it is reported with its stack
(``TIMEOUT``), its peers are released from their collectives, and it is left to run on as a daemon
thread (the run goes on; the process ends at the run's end).
"""
from __future__ import annotations

import functools
import io
import os
import sys
import threading
import time
import traceback
import unittest
from typing import Any

from harness.shared.errors import UsageError
from harness.shared import pytest_outcomes
from harness.shared.outcome import (ERROR, FAILED, PASSED, SKIPPED, TIMEOUT, XFAIL, RankResult, capture_exception,
                                    type_names)
from harness.parent.run import Run, run_for
from harness.inprocess import watchdog

__all__ = ["THREADS", "run_threaded", "spawn_threads", "spawn_threads_and_init_comms", "threads_reason"]

#: the placement label of a test whose ranks are threads of one process
THREADS = "threads"


def threads_reason(world_size: int, device_type: str, world_note: str = "") -> str:
    """Why a threaded test ran where it did, for its record (the runner's ``placement:`` line).

    Example::

        threads_reason(4, "cpu")   # 'world size 4 as threads of one process (in-process group) on cpu'
    """
    why = f"world size {world_size} as threads of one process (in-process group) on {device_type}"
    return f"{world_note}; {why}" if world_note else why


def _device_type(world_size: int, asked: str) -> str:
    """"cuda" with a GPU for every thread rank (upstream's threads use ``cuda:rank``), else "cpu"."""
    from harness.shared.placement import gpu_count

    if asked == "cpu":
        return "cpu"
    return "cuda" if gpu_count() >= world_size else "cpu"


class _ThreadOutput:
    """Stands in for ``sys.stdout`` / ``sys.stderr`` while thread ranks run: what a thread rank prints is kept
    as that rank's block (as a rank process's output is), what any other thread prints passes through."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.by_thread: dict[int, io.StringIO] = {}

    def keep(self, buffer: io.StringIO) -> None:
        self.by_thread[threading.get_ident()] = buffer

    def write(self, text: str) -> int:
        buffer = self.by_thread.get(threading.get_ident())
        return buffer.write(text) if buffer is not None else self.real.write(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.by_thread:
            self.real.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _Threads:
    """The thread ranks of one running test: started by ``spawn_threads``, joined by the test method."""

    def __init__(self, world: Any, threads: list[threading.Thread], results: dict[int, RankResult],
                 exit_installed: Any, started: float) -> None:
        self.world = world
        self.threads = threads
        self.results = results
        self.exit_installed = exit_installed
        self.started = started
        self.outputs: tuple[_ThreadOutput, _ThreadOutput] | None = None

    def restore_output(self) -> None:
        """``sys.stdout`` and ``sys.stderr`` as they were before the threads started."""
        if self.outputs is not None:
            out, err = self.outputs
            if sys.stdout is out:
                sys.stdout = out.real
            if sys.stderr is err:
                sys.stderr = err.real
            self.outputs = None


@functools.lru_cache(maxsize=None)
def _before_threads() -> None:
    """What torch sets up once per process on first use, without a lock, done in the main thread before the thread
    ranks start. On a CUDA build without a usable GPU, the first FakeTensorMode (DTensor's sharding propagation,
    FSDP2's ``fully_shard``) installs a no-op CUDA device guard (``torch._C._ensureCUDADeviceGuardSet``, as
    ``FakeTensorMode.__enter__`` does); two thread ranks doing it at once crashed the process with torch 2.11's CUDA
    build (a segfault in 2 of 10 runs of a two-rank ``fully_shard``). The guard is the process's: once is enough."""
    import torch

    ensure = getattr(torch._C, "_ensureCUDADeviceGuardSet", None)
    if ensure is not None and torch.version.cuda and not torch.cuda.is_available():
        ensure()


def spawn_threads(test: Any) -> None:
    """Start ``test``'s thread ranks (upstream's ``_spawn_threads``): called from ``setUp``, in the main thread."""
    from harness.inprocess import threaded_pg

    if getattr(test, "_harness_threads", None) is not None:
        return
    run = test._harness_threaded_run
    if run is None:
        raise UsageError(f"{test.id()}: _spawn_threads() is for setUp of a test the harness runs")
    world_size = test.world_size
    timeout = run.settings.timeout_for(getattr(test, "timeout", None), test.id())
    world = threaded_pg.ThreadWorld(world_size, timeout)
    installed = threaded_pg.installed(world)
    installed.__enter__()
    store = _hash_store()
    results: dict[int, RankResult] = {}
    name = test._testMethodName
    method = getattr(type(test), name)
    threads = []
    outputs = (_ThreadOutput(sys.stdout), _ThreadOutput(sys.stderr))
    _before_threads()
    for rank in range(world_size):
        thread = threading.Thread(target=_thread_rank, name=f"{test.id()} [rank {rank}/{world_size}]",
                                  args=(test, method, rank, world_size, store, world, results, outputs),
                                  daemon=True)
        threads.append(thread)
    test._harness_threads = _Threads(world, threads, results, installed, time.monotonic())
    test._harness_threads.outputs = outputs
    sys.stdout, sys.stderr = outputs
    for thread in threads:
        thread.start()


def _hash_store() -> Any:
    import torch.distributed as dist

    return dist.HashStore()


def _thread_rank(test: Any, method: Any, rank: int, world_size: int, store: Any, world: Any,
                 results: dict[int, RankResult], outputs: tuple[_ThreadOutput, _ThreadOutput]) -> None:
    """One thread rank: its own instance of the test, its default group, perThreadSetUp, the method, perThreadTearDown."""
    import torch.distributed as dist

    from harness.inprocess import threaded_pg

    started = time.monotonic()
    printed = io.StringIO()
    for output in outputs:
        output.keep(printed)
    threaded_pg.bind(rank)
    mine = type(test)(test._testMethodName)
    for attr in ("temp_dir", "file_name", "_harness_device_type", "_harness_threaded_run", "_harness_in_thread"):
        mine.__dict__[attr] = test.__dict__.get(attr)
    mine.__dict__["_harness_in_thread"] = True
    mine.rank = rank
    mine.threads = []
    result = RankResult(rank, PASSED)
    try:
        dist.init_process_group(threaded_pg.BACKEND, rank=rank, world_size=world_size, store=store)
        mine.perThreadSetUp()
        try:
            method(mine)
        finally:
            mine.perThreadTearDown()
    except BaseException as exc:  # every outcome of a thread is data, as a rank's is
        result = _result_of(rank, exc)
        if result.status not in (SKIPPED, XFAIL, TIMEOUT):  # a rank that timed out: its peers time out on their own
            world.abort(f"rank {rank} failed: {type(exc).__name__}")
    finally:
        _drop_thread_modes()
        threaded_pg.unbind()
        result.output = printed.getvalue()
        result.duration = time.monotonic() - started
        result.arrived = time.monotonic()
        results[rank] = result


def _drop_thread_modes() -> None:
    """Pop the torch function and dispatch modes the thread rank left on its own stacks (``torch.set_default_device``
    in ``perThreadSetUp`` leaves one).

    Those stacks are C++ thread-locals holding Python objects: left there, they are released as the OS thread
    ends, after ``join`` has returned, and one released while the interpreter shuts down aborts the whole
    process ("terminate called without an active exception", exit status 134) after every test passed.
    """
    import torch

    for length, pop in (("_len_torch_function_stack", "_pop_torch_function_stack"),
                        ("_len_torch_dispatch_stack", "_pop_torch_dispatch_stack")):
        count, drop = getattr(torch._C, length, None), getattr(torch._C, pop, None)
        if count is None or drop is None:  # an older torch without them: nothing to pop by this name
            continue
        try:
            while count() > 0:
                drop()
        except Exception:  # a mode that refuses to go: the thread ends as upstream's would
            break


def _result_of(rank: int, exc: BaseException) -> RankResult:
    if isinstance(exc, unittest.SkipTest):
        return RankResult(rank, SKIPPED, message=str(exc))
    pytest_outcome = pytest_outcomes.outcome(exc)  # pytest.skip() / xfail() / fail() in the thread rank
    if pytest_outcome is not None and pytest_outcome[0] in (SKIPPED, XFAIL):
        return RankResult(rank, pytest_outcome[0], message=pytest_outcome[1])
    from harness.inprocess.threaded_pg import CollectiveTimeout

    kind, message, text = capture_exception(exc)
    if pytest_outcome is not None:
        return RankResult(rank, FAILED, kind, message, text, exc_types=type_names(exc))
    if isinstance(exc, CollectiveTimeout):  # a hang in a collective, ordered as one (a rank stuck elsewhere first)
        return RankResult(rank, TIMEOUT, kind, message, text, stack=text)
    return RankResult(rank, FAILED if isinstance(exc, AssertionError) else ERROR, kind, message, text,
                      exc_types=type_names(exc))


def join_threads(test: Any) -> None:
    """The main thread's test method: wait for every thread rank, judge their results, report (raises on failure)."""
    from harness.judging import report, verdict
    from harness.inprocess import threaded_pg
    from harness.shared.placement import Placement

    __tracebackhide__ = True
    threads: _Threads | None = getattr(test, "_harness_threads", None)
    if threads is None:  # a setUp that never called _spawn_threads(): the threads start now
        spawn_threads(test)
        threads = test._harness_threads
    run: Run = test._harness_threaded_run
    world = threads.world
    try:
        # a thread in a collective times out there first (threaded_pg), and records where; one that is stuck
        # anywhere else is found a second later
        deadline = threads.started + world.timeout + 1.0
        for thread in threads.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [rank for rank, thread in enumerate(threads.threads) if thread.is_alive()]
        if stuck:
            world.abort(f"rank(s) {stuck} did not finish")
            frames = sys._current_frames()
            in_collective = []
            for rank in stuck:
                thread = threads.threads[rank]
                where = threaded_pg.current_collective(rank)
                if where:
                    in_collective.append(rank)
                frame = frames.get(thread.ident or -1)
                stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
                threads.results[rank] = RankResult(
                    rank, TIMEOUT, "TimeoutError",
                    f"timed out after {world.timeout:g} s" + (f" in {where}" if where else " outside any collective")
                    + " (the thread cannot be stopped: it is left running; set HARNESS_TIMEOUT to raise)",
                    stack=stack, arrived=time.monotonic())
            # the ones in a collective leave it now (aborted); one stuck outside every collective never will
            for rank in in_collective:
                threads.threads[rank].join(2.0)
    finally:
        threads.restore_output()
        threads.exit_installed.__exit__(None, None, None)
    results = [threads.results.get(rank, RankResult(rank, ERROR, "RuntimeError", "the thread left no result"))
               for rank in range(len(threads.threads))]
    device_type = test._harness_device_type
    gpus_asked, sized_by_devices = test._harness_gpus_asked
    # a test written for GPUs (skip_if_lt_x_gpu, or a world sized by the device count) that runs its threads on
    # CPU for want of them: a failure carries the same note as on rank processes (upstream skips it there)
    shortfall = device_type == "cpu" and run.settings.device != "cpu" and bool(gpus_asked or sized_by_devices)
    placement = Placement(device_type, len(results), threads_reason(len(results), device_type), shortfall=shortfall)
    facts = verdict.Facts(_short_id(test), len(results), placement,
                          module_file=getattr(sys.modules.get(type(test).__module__), "__file__", None),
                          gpus_asked=gpus_asked, sized_by_devices=sized_by_devices,
                          gpus_found=_gpu_count() if shortfall else 0)
    judged = verdict.judge(results, facts, show_output=run.settings.show_output)
    judged.lines[:] = [line.replace(f"on {placement.label}", f"on {THREADS} ({device_type})")
                       .replace("ran on CPU/gloo", "ran as threads on CPU") for line in judged.lines]
    report.report(test, judged, run.notes)


def _gpu_count() -> int:
    from harness.shared.placement import gpu_count

    return gpu_count()


def _short_id(test: Any) -> str:
    from harness.judging.notes import short_id

    return short_id(test)


def run_threaded(test: Any, result: unittest.TestResult | None) -> Any:
    """Run ``test`` in this process, its ranks as threads; record where it ran (the run's notes)."""
    from harness.inprocess import local
    from harness.parent import drawn
    from harness.classes.case import MultiProcessTestCase, _count_decorator_skip
    from harness.testing.decorators import gpus_needed, markers
    from harness.judging.notes import TestRecord
    from harness.parent.testrun import world_size_for

    run = run_for(result)
    name = test._testMethodName
    fn = getattr(type(test), name)
    test_id = _short_id(test)
    conf = run.settings
    notes = run.notes
    notes.harness_ran(test_id)
    _count_decorator_skip(test, getattr(test, name), run)
    started = time.monotonic()
    if result is None:
        result = test.defaultTestResult()
    try:
        world_size, world_note = world_size_for(test, test_id, gpus_needed(type(test), fn))
        limit = conf.timeout_for(getattr(test, "timeout", None), test_id)
    except UsageError as exc:
        return local._run_failing(test, result, exc)
    device_type = _device_type(world_size, conf.device)
    gpus_asked = (gpus_needed(type(test), fn), bool(world_note))

    def make_record(seconds: float) -> TestRecord:
        return TestRecord(test_id, world_size, THREADS, threads_reason(world_size, device_type, world_note), seconds,
                          [os.getpid()], False)

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        join_threads(test)

    snapshot = None
    cls_before = test.__class__
    with local._test_files(markers(fn)["temp_dir"]) as (temp_dir, file_name), local._instead(test, name, body), \
            local._recorded(result, notes, started, make_record), \
            drawn.refused(fn, test_id, "threaded classes (every rank a thread, started in setUp)"), \
            watchdog.bounded(limit, "threads"):
        test.temp_dir, test.file_name = temp_dir, file_name
        test._harness_device_type = device_type
        test._harness_gpus_asked = gpus_asked
        test._harness_threaded_run = run
        test._harness_threads = None
        _pin_world_size(test, world_size)
        try:
            local._reset_seeds(conf.seed)  # one RNG for every thread rank, as upstream
            snapshot = local._isolation_record() if conf.env_changed != "off" else None
            return super(MultiProcessTestCase, test).run(result)
        finally:
            threads = test.__dict__.pop("_harness_threads", None)
            if threads is not None and _installed_open(threads):  # setUp started them, the method never joined
                threads.world.abort("the test's setUp or the test method failed in the main thread")
                for thread in threads.threads:
                    thread.join(threads.world.timeout)
                threads.restore_output()
                threads.exit_installed.__exit__(None, None, None)
            test.__class__ = cls_before
            if snapshot is not None:
                changes = local._isolation_restore(snapshot)
                if changes:
                    notes.altered_by(test_id, changes, "the process that runs threaded tests keeps them")
            test.__dict__.pop("_harness_threaded_run", None)
            test.__dict__.pop("_harness_gpus_asked", None)


def _pin_world_size(test: Any, world_size: int) -> None:
    from harness.classes.case import _pin_world_size as pin

    pin(test, world_size)


def _installed_open(threads: _Threads) -> bool:
    """The threads' group world is still installed (setUp started them but the test method never joined them)."""
    from harness.inprocess import threaded_pg

    return threaded_pg._current is threads.world


def spawn_threads_and_init_comms(func: Any = None, timeout: float | None = None, world_size: int = 4) -> Any:
    """Upstream's decorator for a test method of any ``TestCase``: the method runs once in each of
    ``world_size`` threads of the process that runs the test, each thread a rank with its own default group
    (the harness's in-process ``harness_threaded`` backend), all sharing ``self``; ``dist.get_rank()`` tells
    them apart.

    The test fails when a thread rank fails (the first failure, its rank named in a note) and when a rank
    waits in a collective, or runs, past ``timeout`` seconds (default: ``HARNESS_TIMEOUT``, else the
    harness's default); it is skipped when every rank skips.

    Example::

        class TestObjects(TestCase):
            @spawn_threads_and_init_comms(world_size=4)
            def test_broadcast_object_list(self):
                box = [dist.get_rank()]
                dist.broadcast_object_list(box, src=0)
                self.assertEqual(box, [0])
    """
    if func is None:
        return functools.partial(spawn_threads_and_init_comms, timeout=timeout, world_size=world_size)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise UsageError(f"@spawn_threads_and_init_comms(world_size={world_size!r}) on {func.__qualname__}: "
                         "the world size must be an int >= 1")

    @functools.wraps(func)
    def threads_test(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        from harness.shared.config import settings

        limit = float(timeout) if timeout is not None else settings().timeout_for(None, self.id())
        with watchdog.bounded(limit, "threads"):
            outcomes = _run_thread_ranks(lambda: func(self, *args, **kwargs), world_size, limit, self.id())
        _raise_first(outcomes, world_size, self.id())

    return threads_test


def _run_thread_ranks(body: Any, world_size: int, limit: float, test_id: str) -> dict[int, BaseException | None]:
    """Run ``body`` on ``world_size`` thread ranks, each with its default group; each rank's exception (None: passed)."""
    import torch.distributed as dist

    from harness.inprocess import threaded_pg

    outcomes: dict[int, BaseException | None] = {}
    world = threaded_pg.ThreadWorld(world_size, limit)

    def rank_main(rank: int, store: Any) -> None:
        threaded_pg.bind(rank)
        try:
            dist.init_process_group(threaded_pg.BACKEND, rank=rank, world_size=world_size, store=store)
            body()
            outcomes[rank] = None
        except BaseException as exc:  # every rank's outcome is data; the first failure is raised in the test
            outcomes[rank] = exc
            if not pytest_outcomes.is_skip(exc):
                world.abort(f"rank {rank} failed: {type(exc).__name__}")
        finally:
            _drop_thread_modes()
            threaded_pg.unbind()

    _before_threads()
    with threaded_pg.installed(world):
        store = _hash_store()
        threads = [threading.Thread(target=rank_main, args=(rank, store), daemon=True,
                                    name=f"{test_id} [rank {rank}/{world_size}]") for rank in range(world_size)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + limit + 5.0  # a rank in a collective times out there first
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [rank for rank, thread in enumerate(threads) if thread.is_alive()]
        if stuck:
            world.abort(f"rank(s) {stuck} did not finish")
            for thread in threads:
                thread.join(2.0)
            for rank in stuck:
                where = threaded_pg.current_collective(rank)
                outcomes.setdefault(rank, TimeoutError(
                    f"rank {rank}/{world_size} timed out after {limit:g} s"
                    + (f" in {where}" if where else " outside any collective")
                    + " (the thread cannot be stopped: it is left running; set HARNESS_TIMEOUT to raise)"))
    return outcomes


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, which the traceback prints below the message; Python 3.10 has no notes, so there the
    note goes at the end of the message itself (its first argument, where that is text)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]}\n{note}", *exc.args[1:])
    else:
        exc.args = (*exc.args, note)


def _raise_first(outcomes: dict[int, BaseException | None], world_size: int, test_id: str) -> None:
    """Raise the failure of the lowest failing rank, one a peer's failure did not cause if there is one."""
    from harness.inprocess.threaded_pg import CollectiveError

    failures = {rank: exc for rank, exc in outcomes.items() if exc is not None and not pytest_outcomes.is_skip(exc)}
    if failures:
        own = {rank: exc for rank, exc in failures.items() if not isinstance(exc, CollectiveError)}
        rank, exc = min((own or failures).items())
        others = sorted(set(failures) - {rank})
        _add_note(exc, f"{test_id}: thread rank {rank} of {world_size} (spawn_threads_and_init_comms)"
                  + (f"; rank(s) {others} failed too" if others else ""))
        raise exc
    skips = [exc for exc in outcomes.values() if pytest_outcomes.is_skip(exc)]
    if len(skips) == world_size:
        raise skips[0]
