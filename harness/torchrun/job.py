"""Under torchrun: spawn nothing; this process is one rank of a world torchrun launched.

:class:`LaunchedJob` is a transport: the same ``harness.shared.world.World`` a spawned pool is, carried by
torchrun's store instead of pipes. When torchrun (torch.distributed.elastic) set ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_ADDR``/``MASTER_PORT``, every process runs the same tests
in the same order. Each runs the body as its rank (the same ``rank_task.run_task`` a pool worker uses) on
the process group from ``env://``, publishes its RankResult in the store (a side channel: a broken
collective cannot block it; typed messages under one key scheme, harness.torchrun.job_store), and reads every
other rank's, so every rank reaches the same verdict (harness.judging.verdict); rank 0 alone prints it and writes
the JUnit XML. The ranks meet between ``run_subtests`` combinations through the store, by the pool's
rules (``protocol.meeting_call``, and ``harness.shared.grace`` for HARNESS_PEER_GRACE). A watchdog thread turns
a hang into a reported timeout with the stacks and ends the job; a rank that dies makes torchrun stop
the job, and rank 0 says which test was running.

The run that needs ranks first makes the job (harness.parent.run.Run.worlds) and holds it: a process joins
torchrun's rendezvous once.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import faulthandler
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Iterator, NoReturn

from harness.ranks import recorder
from harness.ranks.comms import ProcessGroupKeeper
from harness.shared.config import Settings
from harness.shared.errors import HarnessError, RankError
from harness.ranks.capture import write_to_real_stderr
from harness.ranks.gpu import take_gpu
from harness.shared.launcher import launched_rank, report_stream
from harness.shared.grace import PeerGrace, Trouble
from harness.torchrun.desync import DesyncWatch
from harness.torchrun.job_store import (Collectives, Ended, Example, JobOver, JobStore, Keys, Leaving, Outcome, Seed,
                                        Steps, TempDir)
from harness.shared.outcome import ERROR, KILLED, PASSED, TIMEOUT, RankResult, tidy_stack
from harness.shared.placement import Placement, choose_placement
from harness.shared.status import BAD
from harness.shared.protocol import BodyEnded, Done, Go, Meet, Stop, Task, meeting_call, teardown_call
from harness.ranks.task import RankContext, run_task
from harness.judging.analysis import stopped_at_once
from harness.judging.verdict import Facts, judge
from harness.shared.world import World, Worlds

__all__ = ["LaunchedJob", "main_module_entry"]

# Frames of this module are hidden from unittest's tracebacks.
__unittest = True

_WENT = {"failed": "failed", "error": "raised", "skipped": "was skipped"}  # a combination's status, in words
_BAD_OUTCOMES = {str(s) for s in BAD}  # an Outcome's status that fails the test on every rank (LaunchedJob.agree)


#: seconds that stand for "no limit" under HARNESS_DEBUGPY (a week: time.monotonic() arithmetic stays finite)
_NO_LIMIT = 7 * 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class _Running:
    """The test under way on this rank, as the watchdog sees it."""

    keys: Keys
    test_id: str
    deadline: float  # time.monotonic()
    timeout: float
    grace: PeerGrace
    desync: DesyncWatch | None  # None: not looked for (one rank, or an IDE's debugger may hold a rank)


class _Arrival:
    """When this rank's failure (or its result) became known, as a number every rank can compare.

    The ranks' clocks are not one clock (two nodes), but the job's store is one: each rank takes the next
    number of the test's counter (``Keys.arrivals``) when its test fails (``RankContext.notice``, before its
    tearDown runs, as a pool's rank sends ``Failing``) or else when its result is ready. The number goes
    into ``RankResult.arrived``, so that the verdict names the rank that failed first as the root cause,
    as it does for a pool (harness.shared.outcome.order_by_cause), instead of the lowest rank.
    """

    def __init__(self, store: JobStore, keys: Keys) -> None:
        self.store = store
        self.keys = keys
        self.number: int | None = None

    def failing(self, result: RankResult) -> None:
        """The test failed here (the rank's notice; its tearDown and cleanups still run)."""
        if self.number is None:
            self.number = self.store.ticket(self.keys.arrivals)

    def known(self) -> float:
        """The rank's place in the order: the number its failure took, else one taken now."""
        if self.number is None:
            self.number = self.store.ticket(self.keys.arrivals)
        return float(self.number)


#: ``RankResult.arrived`` of a rank that sent no result: after every rank that did
_NEVER_ARRIVED = math.inf


class LaunchedJob(World, Worlds):
    """This process's place in the launched world: the only world of the run that holds it (harness.parent.run).

    A process is one rank of one torchrun job and joins its rendezvous once: the first run of the process
    that needs ranks makes the job (with that run's settings ``conf``: the placement and the ranks' settings
    are the job's, for its whole life) and holds it; a second one in the same process is refused.

    Its placement is decided for the node's local ranks: one GPU per local rank on NCCL, else the local
    ranks share the node's GPUs over gloo, else CPU (harness.shared.placement).
    """

    #: a LaunchedJob was made in this process (it joined torchrun's rendezvous): the only state kept on the
    #: class, because a second rendezvous of the same rank cannot work
    _joined = False

    def __init__(self, conf: Settings) -> None:
        import torch
        import torch.distributed as dist

        if LaunchedJob._joined:
            raise HarnessError(
                "this process already joined its torchrun job for another harness run (harness.parent.run.Run): a "
                "launched rank belongs to one run; hand that run to every test (run.attach(result)) instead of "
                "making a second one")
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
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
        LaunchedJob._joined = True
        # torchrun's agent may keep its store across --max-restarts: each attempt's keys (the groups' addresses
        # among them) under a prefix of their own, or a restarted rank reads a dead one's address
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or "0"
        self.store = JobStore(dist.PrefixStore("harness" if attempt == "0" else f"harness/attempt{attempt}", store))
        self.steps = Steps()  # every rank numbers its steps the same: see Steps for the invariant
        self.run_id = os.environ.get("TORCHELASTIC_RUN_ID", "") or os.environ.get("MASTER_PORT", "")
        self.scratch = tempfile.mkdtemp(prefix=f"harness-torchrun-r{self.rank}-")
        keeper = ProcessGroupKeeper(lambda: self.store.store, self.rank, self.world_size)
        self.ctx = RankContext(self.rank, self.world_size, self.placement, os.path.join(self.scratch, "out"),
                               keeper, conf, gpu=gpu)
        self.pg_suspect = False
        self.active: tuple[Keys, str] | None = None  # (the step, the test id) of the test under way
        self.active_id = ""  # the test id of the last test that ran
        self.poisoned = ""  # set once a rank hung or broke its GPU: the world cannot run another test
        self.parted = ""  # the test at which a launched process was found at another test, or gave no outcome (agree)
        self.ended_posted: Keys | None = None  # the test whose Ended this rank posted (_post_ended)
        self.current: _Running | None = None
        self.lock = threading.Lock()
        self.watchdog = threading.Thread(target=self._watch, daemon=True, name="harness-torchrun-watchdog")
        self.watchdog.start()
        atexit.register(self._at_exit)
        if self.rank == 0:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        # A rank that dies (SIGSEGV, abort) prints its Python stack to the job's stderr, past any capture.
        self._crash_stream = os.fdopen(os.dup(2), "w")
        faulthandler.enable(file=self._crash_stream, all_threads=True)

    # ---- Worlds: the launched world is the only one -------------------------------------------------

    @property
    def reports(self) -> bool:  # type: ignore[override]
        return self.rank == 0

    def enough_gpus(self, gpus_asked: int) -> int:
        """The launched world is "a machine with enough GPUs", unless the test names its own number."""
        return gpus_asked or self.world_size

    def place(self, world_size: int, gpus_asked: int, conf: Settings, world_note: str = "") -> Placement:
        node = self.placement
        return dataclasses.replace(node, reason="launched by torchrun" + (f"; {world_note}" if world_note else "")
                                   + (f"; {node.reason}" if node.shortfall or node.shared else ""))

    def skip(self, world_size: int) -> str:
        if self.poisoned:
            return self.poisoned
        if self.skip_all:
            return self.skip_all
        if world_size != self.world_size:
            return (f"needs world size {world_size}, torchrun launched {self.world_size} ranks (run it with "
                    f"--nnodes x --nproc-per-node = {world_size})")
        return ""

    def world(self, world_size: int, placement: Placement, conf: Settings) -> tuple["LaunchedJob", bool]:
        return self, True

    def close(self) -> None:
        """The launched ranks end with the job (at exit, together: see _at_exit)."""

    # ---- a test that ran in each launched process, not on the job's ranks ---------------------------

    def before_in_process(self) -> None:
        """This process keeps the job's default group from test to test; a test that is not the job's (a plain
        ``TestCase``) finds none, as in a process without the harness (it may make its own, on ``env://``)."""
        self.ctx.keeper.release()

    def agree(self, test_id: str, status: str, text: str, wait_s: float) -> list[tuple[str, str, str]]:
        """A plain ``TestCase`` (or a class of thread ranks) runs in every launched process, each on its own: post
        how it ended here and read how it ended on every other rank, so that every rank reports it failed
        where it failed on any rank, not only on rank 0, whose report is the job's. Returns the other ranks'
        failures of it, each ``(status, title, text)``: a failure's own text, or what went wrong with the
        exchange (a rank that sent nothing within ``wait_s`` of this one's end, a rank at another test).
        Passes and skips elsewhere add nothing: this rank's own outcome stands."""
        if self.world_size == 1:
            return []
        if self.poisoned or self.parted:  # a rank hung or died, or the ranks parted at an earlier test (said there):
            return []  # the others are not waiting for this word, nor sending theirs for the same test
        keys = self.steps.next()
        self.store.post(keys.outcome(self.rank), Outcome(test_id, status, text))
        outcomes = self._await_posted([keys.outcome(r) for r in range(self.world_size)], wait_s)
        found = []
        for r, theirs in enumerate(outcomes):
            if r == self.rank:
                continue
            title = f"{test_id} [launched rank {r}]"
            if theirs is None or theirs.test_id != test_id:
                self.parted = test_id
            if theirs is None:
                found.append(("error", title, f"launched rank {r} of {self.world_size} gave no outcome for this test "
                              f"within {wait_s:g} s of rank {self.rank} ending it (it runs in each launched process, "
                              "not on the job's ranks): it is still in it, or it is gone (torchrun's summary says)"))
            elif theirs.test_id != test_id:
                found.append(("error", title, self._parted_text(r, theirs.test_id, test_id, ran=False)))
            elif theirs.status in _BAD_OUTCOMES:
                found.append((theirs.status, title, f"{theirs.status} on launched rank {r} of {self.world_size} (the "
                              f"test runs in each launched process; rank {self.rank}: {status}):\n{theirs.text}"))
        return found

    def note_class_error(self, test_id: str, text: str) -> None:
        """A class or module set-up (or tear-down) raised in this process (``test_id``: unittest's "setUpClass
        (mod.Class)"): posted for the other ranks, which show it should they find this process at another test
        than theirs (it went on to the next class, where the ones whose set-up passed run this class's tests)."""
        if self.world_size == 1:
            return
        n = self.store.ticket(Keys.class_errors(self.rank))
        self.store.post(Keys.class_error(self.rank, n), Outcome(test_id, "error", text))

    def _parted_text(self, r: int, theirs: str, ours: str, ran: bool) -> str:
        """Launched rank ``r`` was at test ``theirs`` where this one was at ``ours``, with the set-ups that raised in
        its process (note_class_error), the likely reason, below."""
        errors = [self.store.read_posted(Keys.class_error(r, n))
                  for n in range(1, self.store.count(Keys.class_errors(r)) + 1)]
        errors = [e for e in errors if e is not None]
        said = (f"launched rank {r} {'ran' if ran else 'ended'} {theirs} where rank {self.rank} "
                f"{'ran' if ran else 'ended'} {ours}: the launched processes no longer run the same tests (a class or "
                "module set-up that failed in some of them only?), so the job's later verdicts cannot be trusted; ")
        if not errors:
            return said + "run the file without torchrun to see why"
        said += f"what raised in launched rank {r}'s process is below"
        return said + "".join(f"\n\n{e.test_id} on launched rank {r}:\n{e.text}" for e in errors)

    # ---- World: one test ---------------------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        return [os.getpid()]

    @contextlib.contextmanager
    def test_files(self, temp_dir: bool) -> Iterator[tuple[str | None, str]]:
        """Rank 0 makes the test's directory and says where through the store (one node: one directory)."""
        keys = self.steps.next()
        made = None
        if temp_dir:
            if self.rank == 0:
                made = tempfile.mkdtemp(prefix="harness-test-")
                self.store.post(keys.temp_dir, TempDir(made))
            else:
                made = self.store.read(keys.temp_dir).path
                os.makedirs(made, exist_ok=True)
        file_name = os.path.join(tempfile.gettempdir(), f"harness-{self.run_id}-{keys.step}.store")
        try:
            yield made, file_name
        finally:
            if made:
                shutil.rmtree(made, ignore_errors=True)
            try:
                os.remove(file_name)
            except OSError:
                pass

    def start_examples(self, fn: Any) -> None:
        """Every rank's hypothesis engine gets rank 0's seed and no example database, so given the same
        verdicts (which every rank reaches from the same results) they draw and shrink in lockstep."""
        keys = self.steps.next()
        if self.rank == 0:
            self.store.post(keys.seed, Seed(int.from_bytes(os.urandom(8), "little")))
        fn._hypothesis_internal_use_seed = self.store.read(keys.seed).value
        # A drawn world of another size than the launched one is filtered out (harness.parent.testrun): not too much
        from hypothesis import HealthCheck

        fn._harness_settings_overrides = {"database": None, "suppress_health_check": [HealthCheck.filter_too_much]}

    def same_example(self, kwargs: dict[str, Any], test_id: str) -> dict[str, Any]:
        """Every rank draws its own example from the same seed (start_examples): rank 0's must be it."""
        if self.world_size == 1:
            return kwargs  # no step taken: the world has one rank, so no other rank takes one either
        keys = self.steps.next()
        if self.rank == 0:
            self.store.post(keys.example, Example(kwargs))
            return kwargs
        theirs = self.store.read(keys.example).kwargs
        if repr(theirs) != repr(kwargs):
            raise RankError(f"{test_id} [rank {self.rank}/{self.world_size}]: hypothesis drew {kwargs!r} here but "
                            f"{theirs!r} on rank 0; a strategy that depends on the rank cannot be used under torchrun")
        return theirs

    def left_altered(self, results: list[RankResult]) -> str:
        broken = [r for r in results if r.cuda_broken]
        if broken and not self.poisoned:
            r = broken[0]
            self.poisoned = (f"the job cannot go on: {self.active_id} broke the CUDA context on rank {r.rank} "
                             f"({r.cuda_broken}); a launched rank cannot be replaced, so start the job again")
            return "the job's remaining tests are skipped (a launched rank cannot be replaced)"
        return "the launched ranks went on with it (they cannot be replaced)"

    def run(self, task: Task, peer_grace: float) -> list[RankResult]:
        timeout = task.timeout
        if task.debugpy is not None:  # an IDE's debugger may hold a rank at any time (harness.ranks.debugger)
            timeout, peer_grace = _NO_LIMIT, _NO_LIMIT
        keys = self.steps.next()
        grace = PeerGrace(peer_grace)
        test_id = task.test_id or f"{task.module}.{task.qualname}.{task.method}"
        self.active = (keys, test_id)
        self.active_id = test_id
        with self.lock:
            watch = None if task.debugpy is not None or self.world_size == 1 else \
                DesyncWatch(self.store, keys, self.rank, self.world_size)
            self.current = _Running(keys, test_id, time.monotonic() + timeout, timeout, grace, watch)
        arrival = _Arrival(self.store, keys)
        self.ctx.meet = self._meeting(keys, grace)
        self.ctx.notice = arrival.failing
        self.ctx.body_ended = self._body_end(keys, timeout, grace)
        try:
            result = run_task(task, self.ctx)
        finally:
            with self.lock:
                self.current = None
            faulthandler.enable(file=self._crash_stream, all_threads=True)  # whatever the test did to it
        result.arrived = arrival.known()
        self._post_ended(keys, result.status)  # (a test without a tearDown of its own: its body ended with it)
        self.store.post(keys.result(self.rank), Done(result, test_id))
        results = self._collect(keys, grace.wait_for_results(timeout), test_id)
        if any(r.is_bad for r in results):
            self._share_collectives(keys, results)
        self.active = None
        for r in results:
            if r.status == TIMEOUT:
                self.poisoned = f"the job cannot go on: {test_id} hung on rank {r.rank}"
            elif r.status == KILLED and not self.poisoned:  # its watchdog stopped it inside a collective: it leaves
                self.poisoned = (f"the job cannot go on: {test_id} left rank {r.rank} inside a collective, and a "
                                 "launched rank cannot be replaced")
        return results

    def _meeting(self, keys: Keys, grace: PeerGrace) -> Any:
        """run_subtests' meeting between two combinations, through the store (not the test's group).

        Each rank posts the meeting it reached with how its combination went (protocol.Meet), and waits for
        the others by the pool's rule (protocol.meeting_call): every rank there, go on; a rank that left the
        test (its result is in the store) while the others wait, stop. When a combination failed or was
        skipped (here or on a peer) and a peer has not arrived within HARNESS_PEER_GRACE (harness.shared.grace),
        that peer is stuck inside the combination: this rank stops the test with that said, and, on gloo,
        closing its group on the way out (harness.ranks.task) wakes the stuck peer at once instead of at the timeout.
        """

        def meet(index: int, outcome: Any) -> None:
            self.store.post(keys.meet(index, self.rank), Meet(index, outcome))
            meeting = PeerGrace(grace.seconds)  # this combination's: a meeting every rank got through ends it
            if outcome.status != PASSED:
                meeting.start(Trouble(time.monotonic(), self.rank, f"it {_WENT[outcome.status]} here", True))
            others = [r for r in range(self.world_size) if r != self.rank]
            while True:
                there, left = self.store.at_meeting(keys, index, others)
                call = meeting_call(self.world_size, {r: index for r in (self.rank, *there)}, left)
                if isinstance(call, Go):
                    return
                if isinstance(call, Stop):
                    raise HarnessError(call.why)
                now = time.monotonic()
                if not meeting.running:
                    for r in others:
                        theirs = self.store.read_posted(keys.meet(index, r))
                        if theirs is not None and theirs.outcome.status != PASSED:
                            went = _WENT.get(theirs.outcome.status, "failed")
                            meeting.start(Trouble(now, r, f"it {went} on rank {r}", True))
                elif meeting.over(now):
                    raise HarnessError(meeting.never_finished([r for r in others if r not in there], outcome.label))
                time.sleep(0.02)

        return meet

    def _body_end(self, keys: Keys, timeout: float, grace: PeerGrace) -> Any:
        """The body ended here: wait, through the store, until every rank ended it (or left) before tearDown.

        The pool's rule (shared.protocol.teardown_call): a body that did not pass, here or on a peer, lets the ranks
        go at once, so that no rank is held for a peer in trouble. While it waits, this rank is not the one that
        hangs: its watchdog stands aside, and the wait ends when the peers' time limit and the grace would
        have posted their results (a hung peer's watchdog posts one)."""

        def body_ended(status: str) -> None:
            self._post_ended(keys, status)
            self.store.post(keys.body_ended(self.rank), BodyEnded(status))
            with self.lock:
                running, self.current = self.current, None
            try:
                deadline = time.monotonic() + grace.wait_for_results(timeout)
                others = [r for r in range(self.world_size) if r != self.rank]
                while time.monotonic() < deadline:
                    ended, left, trouble = {self.rank}, set(), status != PASSED
                    for r in others:
                        if self.store.has(keys.result(r)):
                            left.add(r)
                            continue
                        theirs = self.store.read_posted(keys.body_ended(r))
                        if theirs is not None:
                            ended.add(r)
                            trouble = trouble or theirs.status != PASSED
                    if teardown_call(self.world_size, ended, left, trouble) is not None:
                        return
                    time.sleep(0.02)
            finally:
                with self.lock:
                    self.current = running

        return body_ended

    def _post_ended(self, keys: Keys, status: str) -> None:
        """This rank's body ended (``status``): it calls no collective more in this test. What it called goes to
        the store (Ended), once, for a peer that may wait in one it never called (harness.torchrun.desync)."""
        if self.world_size == 1 or self.ended_posted == keys:
            return
        self.ended_posted = keys
        self.store.post(keys.ended(self.rank), Ended(status, recorder.own_dump(self.rank)))
        self.store.ticket(keys.ended_posts)

    def _collect(self, keys: Keys, wait_s: float, test_id: str) -> list[RankResult]:
        """Every rank's result from the store; short polls so SIGTERM from torchrun is handled at once. A rank that
        ran another test at this step (its class's set-up failed there alone, so it went on to the next) gets an
        error that says so in place of its result, the same on every rank, and the job goes no further."""
        results = []
        for r, done in enumerate(self._await_posted(keys.results(self.world_size), wait_s)):
            if done is not None and done.test_id and done.test_id != test_id:
                results.append(RankResult(rank=r, status=ERROR, exc_type="HarnessError",
                                          message=self._parted_text(r, done.test_id, test_id, ran=True),
                                          arrived=done.result.arrived))
                if not self.poisoned:  # (agree exchanges nothing more either: it looks at this too)
                    self.poisoned = (f"the job cannot go on: the launched processes no longer run the same tests "
                                     f"(launched rank {r} ran {done.test_id} where this one ran {test_id})")
            elif done is not None:
                results.append(done.result)
            else:
                results.append(RankResult(rank=r, status=TIMEOUT, arrived=_NEVER_ARRIVED,
                                          message=f"sent no result within {wait_s:.0f} s (it hung or died)"))
        return results

    def _await_posted(self, wanted: list[str], wait_s: float) -> list[Any]:
        """The message at each of ``wanted`` once every one is there or ``wait_s`` has passed (None where none was
        posted); short polls, so that SIGTERM from torchrun is handled at once."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self.store.has(*wanted):
            time.sleep(0.02)
        return [self.store.read_posted(key) for key in wanted]

    def _share_collectives(self, keys: Keys, results: list[RankResult], wait_s: float = 2.0) -> None:
        """The test went wrong: every rank posts its collectives in the test (harness.ranks.recorder) to the store
        and puts each rank's on its result (a rank that hung posted them with its result), so that every rank
        reaches the same verdict."""
        mine = results[self.rank].collectives
        if mine is None:
            mine = results[self.rank].collectives = recorder.own_dump(self.rank)
        self.store.post(keys.collectives(self.rank), Collectives(mine))
        # a rank with no result of its own (it died, or hangs without a watchdog's word) posts nothing
        wanted = {r.rank for r in results if r.collectives is None and r.rank != self.rank and r.status != TIMEOUT}
        deadline = time.monotonic() + wait_s
        while wanted and time.monotonic() < deadline:
            for r in list(wanted):
                theirs = self.store.read_posted(keys.collectives(r))
                if theirs is not None:
                    results[r].collectives = theirs.dump
                    wanted.discard(r)
            time.sleep(0.02)

    # ---- hangs and ends ------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            time.sleep(0.2)
            with self.lock:
                cur = self.current
            if cur is None:
                continue
            if time.monotonic() >= cur.deadline:
                result = RankResult(rank=self.rank, status=TIMEOUT, stack=self._own_stack(),
                                    message=f"timed out after {cur.timeout:.0f} s (raise the class's `timeout` or "
                                            "set HARNESS_TIMEOUT)")
                self._end_test(cur, result, float(self.store.ticket(cur.keys.arrivals)), "a hung rank")
            if cur.desync is not None and not cur.grace.running:
                try:
                    left = cur.desync.left_behind()
                except Exception:  # the store went away (the job is ending): the timeout stays the net
                    left = None
                if left is not None:  # a peer's body ended without the collective this rank waits in
                    cur.grace.start(Trouble(time.monotonic(), left[0], left[1]))
            if cur.grace.running and cur.grace.over(time.monotonic()):
                with self.lock:
                    still = self.current is cur  # (its test may have ended on its own meanwhile)
                if still:
                    result = RankResult(rank=self.rank, status=KILLED, stack=self._own_stack(),
                                        message=cur.grace.overran(time.monotonic()))
                    self._end_test(cur, result, float(self.store.ticket(cur.keys.arrivals)),
                                   "a rank left inside a collective that a peer never joins")
            found = None
            if cur.desync is not None:
                try:
                    found = cur.desync.look()
                except Exception:  # the store went away (the job is ending): the timeout stays the net
                    found = None
            if found is not None:
                result = RankResult(rank=self.rank, status=KILLED, stack=self._own_stack(),
                                    message=stopped_at_once(self.rank, found))
                # the root cause comes first in the report: before any number the arrivals counter hands out
                arrived = 0.0 if self.rank == found[0] else float(self.store.ticket(cur.keys.arrivals))
                self._end_test(cur, result, arrived, "a rank blocked in a collective")

    def _end_test(self, cur: _Running, result: RankResult, arrived: float, who: str) -> NoReturn:
        """This rank's main thread is stuck in its test (a timeout, a desync): post its result from here, then
        end the job: rank 0 reports for every rank first, the others wait until it has."""
        try:
            result.collectives = recorder.own_dump(self.rank)  # read while the main thread waits
        except Exception:
            pass
        result.arrived = arrived
        self.store.post(cur.keys.result(self.rank), Done(result, cur.test_id))
        if self.rank == 0:
            # The main thread is stuck, so report from here, then end the job.
            results = self._collect(cur.keys, cur.grace.wait_for_results(timeout=0.0), cur.test_id)  # the limit is past
            self._share_collectives(cur.keys, results)
            verdict = judge(results, Facts(cur.test_id, self.world_size, self.placement))
            write_to_real_stderr(f"\nERROR: {cur.test_id}\n{verdict.text}\n\nharness: ending the job "
                                 f"({who} cannot run another test)\n")
            self._set_done()
        else:
            # Let rank 0 read our stack and report, then end this process so torchrun stops the job.
            self._wait_done(max(60.0, cur.grace.seconds + 30))
        # os._exit runs no atexit, and torchrun stops every rank as soon as one exits: each rank tidies, then
        # they leave together
        shutil.rmtree(self.scratch, ignore_errors=True)
        with contextlib.suppress(Exception):
            self.store.post(Keys.leaving(self.rank), Leaving())
            everyone = [Keys.leaving(r) for r in range(self.world_size)]
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not self.store.has(*everyone):
                time.sleep(0.05)
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
            self.store.post(Keys.DONE, JobOver())
        except Exception:
            pass

    def _wait_done(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.store.has(Keys.DONE):
                    return
            except Exception:
                return
            time.sleep(0.2)

    def _at_exit(self) -> None:
        # Tidy first: once every rank has said it is leaving, one that ends non-zero makes torchrun SIGTERM
        # the others, and a rank other than 0 dies of it at once (no handler), with whatever it had not removed
        shutil.rmtree(self.scratch, ignore_errors=True)
        # Leave together: torchrun stops the whole job as soon as one rank exits non-zero, which would
        # cut off a rank that is still finishing its own (identical) report.
        if self.rank == 0:
            self._set_done()  # it has reported: a rank its watchdog stopped (waiting for this word) tidies and leaves
        try:
            self.store.post(Keys.leaving(self.rank), Leaving())
            everyone = [Keys.leaving(r) for r in range(self.world_size)]
            deadline = time.monotonic() + (5.0 if self.poisoned else 30.0)
            while time.monotonic() < deadline and not self.store.has(*everyone):
                time.sleep(0.05)
        except Exception:
            pass
        try:
            self.ctx.keeper.release()
        except Exception:
            pass

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """torchrun stops every rank when one dies: say which test that was, then go at once (raising
        would only let unittest record an error and start the next test on a world that is gone)."""
        active = self.active
        if active is not None:
            keys, test_id = active
            try:
                missing = [r for r in range(self.world_size) if r != self.rank and not self.store.has(keys.result(r))]
            except Exception:
                missing = []
            who = f"rank(s) {missing} sent no result" if missing else "another rank stopped"
            write_to_real_stderr(f"\nharness: torchrun stopped the job while {test_id} was running; {who}: it "
                                 "died (its Python stack, if it had one, is above; torchrun's summary below gives "
                                 "its exit code or signal)\n")
        else:
            write_to_real_stderr(f"\nharness: torchrun stopped the job (signal {signum}) between tests\n")
        self._set_done()
        # os._exit runs no atexit: tidy here, as every other way out does (torchrun stops a rank that had not
        # reached its own way out yet when a peer ended the job)
        shutil.rmtree(self.scratch, ignore_errors=True)
        os._exit(128 + signum)


def main_module_entry(argv: list[str] | None, runner_class: type = unittest.TextTestRunner) -> None:
    """``run_tests()`` under torchrun: every rank runs, rank 0 alone prints (``runner_class``: run_tests's,
    whose results carry its run)."""
    runner = runner_class(stream=report_stream(), verbosity=2 if launched_rank() == 0 else 0)
    unittest.main(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                  testRunner=runner)
