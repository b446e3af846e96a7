"""Under torchrun: spawn nothing; this process is one rank, and rank 0 reports for every rank.

When torchrun (torch.distributed.elastic) set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``MASTER_ADDR``/``MASTER_PORT``, every process runs the same tests in the same order. Each runs the
body as its rank (the same ``rank.execute`` a pool worker uses) on the process group from ``env://``,
publishes its RankResult in torchrun's store (a side channel: a broken collective cannot block it),
and reads every other rank's, so every rank reaches the same verdict; rank 0 alone prints it and
writes the JUnit XML. A watchdog thread turns a hang into a reported timeout with the stacks and ends
the job; a rank that dies makes torchrun stop the job, and rank 0 says which test was running.
"""
from __future__ import annotations

import atexit
import dataclasses
import faulthandler
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest
from typing import Any

from harness.comms import ProcessGroupKeeper
from harness.placement import choose_placement
from harness.config import settings
from harness.decorators import gpus_needed, markers
from harness.errors import HarnessError, RankError
from harness.execution import TestRun, drive, skip_if_nccl_alone
from harness.hypothesis_support import is_hypothesis_test
from harness.outcome import PASSED, TIMEOUT, RankResult, merge, tidy_stack
from harness.rank import RankContext, Task, execute, take_gpu, write_to_real_stderr

__all__ = ["launched", "launched_rank", "run_as_launched_rank", "main_module_entry", "report_stream"]

# Frames of this module are hidden from unittest's tracebacks.
__unittest = True

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
_WENT = {"failed": "failed", "error": "raised", "skipped": "was skipped"}  # a combination's status, in words


def launched() -> bool:
    """True in a process that torchrun (or another env:// launcher) started as one rank."""
    return all(k in os.environ for k in _ENV) and ("MASTER_ADDR" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ)


def launched_rank() -> int:
    return int(os.environ.get("RANK", "0")) if launched() else 0


def report_stream() -> Any:
    """Where a runner writes its report: stderr on rank 0, nowhere on the other ranks."""
    if launched_rank() == 0:
        return sys.stderr
    return open(os.devnull, "w")


class _Job:
    """This process's place in the launched world, made once."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist


        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        conf = settings()
        # The node's local ranks are the world the placement is chosen for: one GPU per local rank on NCCL,
        # else the local ranks share the node's GPUs over gloo, else CPU (harness.placement).
        node = choose_placement(local_world, 0, conf.device)
        self.placement = dataclasses.replace(
            node, world_size=self.world_size,
            reason=f"{node.reason}, for the {local_world} local ranks of this node" if node.shared else node.reason)
        self.device_type = node.device_type
        self.skip_all = f"{node.skip} on this node" if node.skip else ""
        gpu = None
        if self.device_type == "cuda" and not self.skip_all:
            gpu = take_gpu(self.local_rank, local_world, node.shared)
        if conf.threads:
            torch.set_num_threads(conf.threads)
        store, _, _ = next(dist.rendezvous("env://", self.rank, self.world_size))
        self.store = dist.PrefixStore("harness", store)
        self.run_id = os.environ.get("TORCHELASTIC_RUN_ID", "") or os.environ.get("MASTER_PORT", "")
        self.scratch = tempfile.mkdtemp(prefix=f"harness-torchrun-r{self.rank}-")
        keeper = ProcessGroupKeeper(lambda: self.store, self.rank, self.world_size,
                                    timeout_s=conf.timeout_for(None) + 60, local_rank=self.local_rank)
        self.ctx = RankContext(self.rank, self.world_size, self.device_type,
                               os.path.join(self.scratch, "out"), keeper, shared=node.shared, gpu=gpu)
        self.seq = 0
        self.pg_suspect = False
        self.active: tuple[str, str] | None = None  # (store prefix, test id) of the test under way
        self.poisoned = ""  # set once a rank hung: the world cannot run another test
        self.current: dict[str, Any] | None = None
        self.lock = threading.Lock()
        self.watchdog = threading.Thread(target=self._watch, daemon=True, name="harness-torchrun-watchdog")
        self.watchdog.start()
        atexit.register(self._at_exit)
        if self.rank == 0:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        # A rank that dies (SIGSEGV, abort) prints its Python stack to the job's stderr, past any capture.
        self._crash_stream = os.fdopen(os.dup(2), "w")
        faulthandler.enable(file=self._crash_stream, all_threads=True)

    # ---- one test ------------------------------------------------------------------------------

    def run(self, test: Any, test_id: str, timeout: float, grace: float, kwargs: dict | None,
            temp_dir_wanted: bool) -> list[RankResult]:

        self.seq += 1
        prefix = f"t{self.seq}"
        self.active = (prefix, test_id)
        temp_dir = None
        if temp_dir_wanted:
            if self.rank == 0:
                temp_dir = tempfile.mkdtemp(prefix="harness-test-")
                self.store.set(f"{prefix}/temp_dir", temp_dir)
            else:
                temp_dir = self.store.get(f"{prefix}/temp_dir").decode()
                os.makedirs(temp_dir, exist_ok=True)
        file_name = os.path.join(tempfile.gettempdir(), f"harness-{self.run_id}-{self.seq}.store")
        task = Task(module=type(test).__module__,
                    module_file=getattr(sys.modules.get(type(test).__module__), "__file__", None),
                    qualname=type(test).__qualname__, method=test._testMethodName, device_type=self.device_type,
                    shared=self.placement.shared,
                    seed=settings().seed, kwargs=kwargs, temp_dir=temp_dir, file_name=file_name,
                    fresh_pg=self.pg_suspect, isolate=settings().env_changed != "off",
                    world_size=self.world_size)
        self.pg_suspect = False
        with self.lock:
            self.current = {"prefix": prefix, "deadline": time.monotonic() + timeout, "test_id": test_id,
                            "timeout": timeout, "grace": grace}
        self.ctx.meet = self._meeting(prefix, grace)
        try:
            result = execute(task, self.ctx)
        finally:
            with self.lock:
                self.current = None
            faulthandler.enable(file=self._crash_stream, all_threads=True)  # whatever the test did to it
        self.store.set(f"{prefix}/result/{self.rank}", pickle.dumps(result))
        results = self._collect(prefix, timeout + grace + 5)
        self.active = None
        # Every rank sees the same results, so every rank rebuilds the group before the next test alike.
        self.pg_suspect = any(r.is_bad for r in results)
        for r in results:
            if r.status == TIMEOUT:
                self.poisoned = f"the job cannot go on: {test_id} hung on rank {r.rank}"
            elif r.cuda_broken and not self.poisoned:
                # A launched rank cannot be replaced: the tests after this one would fail on the broken context.
                self.poisoned = (f"the job cannot go on: {test_id} broke the CUDA context on rank {r.rank} "
                                 f"({r.cuda_broken}); a launched rank cannot be replaced, so start the job again")
        if temp_dir:
            shutil.rmtree(temp_dir, ignore_errors=True)
        try:
            os.remove(file_name)
        except OSError:
            pass
        return results

    def _meeting(self, prefix: str, grace: float) -> Any:
        """run_subtests' meeting between two combinations, through torchrun's store (not the test's group).

        Each rank posts how its combination went and waits for the others. When a combination failed or
        was skipped (here or on a peer) and a peer has not arrived within HARNESS_PEER_GRACE, that peer is
        stuck inside the combination: this rank stops the test with that said, and, on gloo, closing its
        group on the way out (harness.rank) wakes the stuck peer at once instead of at the timeout.
        """

        def meet(index: int, outcome: Any) -> None:
            keys = [f"{prefix}/meet/{index}/{r}" for r in range(self.world_size)]
            self.store.set(keys[self.rank], f"{outcome.status}")
            trouble = None if outcome.status == PASSED else (time.monotonic(), f"it {_WENT[outcome.status]} here")
            while not self.store.check(keys):
                now = time.monotonic()
                if trouble is None:
                    for r, key in enumerate(keys):
                        if self.store.check([key]) and self.store.get(key).decode() != PASSED:
                            trouble = (now, f"it {_WENT.get(self.store.get(key).decode(), 'failed')} on rank {r}")
                elif now - trouble[0] > grace:
                    missing = [r for r, key in enumerate(keys) if not self.store.check([key])]
                    raise HarnessError(
                        f"rank {', '.join(map(str, missing))} never finished subtest ({outcome.label}) within "
                        f"HARNESS_PEER_GRACE ({grace:g} s) after {trouble[1]}: it is still inside one of that "
                        "combination's collectives; the test stops here")
                time.sleep(0.02)

        return meet

    def _collect(self, prefix: str, wait_s: float) -> list[RankResult]:
        """Every rank's result from the store; short polls so SIGTERM from torchrun is handled at once."""
        keys = [f"{prefix}/result/{r}" for r in range(self.world_size)]
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.store.check(keys):
                break
            time.sleep(0.02)
        results = []
        for r, key in enumerate(keys):
            if self.store.check([key]):
                results.append(pickle.loads(self.store.get(key)))
            else:
                results.append(RankResult(rank=r, status=TIMEOUT,
                                          message=f"sent no result within {wait_s:.0f} s (it hung or died)"))
        return results

    # ---- hangs and ends ------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                cur = dict(self.current) if self.current else None
            if cur is None or time.monotonic() < cur["deadline"]:
                continue
            stack = self._own_stack()
            result = RankResult(rank=self.rank, status=TIMEOUT, stack=stack,
                                message=f"timed out after {cur['timeout']:.0f} s (raise the class's `timeout` or "
                                        "set HARNESS_TIMEOUT)")
            self.store.set(f"{cur['prefix']}/result/{self.rank}", pickle.dumps(result))
            if self.rank == 0:
                # The main thread is stuck, so report from here, then end the job.
                results = self._collect(cur["prefix"], cur["grace"] + 5)
                verdict = merge(cur["test_id"], results, self.world_size, f"{self.device_type} (torchrun)")
                write_to_real_stderr(f"\nERROR: {cur['test_id']}\n{verdict.text}\n\nharness: ending the job "
                                     "(a hung rank cannot run another test)\n")
                self._set_done()
                os._exit(1)
            # Let rank 0 read our stack and report, then end this process so torchrun stops the job.
            self._wait_done(max(60.0, cur["grace"] + 30))
            os._exit(1)

    def _own_stack(self) -> str:
        with tempfile.TemporaryFile("w+") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.seek(0)
            text = f.read()
        # The watchdog's own frames are noise: keep the other threads.
        blocks = [b for b in text.split("\n\n") if "_watch" not in b]
        return tidy_stack("\n\n".join(blocks))

    def _set_done(self) -> None:
        try:
            self.store.set("done", "1")
        except Exception:
            pass

    def _wait_done(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.store.check(["done"]):
                    return
            except Exception:
                return
            time.sleep(0.2)

    def _at_exit(self) -> None:
        # Leave together: torchrun stops the whole job as soon as one rank exits non-zero, which would
        # cut off a rank that is still finishing its own (identical) report.
        try:
            self.store.set(f"exit/{self.rank}", "1")
            keys = [f"exit/{r}" for r in range(self.world_size)]
            deadline = time.monotonic() + (2.0 if self.poisoned else 30.0)
            while time.monotonic() < deadline and not self.store.check(keys):
                time.sleep(0.05)
        except Exception:
            pass
        if self.rank == 0:
            self._set_done()
        try:
            self.ctx.keeper.release()
        except Exception:
            pass
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """torchrun stops every rank when one dies: say which test that was, then go at once (raising
        would only let unittest record an error and start the next test on a world that is gone)."""
        active = self.active
        if active is not None:
            prefix, test_id = active
            try:
                missing = [r for r in range(self.world_size)
                           if r != self.rank and not self.store.check([f"{prefix}/result/{r}"])]
            except Exception:
                missing = []
            who = f"rank(s) {missing} sent no result" if missing else "another rank stopped"
            write_to_real_stderr(f"\nharness: torchrun stopped the job while {test_id} was running; {who}: it "
                                 "died (its Python stack, if it had one, is above; torchrun's summary below gives "
                                 "its exit code or signal)\n")
        else:
            write_to_real_stderr(f"\nharness: torchrun stopped the job (signal {signum}) between tests\n")
        self._set_done()
        os._exit(128 + signum)


_job: _Job | None = None


def _get_job() -> _Job:
    global _job
    if _job is None:
        _job = _Job()
    return _job


class _LaunchedRun(TestRun):
    """A test run under torchrun: the launched world is "a machine with enough GPUs", unless the test
    names its own number."""

    def __init__(self, test: Any, job: _Job) -> None:
        fn = getattr(type(test), test._testMethodName)
        super().__init__(test, gpus_needed(type(test), fn) or job.world_size)
        node = job.placement
        self.placement = dataclasses.replace(
            node, reason="launched by torchrun" + (f"; {self.world_note}" if self.world_note else "")
            + (f"; {node.reason}" if node.shortfall or node.shared else ""))


def run_as_launched_rank(test: Any) -> None:
    """The test body of ``MultiProcessTestCase.run`` when this process is a torchrun rank."""
    __tracebackhide__ = True
    job = _get_job()
    run = _LaunchedRun(test, job)
    if job.poisoned:
        raise unittest.SkipTest(job.poisoned)
    if job.skip_all:
        raise unittest.SkipTest(job.skip_all)
    if run.world_size != job.world_size:
        raise unittest.SkipTest(f"needs world size {run.world_size}, torchrun launched {job.world_size} ranks "
                                f"(run it with --nnodes x --nproc-per-node = {run.world_size})")
    skip_if_nccl_alone(run)
    run.conf = run.conf if job.rank == 0 else _quiet(run.conf)
    wants_temp = bool(markers(run.fn)["temp_dir"])

    def once(kwargs: dict | None) -> list[RankResult]:
        run.examples += 1
        if kwargs is not None and job.world_size > 1:
            kwargs = _same_example(job, kwargs, run.test_id)
        return job.run(test, run.test_id, run.timeout, run.conf.peer_grace, kwargs, wants_temp)

    try:
        if is_hypothesis_test(run.fn):
            _share_hypothesis_seed(job, run.fn)
        drive(test, run, once)
    finally:
        run.record([os.getpid()], True)


def _quiet(conf: Any) -> Any:
    return dataclasses.replace(conf, show_output=False)


def _share_hypothesis_seed(job: _Job, fn: Any) -> None:
    """Every rank's hypothesis engine gets rank 0's seed and no example database, so given the same
    verdicts (which every rank reaches from the same results) they draw and shrink in lockstep."""
    job.seq += 1
    key = f"t{job.seq}/hypothesis_seed"
    if job.rank == 0:
        job.store.set(key, str(int.from_bytes(os.urandom(8), "little")))
    fn._hypothesis_internal_use_seed = int(job.store.get(key).decode())
    fn._harness_settings_overrides = {"database": None}


def _same_example(job: _Job, kwargs: dict, test_id: str) -> dict:
    job.seq += 1
    key = f"t{job.seq}/example"
    if job.rank == 0:
        job.store.set(key, pickle.dumps(kwargs))
        return kwargs
    theirs = pickle.loads(job.store.get(key))
    if repr(theirs) != repr(kwargs):
        raise RankError(f"{test_id} [rank {job.rank}/{job.world_size}]: hypothesis drew {kwargs!r} here but "
                        f"{theirs!r} on rank 0; a strategy that depends on the rank cannot be used under torchrun")
    return theirs


def main_module_entry(argv: list[str] | None) -> None:
    """``run_tests()`` under torchrun: every rank runs, rank 0 alone prints."""
    runner = unittest.TextTestRunner(stream=report_stream(), verbosity=2 if launched_rank() == 0 else 0)
    unittest.main(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                  testRunner=runner)
