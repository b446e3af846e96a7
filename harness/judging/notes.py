"""What one run has to say beside the tests' own outcomes: where each test ran, and the end-of-run lines.

A :class:`Notes` belongs to one run (``harness.parent.run.Run``); the harness adds to it as tests run, and
the entry point that made the run prints its lines where they belong: the runner in its summary, the
pytest plugin in a ``distharness`` section, ``run_tests()`` and plain ``python -m unittest`` on
stderr at the end.
"""
from __future__ import annotations

import dataclasses
import sys
import unittest
from typing import Any

from harness.judging.fallback import TRIED_ON_CPU, TRIED_ON_SHARED

__all__ = ["TestRecord", "Notes", "short_id", "ALTERED_HINT"]

#: what the altered-process lines add where the run does not say which HARNESS_ENV_CHANGED is in force
ALTERED_HINT = " (HARNESS_ENV_CHANGED=fail makes it a failure)"

_FALLBACK_KIND = "hard-code CUDA, ran on CPU for want of GPUs (HARNESS_DEVICE=cpu makes them failures)"
_TRIED_KIND = "asked for GPUs and failed when tried on CPU for want of them (HARNESS_DEVICE=cpu makes them failures)"
_TRIED_SHARED_KIND = ("asked for GPUs and failed when tried on GPUs their ranks shared for want of them "
                      "(HARNESS_DEVICE=cuda-shared makes them failures)")


@dataclasses.dataclass
class TestRecord:
    """One test as it ran: where, on how many ranks, how long, with which processes."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    test_id: str
    world_size: int
    placement: str  # "cpu/gloo", "cuda/nccl", or "" when it never ran
    reason: str  # why that placement ("needs 4 GPUs, found 0: ran on CPU/gloo")
    seconds: float
    pids: list[int]
    reused_pool: bool
    examples: int = 1  # hypothesis examples sent to the ranks
    triage: str = ""  # what checking its failure in fresh ranks found (harness.judging.triage.Finding.line)
    picture: Any = None  # a failure's ranks x collectives (harness.judging.analysis.Picture), for the HTML report
    faults: str = ""  # its injected faults, each with where it fired (harness.judging.attempts.fault_names)
    attempts: list[str] = dataclasses.field(default_factory=list)  # every attempt in words (attempts.describe)


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


def _ids(tests: list[str], most: int) -> str:
    return ", ".join(tests[:most]) + (f" and {len(tests) - most} more" if len(tests) > most else "")


def _kind(reason: str, hard_coded: bool) -> str:
    """What a needs-CUDA skip is grouped under in the summary: the harness's own kind (a test that hard-codes
    CUDA and ran on CPU for want of GPUs), or the reason's words."""
    if hard_coded:
        return _FALLBACK_KIND
    if TRIED_ON_CPU in reason:
        return _TRIED_KIND
    if TRIED_ON_SHARED in reason:
        return _TRIED_SHARED_KIND
    first = reason.strip().splitlines()[0] if reason.strip() else "(no reason given)"
    return first if len(first) <= 140 else first[:137] + "..."


class Notes:
    """One run's records and end-of-run notes, as data; the lines are made from them when asked.

    Example::

        notes = Notes()
        notes.needs_cuda_for("mod.TestX.test_y", "needs CUDA: ...")
        notes.end_of_run_lines()    # ["1 test needs CUDA, skipped (a GPU or NCCL was missing): mod.TestX.test_y", ...]
    """

    def __init__(self) -> None:
        #: every harness test as it ran, in order (the pytest plugin's count of tests per placement)
        self.records: list[TestRecord] = []
        #: test id -> its record not yet taken by a front end (take_record: the runner's line, the pytest plugin)
        self._untaken: dict[str, TestRecord] = {}
        #: (ran on CPU, the placement's reason) -> test ids that ran on CPU, or on GPUs their ranks shared,
        #: for want of GPUs
        self.fallbacks: dict[tuple[bool, str], list[str]] = {}
        #: (test id, what it left, what became of the ranks) for each test that left them altered
        self.altered: list[tuple[str, list[str], str]] = []
        #: test id -> why each of its (sub)tests was skipped for want of a GPU or NCCL: it hard-codes CUDA and
        #: ran on CPU ("needs CUDA: ..."), or its skip says so in upstream's words (see fallback.gpu_skip)
        self.needs_cuda: dict[str, list[str]] = {}
        #: the needs-CUDA reasons of tests that hard-code CUDA and ran on CPU for want of GPUs (their own group)
        self.hard_coded: set[str] = set()
        #: "module.Class" -> (how it reaches upstream's harness, ids of its tests that ran)
        self.upstream: dict[str, tuple[Any, list[str]]] = {}
        #: every failure checked in fresh ranks (harness.judging.triage.Finding), in order
        self.triaged: list[Any] = []
        #: ids of the tests the harness's own ``run()`` ran (on ranks, or locally): a class that mixes upstream's
        #: bases with the harness's runs on whichever ``run()`` wins in its MRO, and its line must say which
        self.ran_by_harness: set[str] = set()
        #: (test id, its faults and where each fired) of each test with injected faults, in order
        self.faulted: list[tuple[str, str]] = []

    # ---- adding ------------------------------------------------------------------------------------

    def record(self, rec: TestRecord) -> None:
        """The test as it ran (its latest run, where a test ran twice before a front end took it)."""
        self.records.append(rec)
        self._untaken[rec.test_id] = rec
        if rec.faults:
            self.faulted.append((rec.test_id, rec.faults))

    def take_record(self, test_id: str) -> TestRecord | None:
        """The record of ``test_id`` since a front end last took it (None: the harness did not run it).

        Example::

            rec = notes.take_record("mod.TestX.test_y")    # rec.placement: "cpu/gloo"
        """
        return self._untaken.pop(test_id, None)

    def fallback(self, test_id: str, on_cpu: bool, reason: str) -> None:
        """``test_id`` ran on CPU (``on_cpu``), or on shared GPUs, for want of GPUs: the placement's ``reason``."""
        self.fallbacks.setdefault((on_cpu, reason), []).append(test_id)

    def altered_by(self, test_id: str, changes: list[str], then: str = "ranks restarted") -> None:
        """``test_id`` left its ranks altered (``changes``); ``then``: what became of them."""
        if self.altered and self.altered[-1][0] == test_id:  # another hypothesis example of the same test
            self.altered[-1][1].extend(c for c in changes if c not in self.altered[-1][1])
            return
        self.altered.append((test_id, list(changes), then))

    def triage(self, finding: Any) -> None:
        """A failure was checked in fresh ranks (harness.judging.triage): what was found, and what it cost."""
        self.triaged.append(finding)

    @property
    def triage_seconds(self) -> float:
        """What checking failures in fresh ranks has cost this run so far (HARNESS_TRIAGE_BUDGET bounds it)."""
        return sum(f.seconds for f in self.triaged)

    def triage_lines(self) -> list[str]:
        """One line for what triage found in this run, and its cost; none when nothing was checked."""
        if not self.triaged:
            return []
        from harness.judging.triage import FLAKY, OWN, POLLUTED, UNDECIDED

        kinds = [(OWN, "their own"), (POLLUTED, "caused by an earlier test"), (FLAKY, "flaky"),
                 (UNDECIDED, "undecided")]
        found = ", ".join(f"{n} {words}" for kind, words in kinds
                          if (n := sum(f.kind == kind for f in self.triaged)))
        reruns = sum(f.reruns for f in self.triaged)
        lines = [f"triage: {len(self.triaged)} failure(s) in reused ranks checked in fresh ranks: {found} "
                 f"({reruns} re-run{'s' if reruns != 1 else ''}, {self.triage_seconds:.1f} s)"]
        for f in self.triaged:
            if f.kind == POLLUTED:
                lines.append(f"triage: {f.test_id} {f.line()}")
        return lines

    def harness_ran(self, test_id: str) -> None:
        """The harness's own ``run()`` took ``test_id`` (harness.classes.case, harness.inprocess.local), whatever else is in its MRO."""
        self.ran_by_harness.add(test_id)

    def needs_cuda_for(self, test_id: str, reason: str, fallback: bool = False) -> None:
        """``test_id`` (or one of its subtests) was skipped for want of a GPU or NCCL; ``fallback``: it hard-codes
        CUDA and ran on CPU for want of GPUs (harness.judging.verdict's NEEDS_CUDA)."""
        self.needs_cuda.setdefault(test_id, []).append(reason)
        if fallback:
            self.hard_coded.add(reason)

    def skip_seen(self, test: Any, reason: str) -> None:
        """A front end (the runner, the pytest plugin, ``run_tests``) saw ``test`` (or one of its subtests)
        skipped: count it when the reason means "needs a GPU or NCCL". The harness's own classes are counted
        where the harness runs them (harness.parent.testrun, harness.judging.verdict), so they are left alone here."""
        from harness.judging.verdict import skipped

        if isinstance(test, unittest.case._SubTest):
            test = test.test_case
        if getattr(type(test), "_harness_test_class", False) or not skipped("", reason).gpu:
            return
        self.needs_cuda_for(short_id(test) if isinstance(test, unittest.TestCase) else str(test), reason)

    def test_class_seen(self, test: Any) -> Any:
        """A front end is about to run ``test``: remember its class when it still derives from one of upstream's
        multi-process bases (it runs on upstream's harness, not this one). Returns the ``UpstreamBase`` or None."""
        from harness.judging.upstream import upstream_base

        if isinstance(test, unittest.case._SubTest):
            test = test.test_case
        found = upstream_base(type(test))
        if found is None:
            return None
        if isinstance(test, unittest.TestCase):  # the class as the user named its module (__main__ -> file stem)
            found = dataclasses.replace(found, cls=short_id(test).rsplit(".", 1)[0])
        self.upstream.setdefault(found.cls, (found, []))[1].append(short_id(test) if isinstance(test, unittest.TestCase)
                                                                   else str(test))
        return found

    # ---- the lines ---------------------------------------------------------------------------------

    def fallback_lines(self) -> list[str]:
        """One line per reason that tests ran on CPU, or on GPUs their ranks shared, for want of GPUs."""
        lines = []
        for (on_cpu, reason), tests in self.fallbacks.items():
            if on_cpu:  # the reason ends as the line begins: say it once
                where, why = "on CPU/gloo, not GPUs", reason.removesuffix(": ran on CPU/gloo")
            else:
                where, why = "on shared GPUs over gloo, not one GPU per rank on NCCL", reason
            lines.append(f"{len(tests)} test(s) ran {where} ({why}): {_ids(tests, 3)}; HARNESS_DEVICE=nccl would "
                         "skip them instead")
        return lines

    def altered_lines(self) -> list[str]:
        """One line per test that left the process altered: what it left, and what became of the ranks."""
        return [f"{test_id} altered the process: {'; '.join(changes)}; {then}" for test_id, changes, then in
                self.altered]

    def needs_cuda_lines(self) -> list[str]:
        """The count line, "N tests need CUDA (M subtests), skipped: a, b, c and 2 more", then one line per
        reason: "  3 x Need at least 2 CUDA devices: a, b, c" ([] when none)."""
        if not self.needs_cuda:
            return []
        tests = list(self.needs_cuda)
        count = sum(len(v) for v in self.needs_cuda.values())
        subs = f" ({count} subtests)" if count != len(tests) else ""
        lines = [f"{len(tests)} {'tests need' if len(tests) != 1 else 'test needs'} CUDA{subs}, skipped (a GPU or "
                 f"NCCL was missing): {_ids(tests, 5)}"]
        kinds: dict[str, list[str]] = {}
        for test_id, reasons in self.needs_cuda.items():
            for reason in reasons:
                kinds.setdefault(_kind(reason, reason in self.hard_coded), []).append(test_id)
        for kind, ids in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(ids)} x {kind}: {_ids(list(dict.fromkeys(ids)), 3)}")
        return lines

    def upstream_lines(self, ran_by: str | None = None) -> list[str]:
        """One line per class with one of upstream's bases in its MRO: which class, which base, which harness
        actually ran its tests (the harness's ``run()`` wins over upstream's in a mixed MRO), what to change.
        ``ran_by`` "upstream" or "harness": only the lines about tests that one ran (None: all)."""
        lines = []
        for found, ids in self.upstream.values():
            ours = [i for i in ids if i in self.ran_by_harness]
            theirs = len(ids) - len(ours)
            if ours and ran_by in (None, "harness"):
                lines.append(found.line(len(ours), ran_by="harness"))
            if (theirs or not ids) and ran_by in (None, "upstream"):
                lines.append(found.line(theirs, ran_by="upstream"))
        return lines

    def end_of_run_lines(self) -> list[str]:
        """What a run that has no summary of its own ends with (unittest, ``run_tests()``, the pytest plugin)."""
        return (self.upstream_lines() + self.fallback_lines() + self.needs_cuda_lines()
                + [line + ALTERED_HINT for line in self.altered_lines()] + self.triage_lines() + self.fault_lines())

    def fault_lines(self) -> list[str]:
        """Each test with injected faults, named with them (where the front end has no line of its own per test)."""
        return [f"{test_id}: faults: {faults}" for test_id, faults in self.faulted]

    def say(self, stream: Any = None) -> None:
        """Write :meth:`end_of_run_lines` (``harness: ...``) to ``stream`` (stderr) and forget them."""
        stream = sys.stderr if stream is None else stream
        for line in self.end_of_run_lines():
            stream.write(f"harness: {line}\n")
        try:
            stream.flush()
        except Exception:
            pass
        self.forget()

    def forget(self) -> None:
        """Forget the end-of-run notes (said); the records stay."""
        self.fallbacks.clear()
        self.altered.clear()
        self.needs_cuda.clear()
        self.hard_coded.clear()
        self.upstream.clear()
        self.triaged.clear()
        self.ran_by_harness.clear()
        self.faulted.clear()
