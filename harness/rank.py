"""Inside a rank process: wait for tasks, run each test body as this rank, send back a RankResult."""
from __future__ import annotations

import dataclasses
import faulthandler
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

from harness import subtests
from harness.outcome import ERROR, FAILED, PASSED, SKIPPED, RankResult, capture_exception

__all__ = ["Task", "RankContext", "execute", "worker_main"]

# Frames of this module are hidden from unittest's tracebacks.
__unittest = True


@dataclasses.dataclass
class Task:
    """What the parent asks every rank to run: the same object goes to each rank."""

    module: str
    module_file: str | None
    qualname: str
    method: str
    device_type: str
    seed: int
    kwargs: dict[str, Any] | None = None  # a hypothesis example; None for a plain test
    temp_dir: str | None = None
    file_name: str | None = None
    fresh_pg: bool = False  # the last test went wrong: rebuild the process group first
    world_size: int = 0  # the parent's world size for this test; the ranks' self.world_size says it (0: unset)


@dataclasses.dataclass
class RankContext:
    """What a rank knows about itself for its whole life."""

    rank: int
    world_size: int
    device_type: str
    out_path: str
    keeper: Any  # comms.ProcessGroupKeeper


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


def _reset_state(seed: int) -> None:
    """Every test starts the same way on every rank, whatever the previous test did."""
    import random

    import torch

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

    def __init__(self, path: str):
        self.path = path

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
        self.file.seek(0)
        self.text = self.file.read().decode("utf-8", "replace")
        self.file.close()


def execute(task: Task, ctx: RankContext) -> RankResult:
    """Run one test as this rank and turn whatever happened into a RankResult."""
    from harness.comms import normalize_backend
    from harness.decorators import markers

    start = time.monotonic()
    recorder = subtests.SubtestRecorder()
    result = RankResult(rank=ctx.rank, status=PASSED)
    keeper = ctx.keeper
    with _Capture(ctx.out_path) as cap:
        try:
            cls = _resolve(task)
            test = cls(task.method)
            test._harness_bind(ctx.rank, task, ctx.device_type)
            _reset_state(task.seed)
            fn = getattr(cls, task.method)
            marks = markers(fn)
            if task.fresh_pg and keeper is not None:
                keeper.release()
            if keeper is not None:
                wants_pg = bool(marks["comms"]) or getattr(cls, "_harness_auto_comms", False)
                if wants_pg:
                    asked = marks["comms"] if isinstance(marks["comms"], str) else test.backend
                    keeper.ensure(normalize_backend(asked, ctx.device_type), ctx.device_type)
                else:
                    # A plain MultiProcessTestCase makes its own group (upstream style, file://self.file_name).
                    keeper.release()
            subtests._recorder = recorder
            test.setUp()
            try:
                if task.kwargs is not None:
                    hyp = fn.hypothesis
                    inner = getattr(hyp, "_harness_original_inner", None) or hyp.inner_test
                    inner(test, **task.kwargs)
                else:
                    getattr(test, task.method)()
            finally:
                try:
                    test.tearDown()
                finally:
                    test.doCleanups()
        except unittest.SkipTest as exc:
            result.status, result.message = SKIPPED, str(exc)
        except BaseException as exc:  # noqa: B902 - CheckpointException and friends derive from BaseException
            result.exc_type, result.message, result.traceback = capture_exception(exc)
            result.status = FAILED if isinstance(exc, AssertionError) else ERROR
        finally:
            subtests._recorder = None
            result.subtests = recorder.outcomes
            if keeper is not None:
                try:
                    _after_test(keeper, result)
                except BaseException as exc:  # noqa: B902
                    if result.status == PASSED:
                        result.exc_type, result.message, result.traceback = capture_exception(exc)
                        result.status = ERROR
    result.output = cap.text
    result.duration = time.monotonic() - start
    return result


def _after_test(keeper: Any, result: RankResult) -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # the next test in this process starts with the GPU memory given back
    keeper.forget_if_gone()
    if result.is_bad and keeper.backend is not None and "nccl" not in keeper.backend:
        # Closing a gloo group wakes the peers still blocked on this rank at once ("Connection closed
        # by peer") instead of at the timeout; the parent rebuilds the group for the next test.
        keeper.release()
        return
    keeper.destroy_subgroups()
    if keeper.backend is None:
        keeper.release()  # a group the test made itself (not ours) does not outlive the test


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


def _watch_parent(parent_pid: int, pool_dir: str) -> None:
    """Die with the parent, even when it was SIGKILLed and could not tell us, and clean up after it."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            _orphaned_exit(pool_dir)


def worker_main(conn: Any, rank: int, world_size: int, device_type: str, pool_dir: str, threads: int,
                parent_pid: int) -> None:
    """Entry point of a spawned rank process; serves tasks until the parent sends None or goes away."""
    threading.Thread(target=_watch_parent, args=(parent_pid, pool_dir), daemon=True,
                     name="harness-watch-parent").start()
    try:
        _serve(conn, rank, world_size, device_type, pool_dir, threads)
    except (BrokenPipeError, EOFError, ConnectionError, OSError):
        if os.getppid() == parent_pid:
            raise
    if os.getppid() != parent_pid:
        _orphaned_exit(pool_dir)


def _serve(conn: Any, rank: int, world_size: int, device_type: str, pool_dir: str, threads: int) -> None:
    stack_file = open(os.path.join(pool_dir, f"rank{rank}.stack"), "w")
    faulthandler.enable(file=stack_file, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)
    try:
        import torch

        from harness.comms import ProcessGroupKeeper

        torch.set_num_threads(threads)
        if device_type == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        import torch.distributed as dist

        store_path = os.path.join(pool_dir, "store")
        ctx = RankContext(rank, world_size, device_type, os.path.join(pool_dir, f"rank{rank}.out"),
                          ProcessGroupKeeper(lambda: dist.FileStore(store_path, world_size), rank, world_size))
    except BaseException as exc:  # noqa: B902
        conn.send(("error", capture_exception(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if task is None:
            break
        conn.send(execute(task, ctx))
    try:
        ctx.keeper.release()
    except Exception:
        pass
