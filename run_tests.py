#!/usr/bin/env python
"""Run the distharness test suite: select, shard, report, and write JUnit XML.

Examples::

    python run_tests.py                                  # everything in test_distributed/
    python run_tests.py --all                            # ... plus the harness's own tests in tests/
    python run_tests.py -i test_pipeline -k parity       # one module, tests whose id matches *parity*
    python run_tests.py --list --shard 1 2               # what CI machine 1 of 2 would run
    HYPOTHESIS_PROFILE=ci python run_tests.py --all --junit-xml test-reports/junit.xml

One line is printed per test (progress, outcome, id, device/backend, world size, seconds). What the
ranks print is buffered and shown only with a failure (``--no-buffer`` shows it live). At the end
come the failures in full, a table per module, the skip reasons grouped, the slowest tests, and as
the very last line ``N passed, N failed, N skipped`` (errors count as failed; CI tooling reads it).

Exit status: 0 when at least one test ran and none failed; 1 when a test failed or errored; 2 for a
usage error; 5 when no test ran (nothing selected, or everything skipped); 130 when interrupted by
Ctrl-C, 143 when terminated by SIGTERM (the running test is reported INTR, counted as failed, and the
rank processes and every directory the run made are removed).

``--shuffle [SEED]`` runs the tests in a random order (classes shuffled, and the tests within each
class); the seed is printed, and ``--shuffle SEED`` gives the same order again.

Sharding (``--shard I N``) splits the selected tests over N machines by the durations recorded in
``.ci/test-times.json`` (``--update-times`` rewrites it from a run): longest first, each test to the
machine with the least expected time so far; a test without a record counts as the mean of those
with one. The split is made per test (two tests of one class may land on different machines; each
machine then sets the class up for its own tests). Every machine computes the same split from the
same test list and times file, so the N shards together run every selected test exactly once.

Under ``torchrun`` (harness.torchrun) every process runs this file as one rank; rank 0 alone prints,
writes the JUnit XML and updates the times file.

The rank processes are spawned and import this file again as ``__mp_main__``: everything that runs
lives under ``if __name__ == "__main__":``.
"""
from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import sys
import time
import unittest
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

ROOT = Path(__file__).resolve().parent
SUITE_DIR = "test_distributed"
HARNESS_TESTS_DIR = "tests"
DEFAULT_TIMES = ROOT / ".ci" / "test-times.json"

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_TESTS, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 5, 130, 143

PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = "passed", "failed", "error", "skipped", "xfail", "xpass"
INTERRUPTED = "interrupted"  # the test was running when Ctrl-C or SIGTERM came: never a pass
_LABEL = {PASSED: "PASS", FAILED: "FAIL", ERROR: "ERROR", SKIPPED: "SKIP", XFAIL: "XFAIL", XPASS: "XPASS",
          INTERRUPTED: "INTR"}
_BAD = (FAILED, ERROR, XPASS, INTERRUPTED)


# ---- command line --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_tests.py",
        description="Run the distharness test suite (test_distributed/, and the harness's own tests in tests/ on "
                    "request) with one line per test, a summary, sharding over CI machines and JUnit XML.",
        epilog="Exit status: 0 all ran tests passed; 1 failures; 2 usage error; 5 no test ran; 130 interrupted; "
               "143 terminated (SIGTERM). "
               "The last line printed is always 'N passed, N failed, N skipped'.",
    )
    what = p.add_argument_group("what to run")
    what.add_argument("targets", nargs="*", metavar="MODULE|PATH",
                      help="run these instead of the default folders: a module (tests.fixtures.fx_pass), a "
                           "module.Class[.method], a file (path/test_x.py) or a folder (its test_*.py files)")
    what.add_argument("--all", action="store_true",
                      help=f"run {SUITE_DIR}/ and the harness's own tests in {HARNESS_TESTS_DIR}/")
    what.add_argument("--harness-tests", action="store_true",
                      help=f"run only the harness's own tests in {HARNESS_TESTS_DIR}/ (not {SUITE_DIR}/)")
    what.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                      help="run tests whose id (module.Class.method) contains PATTERN or matches it as a shell "
                           "pattern (fnmatch, e.g. '*Pipeline*.test_*parity'); repeatable, a test matching any runs")
    what.add_argument("-i", "--include", action="append", default=[], metavar="MODULE",
                      help="run only this module: a module name (test_pipeline, test_distributed.test_pipeline), "
                           "a path (test_distributed/test_pipeline.py) or a shell pattern (test_fsdp*); repeatable")
    what.add_argument("-x", "--exclude", action="append", default=[], metavar="MODULE",
                      help="skip this module (same forms as --include); repeatable; wins over --include")
    what.add_argument("--shard", nargs=2, type=int, metavar=("I", "N"),
                      help="run shard I of N (1 <= I <= N), balanced by the durations in the times file")
    what.add_argument("--times-file", default=str(DEFAULT_TIMES), metavar="PATH",
                      help="JSON file of recorded test durations used by --shard and written by --update-times "
                           "(default: .ci/test-times.json)")
    what.add_argument("--update-times", action="store_true",
                      help="after the run, merge this run's test durations into the times file")
    what.add_argument("--list", action="store_true",
                      help="print the ids of the tests that would run (after -k/-i/-x/--shard) and exit")

    how = p.add_argument_group("how to run")
    how.add_argument("--device", choices=("auto", "cpu", "cuda"),
                     help="sets HARNESS_DEVICE: auto uses CUDA/NCCL when there are enough GPUs, else CPU/gloo; "
                          "cuda skips tests that lack GPUs (default: HARNESS_DEVICE from the environment, or auto)")
    how.add_argument("--timeout", type=float, metavar="S",
                     help="sets HARNESS_TIMEOUT: seconds one test may run before its ranks' stacks are dumped and "
                          "they are killed (default: the class's timeout, else 300)")
    how.add_argument("--hypothesis-profile", choices=("ci", "dev", "nightly"),
                     help="sets HYPOTHESIS_PROFILE (ci: 2 derandomized examples; dev: 5; nightly: 50; default: "
                          "the environment's, else ci under CI=true, else dev)")
    how.add_argument("--failfast", action="store_true", help="stop after the first failing or erroring test")
    how.add_argument("--shuffle", nargs="?", type=int, const=-1, default=None, metavar="SEED",
                     help="run the tests in a random order: the classes shuffled, and the tests within each class "
                          "(the seed is printed; give it to get the same order again)")
    how.add_argument("--fail-env-changed", action="store_true",
                     help="sets HARNESS_ENV_CHANGED=fail: a test that leaves its rank processes altered beyond what "
                          "the harness restores (a replaced torch function, a thread or child process left running) "
                          "fails; without it such a test is named in the summary and the ranks are replaced")
    how.add_argument("--no-buffer", "-s", dest="buffer", action="store_false",
                     help="show what tests and ranks print as it comes, instead of only with failures")

    out = p.add_argument_group("reporting")
    out.add_argument("-v", "--verbose", action="store_true",
                     help="also print each subtest's outcome, why each test ran where it did, and the output of "
                          "passing tests")
    out.add_argument("--junit-xml", metavar="PATH",
                     help="write JUnit XML: one testcase per test and one per failing subtest")
    out.add_argument("--slowest", type=int, default=10, metavar="N",
                     help="how many of the slowest tests to list at the end (0: none; default: 10)")
    return p


# ---- discovery and selection ---------------------------------------------------------------------


def iter_tests(suite: Iterable[Any]) -> Iterable[unittest.TestCase]:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_tests(item)
        else:
            yield item


def is_load_failure(test: Any) -> bool:
    return type(test).__name__ == "_FailedTest"


def module_of(test: Any) -> str:
    """The module a test belongs to; an import failure belongs to the module that failed to import."""
    if is_load_failure(test):
        return test._testMethodName
    if isinstance(test, unittest.case._SubTest):
        test = test.test_case
    module = type(test).__module__
    if module == "unittest.suite" and hasattr(test, "description"):  # _ErrorHolder: "setUpClass (mod.Class)"
        inner = test.description.rpartition("(")[2].rstrip(")")
        return inner.rsplit(".", 1)[0] if "." in inner else inner
    return module


def discover_dir(name: str) -> list[unittest.TestCase]:
    start = ROOT / name
    if not start.is_dir():
        return []
    loader = unittest.TestLoader()
    if (start / "__init__.py").is_file():
        suite = loader.discover(str(start), pattern="test_*.py", top_level_dir=str(ROOT))
    else:  # not a package: its modules are imported by their bare names from that directory
        suite = loader.discover(str(start), pattern="test_*.py", top_level_dir=str(start))
    return list(iter_tests(suite))


def load_target(target: str) -> list[unittest.TestCase]:
    """The tests of one command-line target: a folder, a .py file, or a dotted module[.Class[.method]]."""
    path = Path(target)
    if path.is_dir():
        return discover_dir(str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT)
                            else str(path.resolve()))
    if target.endswith(".py"):
        resolved = path.resolve()
        if not resolved.is_file():
            raise FileNotFoundError(f"{target}: no such file")
        if not resolved.is_relative_to(ROOT):
            sys.path.insert(0, str(resolved.parent))
            target = resolved.stem
        else:
            target = ".".join(resolved.relative_to(ROOT).with_suffix("").parts)
    return list(iter_tests(unittest.TestLoader().loadTestsFromName(target)))


def module_matches(module: str, spec: str) -> bool:
    spec = spec.strip()
    if spec.endswith(".py"):
        spec = spec[:-3]
    spec = spec.strip("/").replace("/", ".").replace(os.sep, ".")
    if not spec:
        return False
    last = module.rsplit(".", 1)[-1]
    return (module == spec or module.startswith(spec + ".") or module.endswith("." + spec)
            or fnmatch.fnmatchcase(module, spec) or fnmatch.fnmatchcase(last, spec))


def id_matches(test_id: str, pattern: str) -> bool:
    return pattern in test_id or fnmatch.fnmatchcase(test_id, pattern)


def select(tests: list[unittest.TestCase], args: argparse.Namespace) -> list[unittest.TestCase]:
    chosen = []
    for t in tests:
        module = module_of(t)
        if args.include and not any(module_matches(module, m) for m in args.include):
            continue
        if any(module_matches(module, m) for m in args.exclude):
            continue
        # A module that failed to import is never filtered out by -k: its tests are unknown.
        if args.patterns and not is_load_failure(t) and not any(id_matches(t.id(), p) for p in args.patterns):
            continue
        chosen.append(t)
    return chosen


def shuffle(tests: list[unittest.TestCase], seed: int) -> list[unittest.TestCase]:
    """A random order that keeps each class's tests together (so its setUpClass runs once): the classes
    shuffled, then the tests within each class. The same seed and test list give the same order."""
    import random

    rng = random.Random(seed)
    groups: dict[str, list[unittest.TestCase]] = collections.OrderedDict()
    for t in tests:
        key = f"{module_of(t)}.{type(t).__qualname__}" if not is_load_failure(t) else t.id()
        groups.setdefault(key, []).append(t)
    order = list(groups.values())
    rng.shuffle(order)
    for group in order:
        rng.shuffle(group)
    return [t for group in order for t in group]


# ---- durations and sharding ----------------------------------------------------------------------


def load_times(path: str) -> dict[str, float]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        print(f"warning: cannot read the times file {path}: {exc}; sharding by test count", file=sys.stderr)
        return {}
    tests = data.get("tests", data) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in tests.items() if isinstance(v, (int, float))}


def save_times(path: str, new: dict[str, float]) -> None:
    merged = load_times(path)
    merged.update({k: round(v, 3) for k, v in new.items()})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": 1, "note": "seconds per test id, written by run_tests.py --update-times",
                   "tests": dict(sorted(merged.items()))}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def shard(tests: list[unittest.TestCase], index: int, count: int,
          times: dict[str, float]) -> tuple[list[unittest.TestCase], list[float], float, int]:
    """Greedy longest-first bin packing; returns (this shard's tests in suite order, loads, default, known)."""
    ids = [t.id() for t in tests]
    known = [times[i] for i in ids if i in times]
    default = sum(known) / len(known) if known else (sum(times.values()) / len(times) if times else 1.0)
    weights = [times.get(i, default) for i in ids]
    order = sorted(range(len(tests)), key=lambda n: (-weights[n], ids[n], n))
    loads = [0.0] * count
    owner = [0] * len(tests)
    for n in order:
        target = min(range(count), key=lambda s: (loads[s], s))
        loads[target] += weights[n]
        owner[n] = target
    mine = [t for n, t in enumerate(tests) if owner[n] == index - 1]
    return mine, loads, default, len(known)


# ---- the result object ---------------------------------------------------------------------------


@dataclass
class Problem:
    kind: str  # FAILED or ERROR or XPASS
    title: str  # "test id" or "test id (subtest: a=1)"
    text: str


@dataclass
class Entry:
    """One test as the runner saw it."""

    test_id: str
    module: str
    classname: str
    method: str
    status: str = PASSED
    seconds: float = 0.0
    placement: str = ""
    world_size: int | None = None
    reason: str = ""  # skip reason
    why_placed: str = ""  # the harness's reason for the placement ("needs 4 GPUs, found 0: ran on CPU/gloo")
    problems: list[Problem] = field(default_factory=list)
    sub_passed: int = 0
    sub_failed: list[tuple[str, str, str]] = field(default_factory=list)  # (params, kind, text)
    sub_skipped: list[tuple[str, str]] = field(default_factory=list)  # (params, reason)
    output: str = ""
    examples: int = 0  # hypothesis examples run (0: not a harness test)
    real: bool = True  # False: an import failure or a class/module set-up error, not a test of its own

    @property
    def subtests(self) -> int:
        return self.sub_passed + len(self.sub_failed) + len(self.sub_skipped)


def _interrupt_reason(exc: BaseException | None) -> str:
    from harness.pool import Terminated

    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


def _split_id(test: Any) -> tuple[str, str, str]:
    test_id = test.id()
    module = module_of(test)
    if is_load_failure(test):
        return test_id, module, "import"
    if test_id.startswith(module + "."):
        rest = test_id[len(module) + 1:]
        cls, _, method = rest.rpartition(".")
        return test_id, f"{module}.{cls}" if cls else module, method or rest
    return test_id, module, test_id


class RunnerResult(unittest.TestResult):
    """One line per test as it finishes, with progress; keeps every outcome for the summary."""

    def __init__(self, stream: TextIO, total: int, verbose: bool, buffer: bool, failfast: bool, width: int = 0):
        super().__init__(stream, None, 2 if verbose else 1)
        self.out = stream
        self.total = total
        self.verbose = verbose
        self.buffer = buffer
        self.failfast = failfast
        self.entries: list[Entry] = []
        self.started = 0
        self._current: Entry | None = None
        self._t0 = 0.0
        self._records_at = 0
        self._width = width  # the id column: as wide as the longest selected id, at most 90

    # unittest mirrors buffered output of a failing test to the terminal at once; we show it in the report.
    def _restoreStdout(self) -> None:
        self._mirrorOutput = False
        super()._restoreStdout()

    def startTest(self, test: unittest.TestCase) -> None:
        from harness import report

        self.started += 1
        test_id, classname, method = _split_id(test)
        self._current = Entry(test_id, module_of(test), classname, method, real=not is_load_failure(test))
        self._outcome_seen = False
        self._records_at = len(report.records)
        self._t0 = time.monotonic()
        super().startTest(test)

    def _entry_for(self, test: Any) -> Entry:
        if isinstance(test, unittest.case._SubTest):
            test = test.test_case
        cur = self._current
        if cur is not None and isinstance(test, unittest.TestCase) and test.id() == cur.test_id:
            return cur
        # An error outside any test (setUpClass, setUpModule, ...): a failed entry of its own.
        desc = getattr(test, "description", None) or test.id()
        module = module_of(test)
        entry = Entry(desc, module, module, desc, status=ERROR, real=False)
        self.entries.append(entry)
        self._print_line(entry, progress=False)
        return entry

    def _last_text(self, bucket: list) -> str:
        return bucket[-1][1] if bucket else ""

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._outcome_seen = True
        super().addSuccess(test)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._outcome_seen = True
        super().addFailure(test, err)
        entry = self._entry_for(test)
        entry.status = FAILED if entry.status != ERROR else ERROR
        entry.problems.append(Problem(FAILED, entry.test_id, self._last_text(self.failures)))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._outcome_seen = True
        super().addError(test, err)
        entry = self._entry_for(test)
        entry.status = ERROR
        entry.problems.append(Problem(ERROR, entry.test_id, self._last_text(self.errors)))

    def addSkip(self, test: Any, reason: str) -> None:
        self._outcome_seen = True
        super().addSkip(test, reason)
        entry = self._entry_for(test)
        if isinstance(test, unittest.case._SubTest):
            entry.sub_skipped.append((test._subDescription(), reason))
            if self.verbose:
                self._sub_line("SKIP", test, reason)
        else:
            entry.status = SKIPPED if entry.status not in _BAD else entry.status
            entry.reason = reason

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._outcome_seen = True
        super().addExpectedFailure(test, err)
        self._entry_for(test).status = XFAIL

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self._outcome_seen = True
        super().addUnexpectedSuccess(test)
        entry = self._entry_for(test)
        entry.status = XPASS
        entry.problems.append(Problem(XPASS, entry.test_id, "unexpected success: the test is marked "
                                                            "@expectedFailure but passed"))

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        self._outcome_seen = True
        entry = self._entry_for(test)
        params = subtest._subDescription()
        if err is None:
            entry.sub_passed += 1
            if self.verbose:
                self._sub_line("PASS", subtest, "")
            return
        kind = FAILED if issubclass(err[0], test.failureException) else ERROR
        bucket = self.failures if kind == FAILED else self.errors
        text = self._last_text(bucket)
        entry.sub_failed.append((params, kind, text))
        entry.problems.append(Problem(kind, f"{entry.test_id} {params}", text))
        if entry.status not in (ERROR,):
            entry.status = kind
        if self.verbose:
            self._sub_line(_LABEL[kind], subtest, "")

    def stopTest(self, test: unittest.TestCase) -> None:
        from harness import report

        entry = self._current or self._entry_for(test)
        if self.verbose and self.buffer:
            entry.output = "".join(buf.getvalue() for buf in (getattr(self, "_stdout_buffer", None),
                                                              getattr(self, "_stderr_buffer", None)) if buf)
        super().stopTest(test)
        if not self._outcome_seen and entry.status == PASSED and entry is self._current:
            # unittest calls stopTest on the way out of an interrupt that reported nothing: the test was
            # running, it did not pass
            entry.status = INTERRUPTED
            why = _interrupt_reason(sys.exc_info()[1])
            entry.problems.append(Problem(INTERRUPTED, entry.test_id,
                                          f"{why} while this test was running; its ranks were stopped"))
        entry.seconds = time.monotonic() - self._t0
        recs = [r for r in report.records[self._records_at:] if r.test_id == entry.test_id]
        if recs:
            rec = recs[-1]
            entry.world_size = rec.world_size
            entry.placement = rec.placement
            entry.why_placed = rec.reason
            entry.examples = sum(r.examples for r in recs)
        self.entries.append(entry)
        self._current = None
        self._print_line(entry, progress=True)

    # ---- printing ----

    def _print_line(self, e: Entry, progress: bool) -> None:
        width = len(str(self.total))
        count = f"[{self.started:>{width}}/{self.total}]" if progress else f"[{'-':>{width}}/{self.total}]"
        where = e.placement or "-"
        ws = f"ws={e.world_size}" if e.world_size else "ws=-"
        extra = ""
        if e.subtests:
            bits = [f"{e.subtests} subtests"]
            if e.sub_failed:
                bits.append(f"{len(e.sub_failed)} failed")
            if e.sub_skipped:
                bits.append(f"{len(e.sub_skipped)} skipped")
            extra = " (" + ", ".join(bits) + ")"
        if e.examples > 1:
            extra += f" ({e.examples} examples)"
        if e.status == SKIPPED and e.reason:
            extra += f": {e.reason.splitlines()[0][:160]}"
        self._width = max(self._width, min(len(e.test_id), 90))
        line = f"{count} {_LABEL[e.status]:<5} {e.test_id:<{self._width}}  {where:<9} {ws:<5} {e.seconds:7.2f}s{extra}"
        self.out.write(line + "\n")
        if self.verbose:
            if e.why_placed:
                self.out.write(f"        placement: {e.why_placed}\n")
            if e.output.strip() and e.status not in _BAD:
                self.out.write("".join(f"        | {ln}\n" for ln in e.output.rstrip().splitlines()))
        self.out.flush()

    def _sub_line(self, label: str, subtest: Any, reason: str) -> None:
        tail = f": {reason}" if reason else ""
        self.out.write(f"        {label:<5} subtest {subtest._subDescription()}{tail}\n")
        self.out.flush()


# ---- the summary ---------------------------------------------------------------------------------


def counts(entries: list[Entry]) -> tuple[int, int, int]:
    passed = sum(e.status in (PASSED, XFAIL) for e in entries)
    failed = sum(e.status in _BAD for e in entries)
    skipped = sum(e.status == SKIPPED for e in entries)
    return passed, failed, skipped


def _table(rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_summary(result: RunnerResult, out: TextIO, slowest: int, wall: float, not_run: int,
                  stopped_early: str) -> None:
    entries = result.entries
    bar = "=" * 78
    problems = [p for e in entries for p in e.problems]
    if problems:
        out.write(f"\n{bar}\nFAILURES AND ERRORS ({len(problems)})\n")
        for p in problems:
            out.write(f"{bar}\n{_LABEL.get(p.kind, p.kind.upper())}: {p.title}\n{'-' * 78}\n{p.text.rstrip()}\n")
    out.write(f"\n{bar}\nSUMMARY ({len(entries)} tests in {wall:.1f} s)\n{bar}\n")
    by_module: dict[str, list[Entry]] = collections.OrderedDict()
    for e in entries:
        by_module.setdefault(e.module, []).append(e)
    rows = [["module", "tests", "passed", "failed", "skipped", "subtests", "sub skipped", "seconds"]]
    for module, group in by_module.items():
        p, f, s = counts(group)
        rows.append([module, str(len(group)), str(p), str(f), str(s), str(sum(e.subtests for e in group)),
                     str(sum(len(e.sub_skipped) for e in group)), f"{sum(e.seconds for e in group):.1f}"])
    if entries:
        p, f, s = counts(entries)
        rows.append(["total", str(len(entries)), str(p), str(f), str(s), str(sum(e.subtests for e in entries)),
                     str(sum(len(e.sub_skipped) for e in entries)), f"{sum(e.seconds for e in entries):.1f}"])
        out.write(_table(rows, right={1, 2, 3, 4, 5, 6, 7}) + "\n")

    reasons: dict[str, list[str]] = collections.OrderedDict()
    for e in entries:
        if e.status == SKIPPED:
            reasons.setdefault(e.reason.splitlines()[0] if e.reason else "(no reason given)", []).append(e.test_id)
        for params, why in e.sub_skipped:
            reasons.setdefault((why.splitlines()[0] if why else "(no reason given)") + "  [subtests]", []).append(
                f"{e.test_id} {params}")
    if reasons:
        out.write("\nSkipped, by reason:\n")
        for why, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            out.write(f"  {len(ids):>4} x {why}\n")
            for tid in ids[:3]:
                out.write(f"         {tid}\n")
            if len(ids) > 3:
                out.write(f"         ... and {len(ids) - 3} more\n")

    if slowest > 0 and entries:
        out.write(f"\nSlowest {min(slowest, len(entries))} tests:\n")
        for e in sorted(entries, key=lambda e: -e.seconds)[:slowest]:
            out.write(f"  {e.seconds:8.2f}s  {e.test_id}  ({e.placement or '-'}, ws={e.world_size or '-'})\n")

    bad = [e for e in entries if e.status in _BAD]
    if bad:
        out.write("\nFailed:\n")
        for e in bad:
            subs = f" ({len(e.sub_failed)} of {e.subtests} subtests)" if e.sub_failed else ""
            out.write(f"  {_LABEL[e.status]:<5} {e.test_id}{subs}\n")
    if stopped_early:
        out.write(f"\n{stopped_early}\n")
    elif not_run:
        out.write(f"\n{not_run} selected tests did not run (their class or module set-up failed; see above)\n")


# ---- JUnit XML -----------------------------------------------------------------------------------


def write_junit(path: str, entries: list[Entry], wall: float) -> None:
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    xml = JUnitXml(name="distharness")
    suites: dict[str, Any] = {}
    for e in entries:
        suite = suites.get(e.module)
        if suite is None:
            suite = suites[e.module] = TestSuite(e.module)
        case = TestCase(e.method, e.classname, round(e.seconds, 3))
        if e.status in (FAILED, XPASS):
            first = e.problems[0].text if e.problems else ""
            msg = (f"{len(e.sub_failed)} of {e.subtests} subtests failed" if e.sub_failed and
                   not any(p.title == e.test_id for p in e.problems) else _first_line(first))
            res = Failure(msg, "AssertionError" if e.status == FAILED else "UnexpectedSuccess")
            res.text = "\n\n".join(p.text for p in e.problems if p.title == e.test_id) or msg
            case.result = [res]
        elif e.status == INTERRUPTED:
            res = Error(e.problems[-1].text if e.problems else "interrupted", "Interrupted")
            res.text = "\n\n".join(p.text for p in e.problems)
            case.result = [res]
        elif e.status == ERROR:
            first = e.problems[0].text if e.problems else ""
            res = Error(_first_line(first), "Error")
            res.text = "\n\n".join(p.text for p in e.problems if p.title == e.test_id) or first
            case.result = [res]
        elif e.status == SKIPPED:
            case.result = [Skipped(e.reason.splitlines()[0] if e.reason else "skipped")]
        notes = []
        if e.placement:
            notes.append(f"placement: {e.placement}, world size {e.world_size} ({e.why_placed})")
        if e.subtests:
            notes.append(f"subtests: {e.sub_passed} passed, {len(e.sub_failed)} failed, {len(e.sub_skipped)} skipped")
            notes += [f"  skipped {params}: {why}" for params, why in e.sub_skipped]
        if notes:
            case.system_out = "\n".join(notes)
        suite.add_testcase(case)
        for params, kind, text in e.sub_failed:
            sub = TestCase(f"{e.method} {params}", e.classname, 0.0)
            res = (Failure if kind == FAILED else Error)(_first_line(text), "AssertionError" if kind == FAILED
                                                        else "Error")
            res.text = text
            sub.result = [res]
            suite.add_testcase(sub)
    for suite in suites.values():
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    xml.time = round(wall, 3)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    xml.write(path, pretty=True)


def _first_line(text: str) -> str:
    """The exception line of a traceback, else its first line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error" in ln or "Exception" in ln or "Failure" in ln) and not ln.startswith((" ", "Stdout", "Stderr")):
            return ln.strip()[:500]
    return (lines[0].strip() if lines else "")[:500]


# ---- main ----------------------------------------------------------------------------------------


def _usage(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"run_tests.py: error: {message}", file=sys.stderr)
    print("0 passed, 0 failed, 0 skipped")
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout

    if args.timeout is not None and args.timeout <= 0:
        return _usage(parser, "--timeout must be a number of seconds > 0")
    if args.shard is not None:
        index, count = args.shard
        if count < 1 or not 1 <= index <= count:
            return _usage(parser, f"--shard {index} {count}: need N >= 1 and 1 <= I <= N (shards count from 1)")
    if args.slowest < 0:
        return _usage(parser, "--slowest must be >= 0")

    # The harness and hypothesis read these when a test runs; the spawned ranks inherit them.
    if args.device:
        os.environ["HARNESS_DEVICE"] = args.device
    if args.timeout is not None:
        os.environ["HARNESS_TIMEOUT"] = repr(args.timeout)
    if args.hypothesis_profile:
        os.environ["HYPOTHESIS_PROFILE"] = args.hypothesis_profile
    if args.fail_env_changed:
        os.environ["HARNESS_ENV_CHANGED"] = "fail"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from harness.config import settings
    from harness.errors import UsageError

    try:
        conf = settings()
    except UsageError as exc:
        return _usage(parser, str(exc))

    # Under torchrun every process runs this file as one rank (harness.torchrun); rank 0 alone reports.
    from harness import torchrun

    reporting = not torchrun.launched() or os.environ.get("RANK", "0") == "0"
    if not reporting:
        out = open(os.devnull, "w")

    dirs = [HARNESS_TESTS_DIR] if args.harness_tests else [SUITE_DIR] + ([HARNESS_TESTS_DIR] if args.all else [])
    discovered: list[unittest.TestCase] = []
    if args.targets:
        dirs = args.targets
        for target in args.targets:
            try:
                discovered += load_target(target)
            except (ImportError, AttributeError, FileNotFoundError) as exc:
                return _usage(parser, f"{target}: {exc}")
    else:
        for d in dirs:
            discovered += discover_dir(d)
    modules = {module_of(t) for t in discovered}
    for spec in args.include:
        if not any(module_matches(m, spec) for m in modules):
            known = ", ".join(sorted(modules)) or "none"
            return _usage(parser, f"-i {spec}: no discovered module matches (modules: {known})")
    tests = select(discovered, args)

    shard_note = ""
    if args.shard is not None:
        index, count = args.shard
        times = load_times(args.times_file)
        total_selected = len(tests)
        tests, loads, default, known = shard(tests, index, count, times)
        shard_note = (f"shard {index}/{count}: {len(tests)} of {total_selected} tests, about {loads[index - 1]:.0f} s "
                      f"expected (shards: {', '.join(f'{x:.0f}' for x in loads)} s; {known} tests timed in "
                      f"{os.path.relpath(args.times_file)}, the others counted at {default:.1f} s)")

    shuffle_note = ""
    if args.shuffle is not None:
        seed = args.shuffle if args.shuffle >= 0 else int.from_bytes(os.urandom(4), "little") % 100000
        tests = shuffle(tests, seed)
        shuffle_note = f"shuffled with seed {seed} (--shuffle {seed} runs this order again)"

    if args.list:
        if not reporting:
            return EXIT_OK if tests else EXIT_NO_TESTS
        for t in tests:
            out.write(t.id() + "\n")
        for note in (shard_note, shuffle_note):
            if note:
                print(note, file=sys.stderr)
        print(f"{len(tests)} tests selected from {len({module_of(t) for t in tests})} modules", file=sys.stderr)
        return EXIT_OK if tests else EXIT_NO_TESTS

    import torch

    header = (f"distharness: {len(tests)} tests from {len({module_of(t) for t in tests})} modules "
              f"({', '.join(dirs)}); torch {torch.__version__}, device={conf.device}, reuse={int(conf.reuse)}, "
              f"hypothesis profile={os.environ.get('HYPOTHESIS_PROFILE') or ('ci' if os.environ.get('CI') else 'dev')}")
    out.write(header + "\n")
    for note in (shard_note, shuffle_note):
        if note:
            out.write(note + "\n")
    out.flush()

    width = min(90, max((len(t.id()) for t in tests), default=0))
    result = RunnerResult(out, len(tests), args.verbose, args.buffer, args.failfast, width)
    suite = unittest.TestSuite(tests)
    started = time.monotonic()
    interrupted = ""
    result.startTestRun()
    try:
        suite.run(result)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.pool.Terminated)
        interrupted = _interrupt_reason(exc)
        if result._current is not None:
            result._restoreStdout()
    finally:
        result.stopTestRun()
        # Stop the rank processes now rather than at exit, so whatever they print while shutting down
        # comes before the summary and the count line stays the last line.
        from harness import pool as harness_pool

        harness_pool.shutdown_all()
        # Each test's line already says where it ran and why; no end-of-run note about CPU fallbacks.
        from harness import report as harness_report

        harness_report.fallbacks.clear()
        altered = harness_report.altered_lines()  # shown in the summary, not again at exit
        harness_report.altered.clear()
        needs_cuda = harness_report.needs_cuda_line()  # tests on CPU for want of GPUs that hard-code CUDA
        harness_report.needs_cuda.clear()
    wall = time.monotonic() - started

    not_run = len(tests) - result.started
    stopped = ""
    if interrupted:
        stopped = f"{interrupted}: {not_run} of {len(tests)} selected tests did not run"
    elif result.shouldStop and not_run:
        stopped = f"stopped after the first failure (--failfast): {not_run} of {len(tests)} selected tests did not run"
    print_summary(result, out, args.slowest, wall, not_run, stopped)
    if altered:
        out.write(f"\nAltered the process ({len(altered)} test(s); HARNESS_ENV_CHANGED={conf.env_changed}):\n")
        out.write("".join(f"  {line}\n" for line in altered))
    if needs_cuda:
        out.write(f"\n{needs_cuda}\n")

    if args.junit_xml and reporting:
        write_junit(args.junit_xml, result.entries, wall)
        out.write(f"JUnit XML: {args.junit_xml}\n")
    if args.update_times and reporting:
        ran = {e.test_id: e.seconds for e in result.entries if e.status != SKIPPED and e.real}
        save_times(args.times_file, ran)
        out.write(f"times of {len(ran)} tests merged into {args.times_file}\n")

    passed, failed, skipped = counts(result.entries)
    if not tests:
        out.write(f"no tests ran: nothing selected (discovered {len(discovered)} tests in {', '.join(dirs)}; "
                  "check -k/-i/-x/--shard)\n")
    elif passed + failed == 0 and not interrupted:
        out.write(f"no tests ran: all {skipped} selected tests were skipped (see the reasons above); "
                  "a run that tests nothing is not a success\n")
    out.write(f"{passed} passed, {failed} failed, {skipped} skipped\n")
    out.flush()
    if interrupted:
        return EXIT_TERMINATED if "SIGTERM" in interrupted else EXIT_INTERRUPTED
    if failed:
        return EXIT_FAILED
    if passed + failed == 0:
        return EXIT_NO_TESTS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
