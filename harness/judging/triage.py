"""A failure in reused ranks, checked against fresh ranks: the test's own, caused by an earlier test (named), or flaky.

Reused ranks must give the answer fresh processes would. The harness restores and detects much of
what a test can leave in its process (harness.ranks.isolation), but not a test module's own globals, a cache
in a user library, a file: so every failure (and error) of a test that ran in ranks which had run
other tests first is checked, in fresh ranks of the same world size and placement, with the same seed
and hypothesis example (:func:`check`):

1. the test alone: if it fails there too, it is **the test's own** failure;
2. else the tests those ranks ran before it, then the test: if it fails, the earlier tests are bisected
   (as CPython's ``regrtest --bisect`` and detect-test-pollution do, :func:`bisect`) down to the one
   that makes it fail, which is **named**; the test's verdict is the one fresh processes give (it
   passed alone), and the one named left state behind (harness.judging.notes: altered the process);
3. else it is **flaky**: it failed once and passed twice; it stays a failure.

Triage never hides a failure fresh processes also show, spends at most the run's budget
(``HARNESS_TRIAGE_BUDGET`` seconds, then it says it stopped), and a test that hangs under it is stopped
as any other (its own timeout). ``HARNESS_TRIAGE=0`` or ``--no-triage`` turns it off. Under torchrun
the launched ranks cannot be replaced: nothing is re-run, and the failure says so.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence, TypeVar

from harness.shared.outcome import BAD, RankResult
from harness.shared.protocol import Task

__all__ = ["Finding", "Ran", "bisect", "check", "OWN", "POLLUTED", "FLAKY", "UNDECIDED"]

OWN, POLLUTED, FLAKY, UNDECIDED = "own", "polluted", "flaky", "undecided"

T = TypeVar("T")


@dataclasses.dataclass
class Ran:
    """One test a world's ranks ran: what was sent (to send again) and the test as unittest knows it."""

    task: Task
    test: Any  # the unittest.TestCase, to name it (and fail it under HARNESS_ENV_CHANGED=fail)


@dataclasses.dataclass
class Finding:
    """What triage found about one failure, as data; :meth:`line` says it in words."""

    kind: str  # OWN, POLLUTED, FLAKY or UNDECIDED (the budget ran out first)
    test_id: str
    culprits: list[Ran] = dataclasses.field(default_factory=list)  # POLLUTED: the earlier tests that cause it
    reruns: int = 0
    seconds: float = 0.0
    failed: int = 1  # runs of the test that failed, the first (in reused ranks) included
    runs: int = 1  # runs of the test, the first included
    differently: str = ""  # OWN: how the fresh run failed, when not as the reused one did
    fresh: list[RankResult] | None = None  # POLLUTED: the results fresh ranks gave (the verdict)
    stopped: str = ""  # UNDECIDED: why triage stopped

    @property
    def culprit_ids(self) -> list[str]:
        return [ran.task.test_id for ran in self.culprits]

    def line(self) -> str:
        """One line for the test's report and the runner's line under it."""
        names = " and ".join(self.culprit_ids)
        if self.kind == OWN:
            how = f", differently: {self.differently}" if self.differently else ""
            return f"fails in fresh ranks too (alone{how}): the test's own failure"
        if self.kind == POLLUTED:
            together = " (together)" if len(self.culprits) > 1 else ""
            return (f"fails after {names}{together} in shared ranks; passes in fresh ranks: {names} left state "
                    "behind that a fresh process would not have")
        if self.kind == FLAKY:
            return f"flaky: failed {self.failed} of {self.runs} runs (passed alone in fresh ranks, and after the " \
                   "tests that ran before it)"
        if self.fresh is None:
            return f"not checked in fresh ranks: {self.stopped}"
        return f"passed alone in fresh ranks; the cause was not found: {self.stopped}"

    def cost(self) -> str:
        return f"{self.reruns} re-run{'s' if self.reruns != 1 else ''}, {self.seconds:.1f} s"


def bisect(earlier: Sequence[T], fails: Callable[[Sequence[T]], bool]) -> list[T]:
    """The fewest of ``earlier`` (kept in their order) after which the test fails, given that it fails after
    all of them: halve while one half alone makes it fail; two that fail only together are returned
    together. ``fails(subset)`` runs the subset, then the test, in fresh ranks.

    Example::

        bisect(["a", "b", "c", "d"], lambda s: "c" in s)   # ["c"], in 2 runs
    """
    candidates = list(earlier)
    while len(candidates) > 1:
        half = len(candidates) // 2
        first, second = candidates[:half], candidates[half:]
        if fails(first):
            candidates = first
        elif fails(second):
            candidates = second
        else:
            # Neither half alone: the test fails only after tests from both. Narrow each half while the
            # other is kept whole (the same halving, one side at a time).
            keep_first = _narrow(first, lambda part: fails([*part, *second]))
            keep_second = _narrow(second, lambda part: fails([*keep_first, *part]))
            return [*keep_first, *keep_second]
    return candidates


def _narrow(items: list[T], fails: Callable[[list[T]], bool]) -> list[T]:
    while len(items) > 1:
        half = len(items) // 2
        if fails(items[:half]):
            items = items[:half]
        elif fails(items[half:]):
            items = items[half:]
        else:
            break
    return items


class _Budget(Exception):
    """The run's triage budget is spent: stop where we are."""


def check(task: Task, history: Sequence[Ran], results: list[RankResult], fresh_world: Callable[[], Any],
          fails: Callable[[list[RankResult]], bool], peer_grace: float, budget_left: float) -> Finding:
    """Triage one failure: ``task`` failed with ``results`` in ranks that ran ``history`` first.

    ``fresh_world()`` gives a new world (harness.shared.world.World) of the same world size and placement, not
    reused by anything else; each is closed here. ``fails(results)``: whether a run of the test failed,
    as its verdict says (a failed subtest counts, as it did for the failure being checked: the same
    decision, harness.judging.verdict's, not one of triage's own). ``budget_left``: seconds this check may spend.
    """
    started = time.monotonic()
    finding = Finding(UNDECIDED, task.test_id)

    def run(sequence: Sequence[Task]) -> list[RankResult] | None:
        """The tasks in one fresh world, in order; the last one's results (None: an earlier one broke it)."""
        if time.monotonic() - started > budget_left:
            raise _Budget()
        finding.reruns += 1
        world = fresh_world()
        try:
            last: list[RankResult] | None = None
            for i, sent in enumerate(sequence):
                with world.test_files(sent.temp_dir is not None) as (temp_dir, file_name):
                    again = dataclasses.replace(sent, temp_dir=temp_dir, file_name=file_name,
                                                fresh_pg=world.pg_suspect)
                    last = world.run(again, peer_grace)
                world.pg_suspect = any(r.is_bad for r in last)
                if getattr(world, "broken", False) and i < len(sequence) - 1:
                    return None  # an earlier test crashed or hung its ranks: this order tells nothing
            return last
        finally:
            world.close()

    def failed(out: list[RankResult] | None) -> bool:
        return out is not None and fails(out)

    try:
        alone = run([task])
        finding.runs += 1
        if failed(alone):
            finding.kind, finding.failed = OWN, finding.failed + 1
            finding.differently = _differently(results, alone)
            return finding
        finding.fresh = alone
        earlier = [ran.task for ran in history]
        after_all = run([*earlier, task])
        if after_all is None:
            finding.stopped = "an earlier test broke the fresh ranks when run again before it"
            return finding
        finding.runs += 1
        if not failed(after_all):
            finding.kind = FLAKY
            return finding
        finding.failed += 1
        by_task = {id(ran.task): ran for ran in history}
        culprits = bisect(earlier, lambda subset: failed(run([*subset, task])))
        finding.culprits = [by_task[id(t)] for t in culprits]
        finding.kind = POLLUTED
        return finding
    except _Budget:
        finding.kind = UNDECIDED
        finding.stopped = "the run's triage budget is spent (HARNESS_TRIAGE_BUDGET)"
        return finding
    finally:
        finding.seconds = time.monotonic() - started


def _root(results: list[RankResult]) -> RankResult | None:
    from harness.shared.outcome import order_by_cause

    bad = [r for r in results if r.status in BAD]
    return order_by_cause(bad)[0] if bad else None


def _differently(first: list[RankResult], again: list[RankResult]) -> str:
    """How ``again`` failed, when its root cause is not the same kind of failure as ``first``'s ("": the same)."""
    a, b = _root(first), _root(again)
    if a is None or b is None or (a.status, a.exc_type) == (b.status, b.exc_type):
        return ""
    what = f"{b.exc_type}: {b.message}" if b.exc_type else (b.message or b.status)
    return what.splitlines()[0][:200] if what else b.status
