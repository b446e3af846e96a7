"""What the parent shows: rank-prefixed output blocks, the per-test record, and test ids for messages."""
from __future__ import annotations

import atexit
import dataclasses
import sys
from typing import Any

from harness.outcome import RankResult, prefixed

__all__ = ["TestRecord", "records", "record", "print_rank_output", "short_id", "note_fallback", "fallbacks",
           "note_altered", "altered", "altered_lines", "note_needs_cuda", "needs_cuda", "needs_cuda_line",
           "fallback_lines", "end_of_run_lines", "clear_end_of_run"]


@dataclasses.dataclass
class TestRecord:
    """One test as it ran: where, on how many ranks, how long, with which processes."""

    test_id: str
    world_size: int
    placement: str  # "cpu/gloo", "cuda/nccl", or "" when it never ran
    reason: str  # why that placement ("needs 4 GPUs, found 0: ran on CPU/gloo")
    seconds: float
    pids: list[int]
    reused_pool: bool
    examples: int = 1  # hypothesis examples sent to the ranks


records: list[TestRecord] = []


def record(rec: TestRecord) -> None:
    records.append(rec)


def short_id(test: Any) -> str:
    """``module.Class.method`` with the module as the user named it (``__main__`` -> file stem)."""
    test_id = test.id()
    module = type(test).__module__
    if module == "__main__":
        main = sys.modules.get("__main__")
        path = getattr(main, "__file__", "") or ""
        stem = path.rsplit("/", 1)[-1].removesuffix(".py") if path else "__main__"
        test_id = stem + test_id[len("__main__"):]
    return test_id


def print_rank_output(results: list[RankResult]) -> None:
    """Each rank's output as one block, so lines from different ranks never interleave."""
    blocks = [prefixed(r.rank, r.output) for r in sorted(results, key=lambda r: r.rank) if r.output.strip()]
    if blocks:
        sys.stdout.write("\n".join(blocks) + "\n")
        sys.stdout.flush()


#: reason -> test ids that ran on CPU/gloo because there were not enough GPUs
fallbacks: dict[str, list[str]] = {}


def note_fallback(reason: str, test_id: str) -> None:
    if not fallbacks:
        atexit.register(_say_fallbacks)
    fallbacks.setdefault(reason, []).append(test_id)


def fallback_lines() -> list[str]:
    """One line per reason that tests ran on CPU, or on GPUs their ranks shared, for want of GPUs, naming the tests."""
    lines = []
    for reason, tests in fallbacks.items():
        shown = ", ".join(tests[:3]) + (f" and {len(tests) - 3} more" if len(tests) > 3 else "")
        if reason.endswith(": ran on CPU/gloo"):
            where, why = "on CPU/gloo, not GPUs", reason.removesuffix(": ran on CPU/gloo")
        else:
            where, why = "on shared GPUs over gloo, not one GPU per rank on NCCL", reason
        lines.append(f"{len(tests)} test(s) ran {where} ({why}): {shown}; HARNESS_DEVICE=nccl would skip them "
                     "instead")
    return lines


def _say_fallbacks() -> None:
    """At the end of a unittest or pytest run: which tests ran on CPU instead of GPUs, and why.

    A runner that shows each test's placement itself (run_tests.py) clears ``fallbacks`` first.
    """
    for line in fallback_lines():
        sys.stderr.write(f"harness: {line}\n")
    fallbacks.clear()


#: (test id, what it left) for each test after which the ranks were replaced (harness.isolation)
altered: list[tuple[str, list[str]]] = []


def note_altered(test_id: str, changes: list[str]) -> None:
    if not altered:
        atexit.register(_say_altered)
    if altered and altered[-1][0] == test_id:  # another hypothesis example of the same test
        altered[-1][1].extend(c for c in changes if c not in altered[-1][1])
        return
    altered.append((test_id, list(changes)))


def altered_lines() -> list[str]:
    """One line per test that left the process altered: what it left, and that the ranks were replaced."""
    return [f"{test_id} altered the process: {'; '.join(changes)}; ranks restarted" for test_id, changes in altered]


_ALTERED_HINT = " (HARNESS_ENV_CHANGED=fail makes it a failure)"


def _say_altered() -> None:
    """At the end of a unittest or pytest run, as regrtest's "env changed" (run_tests.py clears ``altered``
    and prints the same lines in its summary)."""
    for line in altered_lines():
        sys.stderr.write(f"harness: {line}{_ALTERED_HINT}\n")
    altered.clear()


#: test id -> why each of its (sub)tests was skipped: it ran on CPU for want of GPUs and hard-codes CUDA
needs_cuda: dict[str, list[str]] = {}


def note_needs_cuda(test_id: str, reason: str) -> None:
    if not needs_cuda:
        atexit.register(_say_needs_cuda)
    needs_cuda.setdefault(test_id, []).append(reason)


def needs_cuda_line() -> str:
    """One summary line: "N tests need CUDA (M subtests): a, b, c and 2 more" ("" when none)."""
    if not needs_cuda:
        return ""
    tests = list(needs_cuda)
    count = sum(len(v) for v in needs_cuda.values())
    subs = f" ({count} subtests)" if count != len(tests) else ""
    shown = ", ".join(tests[:5]) + (f" and {len(tests) - 5} more" if len(tests) > 5 else "")
    return (f"{len(tests)} {'tests need' if len(tests) != 1 else 'test needs'} CUDA{subs}, skipped (on CPU for want of GPUs; "
            f"HARNESS_DEVICE=cpu makes them failures): {shown}")


def _say_needs_cuda() -> None:
    """At the end of a unittest or pytest run; a runner that prints the line itself clears ``needs_cuda``."""
    line = needs_cuda_line()
    if line:
        sys.stderr.write(f"harness: {line}\n")
    needs_cuda.clear()


def end_of_run_lines() -> list[str]:
    """What a unittest run ends with on stderr, for a runner that prints it in its own summary (the pytest
    plugin); :func:`clear_end_of_run` then keeps it from being printed again at exit."""
    lines = fallback_lines() + ([needs_cuda_line()] if needs_cuda else [])
    return lines + [line + _ALTERED_HINT for line in altered_lines()]


def clear_end_of_run() -> None:
    fallbacks.clear()
    needs_cuda.clear()
    altered.clear()
