"""Local-tensor test classes: every rank simulated in the test's own process (``LocalTensorMode``, a ``fake`` group).

Upstream's DTensor tests come in two forms: a ``DTensorTestBase`` class, whose tests run on one process
per rank, and its twin made by ``create_local_tensor_test_class``, whose tests run in ONE process: the
``fake`` process-group backend answers every collective at once, and
``torch.distributed._local_tensor.LocalTensorMode`` makes every tensor a ``LocalTensor`` holding one
value per rank, so each op runs for all ranks together and ``self.rank`` is a symbolic int (one value
per rank). This module mirrors both names on public torch (nothing of ``torch.testing._internal``):

* :class:`LocalDTensorTestBase` runs its tests in the process that runs the test (the runner's,
  pytest's or unittest's), never on rank processes; with ``@with_comms`` (or a subclass's
  ``_harness_auto_comms``) the default group is a ``fake`` one of world size N;
* :func:`create_local_tensor_test_class` makes the twin of a test class, each ``test_*`` method of
  the class run inside ``LocalTensorMode``, as upstream's does.

The test's record in the run's notes says where it ran: placement ``local``, world size N (the
runner's per-test line shows ``local ws=N``; the pytest plugin's ``harness_placement`` property).
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import time
import traceback
import unittest
from typing import Any, Callable, Iterable, Iterator

from harness.classes.case import DTensorTestBase, MultiProcessTestCase, _pin_world_size
from harness.parent import drawn, template
from harness.shared.errors import UsageError
from harness.judging.fallback import TRIED_ON_CPU
from harness.parent.run import Run, run_for
from harness.inprocess import watchdog

__all__ = ["LOCAL", "LocalDTensorTestBase", "create_local_tensor_test_class", "local_reason"]

# Unlike harness.classes.case, this module's frames are not marked ``__unittest``: the test body runs beneath them, and
# unittest cuts an assertion's traceback at the first marked frame.

#: the placement label of a test whose ranks are simulated in one process
LOCAL = "local"


def local_reason(world_size: int, device_type: str, world_note: str = "") -> str:
    """Why a local test ran where it did, for its record (the runner's ``placement:`` line, pytest's properties).

    Example::

        local_reason(4, "cpu")
        # 'world size 4 simulated in one process (LocalTensorMode over a fake process group) on cpu'
    """
    why = (f"world size {world_size} simulated in one process (LocalTensorMode over a fake process group) "
           f"on {device_type}")
    return f"{world_note}; {why}" if world_note else why


class LocalDTensorTestBase(DTensorTestBase):
    """Upstream's ``LocalDTensorTestBase``: ``DTensorTestBase``'s tests with every rank simulated in one process.

    The test runs where unittest runs it (no rank processes). ``self.rank`` is a symbolic int holding
    every rank (``torch.SymInt`` over ``LocalIntNode``), ``self.world_size`` the simulated world (4 by
    default), ``self.device_type`` "cpu" unless there is a GPU per simulated rank (as upstream), and
    ``@with_comms`` gives a ``fake`` default group of that size. A class made by
    :func:`create_local_tensor_test_class` also runs each test inside ``LocalTensorMode``; a class derived
    from this one directly enters it itself (``with self._get_local_tensor_mode(): ...``), as upstream.

    Example::

        class TestAdd(LocalDTensorTestBase):
            @with_comms
            def test_add(self):
                mesh = self.build_device_mesh()
                with self._get_local_tensor_mode():
                    d = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
                    self.assertEqual((d + d).full_tensor(), torch.full((4, 4), 2.0))
    """

    #: the harness runs this class's tests in the parent, every rank simulated (harness.judging.upstream, harness.judging.notes)
    _harness_local = True
    _harness_local_ws = 0

    @property
    def is_local_tensor_enabled(self) -> bool:
        return True

    @property
    def rank(self) -> Any:  # type: ignore[override]
        """Every rank at once: a symbolic int whose value on rank r is r (upstream's ``LocalIntNode``)."""
        import torch
        from torch.distributed._local_tensor import LocalIntNode

        return torch.SymInt(LocalIntNode({r: r for r in range(self.world_size)}))

    @rank.setter
    def rank(self, rank: Any) -> None:
        pass  # upstream's setUp sets it to the parent's rank; a local test is every rank

    @property
    def backend(self) -> str:
        return "fake"

    def _get_local_tensor_mode(self) -> Any:
        """``LocalTensorMode`` over every simulated rank; enter it around code that must run for all ranks."""
        from torch.distributed._local_tensor import LocalTensorMode

        return LocalTensorMode(frozenset(range(self.world_size)))

    def _handle_test_skip(self, msg: str) -> None:
        """Upstream's ``skip_if_lt_x_gpu`` (left unported) calls this instead of exiting a rank: a skip."""
        self.skipTest(msg)

    def setUp(self) -> None:
        import torch

        super().setUp()
        torch.autograd._enable_record_function(False)  # as upstream: profiler hooks see no LocalTensor

    def tearDown(self) -> None:
        import torch
        from torch.distributed.tensor import _random

        _random._rng_tracker = None  # an RNG tracker made for the simulated ranks must not outlive the test
        super().tearDown()
        torch.autograd._enable_record_function(True)

    def build_device_mesh(self) -> Any:
        from torch.distributed._local_tensor import maybe_disable_local_tensor_mode

        with maybe_disable_local_tensor_mode():
            return super().build_device_mesh()

    def init_pg(self, eager_init: bool = False, backend: str | None = None) -> None:
        """Make the ``fake`` default group of ``world_size`` (a test that calls it itself; ``@with_comms`` does)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("fake", rank=0, world_size=self.world_size)

    def destroy_pg(self, *args: Any, **kwargs: Any) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def _spawn_threads(self) -> None:
        """Nothing to start: every rank is simulated here. The twin of a thread-rank class (``DTensorOpTestBase``,
        ``create_local_tensor_test_class(..., base_class=LocalDTensorOpTestBase)``) keeps that class among its
        bases, whose ``setUp`` calls this, as upstream's local classes do."""

    def init_manual_seed_for_rank(self) -> None:
        """Every simulated rank draws from one generator, so all of them get the same seed (as upstream)."""
        import torch

        torch.manual_seed(0)

    # ---- in the process that runs the test -------------------------------------------------------

    def run(self, result: unittest.TestResult | None = None) -> unittest.TestResult | None:
        if self._harness_in_rank:  # a rank was asked to run it (a mixed class): run the body as it is
            return super().run(result)
        return _run_local(self, run_for(result), result)


def _device_type(world_size: int, asked: str) -> str:
    """"cuda" with a GPU for every simulated rank (as upstream's ``DEVICE_COUNT >= world_size``), else "cpu"."""
    from harness.shared.placement import gpu_count

    if asked == "cpu":
        return "cpu"
    return "cuda" if gpu_count() >= world_size else "cpu"


def _run_local(test: LocalDTensorTestBase, run: Run, result: unittest.TestResult | None) -> Any:
    """Run ``test`` in this process, every rank simulated; record where it ran; count its GPU skips."""
    from harness.classes.case import _count_decorator_skip
    from harness.testing.decorators import gpus_needed, markers
    from harness.judging.notes import TestRecord, short_id
    from harness.parent.testrun import world_size_for

    name = test._testMethodName
    fn = getattr(type(test), name)
    test_id = short_id(test)
    conf = run.settings
    notes = run.notes
    notes.harness_ran(test_id)
    _count_decorator_skip(test, getattr(test, name), run)
    started = time.monotonic()
    if result is None:
        result = test.defaultTestResult()
    try:
        gpus_asked = gpus_needed(type(test), fn)
        world_size, world_note = world_size_for(test, test_id, gpus_asked)
        limit = conf.timeout_for(getattr(test, "timeout", None), test_id)
    except UsageError as exc:  # a world size or a timeout that cannot be: the test's error, as on ranks
        return _run_failing(test, result, exc)
    device_type = _device_type(world_size, conf.device)
    # On CPU for want of a GPU per simulated rank (not because CPU was asked for): as on the harness's ranks, an
    # error that only CUDA explains is a "needs CUDA" skip (HARNESS_DEVICE=cpu: a failure).
    fallback = device_type == "cpu" and conf.device != "cpu"
    marks = markers(fn)
    wants_pg = bool(marks["comms"]) or test._harness_auto_comms
    module_file = getattr(sys.modules.get(type(test).__module__), "__file__", None)

    hard_coded: set[str] = set()  # the needs-CUDA skips guard made (the notes group them as the harness's kind)

    def guard(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the test (or one ``run_subtests`` combination): a hard-coded-CUDA error on CPU for want of GPUs
        becomes a "needs CUDA" skip, as on the harness's ranks."""
        __tracebackhide__ = True
        try:
            return call(*args, **kwargs)
        except unittest.SkipTest:
            raise
        except Exception as exc:
            reason = _needs_cuda_reason(exc, module_file) if fallback else ""
            if not reason and fallback and (gpus_asked or world_note):
                # it asks for GPUs: what failed on CPU says nothing of it on GPUs (HARNESS_DEVICE=cpu: a failure)
                reason = _tried_on_cpu_reason(exc, module_file, max(gpus_asked, world_size), gpus_asked)
            if reason:
                hard_coded.add(reason)
                raise unittest.SkipTest(reason) from exc
            raise

    bound = getattr(test, name)

    @functools.wraps(bound)
    def body(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        with _fake_group(test, wants_pg, world_size):
            return guard(bound, *args, **kwargs)

    original_add_skip = getattr(result, "addSkip", None)

    def add_skip(case: Any, reason: str) -> None:
        if _gpu_skip(reason):  # the front ends leave the harness's classes to it: count it here
            notes.needs_cuda_for(test_id, reason, fallback=reason in hard_coded and TRIED_ON_CPU not in reason)
        if original_add_skip is not None:
            original_add_skip(case, reason)

    def make_record(seconds: float) -> TestRecord:
        return TestRecord(test_id, world_size, LOCAL, local_reason(world_size, device_type, world_note), seconds,
                          [os.getpid()], False)

    cls_before = test.__class__
    snapshot = None
    with _test_files(marks["temp_dir"]) as (temp_dir, file_name), _instead(test, name, body), \
            _instead(result, "addSkip", add_skip), _recorded(result, notes, started, make_record), \
            drawn.refused(fn, test_id, "local-tensor classes (every rank simulated in this process)"), \
            watchdog.bounded(limit, "local"):
        test.temp_dir, test.file_name = temp_dir, file_name
        test._harness_device_type = device_type
        test._harness_local_guard = guard
        _pin_world_size(test, world_size)
        try:
            _reset_seeds(conf.seed)
            snapshot = _isolation_record() if conf.env_changed != "off" else None
            return super(MultiProcessTestCase, test).run(result)
        finally:
            if snapshot is not None:
                changes = _isolation_restore(snapshot)
                if changes:
                    notes.altered_by(test_id, changes, "the process that runs local tests keeps them")
            test.__class__ = cls_before
            test.__dict__.pop("_harness_local_guard", None)


def _run_failing(test: LocalDTensorTestBase, result: Any, exc: BaseException) -> Any:
    """unittest's run of ``test`` with ``exc`` as its outcome (no setUp: the test could not be prepared)."""

    def fail() -> None:
        raise exc

    with _instead(test, test._testMethodName, fail), _instead(test, "setUp", _nothing), \
            _instead(test, "tearDown", _nothing):
        return super(MultiProcessTestCase, test).run(result)


def _nothing() -> None:
    pass


@contextlib.contextmanager
def _recorded(result: Any, notes: Any, started: float, make: Callable[[float], Any]) -> Iterator[None]:
    """The test's record (``make(seconds)``), noted once: when ``result`` hears the test stopped (the runner's
    line reads it then), or else when the block ends. For the classes that run in this process."""
    done: list[bool] = []

    def record() -> None:
        if not done:
            done.append(True)
            notes.record(make(time.monotonic() - started))

    original = getattr(result, "stopTest", None)

    def stop_test(case: Any) -> None:
        record()
        if original is not None:
            original(case)

    with _instead(result, "stopTest", stop_test):
        try:
            yield
        finally:
            record()


@contextlib.contextmanager
def _instead(obj: Any, attr: str, value: Any) -> Iterator[None]:
    """``obj.attr`` is ``value`` for the block, then what the instance held before (or nothing) again.

    pytest hands the item as unittest's result, and holds the test method on the instance: both are put
    back as they were. An object that takes no attributes is left alone."""
    holder = getattr(obj, "__dict__", None)
    if holder is None:
        yield
        return
    missing = object()
    saved = holder.get(attr, missing)
    try:
        setattr(obj, attr, value)
    except AttributeError:
        yield
        return
    try:
        yield
    finally:
        if saved is missing:
            holder.pop(attr, None)
        else:
            holder[attr] = saved


def _gpu_skip(reason: str) -> bool:
    from harness.judging.fallback import gpu_skip

    return gpu_skip(reason)


def _needs_cuda_reason(exc: BaseException, module_file: str | None) -> str:
    from harness.judging.fallback import needs_cuda, test_line

    message = str(exc)
    if not needs_cuda(type(exc).__name__, message):
        return ""
    where = test_line("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), module_file)
    first = message.strip().splitlines()[0] if message.strip() else ""
    return f"needs CUDA: {type(exc).__name__}: {first}" + (f" ({where})" if where else "")


def _tried_on_cpu_reason(exc: BaseException, module_file: str | None, wanted: int, gpus_asked: int) -> str:
    from harness.judging.fallback import test_line, tried_on_cpu

    message = str(exc)
    where = test_line("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), module_file)
    first = message.strip().splitlines()[0] if message.strip() else ""
    return tried_on_cpu(wanted, gpus_asked, f"{type(exc).__name__}: {first}"[:300], where)


@contextlib.contextmanager
def _fake_group(test: LocalDTensorTestBase, wanted: bool, world_size: int) -> Iterator[None]:
    """The ``fake`` default group of ``world_size`` around the test (``@with_comms``), and no group left after it."""
    import torch.distributed as dist

    if wanted:
        if dist.is_initialized():
            raise UsageError(f"{test.id()}: a local-tensor test needs its own fake process group, but this process "
                             f"already has a default group ({dist.get_backend()}); run local tests outside torchrun "
                             "and outside a test that left its group up")
        dist.init_process_group("fake", rank=0, world_size=world_size)
    try:
        yield
    finally:
        if dist.is_initialized():  # ours, or one the test made itself (upstream's init_pg)
            dist.destroy_process_group()


@contextlib.contextmanager
def _test_files(temp_dir: bool) -> Iterator[tuple[str | None, str]]:
    """A FileStore path (``self.file_name``) and, for ``@with_temp_dir``, a directory; both removed after. They are
    in one folder named to the template first (harness.parent.template.owned_dir), which removes it should this
    process end without a word (killed, or ended by the watchdog: harness.inprocess.watchdog)."""
    folder = template.owned_dir("harness-local-")
    file_name = os.path.join(folder, "store")
    open(file_name, "w").close()
    directory = os.path.join(folder, "temp") if temp_dir else None
    if directory is not None:
        os.mkdir(directory, 0o700)
    try:
        yield directory, file_name
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _reset_seeds(seed: int) -> None:
    import random

    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed % (2**32))


def _isolation_record() -> Any:
    from harness.ranks import isolation

    return isolation.record()


def _isolation_restore(snapshot: Any) -> list[str]:
    from harness.ranks import isolation

    return isolation.restore(snapshot)


def _wrap_local(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run inside the test's ``LocalTensorMode``, with dynamo's caches reset first (as upstream)."""

    @functools.wraps(fn)
    def local_test(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        torch._dynamo.reset()
        with self._get_local_tensor_mode():
            return fn(self, *args, **kwargs)

    return local_test


def _skipped(self: Any) -> None:
    self.skipTest("Skipped test")


def create_local_tensor_test_class(orig_cls: type, skipped_tests: Iterable[str] | None = None,
                                   base_class: type = LocalDTensorTestBase) -> type:
    """The local-tensor twin of ``orig_cls``: ``<Name>WithLocalTensor``, on ``base_class`` then ``orig_cls``'s bases.

    Every ``test_*`` method defined in ``orig_cls`` runs inside ``LocalTensorMode`` (dynamo reset first);
    those named in ``skipped_tests`` are skipped ("Skipped test"), as upstream's. Its tests run in one
    process, every rank simulated (see :class:`LocalDTensorTestBase`).

    Example::

        class DTensorTest(DTensorTestBase):
            @with_comms
            def test_full(self):
                ...

        DTensorTestWithLocalTensor = create_local_tensor_test_class(DTensorTest, skipped_tests=["test_slow"])
    """
    if not isinstance(orig_cls, type):
        raise UsageError(f"create_local_tensor_test_class({orig_cls!r}): pass the test class itself")
    if isinstance(skipped_tests, str):
        raise UsageError(f"create_local_tensor_test_class({orig_cls.__qualname__}, skipped_tests={skipped_tests!r}): "
                         f"a list of test names, e.g. [{skipped_tests!r}]")
    if not (isinstance(base_class, type) and issubclass(base_class, unittest.TestCase)):
        raise UsageError(f"create_local_tensor_test_class({orig_cls.__qualname__}, base_class={base_class!r}): "
                         "a test class such as harness.LocalDTensorTestBase")
    skipped = set(skipped_tests or ())
    namespace = dict(orig_cls.__dict__)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    for name, value in list(namespace.items()):
        if not callable(value) or isinstance(value, type):
            continue
        if name in skipped:
            namespace[name] = _skipped
        elif name.startswith("test_"):
            namespace[name] = _wrap_local(value)
    return type(orig_cls.__name__ + "WithLocalTensor", (base_class,) + orig_cls.__bases__, namespace)
