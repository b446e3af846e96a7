"""One attempt of a test with faults on purpose, judged: which ranks the faults took, which errors follow from them,
whether the world starts again; the faults that never fired; every attempt in the report's words.

Pure decisions over data (the ranks' results, what the fault log says fired); harness.parent.restarts runs the
attempts and hands the last one's results, with these judged as passed, to ``verdict.judge``.

The rules: a rank where a fault that ends or breaks a test fired (kill, raise_, hang, io_error) and whose test
then went wrong was taken by the fault; in that attempt its peers' errors, crashes and stops follow from it. An
``AssertionError`` is the test's own verdict wherever it is (unless ``raise_`` injected that very type): what the
survivors assert is what the test checks. Anything else that went wrong is a failure no fault explains: the test
fails and is not run again.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.shared.faults import DISRUPTING, Fault
from harness.shared.outcome import CRASHED, ERROR, FAILED, KILLED, PASSED, TIMEOUT, RankResult

__all__ = ["Attempt", "judge_attempt", "never_fired", "describe", "fault_names"]

#: what the world became after an attempt (Attempt.then)
RESTARTED, LAST, FAILED_THEN, PASSED_THEN = "restarted", "last", "failed", "passed"


@dataclasses.dataclass
class Attempt:
    """One run of the test in one world: what fired, what the faults took, what follows from them."""

    number: int
    fired: list[dict[str, Any]]  # the fault log's entries: index (in the plan), rank, where, counts
    results: list[RankResult]  # as the verdict judges them: ranks taken by a fault and their peers' errors passed
    taken: dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> what the fault did to it
    follows: dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> its error, following from it
    unexplained: list[int] = dataclasses.field(default_factory=list)  # ranks whose failure no fault explains
    seen: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)  # rank -> its counts (RankResult.faults)
    then: str = ""  # RESTARTED, or how the attempt ended the test (set by the caller)

    @property
    def disrupted(self) -> bool:
        """A fault killed or failed a rank here: the world is ended, and started again where restarts are left."""
        return bool(self.taken)


def _excusable(res: RankResult, injected_type: str = "") -> bool:
    if res.status == FAILED:  # an assertion is what the test checks
        return bool(injected_type) and res.exc_type == injected_type
    return res.status in (ERROR, CRASHED, KILLED, TIMEOUT) or (res.status == PASSED and res.is_bad)


def _as_passed(res: RankResult) -> RankResult:
    kept = [s for s in res.subtests if s.status not in (FAILED, ERROR, CRASHED, KILLED, TIMEOUT)]
    return RankResult(rank=res.rank, status=PASSED, subtests=kept, output=res.output, duration=res.duration,
                      arrived=res.arrived, faults=res.faults, default_group=res.default_group, altered=res.altered)


def judge_attempt(plan: list[Fault], number: int, results: list[RankResult], log: list[dict[str, Any]]) -> Attempt:
    """Attempt ``number``'s ``results`` (one per rank) with the fault log's entries (``log``).

    Example::

        a = judge_attempt([kill(1, op="all_reduce", nth=3)], 0, [RankResult(0, ERROR, "RuntimeError", "closed"),
                          RankResult(1, CRASHED, exitcode=-9)], [{"index": 0, "rank": 1, "where": "..."}])
        a.taken, a.follows, a.disrupted    # ({1: 'killed by SIGKILL (exit code -9)'}, {0: 'RuntimeError: closed'}, True)
    """
    fired: dict[int, dict[str, Any]] = {}
    for entry in log:
        fired.setdefault(entry["index"], entry)
    for res in results:
        for entry in (res.faults or {}).get("fired", []):
            fired.setdefault(entry["index"], entry)
    attempt = Attempt(number, [fired[i] for i in sorted(fired)], list(results))
    for res in results:
        if res.faults is not None:
            attempt.seen[res.rank] = res.faults
    by_rank: dict[int, list[Fault]] = {}
    for i, entry in fired.items():
        if 0 <= i < len(plan) and plan[i].kind in DISRUPTING:
            by_rank.setdefault(entry["rank"], []).append(plan[i])
    for res in results:
        mine = by_rank.get(res.rank, [])
        if not mine or not res.is_bad:
            continue
        injected = next((type(f.exc).__name__ if isinstance(f.exc, BaseException) else getattr(f.exc, "__name__", "")
                         for f in mine if f.kind == "raise_"), "")
        if _excusable(res, injected):
            attempt.taken[res.rank] = res.one_line()
    for res in results:
        if res.rank in attempt.taken or not res.is_bad:
            continue
        if attempt.taken and _excusable(res):
            attempt.follows[res.rank] = res.one_line()
        else:
            attempt.unexplained.append(res.rank)
    if not attempt.unexplained:
        attempt.results = [_as_passed(r) if r.rank in attempt.taken or r.rank in attempt.follows else r
                           for r in results]
    return attempt


def never_fired(plan: list[Fault], attempts: list[Attempt], restarts: int, only: int | None = None) -> list[str]:
    """A line for each fault of ``plan`` that never fired in the ``attempts`` that ran (``restarts``: how many the
    test allows), each saying why as far as the ranks told. ``only``: the faults of that attempt alone, judged on
    the last of ``attempts`` (torchrun's, where this process saw no other).

    Example::

        never_fired([kill(1, op="all_reduce", nth=10)], [attempt], 0)
        # ["kill(rank=1, op='all_reduce', nth=10) never fired: rank 1 made 1 all_reduce"]
    """
    lines = []
    for i, fault in enumerate(plan):
        number = fault.attempt
        if only is not None:
            if number != only:
                continue
            attempt = attempts[-1]
            if not any(e["index"] == i for e in attempt.fired):
                lines.append(f"{fault} never fired: {_calls_made(fault, i, attempt)}")
            continue
        if number >= len(attempts):
            why = (f"attempt {number} never started (the test ran {len(attempts)} "
                   f"attempt{'s' if len(attempts) != 1 else ''}")
            if restarts < number:
                why += f"; it allows {restarts} restart{'s' if restarts != 1 else ''}: give it @restarts({number})"
            elif attempts and not attempts[-1].disrupted:
                why += "; the world starts again only after a fault kills or fails a rank"
            lines.append(f"{fault} never fired: {why})")
            continue
        attempt = attempts[number]
        if any(e["index"] == i for e in attempt.fired):
            continue
        lines.append(f"{fault} never fired: {_calls_made(fault, i, attempt)}")
    return lines


def _calls_made(fault: Fault, index: int, attempt: Attempt) -> str:
    rank = fault.rank
    seen = attempt.seen.get(rank)
    res = next((r for r in attempt.results if r.rank == rank), None)
    if seen is None:
        how = f" ({res.one_line()})" if res is not None and res.status != PASSED else ""
        return f"rank {rank} ended before it said how many calls it made{how}"
    if fault.kind == "io_error":
        opened = seen.get("opened", {}).get(index, 0)
        written = seen.get("written", {}).get(index, 0)
        return (f"rank {rank} opened {opened} file{'s' if opened != 1 else ''} for writing under {fault.path_glob!r} "
                f"and wrote {written} bytes there (after_bytes={fault.after_bytes})")
    count = seen.get("seen", {}).get(index, 0)
    words = f"rank {rank} made {count} {fault.what}"
    if fault.op is not None and count == 0 and seen.get("counts"):
        made = ", ".join(f"{n} {op}" for op, n in sorted(seen["counts"].items()))
        words += f" (it made {made})"
    taken = attempt.taken.get(rank)
    if taken:
        words += f", then another fault took it: {taken}"
    return words


def fault_names(plan: list[Fault], attempts: list[Attempt], launched: bool = False) -> str:
    """The faults a passing test's line names: each, with the attempt it fired in (``launched``: torchrun's attempt,
    whose process never saw the earlier ones)."""
    out = []
    for i, fault in enumerate(plan):
        where = next((f"fired in attempt {a.number} on rank {e['rank']} {e['where']}" for a in attempts
                      for e in a.fired if e["index"] == i), "never fired")
        if launched and attempts and fault.attempt < attempts[-1].number:
            where = (f"was due in attempt {fault.attempt} of this torchrun job, before this one "
                     f"(TORCHELASTIC_RESTART_COUNT={attempts[-1].number})")
        elif launched and attempts and fault.attempt > attempts[-1].number:
            where = f"is due in attempt {fault.attempt}, after this one"
        out.append(f"{fault} {where}")
    return "; ".join(out)


def describe(plan: list[Fault], attempts: list[Attempt], restarts: int) -> list[str]:
    """Every attempt in the report's words: what fired where, what became of each rank, and what followed."""
    lines = []
    for a in attempts:
        head = f"attempt {a.number} (restart_count {a.number})"
        if not a.fired:
            lines.append(f"{head}: no fault fired")
        for e in a.fired:
            lines.append(f"{head}: {plan[e['index']]} fired on rank {e['rank']} {e['where']}")
        for rank in sorted(a.taken):
            lines.append(f"  rank {rank}: {a.taken[rank]} (the injected fault)")
        for rank in sorted(a.follows):
            lines.append(f"  rank {rank}: {a.follows[rank]} (follows from the injected fault)")
        for rank in a.unexplained:
            res = next(r for r in a.results if r.rank == rank)
            lines.append(f"  rank {rank}: {res.one_line()} (no fault explains it: not run again)")
        if a.then == RESTARTED:
            lines.append(f"  -> the world was ended and started again in fresh ranks "
                         f"(restart {a.number + 1} of {restarts})")
        elif a.then:
            lines.append(f"  -> {a.then}")
    return lines
