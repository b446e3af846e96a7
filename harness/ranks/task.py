"""One test as one rank runs it: bound to the rank, from a fresh rank's state, its outcome as a RankResult.

A spawned rank (harness.ranks.process) and a rank torchrun launched (harness.torchrun.job) both call :func:`run_task`
for each test: the test's output is captured (harness.ranks.capture), its process group made or kept
(harness.ranks.comms) on the backend its placement gives (harness.shared.placement), its process state recorded and put
back (harness.ranks.isolation), and its GPU checked after it (harness.ranks.cuda_state).
"""
from __future__ import annotations

import bdb
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import time
import traceback
import unittest
from typing import Any

from harness.ranks import debugger, recorder as flight_recorder
from harness.ranks import cuda_state, fault_trigger, isolation
from harness.testing import subtests
from harness.ranks.capture import Capture
from harness.ranks.comms import forget_destroyed_groups
from harness.shared.config import Settings
from harness.shared import pytest_outcomes
from harness.shared.outcome import (ERROR, FAILED, PASSED, SKIPPED, XFAIL, RankResult, SubtestOutcome, capture_exception,
                                    shown_value, type_names)
from harness.shared.placement import Placement
from harness.shared.protocol import Task, group_timeout
from harness.testing.parametrize import PARAMS_ATTR

__all__ = ["RankContext", "run_task"]

# Frames of this module are hidden from unittest's tracebacks.
__unittest = True


@dataclasses.dataclass
class RankContext:
    """What a rank knows about itself for its whole life."""

    rank: int
    world_size: int
    #: where this rank runs, given once when it started (the pool's placement, or the launched node's)
    placement: Placement
    out_path: str
    keeper: Any  # comms.ProcessGroupKeeper
    conf: Settings  # the run's settings, as the parent had them
    #: meet the other ranks between run_subtests combinations through the parent (pool mode); None: a
    #: barrier on the test's process group (torchrun, where there is no parent)
    meet: Any = None
    gpu: int | None = None  # this rank's GPU (cuda:gpu), made current again before every test
    #: tell the parent at once that the test failed here, before tearDown and the cleanups run (pool mode):
    #: its peers' HARNESS_PEER_GRACE starts then, even if this rank then waits for them in a tearDown
    notice: Any = None
    #: the body ended here (its status): wait until every rank ended it before tearDown and the cleanups run
    #: (harness.shared.protocol.BodyEnded); None: no such wait
    body_ended: Any = None


def _resolve(task: Task) -> type:
    if task.module == "__main__":
        module = sys.modules["__main__"]
    else:
        module = sys.modules.get(task.module)
        if module is None:
            try:
                module = importlib.import_module(task.module)
            except ImportError:
                if not task.module_file:
                    raise
                # pytest's importlib mode: the module is importable only from its path
                spec = importlib.util.spec_from_file_location(task.module, task.module_file)
                if spec is None or spec.loader is None:
                    raise
                module = importlib.util.module_from_spec(spec)
                sys.modules[task.module] = module
                spec.loader.exec_module(module)
    obj: Any = module
    for part in task.qualname.split("."):
        if part == "<locals>":
            raise ImportError(f"{task.module}.{task.qualname} is defined inside a function; "
                              "rank processes can only find test classes defined at module level")
        obj = getattr(obj, part)
    return obj


def _reset_state(seed: int, gpu: int | None = None) -> None:
    """Every test starts the same way on every rank, whatever the previous test did."""
    import random

    import torch

    if gpu is not None:
        torch.cuda.set_device(gpu)  # a test may have made another GPU current

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(None)


class _RankResultCollector(unittest.TestResult):
    """unittest's own outcome calls, made inside the rank, kept as data for the RankResult.

    Running the test through ``TestCase.run`` (rather than calling setUp, the body and tearDown by hand)
    gives every rank unittest's semantics: cleanups run whatever happened in setUp, a failing cleanup
    is an error, a body failure and a tearDown error are both kept, ``self.subTest`` is reported.
    """

    def __init__(self, recorder: subtests.SubtestRecorder, rank: int = 0, notice: Any = None):
        super().__init__()
        self.post_mortem = False  # --pdb: the first failure opens a post-mortem prompt (harness.ranks.debugger)
        self.problems: list[tuple[str, BaseException]] = []
        self.skip_reason: str | None = None
        self.xfail_reason: str | None = None  # pytest.xfail() was called: the test ended as an expected failure
        self.recorder = recorder
        self.rank = rank
        self.notice = notice
        self._early: set[int] = set()  # the errors take_early saw (ids of their exceptions)

    def _problem(self, err: Any) -> None:
        exc = err[1] if err[1] is not None else err[0]()
        pytest_outcome = pytest_outcomes.outcome(exc)  # pytest.skip()/xfail() in setUp or the body: not a problem
        if pytest_outcome is not None and pytest_outcome[0] == SKIPPED:
            self.skip_reason = pytest_outcome[1]
            return
        if pytest_outcome is not None and pytest_outcome[0] == XFAIL:
            self.xfail_reason = pytest_outcome[1]
            return
        self.problems.append((FAILED if isinstance(exc, AssertionError) or pytest_outcome else ERROR, exc))
        if self.post_mortem and len(self.problems) == 1 and not isinstance(exc, (bdb.BdbQuit, debugger.NoTerminal)):
            # before the parent hears of it: the peers wait (no grace yet) while the user looks
            debugger.post_mortem(exc)

    def _tell_parent(self) -> None:
        """The first failure of the test (setUp or the body), sent before tearDown and the cleanups run."""
        if self.notice is None or len(self.problems) != 1:
            return
        status, exc = self.problems[0]
        try:
            kind, message, tb = capture_exception(exc)
            self.notice(RankResult(rank=self.rank, status=status, exc_type=kind, message=message, traceback=tb,
                                   subtests=list(self.recorder.outcomes)))
        except Exception:  # the final result still goes to the parent; this is only a head start
            pass

    def addError(self, test: Any, err: Any) -> None:
        if self._taken_early(err):
            return
        self._problem(err)
        self._tell_parent()

    def addFailure(self, test: Any, err: Any) -> None:
        if self._taken_early(err):
            return
        self._problem(err)
        self._tell_parent()

    def take_early(self, test: Any) -> None:
        """Before tearDown: the outcome of setUp and the body as far as unittest holds it back. Python 3.10's
        unittest keeps it in ``test._outcome`` (``errors``, ``skipped``) until tearDown and the cleanups ran, and
        reports it after them; 3.11 on reports it at once, and has neither list. Taken here, the peers hear of a
        failure before this rank's tearDown, on every Python (a peer stuck waiting for this rank is let go
        after the grace, not the timeout); unittest's later report of the same error is not counted twice."""
        outcome = getattr(test, "_outcome", None)
        for case, exc_info in list(getattr(outcome, "errors", ())):
            if case is test and exc_info is not None and id(exc_info[1]) not in self._early:
                self._early.add(id(exc_info[1]))
                self._problem(exc_info)
                self._tell_parent()
        for case, reason in list(getattr(outcome, "skipped", ())):
            if case is test and self.skip_reason is None:
                self.skip_reason = reason

    def _taken_early(self, err: Any) -> bool:
        if id(err[1]) in self._early:
            self._early.discard(id(err[1]))
            return True
        return False

    def addSkip(self, test: Any, reason: str) -> None:
        self.skip_reason = reason

    # @expectedFailure is the parent's to judge (it decorates the method there too): the rank reports
    # what happened, and the parent's unittest turns a failure into an expected one.
    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self._problem(err)

    def addUnexpectedSuccess(self, test: Any) -> None:
        pass

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        params = {k: shown_value(v) for k, v in subtest.params.items()}
        if isinstance(subtest._message, str):  # unittest's sentinel when subTest() was given no message
            params = {"msg": subtest._message, **params}
        outcome = SubtestOutcome(params, PASSED) if err is None else SubtestOutcome.from_exception(params, err[1])
        self.recorder.outcomes.append(outcome)


def _bound_method(test: Any, task: Task, fn: Any) -> Any:
    """The callable unittest runs as the test: the method, or one hypothesis example of it."""
    if task.kwargs is None:
        return None
    hyp = fn.hypothesis
    inner = getattr(hyp, "_harness_original_inner", None) or hyp.inner_test
    kwargs = {**getattr(fn, PARAMS_ATTR, {}), **task.kwargs}  # a parametrized test's values, then the example

    @functools.wraps(fn)
    def example() -> None:
        inner(test, **{name: _in_rank(value, test) for name, value in kwargs.items()})

    return example


def _in_rank(value: Any, test: Any) -> Any:
    """A drawn value as the test body gets it: a drawn mesh (harness.strategies) built into the DeviceMesh it
    describes, inside the test's run (after setUp, on its process group); any other value as it came."""
    make = getattr(value, "harness_in_rank", None)
    return make(test.device_type) if callable(make) else value


def _teardown_after_every_body(test: Any, collector: _RankResultCollector, body_ended: Any) -> None:
    """The test's tearDown and cleanups start once every rank ended the body (``body_ended`` waits for the world).

    Upstream runs ``tearDown`` in the parent after every rank ended; a test whose ``tearDown`` removes what its
    peers still use (the ``FileStore`` file of a group it made on ``self.file_name``) relies on that. Only a test
    with a ``tearDown`` of its own or a cleanup waits: there is nothing to order otherwise. A rank that does not
    wait ends its test, which lets the others go as well.
    """
    waited: list[bool] = []

    def wait() -> None:
        if waited:
            return
        waited.append(True)
        collector.take_early(test)
        if collector.problems:
            status = collector.problems[0][0]
        elif collector.xfail_reason is not None:
            status = XFAIL
        else:
            status = SKIPPED if collector.skip_reason is not None else PASSED
        body_ended(status)

    if type(test).tearDown is not unittest.TestCase.tearDown:
        tear_down = test.tearDown

        def tearDown() -> None:  # noqa: N802 - unittest's name
            wait()
            tear_down()

        test.tearDown = tearDown
    do_cleanups = test.doCleanups

    def doCleanups() -> Any:  # noqa: N802 - unittest's name
        if getattr(test, "_cleanups", None):
            wait()
        return do_cleanups()

    test.doCleanups = doCleanups


def _backend_asked(test: Any, marks: dict[str, Any]) -> str | None:
    """The backend the test asks for: ``@with_comms(backend=...)``, else its class's own ``backend`` (an
    upstream-style override, said in the test's words); None: it asks for none, the placement's is taken."""
    if isinstance(marks["comms"], str):
        return marks["comms"]
    return test._harness_asked_backend()


def run_task(task: Task, ctx: RankContext) -> RankResult:
    """Run one test as this rank and turn whatever happened into a RankResult.

    Then, with the test's frames and exceptions gone, the GPU is checked (harness.ranks.cuda_state): a CUDA
    context the test broke, or memory it left referenced, is what the test left that only fresh ranks
    undo, whatever HARNESS_ENV_CHANGED says.
    """
    start = time.monotonic()
    flight_recorder.enable()  # before the first process group: torch's flight recorder (harness.ranks.recorder)
    flight_recorder.new_task()
    baseline = cuda_state.before_test()
    result = _run_in_rank(task, ctx)
    broken, left = cuda_state.after_test(baseline, f"{result.exc_type}: {result.message}")
    if broken:
        result.cuda_broken = broken
        result.altered.append(cuda_state.broken_sentence(broken))
    result.altered += left
    result.duration = time.monotonic() - start
    return result


def _run_in_rank(task: Task, ctx: RankContext) -> RankResult:
    from harness.testing.decorators import markers

    pid = os.getpid()  # a child the test forked that returns here must never act as this rank
    snapshot = None
    recorder = subtests.SubtestRecorder(ctx.meet)
    result = RankResult(rank=ctx.rank, status=PASSED)
    keeper = ctx.keeper
    test: Any = None
    debug_hooks = None
    trigger = None
    collector = None
    with Capture(ctx.out_path, ctx.conf.output_limit) as cap:
        try:
            cls = _resolve(task)
            test = cls(task.method)
            test._harness_bind(ctx.rank, task, ctx.placement)
            test._harness_subtests = recorder
            _reset_state(task.seed, ctx.gpu)
            fn = getattr(cls, task.method)
            marks = markers(fn)
            if task.fresh_pg and keeper is not None:
                keeper.release()
            if keeper is not None:
                wants_pg = bool(marks["comms"]) or getattr(cls, "_harness_auto_comms", False)
                if wants_pg:
                    backend = ctx.placement.backend_for(_backend_asked(test, marks))
                    # NCCL binds its communicator to the rank's GPU; gloo takes CUDA tensors as they come
                    keeper.ensure(backend, group_timeout(task.timeout), ctx.gpu if "nccl" in backend else None)
                else:
                    # A plain MultiProcessTestCase makes its own group (upstream style, file://self.file_name).
                    keeper.release()
            flight_recorder.begin_test()  # the collectives recorded from here on are the test's
            # before the state is recorded, so that isolation finds the hooks as it left them
            debug_hooks = debugger.install(task.test_id, ctx.rank, task.debug, task.post_mortem)
            if task.debugpy is not None:
                debugger.wait_for_ide(task.debugpy + ctx.rank, task.test_id, ctx.rank)
            snapshot = isolation.record() if task.isolate else None
            if task.faults is not None:  # after the record: the environment and torch's functions are put back
                trigger = fault_trigger.arm(task.faults, ctx.rank, task.attempt, task.fault_log, task.module,
                                            count=task.count_calls)
            example = _bound_method(test, task, fn)
            if example is not None:
                setattr(test, task.method, example)
            collector = _RankResultCollector(recorder, ctx.rank, ctx.notice)
            collector.post_mortem = task.post_mortem
            if ctx.body_ended is not None:
                _teardown_after_every_body(test, collector, ctx.body_ended)
            test.run(collector)
            if collector.problems:
                status, exc = collector.problems[0]
                result.status = status
                result.exc_type, result.message, result.traceback = capture_exception(exc)
                result.exc_types = type_names(exc)
                if isinstance(exc, bdb.BdbQuit):
                    result.message = debugger.quit_message()
                for _, more in collector.problems[1:]:
                    result.traceback = (result.traceback.rstrip() + "\n\nAnd, in tearDown or a cleanup of the "
                                        "same test:\n\n" + capture_exception(more)[2])
            elif collector.xfail_reason is not None:
                result.status, result.message = XFAIL, collector.xfail_reason
            elif collector.skip_reason is not None:
                result.status, result.message = SKIPPED, collector.skip_reason
        except unittest.SkipTest as exc:
            result.status, result.message = SKIPPED, str(exc)
        except BaseException as exc:  # noqa: B902 - CheckpointException and friends derive from BaseException
            pytest_outcome = pytest_outcomes.outcome(exc)  # pytest.skip() where unittest's run does not catch it
            if pytest_outcome is not None and pytest_outcome[0] in (SKIPPED, XFAIL):
                result.status, result.message = pytest_outcome
            else:
                result.exc_type, result.message, result.traceback = capture_exception(exc)
                result.exc_types = type_names(exc)
                result.status = FAILED if isinstance(exc, AssertionError) or pytest_outcome else ERROR
            if test is not None and getattr(test, "_cleanups", None):
                try:
                    test.doCleanups()  # unittest skips them when a BaseException escapes the test
                except BaseException:  # noqa: B902
                    pass
        finally:
            if os.getpid() != pid:
                _end_forked_child(result)
            result.subtests = recorder.outcomes
            if trigger is not None:
                result.faults = trigger.disarm()
            if snapshot is not None:
                result.altered = isolation.restore(snapshot)
            if debug_hooks is not None:
                debugger.uninstall(debug_hooks)
            if keeper is not None:
                try:
                    _after_test(keeper, result)
                except BaseException as exc:  # noqa: B902
                    if result.status == PASSED:
                        result.exc_type, result.message, result.traceback = capture_exception(exc)
                        result.status = ERROR
            _let_go(test, collector)
    result.output = cap.text
    return result


def _let_go(test: Any, collector: "_RankResultCollector | None") -> None:
    """The result holds the failure as text now: nothing of the test may outlive it into the next test.

    A failure's traceback holds the test's frames and their locals (a CUDA tensor of hundreds of MiB, say);
    the test instance holds the collector (its cleanups) and so the traceback. A fresh process would hold
    none of it, and ``cuda_state.after_test`` would count it as memory the test left referenced: the test is
    unbound (no module global keeps it) and its exceptions' frames are cleared, so their locals go at once.
    """
    if test is not None and hasattr(test, "_harness_unbind"):
        test._harness_unbind()
    if collector is None:
        return
    seen: set[int] = set()
    for _, exc in collector.problems:
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            for frame, _ in traceback.walk_tb(exc.__traceback__):
                if frame.f_code.co_flags & _SUSPENDABLE:
                    continue  # a generator's frame may be suspended, not over: clearing it would close it
                try:
                    frame.clear()
                except RuntimeError:  # still executing
                    pass
            exc = exc.__cause__ or exc.__context__
    collector.problems.clear()


_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _end_forked_child(result: RankResult) -> None:
    """A child the test forked came back through the harness: end it as it would have ended on its own."""
    code = 0 if result.status in (PASSED, SKIPPED) else 1
    if result.exc_type == "SystemExit":  # sys.exit(n) in the child: its parent may wait for n
        code = int(result.message) if result.message.lstrip("-").isdigit() else int(bool(result.message))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _after_test(keeper: Any, result: RankResult) -> None:
    import torch
    import torch.distributed as dist

    if keeper.backend is not None:
        result.default_group = dist.is_initialized()  # the parent compares the ranks (verdict.world_changes)
    flight_recorder.note_groups()  # a report after this test still names the groups it made

    try:
        keeper.forget_if_gone()
        if result.is_bad and keeper.backend is not None and "nccl" not in keeper.backend:
            # Closing a gloo group wakes the peers still blocked on this rank at once ("Connection closed
            # by peer") instead of at the timeout; the parent rebuilds the group for the next test.
            keeper.release()
            return
        keeper.destroy_subgroups()
        if keeper.backend is None:
            keeper.release()  # a group the test made itself (not ours) does not outlive the test
    finally:
        forget_destroyed_groups()  # whoever destroyed a group (the test or the harness), no cache hands out its mesh
