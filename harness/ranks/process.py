"""A spawned rank's life: start, say Ready, run each Task the pool's pipe brings (harness.ranks.task), end.

:func:`worker_main` is what a pool (harness.parent.pool) starts in each rank process: it puts the rank on its
GPU (harness.ranks.gpu), makes its context (its placement, its process-group keeper), serves the protocol's
messages (harness.shared.protocol) until Shutdown, and dies with the parent however the parent ends.
"""
from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import threading
import time
from typing import Any

from harness.ranks import recorder
from harness.shared.config import Settings
from harness.ranks.gpu import take_gpu
from harness.shared.processes import gone
from harness.shared.outcome import RankResult, SubtestOutcome, capture_exception, sendable
from harness.shared.placement import Placement
from harness.shared.protocol import BodyEnded, Done, Failing, Go, Meet, Ready, Shutdown, StartFailed, Task, send
from harness.ranks.task import RankContext, run_task

__all__ = ["worker_main"]


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
    """The run's process is gone. A spawned rank is its child; a forked one the template's (harness.parent.template),
    so its parent is watched by pid (a zombie counts as gone: it will never send another task)."""
    if os.getppid() == parent_pid:
        return False
    return gone(parent_pid)


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

    ``placement``: the placement the pool serves (harness.shared.placement: its device and whether ranks share GPUs).
    ``conf``: the run's settings, in force here whatever this process's environment says.
    ``start``: for a rank forked from the template, what a spawned rank would have inherited from the parent
    (``harness.parent.template.RankStart``: its environment, stdout and stderr), applied before anything else.
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
        send(conn, Meet(index, outcome))
        reply = conn.recv()
        if isinstance(reply, Shutdown):  # the parent is stopping the pool (an interrupt): nothing more to do here
            os._exit(0)
        if not isinstance(reply, Go):
            from harness.shared.errors import HarnessError

            raise HarnessError(reply.why)

    return meet


def _parent_body_end(conn: Any) -> Any:
    """The body ended here: tell the parent how (BodyEnded), and start tearDown on its word (Go)."""

    def body_ended(status: str) -> None:
        send(conn, BodyEnded(status))
        reply = conn.recv()
        if isinstance(reply, Shutdown):  # the parent is stopping the pool (an interrupt): nothing more to do here
            os._exit(0)

    return body_ended


def _parent_notice(conn: Any) -> Any:
    """Send the parent a failure as it happens (Failing); no reply is awaited."""

    def notice(result: RankResult) -> None:
        send(conn, Failing(sendable(result)))

    return notice


def _arm_stack_dumps(stack_file: Any) -> None:
    """Crashes and the parent's SIGUSR1 write every thread's stack to ``stack_file``, whatever a test did."""
    faulthandler.enable(file=stack_file, all_threads=True)
    # Unregister first: register() does nothing while faulthandler believes it still holds the signal,
    # even after a test's signal.signal(SIGUSR1, ...) took it over.
    faulthandler.unregister(signal.SIGUSR1)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True, chain=False)


def _serve(conn: Any, rank: int, world_size: int, placement: Placement, pool_dir: str, threads: int,
           conf: Settings) -> None:
    stack_file = open(os.path.join(pool_dir, f"rank{rank}.stack"), "w")
    _arm_stack_dumps(stack_file)
    try:
        import torch

        from harness.ranks.comms import ProcessGroupKeeper

        torch.set_num_threads(threads)
        gpu = take_gpu(rank, world_size, placement.shared) if placement.device_type == "cuda" else None
        import torch.distributed as dist

        store_path = os.path.join(pool_dir, "store")
        ctx = RankContext(rank, world_size, placement, os.path.join(pool_dir, f"rank{rank}.out"),
                          ProcessGroupKeeper(lambda: dist.FileStore(store_path, world_size), rank, world_size), conf,
                          meet=_parent_meeting(conn), notice=_parent_notice(conn), gpu=gpu,
                          body_ended=_parent_body_end(conn))
    except BaseException as exc:  # noqa: B902
        send(conn, StartFailed(capture_exception(exc)))
        return
    recorder.serve_dumps(pool_dir, rank)  # the parent can read this rank's collectives, even in a hang
    send(conn, Ready(os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if not isinstance(task, Task):  # Shutdown
            break
        result = run_task(task, ctx)
        _arm_stack_dumps(stack_file)
        send(conn, Done(sendable(result)))
    try:
        ctx.keeper.release()
    except Exception:
        pass
