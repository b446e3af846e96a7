"""Spawned worlds: start rank processes, reuse them from test to test, watch them, stop them.

A :class:`RankPool` is a ``harness.shared.world.World`` whose ranks this process spawned; it carries the
protocol (harness.shared.protocol) over one pipe per rank and relays the ``run_subtests`` meetings, and knows
nothing of torch.distributed (the ranks do: harness.ranks.process). :class:`Pools` keeps one run's pools, one
per world size and placement kind.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Iterator

from harness.judging.analysis import never_meet, stopped_at_once, stuck
from harness.parent import relay
from harness.parent.recorders import request_dumps
from harness.parent import template
from harness.shared.config import Settings
from harness.shared.errors import HarnessError
from harness.shared.output import read_bounded
from harness.shared.grace import PeerGrace, Trouble
from harness.shared.outcome import (CRASHED, ERROR, FAILED, KILLED, PASSED, SKIPPED, TIMEOUT, XFAIL, RankResult,
                                    SubtestOutcome, describe_exit, tidy_stack)
from harness.shared.placement import Placement, choose_placement
from harness.shared.protocol import (BodyEnded, Done, Failing, Go, Meet, Ready, Shutdown, StartFailed, Task,
                                     meeting_call, send, teardown_call)
from harness.shared.world import World, Worlds

__all__ = ["RankPool", "Pools", "Terminated", "install_sigterm_handler", "ranks_alive"]

#: every pool with live processes, whichever run made it: SIGTERM stops them all before the process exits
#: (a signal is the process's, not a run's; the only module state here, and it holds no pool alive)
_LIVE: "weakref.WeakSet[RankPool]" = weakref.WeakSet()


#: seconds after a rank's test ended while its peers' go on before the parent looks at the peers' collectives
#: (ranks of a passing test end within this of each other, and cost nothing), then again every RECHECK
SETTLE, RECHECK = 0.25, 1.0

#: seconds between two looks at whether every rank of a test is blocked (its main thread used no CPU since the
#: last look: read from /proc, nothing asked of the ranks); only then are their flight recorders read, and a
#: desync is declared when a second look finds the same blocked collectives (harness.judging.analysis.never_meet)
LOOK = 0.25
#: looks in a row whose dumps did not all come that are asked again at once (harness.parent.pool._look_for_desync)
UNANSWERED = 8


#: how a body that ended went, as a report says it
_BODY = {PASSED: "passed", FAILED: "failed", ERROR: "raised", SKIPPED: "was skipped", XFAIL: "xfailed"}


class PoolStartError(HarnessError):
    pass


class Terminated(KeyboardInterrupt):
    """SIGTERM in the parent, raised where the parent was, so that everything unwinds like Ctrl-C.

    It derives from KeyboardInterrupt because unittest and pytest let that through (any other exception
    would be reported as the running test's error and the run would go on); the runner tells the two
    apart by this class, and the process exits with 143 (128 + SIGTERM) as a terminated process does.
    """


def ranks_alive() -> bool:
    """Whether a run of this process still holds ranks (a pool not closed): they were forked from the template,
    which must outlive them (another run in the same process, a usage error say, must not stop it)."""
    return bool(_LIVE)


def _exit_terminated() -> None:
    for pool in list(_LIVE):
        pool.close()
    template.stop()
    _multiprocessing_exit()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(128 + signal.SIGTERM)


def _multiprocessing_exit() -> None:
    """What multiprocessing's own exit hook does that ``os._exit`` would skip: its finalizers, among them
    the removal of its temporary folder (``pymp-*``, where the template's socket was)."""
    try:
        from multiprocessing import util

        util._run_finalizers()  # private, in 3.8 to 3.13 alike; without it the folder is left, nothing worse
    except Exception:  # noqa: BLE001
        pass


#: seconds within which a second SIGTERM is the first one again, by another path: ``timeout`` sends it to the
#: process and to its process group, and a runner process gets it from the group and from its client
SAME_SIGTERM_S = 2.0


def _on_sigterm(signum: int, frame: Any) -> None:
    fired = getattr(_on_sigterm, "fired", None)
    if fired is not None:
        if time.monotonic() - fired < SAME_SIGTERM_S:
            return  # the same SIGTERM, by its other path
        _exit_terminated()  # a second SIGTERM while unwinding: clean up and go now, without the report
    _on_sigterm.fired = time.monotonic()  # type: ignore[attr-defined]
    # Runs at exit before any earlier-registered hook (atexit is last-in first-out): the pools are
    # stopped and removed (the tests' temp dirs and stores live inside them), then exit 143.
    atexit.register(_exit_terminated)
    raise Terminated("terminated by SIGTERM")


def install_sigterm_handler() -> None:
    """Make SIGTERM (``timeout``, a CI cancel, ``kill``) clean up like Ctrl-C; leave a program's own handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


class RankPool(World):
    """``world_size`` spawned processes that run test after test on one placement (its kind: ``cuda``,
    ``cuda-shared`` or ``cpu``; harness.shared.placement).

    The ranks get the run's settings (``conf``) when they start, rather than reading the environment again.
    """

    def __init__(self, world_size: int, placement: Placement, threads: int, conf: Settings):
        self.world_size = world_size
        self.placement = placement
        self.output_limit = conf.output_limit
        self.broken = False
        self.pg_suspect = False
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        ctx, self.spawned_why = template.context(conf.template)
        # removed by the template should the run be killed before its ranks start
        self.dir = template.owned_dir(f"harness-w{world_size}-{placement.kind}-")
        _LIVE.add(self)  # from its first process on, SIGTERM stops it
        try:
            try:
                self._start(ctx, threads, conf)
            except _ForkFailed as exc:  # the template could not fork: spawn these ranks, and from now on
                template.broken(str(exc))
                self._stop_ranks()
                ctx, self.spawned_why = template.context(conf.template)
                self._start(ctx, threads, conf)
            template.note(self.spawned_why)
            self._await_ready(conf.start_timeout)
        except BaseException:  # an interrupt while starting: leave no process and no directory behind
            self.broken = True
            self.close()
            raise

    def _start(self, ctx: Any, threads: int, conf: Settings) -> None:
        """Start one process per rank: forked from the template (ctx "forkserver") or spawned."""
        from harness.ranks.process import worker_main

        forked = ctx.get_start_method() == "forkserver"
        # Intra-op threads: a spawned rank's libraries read them when torch is imported there; a forked
        # rank sets them itself (torch.set_num_threads), its environment made the parent's (RankStart).
        threads_env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        with _environ(None if forked else threads_env):
            for rank in range(self.world_size):
                parent_end, child_end = ctx.Pipe(duplex=True)
                start = template.RankStart.capture(**threads_env) if forked else None
                proc = ctx.Process(target=worker_main, name=f"harness-rank{rank}",
                                   args=(child_end, rank, self.world_size, self.placement, self.dir, threads,
                                         os.getpid(), conf, start))
                try:
                    proc.start()
                except (OSError, EOFError) as exc:
                    if not forked:
                        raise
                    raise _ForkFailed(f"{type(exc).__name__}: {exc}") from exc
                finally:
                    child_end.close()
                self.conns.append(parent_end)
                self.procs.append(proc)

    def _stop_ranks(self) -> None:
        for proc in self.procs:
            _kill(proc)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _await_ready(self, start_timeout: float) -> None:
        deadline = time.monotonic() + start_timeout
        for rank, (conn, proc) in enumerate(zip(self.conns, self.procs)):
            left = max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait([conn, proc.sentinel], timeout=left)
            if conn in ready:
                try:
                    message = conn.recv()
                except EOFError:
                    message = None
                if isinstance(message, Ready):
                    continue
                self.close()
                if isinstance(message, StartFailed):
                    raise PoolStartError(f"rank {rank}/{self.world_size} could not start:\n{message.error[2]}")
            self.close()
            if proc.sentinel in ready or not proc.is_alive():
                proc.join(1)
                raise PoolStartError(f"rank {rank}/{self.world_size} died while starting: {describe_exit(proc.exitcode)}"
                                     " (does the test module run code at import that fails in a fresh process?)")
            raise PoolStartError(f"rank {rank}/{self.world_size} did not start within {start_timeout:.0f} s "
                                 "(set HARNESS_START_TIMEOUT to raise)")

    def _stack_offsets(self) -> list[int]:
        return [_size(os.path.join(self.dir, f"rank{r}.stack")) for r in range(self.world_size)]

    def _read_from(self, name: str, offset: int = 0) -> str:
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask each live rank for its Python stacks (SIGUSR1 -> faulthandler -> a file): no collective needed."""
        offsets = self._stack_offsets()
        asked = []
        for r in ranks:
            if self.procs[r].is_alive():
                try:
                    os.kill(self.procs[r].pid, signal.SIGUSR1)
                    asked.append(r)
                except ProcessLookupError:
                    pass
        stacks: dict[int, str] = {}
        deadline = time.monotonic() + 2.0
        last = {r: -1 for r in asked}
        while asked and time.monotonic() < deadline:
            time.sleep(0.05)
            sizes = {r: _size(os.path.join(self.dir, f"rank{r}.stack")) for r in asked}
            if all(sizes[r] > offsets[r] and sizes[r] == last[r] for r in asked):
                break  # every dump has started and stopped growing
            last = sizes
        for r in ranks:
            stacks[r] = tidy_stack(self._read_from(f"rank{r}.stack", offsets[r]))
        return stacks

    @contextlib.contextmanager
    def test_files(self, temp_dir: bool) -> Iterator[tuple[str | None, str]]:
        """Inside the pool's directory, so that ranks whose parent was killed remove them with it."""
        made = tempfile.mkdtemp(prefix="test-", dir=self.dir) if temp_dir else None
        scratch = tempfile.mkdtemp(prefix="store-", dir=self.dir)
        try:
            yield made, os.path.join(scratch, "store")
        finally:
            if made:
                shutil.rmtree(made, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)

    def debug_address(self) -> str | None:
        return relay.relay_address()  # this process owns the terminal, if there is one

    def left_altered(self, results: list[RankResult]) -> str:
        self.close()  # Pools makes a new pool for the next test
        return "ranks restarted"

    def run(self, task: Task, peer_grace: float) -> list[RankResult]:
        """Send ``task`` to every rank and collect one RankResult per rank, whatever happens.

        An interrupt (Ctrl-C, or SIGTERM turned into one) stops the ranks at once and goes on up.
        """
        try:
            return self._run(task, peer_grace)
        except BaseException:
            self.broken = True
            self.close()
            raise

    def _run(self, task: Task, peer_grace: float) -> list[RankResult]:
        """Send the task, take what the ranks say until every rank's test ended or the time ran out (the
        deadline, or the peer grace once one rank's trouble started it), then make every rank's result."""
        offsets = self._stack_offsets()
        self._send_all(task)
        test = _InFlight(self.world_size, time.monotonic(), task.timeout, PeerGrace(peer_grace),
                         unlimited=task.debugpy is not None)
        while test.pending:
            ready = self._wait_for_news(test)
            now = time.monotonic()
            if not ready:
                if now >= test.limit():
                    break
                self._look_for_stuck_peers(test, now)
                self._answer_meeting(test)  # a grace it started lets the ranks waiting to tear down go
                self._look_for_desync(test, now)
                if test.desync is not None:
                    break
                continue
            for r in ready:
                message = self._receive(r, offsets[r]) if r in test.pending else None
                if message is not None:  # None: the sentinel fired but data is still in the pipe; read it next round
                    self._take(test, r, message, now)
            self._answer_meeting(test)
        return self._results(test)

    def _send_all(self, task: Task) -> None:
        for conn in self.conns:
            try:
                send(conn, task)
            except (BrokenPipeError, OSError):
                pass  # its death is picked up by _run

    def _wait_for_news(self, test: _InFlight) -> list[int]:
        """The ranks still in the test that said something or died, in the time left before the grace or the
        deadline ends (or the next look at stuck peers); [] when that time passed first."""
        limit = test.limit()
        wake = limit if test.check_at is None or test.grace.running else min(limit, test.check_at)
        if not test.grace.running and not test.unlimited:
            wake = min(wake, test.look_at)
        waitables = {}
        for r in test.pending:
            waitables[self.conns[r]] = r
            waitables[self.procs[r].sentinel] = r
        ready = multiprocessing.connection.wait(list(waitables), timeout=max(0.0, wake - time.monotonic()))
        return sorted({waitables[obj] for obj in ready})

    def _look_for_stuck_peers(self, test: _InFlight, now: float) -> None:
        """A rank's test ended while its peers' goes on: a peer that waits in a collective or a group's
        creation that the returned rank can never join waits forever: the grace starts now."""
        if test.check_at is None or test.grace.running or now < test.check_at or relay.in_session():
            return  # (the peers of a rank at a prompt wait for it: that is no hang)
        found = self._never_ending(test.results, test.pending, test.ended)
        test.check_at = time.monotonic() + RECHECK
        if found:
            r = min(found)
            test.grace.start(Trouble(time.monotonic(), r, found[r]))

    def _look_for_desync(self, test: _InFlight, now: float) -> None:
        """Every rank of the test blocked, and their flight recorders show collectives that can never meet:
        ``test.desync`` says so, and the test ends now rather than at its timeout.

        Each look reads only each rank's main-thread CPU time (/proc); the ranks' dumps are asked for when no
        rank's main thread ran since the last look (and something ran since the dumps last said no), and a
        desync is only declared when the dumps of two looks show the same waits with no CPU used in between.
        """
        if now < test.look_at:
            return
        test.look_at = now + LOOK
        if test.grace.running or test.unlimited or relay.in_session():
            test.cpu, test.before = {}, None  # a rank's trouble: the grace decides
            return
        in_body = set(test.pending) - set(test.ended)  # a rank waiting to tear down calls nothing more
        if not in_body:
            return
        cpu = {r: _main_thread_cpu(self.procs[r].pid) for r in sorted(in_body)}
        idle = all(cpu[r] is not None and cpu[r] == test.cpu.get(r) for r in cpu)
        test.cpu = cpu
        if not idle:
            test.before = None
            return
        if test.before is None and cpu == test.asked:
            return  # nothing ran since the dumps said no: they would say it again
        test.asked = cpu
        # the ranks whose test ended too: they call nothing more, and what they called counts
        alive = [r for r in range(self.world_size) if r in test.pending or self.procs[r].is_alive()]
        dumps = request_dumps(self.dir, alive, timeout=1.0)
        if any(r not in dumps for r in alive) and test.unanswered < UNANSWERED:
            # a rank's dump did not come in time (a loaded machine): this look proved nothing, so the next one asks
            # again, though no CPU was used since (a rank that never answers is asked a few times, not for ever)
            test.unanswered += 1
            test.asked = {}
            return
        test.unanswered = 0
        if test.before is not None:
            test.desync = never_meet(dumps, in_body, self.world_size, before=test.before)
        # look again next time only if these dumps alone already show a desync (the next must confirm it)
        test.before = dumps if test.desync is None and never_meet(dumps, in_body, self.world_size,
                                                                  before=dumps) else None

    def _take(self, test: _InFlight, r: int, message: Any, now: float) -> None:
        """Rank ``r`` said ``message`` (protocol.FromRank), or died (a RankResult), at ``now``."""
        if isinstance(message, Failing):
            # the test failed in that rank; its tearDown and cleanups still run: the peers' grace
            # starts now, whether or not that rank then waits for them (in a tearDown collective)
            test.failing[r] = message.result
            test.failing[r].arrived = now
            test.grace.start(Trouble(now, r, f"rank {r} failed"))
            return
        if isinstance(message, BodyEnded):
            # its tearDown waits for the other ranks' bodies (shared.protocol.teardown_call); a rank that was skipped
            # while its peers go on may leave them waiting for it, as a rank that ended does
            # (a skip starts no grace of itself: the peers still running may be on their way to the same skip, slowly
            # on a loaded machine, still importing the test's module; the look at stuck peers starts it when one
            # waits for the skipped rank in a collective or a group's creation)
            test.ended[r] = message.status
            if test.check_at is None:
                test.check_at = now + SETTLE
            return
        if isinstance(message, Meet):
            test.meeting[r] = message.index
            test.reported[r].append(message.outcome)
            if message.outcome.status != PASSED:
                what = "was skipped" if message.outcome.status == SKIPPED else "failed"
                test.grace.start(Trouble(now, r, f"rank {r}'s subtest ({message.outcome.label}) {what}", True))
            return
        result = message.result if isinstance(message, Done) else message  # a RankResult: it died
        result.arrived = now
        if not result.subtests:
            result.subtests = test.reported[r]  # a rank that died: what it said at the meetings
        test.results[r] = result
        test.pending.discard(r)
        test.meeting.pop(r, None)
        test.ended.pop(r, None)
        if result.status == CRASHED:
            self.broken = True
        if result.is_bad:
            test.grace.start(Trouble(now, r, f"rank {r} {'died' if result.status == CRASHED else 'failed'}"))
        # a rank that skipped (or xfailed) is a rank that returned: its peers get the grace once the look at stuck peers
        # finds one waiting for it in a collective (that must not cost the timeout), not before (a slow peer skips too)
        if test.pending and test.check_at is None:
            test.check_at = now + SETTLE

    def _answer_meeting(self, test: _InFlight) -> None:
        """Tell the ranks waiting at a run_subtests meeting to go on or stop, and the ranks waiting to start
        their tearDown to go, once the rules decide (a rank whose body ended has left the combinations)."""
        left = set(range(self.world_size)) - test.pending
        call = meeting_call(self.world_size, test.meeting, left | set(test.ended))
        if call is not None:
            for r in test.meeting:
                self._reply(r, call)
            if isinstance(call, Go):
                test.grace.got_through()  # every rank got through that combination: nothing is stuck
            test.meeting.clear()
        if teardown_call(self.world_size, test.ended, left, test.grace.running) is not None:
            for r in test.ended:
                self._reply(r, Go())
            test.ended.clear()

    def _results(self, test: _InFlight) -> list[RankResult]:
        """Every rank's result: the ones that came, and for the ranks still running (stopped now: past the
        grace or the deadline) what they were doing."""
        went_wrong = bool(test.pending) or any(r.is_bad for r in test.results.values())
        # each live rank's collectives in the test, before any is stopped (harness.ranks.recorder)
        dumps = request_dumps(self.dir, [r for r in range(self.world_size) if self.procs[r].is_alive()]
                                          ) if went_wrong else {}
        if test.pending:
            self._stop_pending(test)
        for r, dump in dumps.items():
            test.results[r].collectives = dump
        if self.broken:
            self.close()
        return [test.results[r] for r in range(self.world_size)]

    def _stop_pending(self, test: _InFlight) -> None:
        """Results for the ranks that never finished: killed after a peer's trouble (the grace ran out), or
        timed out; a rank that had said it failed keeps that failure, with how it ended."""
        self.broken = True
        stacks = self.dump_stacks(sorted(test.pending))
        elapsed = time.monotonic() - test.started
        trouble = test.grace.trouble
        root = test.desync[0] if test.desync is not None else None
        for r in sorted(test.pending, key=lambda r: (r != root, r)):  # a desync's root cause arrives first
            if r in test.ended:  # its body ended; it waited for a peer's that never did, and ran no tearDown
                waited_for = sorted(test.pending - set(test.ended))
                message = (f"stopped while it waited to start its tearDown: its body {_BODY[test.ended[r]]}, rank "
                           f"{', '.join(map(str, waited_for))} never ended the body")
                status = KILLED
            elif test.desync is not None:
                message = stopped_at_once(r, test.desync)
                status = KILLED
            elif trouble is not None and time.monotonic() < test.deadline + test.paused():
                if r in test.meeting:
                    message = test.grace.stopped_at_meeting()
                else:
                    message = test.grace.overran(time.monotonic())
                status = KILLED
            else:
                message = f"timed out after {elapsed:.0f} s (raise the class's `timeout` or set HARNESS_TIMEOUT)"
                status = TIMEOUT
            test.results[r] = RankResult(rank=r, status=status, message=message, stack=stacks.get(r, ""),
                                         subtests=test.reported[r], output=self._output(r),
                                         arrived=time.monotonic(), desync=bool(trouble and trouble.at_meeting),
                                         at_meeting=r in test.meeting)
            if r in test.failing:  # it failed, then never finished its tearDown: report the failure itself
                early = test.failing[r]
                stack = stacks.get(r, "").rstrip()
                early.traceback = (early.traceback.rstrip() + f"\n\nAfter this failure the rank did not finish "
                                   f"(tearDown, cleanups) and was stopped: {message}"
                                   + (f"\nIts stack then (faulthandler):\n{stack}" if stack else ""))
                early.subtests = early.subtests or test.reported[r]
                early.output = self._output(r)
                test.results[r] = early

    def _never_ending(self, results: dict[int, RankResult], pending: set[int], ended: dict[int, str]
                      ) -> dict[int, str]:
        """Ranks in ``pending`` that wait for what a rank whose test (or body: ``ended``) ended can never do
        (harness.judging.analysis: each rank's collectives, asked of the live ranks), each with why."""
        went = {PASSED: "passed", SKIPPED: "was skipped", XFAIL: "xfailed"}
        returned = {r: went.get(res.status, "failed") for r, res in results.items() if self.procs[r].is_alive()}
        returned.update({r: _BODY.get(status, "failed") for r, status in ended.items()})
        pending = set(pending) - set(ended)
        if not returned or not pending:
            return {}
        dumps = request_dumps(self.dir, sorted(set(pending) | set(returned)), timeout=1.0)
        return stuck(dumps, returned, pending, self.world_size)

    def _output(self, r: int) -> str:
        """What rank ``r`` printed in the test so far (bounded: HARNESS_OUTPUT_LIMIT); its own capture is gone."""
        return read_bounded(os.path.join(self.dir, f"rank{r}.out"), limit=self.output_limit)

    def _reply(self, r: int, message: Any) -> None:
        try:
            send(self.conns[r], message)
        except (BrokenPipeError, OSError):
            pass  # its death is picked up by the loop

    def _receive(self, r: int, stack_offset: int) -> Any:
        """Rank ``r``'s next message; a RankResult when it died (None: nothing yet)."""
        conn, proc = self.conns[r], self.procs[r]
        try:
            if conn.poll():
                return conn.recv()
        except (EOFError, OSError):
            pass
        if proc.is_alive():
            proc.join(0.2)
            if proc.is_alive():
                return None
        proc.join(1)
        return RankResult(rank=r, status=CRASHED, exitcode=proc.exitcode,
                          message=describe_exit(proc.exitcode),
                          stack=tidy_stack(self._read_from(f"rank{r}.stack", stack_offset)),
                          output=self._output(r))

    def close(self) -> None:
        """Stop every rank (politely, then by force) and remove the pool's files."""
        for conn in self.conns:
            try:
                send(conn, Shutdown())
            except Exception:
                pass
        deadline = time.monotonic() + (3.0 if not self.broken else 0.0)
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            _kill(proc)
        for conn in self.conns:
            try:
                conn.close()
            except Exception:
                pass
        self.conns, self.procs = [], []
        self.broken = True
        _LIVE.discard(self)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclasses.dataclass
class _InFlight:
    """One test on a pool while the parent waits for its ranks: what each said so far, and its limits."""

    world_size: int
    started: float  # time.monotonic()
    timeout: float
    grace: PeerGrace  # HARNESS_PEER_GRACE, once some rank's trouble started it
    results: dict[int, RankResult] = dataclasses.field(default_factory=dict)
    pending: set[int] = dataclasses.field(default_factory=set)  # ranks whose test has not ended
    meeting: dict[int, int] = dataclasses.field(default_factory=dict)  # rank -> run_subtests meeting it waits at
    reported: dict[int, list[SubtestOutcome]] = dataclasses.field(default_factory=dict)  # what it said at meetings
    failing: dict[int, RankResult] = dataclasses.field(default_factory=dict)  # a failure before its tearDown ran
    ended: dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> its body's status: waits to tear down
    check_at: float | None = None  # when to look whether a returned rank left its peers waiting forever
    paused_before: float = 0.0  # harness.parent.relay.paused_seconds() when the test started
    unlimited: bool = False  # HARNESS_DEBUGPY: an IDE's debugger may hold any rank at any time; nothing is stopped
    look_at: float = 0.0  # when to look next whether every rank is blocked (_look_for_desync)
    cpu: dict[int, int | None] = dataclasses.field(default_factory=dict)  # each rank's main-thread CPU at the last look
    asked: dict[int, int | None] | None = None  # ... when the ranks' dumps were last asked for
    unanswered: int = 0  # looks in a row whose dumps did not all come
    before: dict[int, Any] | None = None  # dumps that showed a desync, to be confirmed by the next look
    desync: tuple[int, str] | None = None  # (the root cause rank, why): every rank blocked for good

    def __post_init__(self) -> None:
        self.pending = set(range(self.world_size))
        self.reported = {r: [] for r in range(self.world_size)}
        self.look_at = self.started + LOOK
        self.paused_before = relay.paused_seconds()

    def limit(self) -> float:
        """When the ranks still running are stopped: the deadline or the grace's end, both moved by the time
        a rank spent at a debugger's prompt; while one is at a prompt, not before the next look."""
        if relay.in_session() or self.unlimited:
            return time.monotonic() + 1.0
        return self.grace.limit(self.deadline) + self.paused()

    def paused(self) -> float:
        """Seconds a rank of this test spent at a debugger's prompt: not the test's time."""
        return relay.paused_seconds() - self.paused_before

    @property
    def deadline(self) -> float:
        return self.started + self.timeout


class _ForkFailed(Exception):
    """The template did not fork a rank (it died, or never started): the pool spawns its ranks instead."""


@contextlib.contextmanager
def _environ(values: dict[str, str] | None) -> Iterator[None]:
    """``values`` in this process's environment while a spawned rank inherits it, then as before."""
    backup = {k: os.environ.get(k) for k in values or {}}
    os.environ.update(values or {})
    try:
        yield
    finally:
        for k, v in backup.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _kill(proc: Any) -> None:
    """Make sure a rank is gone (killed when it still runs).

    A forked rank's exit status comes through the template; with the template gone it reads 255 while the
    rank may still run, so such a rank is killed by its pid as well.
    """
    if proc.pid is None:
        return  # never started
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    if proc.exitcode in (None, 255):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _main_thread_cpu(pid: int | None) -> int | None:
    """The CPU time of process ``pid``'s main thread (ns from /proc's schedstat, else ticks from its stat): it
    does not change while that thread is blocked. None where /proc cannot tell."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _default_threads(world_size: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, world_size))


class Pools(Worlds):
    """One run's spawned worlds, one per (world size, placement kind), kept from test to test.

    Example::

        pools = Pools()
        pool, reused = pools.world(2, choose_placement(2, 0, "cpu"), settings())
        results = pool.run(task, peer_grace=5)
        pools.close()
    """

    replaceable = True  # this process starts its ranks: triage can have fresh ones

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str], RankPool] = {}
        self._at_exit = False

    def place(self, world_size: int, gpus_asked: int, conf: Settings, world_note: str = "") -> Placement:
        placement = choose_placement(world_size, gpus_asked, conf.device)
        if world_note:
            placement = dataclasses.replace(placement, reason=f"{world_note}; {placement.reason}")
        return placement

    def world(self, world_size: int, placement: Placement, conf: Settings) -> tuple[RankPool, bool]:
        """The running pool for this world size and placement kind, or a new one (whose ranks get ``conf``)."""
        key = (world_size, placement.kind)
        pool = self._pools.get(key)
        if pool is not None and not pool.broken:
            return pool, True
        install_sigterm_handler()
        if not self._at_exit:
            # Registered after multiprocessing's own exit hook, so it runs first (atexit is last-in first-out)
            # and multiprocessing never waits on a rank still held here.
            atexit.register(self.close)
            self._at_exit = True
        pool = RankPool(world_size, placement, conf.threads or _default_threads(world_size), conf)
        self._pools[key] = pool
        return pool, False

    def fresh(self, world_size: int, placement: Placement, conf: Settings) -> RankPool:
        """A pool of new ranks that this run does not keep: the caller closes it (harness.judging.triage)."""
        install_sigterm_handler()
        return RankPool(world_size, placement, conf.threads or _default_threads(world_size), conf)

    def done_with(self, world: World, conf: Settings) -> None:
        if not conf.reuse and isinstance(world, RankPool):
            world.close()

    def close(self) -> None:
        for pool in list(self._pools.values()):
            pool.close()
        self._pools.clear()
        if not ranks_alive():  # no run of this process has ranks left: nothing needs the template
            template.stop()
