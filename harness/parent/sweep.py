"""A sweep in the parent: a fault put at each collective a rank makes, one fresh world per point, side by side.

``testrun.TestRun.run_once`` hands a test here when it has ``@faults.sweep(...)`` or the run sweeps every test
(the runner's ``--sweep``, ``HARNESS_SWEEP``). :func:`check` refuses, before any rank starts, a sweep that cannot
run as written (a kind that cannot be swept, a rank outside the world, an unknown op). :func:`run_sweep` then:

* runs the test once without the fault, every rank counting its collectives (the count run): it must pass, and
  it says how many points there are (``nth`` = 1..N of the swept ``op``, or of every collective, per rank);
* runs each point, ``harness.parent.restarts.fresh_attempts`` with the test's ``@restarts``, in worlds forked from
  the template: up to ``HARNESS_SWEEP_JOBS`` points at once (the runner's ``-j``, else ``max(3, cores // world
  size + 1)``), the next worlds started while points run. The first points start beside the count run (a point
  needs only its ``nth``), so the count costs no time of its own; a ``delay`` sweep's first point is its count;
* judges each point (harness.judging.sweeps) and the sweep: it passes when every point passes; its report names
  each failing point as the fault that replays it alone.

Every point's worlds, temp_dir and fault logs are removed after it, whatever happens; an interrupt stops the
points in flight and the worlds started ahead.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from typing import Any, Callable

from harness.judging import sweeps as judging
from harness.judging.verdict import Verdict
from harness.parent import restarts
from harness.ranks.collective_calls import user_name
from harness.shared.errors import UsageError
from harness.shared.faults import NOT_SWEPT, SWEEPABLE, Sweep, parse_sweep
from harness.shared.outcome import FAILED

__all__ = ["sweep_of", "check", "run_sweep", "points_at_once"]

#: who asked for the sweep: the test's own @faults.sweep, or the run (--sweep, HARNESS_SWEEP)
TEST, RUN = "test", "run"


def sweep_of(testrun: Any) -> tuple[Sweep | None, str]:
    """The test's sweep, and who asked for it: its own ``@faults.sweep`` wins over the run's."""
    marked = testrun.marks.get("sweep")
    if marked is not None:
        return marked, TEST
    text = getattr(testrun.conf, "sweep", None)
    if text:
        return parse_sweep(text), RUN
    return None, ""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check(sweep: Sweep, given_by: str, restarts_n: int, test_id: str, world_size: int) -> str:
    """Refuse a sweep that cannot run as written (a UsageError naming the test, the sweep and the fix). Returns why
    the run's sweep does not apply to this test ("" when it does): a rank the test's world does not have."""
    where = f"{test_id}: {'@faults.sweep' if given_by == TEST else '--sweep'} {sweep}"
    if sweep.kind in NOT_SWEPT:
        raise UsageError(f"{where}: {NOT_SWEPT[sweep.kind]}")
    if sweep.kind not in SWEEPABLE:
        raise UsageError(f"{where}: unknown fault {sweep.kind!r}; sweep kill, raise_ or delay")
    ranks = sweep.ranks(world_size)
    if not ranks:
        raise UsageError(f"{where}: no rank to sweep; give rank=1, rank=[0, 1] or rank=faults.every_rank")
    for rank in ranks:
        if not _int(rank):
            raise UsageError(f"{where}: rank {rank!r} is not a rank; give an int, a list of them or "
                             "faults.every_rank")
        if not 0 <= rank < world_size:
            if given_by == RUN and rank >= world_size:
                return (f"--sweep {sweep}: this test's world has {world_size} rank{'s' if world_size != 1 else ''} "
                        f"(no rank {rank}): not swept")
            return _refuse(where, f"rank {rank} is outside the test's world of {world_size} "
                                  f"rank{'s' if world_size != 1 else ''}; name a rank from 0 to {world_size - 1} "
                                  "or sweep faults.every_rank")
    if len(set(ranks)) != len(ranks):
        raise UsageError(f"{where}: a rank named twice; name each rank once")
    why = restarts.problem(sweep.point(ranks[0], sweep.op, 1 if sweep.nth is None else sweep.nth), restarts_n,
                           world_size)
    if why:
        raise UsageError(f"{where}: {why}")
    return ""


def _refuse(where: str, why: str) -> str:
    raise UsageError(f"{where}: {why}")


def points_at_once(conf: Any, world_size: int, placement: Any) -> int:
    """How many points run side by side: HARNESS_SWEEP_JOBS (the runner's -j), else by the cores; one at a time
    on GPUs (two worlds' CUDA contexts at once could take the memory a point needs)."""
    if placement.device_type != "cpu":
        return 1
    if conf.sweep_jobs:
        return conf.sweep_jobs
    # a point waits as much as it computes (ranks forked, a rendezvous, a restart): one more world than the cores
    # hold keeps them busy (tools/bench_faults.py --only sweep)
    return max(3, (os.cpu_count() or 1) // max(1, world_size) + 1)


class _Worlds:
    """Fresh worlds for the points, started ahead from the template while other points run."""

    def __init__(self, start: Callable[[], Any], ahead: int) -> None:
        self.start = start
        self.ahead = ahead
        self.lock = threading.Lock()
        self.ready: list[restarts._Upcoming] = []
        self.closing: list[threading.Thread] = []
        self.taken: list[Any] = []  # every world a point took: stopped at once if the sweep is interrupted
        self.closed = False

    def take(self) -> Any:
        with self.lock:
            upcoming = self.ready.pop(0) if self.ready else None
        world = upcoming.take() if upcoming is not None else self.start()
        with self.lock:
            self.taken.append(world)
        self.refill()
        return world

    def refill(self) -> None:
        with self.lock:
            while not self.closed and len(self.ready) < self.ahead:
                self.ready.append(restarts._Upcoming(self.start))

    def wanted(self, ahead: int) -> None:
        """Keep ``ahead`` worlds started ahead from now on (0: the points left need no more)."""
        with self.lock:
            self.ahead = ahead
            extra = self.ready[ahead:]
            del self.ready[ahead:]
        for upcoming in extra:
            upcoming.discard()

    def close_later(self, world: Any) -> None:
        """Close a point's world in the background: its results are in, and the point's slot goes on at once."""
        world.broken = True  # never reused: its ranks are stopped at once, not asked to end
        closer = threading.Thread(target=world.close, name="harness-sweep-close", daemon=True)
        closer.start()
        with self.lock:
            self.closing.append(closer)

    def stop_all(self) -> None:
        """An interrupt: stop every point's ranks now, so that the points in flight end at once."""
        with self.lock:
            taken = list(self.taken)
        for world in taken:
            world.broken = True
            try:
                world.close()
            except Exception:  # noqa: BLE001 - a world its own point is closing too
                pass

    def close(self) -> None:
        """Stop the worlds started ahead and wait for the points' worlds to be closed: nothing outlives the sweep."""
        with self.lock:
            self.closed = True
            ready, self.ready = self.ready, []
        for upcoming in ready:
            upcoming.discard()
        for closer in self.closing:
            closer.join()


class _Outcome:
    """One run of the sweep (the count run or a point): its attempts, judged as ``@faults.inject`` judges them."""

    def __init__(self, fault: Any, plan: list[Any], done: list[Any], raw: list[Any], judged: Any, seconds: float,
                 pids: list[int]) -> None:
        self.fault, self.plan, self.done, self.raw, self.judged = fault, plan, done, raw, judged
        self.seconds, self.pids = seconds, pids

    def counts(self) -> dict[int, dict[str, int]]:
        """Each rank's collectives in the first attempt, by the user's name (the count run's: every one)."""
        return {r.rank: dict(r.faults.get("counts", {})) for r in self.raw[0] if r.faults is not None}


def run_sweep(testrun: Any, kwargs: dict[str, Any] | None, sweep: Sweep, given_by: str) -> Verdict:
    """Run the sweep (``testrun``: harness.parent.testrun.TestRun) and return the test's one verdict."""
    worlds = testrun.run.worlds
    base = restarts.plan_of(testrun.marks, kwargs)  # the test's own injected faults join every run
    n_restarts = testrun.restarts
    ranks = sweep.ranks(testrun.world_size)
    at_once = points_at_once(testrun.conf, testrun.world_size, testrun.placement)
    start = lambda: worlds.fresh(testrun.world_size, testrun.placement, testrun.conf)  # noqa: E731
    source = _Worlds(start, at_once if testrun.placement.device_type == "cpu" else 0)
    testrun.reused = False
    testrun.pids = []
    lock = threading.Lock()

    def run(fault: Any) -> _Outcome:
        plan = base + ([fault] if fault is not None else [])
        began = time.monotonic()
        done, raw, pids = restarts.fresh_attempts(testrun, kwargs, plan, n_restarts, source.take, count_calls=True,
                                                  ahead=fault is not None and fault.kind != "delay",
                                                  close=source.close_later)
        judged = restarts.judge(testrun, kwargs, plan, done, raw, n_restarts)
        with lock:
            testrun.pids += pids
        return _Outcome(fault, plan, done, raw, judged, time.monotonic() - began, pids)

    single = sweep.nth is not None  # a replay: those points alone, no count
    first_counts = sweep.kind == "delay"  # a delay changes nothing else: its first point's run counts every call
    counted: _Outcome | None = None
    totals: dict[int, int] | None = None
    outcomes: dict[tuple[int, int], _Outcome] = {}
    queue: list[tuple[int, int]] = [(r, sweep.nth) for r in ranks] if single else []
    speculative = 0 if single else at_once - (0 if first_counts else 1)
    if not single:  # the first points of the first rank start beside the count run: each needs only its nth
        queue = [(ranks[0], k) for k in range(1, speculative + 1)]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="harness-sweep")
    futures: dict[concurrent.futures.Future, Any] = {}
    try:
        if not single and not first_counts:
            futures[pool.submit(run, None)] = "count"

        def fill() -> None:
            while queue and len(futures) < at_once:
                rank, nth = queue.pop(0)
                futures[pool.submit(run, sweep.point(rank, sweep.op, nth))] = (rank, nth)

        fill()
        while futures:
            finished, _ = concurrent.futures.wait(list(futures), return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                key = futures.pop(future)
                outcome = future.result()
                if key == "count" or (first_counts and key == (ranks[0], 1)):
                    counted = outcome
                    if key == "count" and outcome.judged.verdict.fails:
                        queue.clear()  # the test fails without the fault: no point is run
                        continue
                    totals = _totals(sweep, outcome, ranks)
                    if totals is None:  # the delay point could not count (it failed): a count run of its own
                        futures[pool.submit(run, None)] = "count"
                        first_counts = False
                    else:
                        started = set(outcomes) | {k for k in futures.values() if k != "count"} | {key}
                        queue[:] = [(r, k) for r in ranks for k in range(1, totals[r] + 1) if (r, k) not in started]
                        source.wanted(min(at_once, len(queue)))
                if key != "count":
                    outcomes[key] = outcome
            if not queue and totals is not None:
                source.wanted(0)
            fill()
    except BaseException:
        for future in futures:
            future.cancel()
        source.stop_all()
        source.close()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    source.close()
    pool.shutdown(wait=True)
    return _verdict(testrun, kwargs, sweep, given_by, counted, totals, outcomes, ranks, n_restarts, base)


def _totals(sweep: Sweep, outcome: _Outcome, ranks: list[int]) -> dict[int, int] | None:
    """The points of each swept rank, from a run that counted every call (None: a rank could not say)."""
    counts = outcome.counts()
    if outcome.judged.verdict.fails or any(r not in counts for r in ranks):
        return None
    name = None if sweep.op is None else user_name(sweep.op)
    return {r: sum(counts[r].values()) if name is None else counts[r].get(name, 0) for r in ranks}


def _verdict(testrun: Any, kwargs: Any, sweep: Sweep, given_by: str, counted: _Outcome | None,
             totals: dict[int, int] | None, outcomes: dict[tuple[int, int], _Outcome], ranks: list[int],
             n_restarts: int, base: list[Any]) -> Verdict:
    test_id = testrun.test_id
    counts = counted.counts() if counted is not None else {}
    if counted is not None and counted.fault is None and counted.judged.verdict.fails:
        verdict = counted.judged.verdict
        verdict.lines = [f"{test_id}: sweep {sweep}: no point was run: the test fails without the fault (its count "
                         "run, below)", "", *verdict.lines]
        testrun.fault_names = f"sweep {sweep}: the run without the fault failed; no point run"
        return verdict
    if totals is not None and not sum(totals.values()):
        what = "collectives" if sweep.op is None else sweep.op
        made = "; ".join(f"rank {r} made no {what}" + (
            f" (it made {', '.join(f'{n} {op}' for op, n in sorted(counts.get(r, {}).items()))})"
            if counts.get(r) else "") for r in ranks)
        if given_by == TEST:
            raise UsageError(f"{test_id}: @faults.sweep {sweep}: no point to sweep: {made}; sweep another op "
                             f"(op=None: every collective) or rank")
        testrun.fault_names = f"sweep {sweep}: 0 points ({made})"
        return counted.judged.verdict if counted is not None else Verdict(test_id, "passed")
    if totals is not None:  # a point started before the count came back, past the rank's last call: not a point
        outcomes = {k: o for k, o in outcomes.items() if k[1] <= totals[k[0]]}
    ordered = [outcomes[k] for k in sorted(outcomes, key=lambda k: (ranks.index(k[0]), k[1]))]
    points = [judging.point_of(number, o.fault, len(o.plan) - 1, o.done, o.judged, o.judged.missing,
                               o.judged.described, o.seconds, n_restarts, test_id)
              for number, o in enumerate(ordered, 1)]
    testrun.ranks_seconds = max((o.judged.ranks_seconds for o in ordered), default=0.0)
    testrun.fault_attempts = judging.described(points)
    if all(p.passed for p in points):
        testrun.fault_names = judging.passed_line(sweep, points, counts, ranks)
        shown = counted if counted is not None else ordered[0] if ordered else None
        return shown.judged.verdict if shown is not None else Verdict(test_id, "passed")
    failing = [o for p, o in zip(points, ordered) if not p.passed]
    testrun.fault_names = f"sweep {sweep}: {len(failing)} of {len(points)} points failed"
    if failing[0].judged.picture is not None:
        testrun.picture = failing[0].judged.picture
    lines = judging.words(test_id, sweep, points, counts, ranks, n_restarts, given_by)
    return Verdict(test_id, FAILED, lines, root_rank=failing[0].judged.verdict.root_rank)
