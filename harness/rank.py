"""Inside a rank process: wait for tasks, run each test body as this rank, send back a RankResult.

A spawned rank (:func:`worker_main`) serves the pool's pipe (harness.protocol's messages); a rank
launched by torchrun calls :func:`run_task` itself (harness.torchrun). Either way a test runs here
the same way: bound to this rank, from a fresh rank's state, its output captured, its process state
put back and its GPU checked after it.
"""
from __future__ import annotations

import dataclasses
import faulthandler
import functools
import importlib
import importlib.util
import os
import shutil
import signal
import sys
import threading
import time
import unittest
from typing import Any

from harness import collectives, cuda_state, isolation, subtests
from harness.comms import forget_destroyed_groups
from harness.config import Settings
from harness.placement import Placement
from harness.outcome import (ERROR, FAILED, PASSED, SKIPPED, RankResult, SubtestOutcome, capture_exception, picklable,
                             read_bounded, sendable)
from harness.protocol import Done, Failing, Go, Meet, Ready, Shutdown, StartFailed, Task, group_timeout

__all__ = ["RankContext", "run_task", "worker_main"]

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


def write_to_real_stderr(text: str) -> None:
    """Write past a test's capture (used by torchrun's watchdog while the test's thread is stuck)."""
    fd = _Capture.active_stderr if _Capture.active_stderr is not None else 2
    os.write(fd, text.encode("utf-8", "replace"))


class _Capture:
    """Send fds 1 and 2 to a file for one test, so C++ output (gloo, NCCL) is caught as well."""

    active_stderr: int | None = None  # the real stderr while a capture is on

    def __init__(self, path: str, limit: int):
        self.path = path
        self.limit = limit

    def __enter__(self) -> "_Capture":
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        self.file = open(self.path, "w+b")
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        _Capture.active_stderr = self.saved[1]
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        _Capture.active_stderr = None
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.file.close()
        self.text = read_bounded(self.path, limit=self.limit)


class _RankResultCollector(unittest.TestResult):
    """unittest's own outcome calls, made inside the rank, kept as data for the RankResult.

    Running the test through ``TestCase.run`` (rather than calling setUp, the body and tearDown by hand)
    gives every rank unittest's semantics: cleanups run whatever happened in setUp, a failing cleanup
    is an error, a body failure and a tearDown error are both kept, ``self.subTest`` is reported.
    """

    def __init__(self, recorder: subtests.SubtestRecorder, rank: int = 0, notice: Any = None):
        super().__init__()
        self.problems: list[tuple[str, BaseException]] = []
        self.skip_reason: str | None = None
        self.recorder = recorder
        self.rank = rank
        self.notice = notice

    def _problem(self, err: Any) -> None:
        exc = err[1] if err[1] is not None else err[0]()
        self.problems.append((FAILED if isinstance(exc, AssertionError) else ERROR, exc))

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
        self._problem(err)
        self._tell_parent()

    def addFailure(self, test: Any, err: Any) -> None:
        self._problem(err)
        self._tell_parent()

    def addSkip(self, test: Any, reason: str) -> None:
        self.skip_reason = reason

    # @expectedFailure is the parent's to judge (it decorates the method there too): the rank reports
    # what happened, and the parent's unittest turns a failure into an expected one.
    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self._problem(err)

    def addUnexpectedSuccess(self, test: Any) -> None:
        pass

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        params = {k: picklable(v) for k, v in subtest.params.items()}
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
    kwargs = task.kwargs

    @functools.wraps(fn)
    def example() -> None:
        inner(test, **kwargs)

    return example


def _backend_asked(test: Any, marks: dict[str, Any]) -> str | None:
    """The backend the test asks for: ``@with_comms(backend=...)``, else its class's own ``backend`` (an
    upstream-style override, said in the test's words); None: it asks for none, the placement's is taken."""
    from harness.case import MultiProcessTestCase

    if isinstance(marks["comms"], str):
        return marks["comms"]
    if getattr(type(test), "backend", None) is MultiProcessTestCase.__dict__["backend"]:
        return None
    return test.backend


def run_task(task: Task, ctx: RankContext) -> RankResult:
    """Run one test as this rank and turn whatever happened into a RankResult.

    Then, with the test's frames and exceptions gone, the GPU is checked (harness.cuda_state): a CUDA
    context the test broke, or memory it left referenced, is what the test left that only fresh ranks
    undo, whatever HARNESS_ENV_CHANGED says.
    """
    start = time.monotonic()
    collectives.enable()  # before the first process group: torch's flight recorder (harness.collectives)
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
    from harness.decorators import markers

    pid = os.getpid()  # a child the test forked that returns here must never act as this rank
    snapshot = None
    recorder = subtests.SubtestRecorder(ctx.meet)
    result = RankResult(rank=ctx.rank, status=PASSED)
    keeper = ctx.keeper
    test: Any = None
    with _Capture(ctx.out_path, ctx.conf.output_limit) as cap:
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
            collectives.begin_test()  # the collectives recorded from here on are the test's
            snapshot = isolation.record() if task.isolate else None
            example = _bound_method(test, task, fn)
            if example is not None:
                setattr(test, task.method, example)
            collector = _RankResultCollector(recorder, ctx.rank, ctx.notice)
            test.run(collector)
            if collector.problems:
                status, exc = collector.problems[0]
                result.status = status
                result.exc_type, result.message, result.traceback = capture_exception(exc)
                for _, more in collector.problems[1:]:
                    result.traceback = (result.traceback.rstrip() + "\n\nAnd, in tearDown or a cleanup of the "
                                        "same test:\n\n" + capture_exception(more)[2])
            elif collector.skip_reason is not None:
                result.status, result.message = SKIPPED, collector.skip_reason
        except unittest.SkipTest as exc:
            result.status, result.message = SKIPPED, str(exc)
        except BaseException as exc:  # noqa: B902 - CheckpointException and friends derive from BaseException
            result.exc_type, result.message, result.traceback = capture_exception(exc)
            result.status = FAILED if isinstance(exc, AssertionError) else ERROR
            if test is not None and getattr(test, "_cleanups", None):
                try:
                    test.doCleanups()  # unittest skips them when a BaseException escapes the test
                except BaseException:  # noqa: B902
                    pass
        finally:
            if os.getpid() != pid:
                _end_forked_child(result)
            result.subtests = recorder.outcomes
            if snapshot is not None:
                result.altered = isolation.restore(snapshot)
            if keeper is not None:
                try:
                    _after_test(keeper, result)
                except BaseException as exc:  # noqa: B902
                    if result.status == PASSED:
                        result.exc_type, result.message, result.traceback = capture_exception(exc)
                        result.status = ERROR
    result.output = cap.text
    return result


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
    collectives.note_groups()  # a report after this test still names the groups it made

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


def _orphaned_exit(pool_dir: str) -> None:
    """The parent is gone (SIGKILLed, say) and cannot clean up: remove the pool's files and leave."""
    # Every rank tries, concurrently; an entry one of them lists may be gone when it gets to it, so try
    # again until the directory is gone (or give up after two seconds).
    for _ in range(20):
        shutil.rmtree(pool_dir, ignore_errors=True)
        if not os.path.exists(pool_dir):
            break
        time.sleep(0.1)
    os._exit(70)


_terminated_at: float | None = None  # when this rank got SIGTERM


def _on_sigterm(signum: int, frame: Any) -> None:
    # SIGTERM to the whole process group (`timeout`, a CI cancel) reaches the parent too, and the parent
    # cleans up (it stops this rank and removes the pool's files). The watch thread ends the rank itself
    # if the parent dies without doing so, or if SIGTERM was meant for this rank alone.
    global _terminated_at
    if _terminated_at is None:
        _terminated_at = time.monotonic()


def _parent_gone(parent_pid: int) -> bool:
    """The run's process is gone. A spawned rank is its child; a forked one the template's (harness.template),
    so its parent is watched by pid (a zombie counts as gone: it will never send another task)."""
    if os.getppid() == parent_pid:
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{parent_pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False  # no /proc (not Linux): the pid is there, so is the parent


def _watch_parent(parent_pid: int, pool_dir: str) -> None:
    """Die with the parent, even when it was SIGKILLed and could not tell us, and clean up after it."""
    while True:
        time.sleep(0.25)
        if _parent_gone(parent_pid):
            _orphaned_exit(pool_dir)
        if _terminated_at is not None and time.monotonic() - _terminated_at > 5.0:
            os._exit(128 + signal.SIGTERM)  # the parent reports it as a rank that died of SIGTERM


def worker_main(conn: Any, rank: int, world_size: int, placement: Placement, pool_dir: str, threads: int,
                parent_pid: int, conf: Settings, start: Any = None) -> None:
    """Entry point of a rank process of a pool; serves tasks until the parent sends Shutdown or goes away.

    ``placement``: the placement the pool serves (harness.placement: its device and whether ranks share GPUs).
    ``conf``: the run's settings, in force here whatever this process's environment says.
    ``start``: for a rank forked from the template, what a spawned rank would have inherited from the parent
    (``harness.template.RankStart``: its environment, stdout and stderr), applied before anything else.
    """
    if start is not None:
        start.apply()
    # Ctrl-C reaches every process of the terminal's group: the parent decides (it marks the test
    # interrupted and stops the ranks), so a rank never turns it into a test failure of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    threading.Thread(target=_watch_parent, args=(parent_pid, pool_dir), daemon=True,
                     name="harness-watch-parent").start()
    try:
        _serve(conn, rank, world_size, placement, pool_dir, threads, conf)
    except (BrokenPipeError, EOFError, ConnectionError, OSError):
        if not _parent_gone(parent_pid):
            raise
    if _parent_gone(parent_pid):
        _orphaned_exit(pool_dir)


def _parent_meeting(conn: Any) -> Any:
    """Between two run_subtests combinations: tell the parent how this one went, wait for the word to go on.

    The meeting goes through the parent, not the test's process group: a rank whose combination failed
    while a peer is still inside one of its collectives would wait forever at a barrier on that group.
    The parent sees the failure, gives the peers HARNESS_PEER_GRACE, and stops the test.
    """

    def meet(index: int, outcome: SubtestOutcome) -> None:
        conn.send(Meet(index, outcome))
        reply = conn.recv()
        if isinstance(reply, Shutdown):  # the parent is stopping the pool (an interrupt): nothing more to do here
            os._exit(0)
        if not isinstance(reply, Go):
            from harness.errors import HarnessError

            raise HarnessError(reply.why)

    return meet


def _parent_notice(conn: Any) -> Any:
    """Send the parent a failure as it happens (Failing); no reply is awaited."""

    def notice(result: RankResult) -> None:
        conn.send(Failing(sendable(result)))

    return notice


def _arm_stack_dumps(stack_file: Any) -> None:
    """Crashes and the parent's SIGUSR1 write every thread's stack to ``stack_file``, whatever a test did."""
    faulthandler.enable(file=stack_file, all_threads=True)
    # Unregister first: register() does nothing while faulthandler believes it still holds the signal,
    # even after a test's signal.signal(SIGUSR1, ...) took it over.
    faulthandler.unregister(signal.SIGUSR1)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)


def take_gpu(local_rank: int, ranks_on_node: int, shared: bool) -> int:
    """Put this rank on its GPU (``cuda:local_rank % G``); sharing a GPU, cap its share of the GPU's memory.

    Ranks that share a GPU each have their own CUDA context and caching allocator; without a cap one rank
    can take the whole GPU and the others fail with out-of-memory errors that are not theirs. Each gets
    an equal share of 90% of the memory (the rest is left for the CUDA contexts themselves).
    """
    import torch

    gpus = torch.cuda.device_count()
    device = local_rank % gpus
    torch.cuda.set_device(device)
    if shared:
        on_this_gpu = len(range(device, ranks_on_node, gpus))
        if on_this_gpu > 1:
            torch.cuda.set_per_process_memory_fraction(0.9 / on_this_gpu, device)
    return device


def _serve(conn: Any, rank: int, world_size: int, placement: Placement, pool_dir: str, threads: int,
           conf: Settings) -> None:
    stack_file = open(os.path.join(pool_dir, f"rank{rank}.stack"), "w")
    _arm_stack_dumps(stack_file)
    try:
        import torch

        from harness.comms import ProcessGroupKeeper

        torch.set_num_threads(threads)
        gpu = take_gpu(rank, world_size, placement.shared) if placement.device_type == "cuda" else None
        import torch.distributed as dist

        store_path = os.path.join(pool_dir, "store")
        ctx = RankContext(rank, world_size, placement, os.path.join(pool_dir, f"rank{rank}.out"),
                          ProcessGroupKeeper(lambda: dist.FileStore(store_path, world_size), rank, world_size), conf,
                          meet=_parent_meeting(conn), notice=_parent_notice(conn), gpu=gpu)
    except BaseException as exc:  # noqa: B902
        conn.send(StartFailed(capture_exception(exc)))
        return
    collectives.serve_dumps(pool_dir, rank)  # the parent can read this rank's collectives, even in a hang
    conn.send(Ready(os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if not isinstance(task, Task):  # Shutdown
            break
        result = run_task(task, ctx)
        _arm_stack_dumps(stack_file)
        conn.send(Done(sendable(result)))
    try:
        ctx.keeper.release()
    except Exception:
        pass
