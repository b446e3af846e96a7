"""A sweep judged: each point's outcome (did the test survive its fault?), and the sweep in the report's words.

Pure decisions over data; harness.parent.sweep runs the points. A point is one run of the test (with its
``@restarts``) with one fault injected at one collective. It passes where the test ends passing: its last attempt
passed on every rank the fault left alive. Stricter than ``@faults.inject`` alone in one way: there, with no restart
left, a survivor's error that follows from the fault is excused; a sweep asks the test to survive each point, so
such an error fails the point ("the test did not survive it"), named with the fault that caused it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.judging.attempts import Attempt
from harness.shared.faults import Fault, ordinal, replay
from harness.shared.outcome import PASSED

__all__ = ["Point", "point_of", "fired_as", "words", "passed_line"]

#: how many failing points a report shows in full (every one has its line)
SHOWN_IN_FULL = 3


@dataclasses.dataclass
class Point:
    """One point of a sweep, run: the fault that replays it, whether the test survived, and why not."""

    number: int  # 1.. in the sweep's order (by rank, then nth)
    fault: Fault  # as injected (op None: the rank's nth collective)
    replay: Fault  # the same call named by its op and its place among that op's calls: what replays it alone
    passed: bool
    line: str  # one line: what happened
    lines: list[str]  # the point's own report (a failing point's)
    attempts: int
    seconds: float


def fired_as(fault: Fault, fired: list[dict[str, Any]], index: int) -> Fault:
    """The fault named as the call it fired at: ``kill(rank=1, nth=5)`` that fired at the rank's 2nd
    gather_object is ``kill(rank=1, op='gather_object', nth=2)``; unchanged where it never fired."""
    entry = next((e for e in fired if e["index"] == index), None)
    if entry is None or not entry.get("op"):
        return fault
    return dataclasses.replace(fault, op=entry["op"], nth=entry["counts"].get(entry["op"], fault.nth))


def point_of(number: int, fault: Fault, index: int, done: list[Attempt], judged: Any, missing: list[str],
             described: list[str], seconds: float, restarts: int, test_id: str) -> Point:
    """One point judged: ``done`` its attempts, ``judged`` its verdict as ``@faults.inject`` gives it (``index``: the
    fault's place in the plan; ``missing``: the faults that never fired)."""
    first = done[0]
    named = fired_as(fault, first.fired, index)
    last = done[-1]
    shown = replay(named)
    if missing:
        line = "; ".join(missing)
        return Point(number, fault, named, False, line, judged.verdict.lines, len(done), seconds)
    if judged.verdict.fails:
        return Point(number, fault, named, False, _root_line(last, judged.verdict.root_rank) or judged.verdict.lines[0],
                     judged.verdict.lines,
                     len(done), seconds)
    if last.disrupted and last.follows:
        taken = "; ".join(f"rank {r}: {what} (the injected fault)" for r, what in sorted(last.taken.items()))
        follows = "; ".join(f"rank {r}: {what}" for r, what in sorted(last.follows.items()))
        why = ("it has no @restarts: nothing resumed the test after the fault" if restarts == 0 else
               f"its {restarts} restart{'s' if restarts != 1 else ''} were spent")
        line = f"the test did not survive it: {taken}; {follows} (follows from it); {why}"
        described = [d if not d.startswith("  -> passed (no restart left") else
                     "  -> the point failed: the test did not survive the fault" for d in described]
        lines = [f"{test_id}: {shown}: {line}",
                 "A sweep's point passes where the test ends passing on every rank the fault left alive: give the "
                 "test @restarts(1) to run it again after the fault, or let the survivors expect it.",
                 "", "Attempts:", *described]
        return Point(number, fault, named, False, line, lines, len(done), seconds)
    restarted = len(done) - 1
    line = "passed" + (f" (restarted {restarted} time{'s' if restarted != 1 else ''})" if restarted else "")
    return Point(number, fault, named, True, line, [], len(done), seconds)


def _root_line(attempt: Attempt, root: int | None) -> str:
    bad = [r for r in attempt.results if r.status != PASSED and (root is None or r.rank == root)]
    if not bad:
        return ""
    first = min(bad, key=lambda r: (r.exc_type != "AssertionError", r.rank))
    return f"rank {first.rank}: {first.one_line()}"


def _counted(sweep: Any, counts: dict[int, dict[str, int]], ranks: list[int]) -> str:
    """What each swept rank made, as the sweep's head says it ("rank 1 made 16 collectives: 8 gather_object, ...")."""
    out = []
    for rank in ranks:
        made = counts.get(rank, {})
        if sweep.op is None:
            total = sum(made.values())
            parts = ", ".join(f"{n} {op}" for op, n in sorted(made.items(), key=lambda kv: (-kv[1], kv[0])))
            out.append(f"rank {rank} made {total} collective{'s' if total != 1 else ''}" + (f" ({parts})" if parts
                                                                                         else ""))
    return "; ".join(out)


def passed_line(sweep: Any, points: list[Point], counts: dict[int, dict[str, int]], ranks: list[int]) -> str:
    """The faults line of a sweep that passed: how many points, over what."""
    made = _counted(sweep, counts, ranks)
    return (f"sweep {sweep}: {len(points)} point{'s' if len(points) != 1 else ''}, all passed"
            + (f" ({made})" if made else ""))


def words(test_id: str, sweep: Any, points: list[Point], counts: dict[int, dict[str, int]], ranks: list[int],
          restarts: int, given_by: str) -> list[str]:
    """A failing sweep's report: the head, each failing point as the fault that replays it and its line, the
    table of every point, then the first failing points' own reports."""
    failed = [p for p in points if not p.passed]
    made = _counted(sweep, counts, ranks)
    head = (f"{test_id}: sweep {sweep}: {len(failed)} of {len(points)} point{'s' if len(points) != 1 else ''} failed"
            + (f" ({made})" if made else "")
            + f"; each point a fresh world{' with @restarts(' + str(restarts) + ')' if restarts else ''}")
    lines = [head, "", "Failing points, each the fault that replays it alone:"]
    for p in failed:
        lines.append(f"  {replay(p.replay)}: {p.line}")
    example = replay(failed[0].replay) if failed else ""
    if given_by == "run":
        name = ".".join(test_id.split(".")[-2:])
        lines += ["", f"Replay one: -k {name} --sweep \"{example}\" (or HARNESS_SWEEP) runs that point alone, judged "
                  "as here"]
    else:
        lines += ["", f"Replay one: @faults.inject(faults.{example}) in place of the sweep"
                  + ("" if restarts else f", or @faults.sweep(faults.{example}) (judged as a point is)")]
    lines += ["", "Every point:"]
    width = max((len(replay(p.replay)) for p in points), default=0)
    for p in points:
        lines.append(f"  {p.number:>3} {replay(p.replay):<{width}}  {'passed' if p.passed else 'FAILED'}"
                     f"  {p.seconds:.2f}s")
    for p in failed[:SHOWN_IN_FULL]:
        lines += ["", f"=== point {p.number}: {replay(p.replay)} ===", *p.lines]
    if len(failed) > SHOWN_IN_FULL:
        lines += ["", f"({len(failed) - SHOWN_IN_FULL} more failing point{'s' if len(failed) - SHOWN_IN_FULL != 1 else ''}"
                  " not shown in full: replay one alone to see its report)"]
    return lines


def described(points: list[Point]) -> list[str]:
    """Every point in one line each (``--verbose`` and the reports' attempts)."""
    return [f"point {p.number}: {replay(p.replay)}: {p.line}" for p in points]


def at_nth(fault: Fault) -> str:
    """How the sweep put its fault: "rank 1's 3rd collective"."""
    return f"rank {fault.rank}'s {ordinal(fault.nth)} {fault.what}"
