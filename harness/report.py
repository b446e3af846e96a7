"""What the parent shows: rank-prefixed output blocks, the per-test record, and test ids for messages."""
from __future__ import annotations

import atexit
import dataclasses
import sys
import unittest
from typing import Any

from harness.outcome import RankResult, prefixed

__all__ = ["TestRecord", "records", "record", "print_rank_output", "short_id", "note_fallback", "fallbacks",
           "note_altered", "altered", "altered_lines", "note_needs_cuda", "needs_cuda", "needs_cuda_line",
           "needs_cuda_lines", "note_skip", "note_test_class", "upstream", "upstream_lines",
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


#: test id -> why each of its (sub)tests was skipped for want of a GPU or NCCL: it hard-codes CUDA and ran on
#: CPU for want of GPUs ("needs CUDA: ..."), or its skip says so in upstream's words ("Need at least 2 CUDA
#: devices", "c10d was not compiled with the NCCL backend", ...; see fallback.gpu_skip)
needs_cuda: dict[str, list[str]] = {}


def note_needs_cuda(test_id: str, reason: str) -> None:
    if not needs_cuda:
        atexit.register(_say_needs_cuda)
    needs_cuda.setdefault(test_id, []).append(reason)


def note_skip(test: Any, reason: str) -> None:
    """A front end (the runner, the pytest plugin, ``run_tests``) saw ``test`` (or one of its subtests)
    skipped: count it when the reason means "needs a GPU or NCCL". The harness's own classes are counted
    where the harness runs them (harness.execution, harness.case), so they are left alone here."""
    from harness.fallback import gpu_skip

    if isinstance(test, unittest.case._SubTest):
        test = test.test_case
    if getattr(type(test), "_harness_test_class", False) or not gpu_skip(reason):
        return
    note_needs_cuda(short_id(test) if isinstance(test, unittest.TestCase) else str(test), reason)


_FALLBACK_KIND = "hard-code CUDA, ran on CPU for want of GPUs (HARNESS_DEVICE=cpu makes them failures)"


def _kind(reason: str) -> str:
    """What a needs-CUDA skip is grouped under in the summary: the harness's own kind, or the reason's words."""
    if reason.startswith("needs CUDA:"):
        return _FALLBACK_KIND
    first = reason.strip().splitlines()[0] if reason.strip() else "(no reason given)"
    return first if len(first) <= 140 else first[:137] + "..."


def _ids(tests: list[str], most: int) -> str:
    return ", ".join(tests[:most]) + (f" and {len(tests) - most} more" if len(tests) > most else "")


def needs_cuda_lines() -> list[str]:
    """The count line, "N tests need CUDA (M subtests), skipped: a, b, c and 2 more", then one line per
    reason: "  3 x Need at least 2 CUDA devices: a, b, c" ([] when none)."""
    if not needs_cuda:
        return []
    tests = list(needs_cuda)
    count = sum(len(v) for v in needs_cuda.values())
    subs = f" ({count} subtests)" if count != len(tests) else ""
    lines = [f"{len(tests)} {'tests need' if len(tests) != 1 else 'test needs'} CUDA{subs}, skipped (a GPU or NCCL "
             f"was missing): {_ids(tests, 5)}"]
    kinds: dict[str, list[str]] = {}
    for test_id, reasons in needs_cuda.items():
        for reason in reasons:
            kinds.setdefault(_kind(reason), []).append(test_id)
    for kind, ids in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(ids)} x {kind}: {_ids(list(dict.fromkeys(ids)), 3)}")
    return lines


def needs_cuda_line() -> str:
    """:func:`needs_cuda_lines` as one text ("" when none)."""
    return "\n".join(needs_cuda_lines())


def _say_needs_cuda() -> None:
    """At the end of a unittest or pytest run; a runner that prints the line itself clears ``needs_cuda``."""
    for line in needs_cuda_lines():
        sys.stderr.write(f"harness: {line}\n")
    needs_cuda.clear()


#: "module.Class" -> (how it reaches upstream's harness, ids of its tests that ran)
upstream: dict[str, tuple[Any, list[str]]] = {}


def note_test_class(test: Any) -> Any:
    """A front end is about to run ``test``: remember its class when it still derives from one of upstream's
    multi-process bases (it runs on upstream's harness, not this one). Returns the ``UpstreamBase`` or None."""
    from harness.upstream import upstream_base

    if isinstance(test, unittest.case._SubTest):
        test = test.test_case
    found = upstream_base(type(test))
    if found is None:
        return None
    if isinstance(test, unittest.TestCase):  # the class as the user named its module (__main__ -> file stem)
        found = dataclasses.replace(found, cls=short_id(test).rsplit(".", 1)[0])
    if not upstream:
        atexit.register(_say_upstream)
    upstream.setdefault(found.cls, (found, []))[1].append(short_id(test) if isinstance(test, unittest.TestCase)
                                                          else str(test))
    return found


def upstream_lines() -> list[str]:
    """One line per class that ran on upstream's harness: which class, which base, the harness class to use."""
    return [found.line(len(ids)) for found, ids in upstream.values()]


def _say_upstream() -> None:
    for line in upstream_lines():
        sys.stderr.write(f"harness: {line}\n")
    upstream.clear()


def end_of_run_lines() -> list[str]:
    """What a unittest run ends with on stderr, for a runner that prints it in its own summary (the pytest
    plugin); :func:`clear_end_of_run` then keeps it from being printed again at exit."""
    lines = upstream_lines() + fallback_lines() + needs_cuda_lines()
    return lines + [line + _ALTERED_HINT for line in altered_lines()]


def clear_end_of_run() -> None:
    fallbacks.clear()
    needs_cuda.clear()
    altered.clear()
    upstream.clear()
