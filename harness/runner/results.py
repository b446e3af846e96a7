"""What happened to each test, as data: the unittest result object that collects it, the counts and the exit code."""
from __future__ import annotations

import dataclasses
import sys
import time
import unittest
from typing import Any, Protocol, Sequence

from harness.judging.notes import short_id
from harness.runner.progress import keeping, test_started
from harness.runner.selection import is_load_failure, module_of
from harness.runner.sharding import class_unit
from harness.shared import pytest_outcomes
from harness.shared.pytest_outcomes import StrictXPass, xfail_reason
from harness.shared.status import BAD, ExitCode, Status

__all__ = ["Problem", "Entry", "Listener", "RunnerResult", "Counts", "counts", "exit_code", "interrupt_reason",
           "uses_ranks", "is_class_error", "skipped_unstarted"]


@dataclasses.dataclass
class Problem:
    """One failure text: of the test, or of one of its subtests."""

    kind: Status  # FAILED, ERROR, XPASS or INTERRUPTED
    title: str  # "test id" or "test id (subtest: a=1)"
    text: str


@dataclasses.dataclass
class Entry:
    """One test as the runner saw it."""

    test_id: str
    module: str
    classname: str
    method: str
    status: Status = Status.PASSED
    seconds: float = 0.0
    placement: str = ""
    world_size: int | None = None
    reason: str = ""  # a skip's reason; an xfail's (pytest's mark or pytest.xfail())
    why_placed: str = ""  # the harness's reason for the placement ("needs 4 GPUs, found 0: ran on CPU/gloo")
    problems: list[Problem] = dataclasses.field(default_factory=list)
    sub_passed: int = 0
    sub_failed: list[tuple[str, Status, str]] = dataclasses.field(default_factory=list)  # (params, kind, text)
    sub_skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (params, reason)
    output: str = ""
    examples: int = 0  # hypothesis examples run (0: not a harness test)
    triage: str = ""  # what checking its failure in fresh ranks found (harness.judging.triage)
    faults: str = ""  # its injected faults and where each fired (harness.judging.attempts)
    attempts: list[str] = dataclasses.field(default_factory=list)  # every attempt of a test with faults, in words
    picture: Any = None  # a failure's ranks x collectives (harness.judging.analysis.Picture): the HTML report draws it
    real: bool = True  # False: an import failure or a class/module set-up error, not a test of its own

    @property
    def subtests(self) -> int:
        return self.sub_passed + len(self.sub_failed) + len(self.sub_skipped)


class Listener(Protocol):
    """Who is told as outcomes arrive (harness.runner.console prints them)."""

    def test_done(self, entry: Entry, started: int | None) -> None: ...

    def subtest_done(self, status: Status, params: str, reason: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class Counts:
    """The last line's numbers: errors and unexpected passes count as failed, expected failures as passed."""

    passed: int
    failed: int
    skipped: int

    def __str__(self) -> str:
        return f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"


def counts(entries: Sequence[Entry]) -> Counts:
    """Example: ``str(counts(result.entries))`` is ``"3 passed, 1 failed, 0 skipped"``."""
    return Counts(sum(e.status in (Status.PASSED, Status.XFAIL) for e in entries),
                  sum(e.status in BAD for e in entries),
                  sum(e.status == Status.SKIPPED for e in entries))


def exit_code(entries: Sequence[Entry], interrupted: str = "") -> int:
    """How the run ends: interrupted beats failed, failed beats "nothing ran"; a run ``pytest.exit()`` stopped
    ends with pytest's code (2, or its ``returncode=``).

    Example::

        exit_code(result.entries, "terminated (SIGTERM)")  # ExitCode.TERMINATED
    """
    if interrupted:
        stopped = pytest_outcomes.exit_status(interrupted)
        if stopped is not None:
            return stopped
        return ExitCode.TERMINATED if "SIGTERM" in interrupted else ExitCode.INTERRUPTED
    c = counts(entries)
    if c.failed:
        return ExitCode.FAILED
    if c.passed == 0:
        return ExitCode.NO_TESTS
    return ExitCode.OK


def interrupt_reason(exc: BaseException | None) -> str:
    """How a run was stopped, in the words the report uses."""
    from harness.parent.pool import Terminated

    if isinstance(exc, pytest_outcomes.PytestExit):
        return str(exc)  # "stopped by pytest.exit('reason')"
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


def uses_ranks(test: Any) -> bool:
    """``test`` (a test, or its class) runs on the harness's rank processes (not a plain TestCase, nor a class
    whose ranks live in this process: thread ranks, local tensors)."""
    from harness.classes.case import MultiProcessTestCase

    cls = test if isinstance(test, type) else type(test)
    return issubclass(cls, MultiProcessTestCase) and not getattr(cls, "_harness_local", False)


def is_class_error(test: Any) -> bool:
    """``test`` is unittest's stand-in for a class or module set-up or tear-down that raised or skipped (an
    ``_ErrorHolder``: "setUpClass (mod.Class)"), which has no stopTest of its own."""
    description = getattr(test, "description", None)
    return type(test).__module__ == "unittest.suite" and isinstance(description, str) and \
        description.partition(" (")[0] in ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule")


def skipped_unstarted(test: Any, started: bool) -> bool:
    """unittest skips a whole test (``@skip`` on it or its class) without starting it first, and stops it after:
    Python 3.12.1's unittest alone (3.12.0 and 3.12.2 on start it, as 3.11 does). A result that calls its own
    ``startTest`` then gives the same lines, counts and timings on every Python. ``started``: the result has
    this test under way."""
    return isinstance(test, unittest.TestCase) and not isinstance(test, unittest.case._SubTest) and not started


def _split_id(test: Any) -> tuple[str, str, str]:
    test_id = test.id()
    module = module_of(test)
    node = getattr(test, "harness_node", None)
    if node is not None:  # a test pytest runs (harness.runner.pytest_items): its names as pytest has them
        return test_id, f"{module}.{node.cls}" if node.cls else module, node.name
    if is_load_failure(test):
        return test_id, module, "import"
    if test_id.startswith(module + "."):
        rest = test_id[len(module) + 1:]
        cls, _, method = rest.rpartition(".")
        return test_id, f"{module}.{cls}" if cls else module, method or rest
    return test_id, module, test_id


# unittest.suite.TestSuite runs each class and module fixture between result._setupStdout() and
# result._restoreStdout(); the suite's step that is running says whose fixture just ended.
_CLASS_TEAR_DOWN = "_tearDownPreviousClass"  # tearDownClass (and class cleanups) of `previousClass`
_MODULE_TEAR_DOWN = "_handleModuleTearDown"  # tearDownModule: counted with the module's last class
_CLASS_SET_UP = "_handleClassSetUp"  # setUpClass of `currentClass` (a setUpModule before it is counted with it)
_STEPS = {_CLASS_TEAR_DOWN: "previousClass", _MODULE_TEAR_DOWN: "", _CLASS_SET_UP: "currentClass"}


def _fixture_step() -> tuple[str, Any]:
    """Which of unittest's fixture steps is ending: its name and the class it handles; ("", None) when the
    caller is none of them (setUpModule, or a unittest that names its steps otherwise)."""
    frame = sys._getframe(1)
    try:
        for _ in range(8):
            if frame is None:
                break
            name = frame.f_code.co_name
            if name in _STEPS and frame.f_globals.get("__name__") == "unittest.suite":
                return name, frame.f_locals.get(_STEPS[name]) if _STEPS[name] else None
            frame = frame.f_back
        return "", None
    finally:
        del frame


def _take_record(entry: Entry, record: Any) -> None:
    """Copy where a harness test ran (harness.judging.notes' record: world, placement, examples, triage, faults,
    attempts, picture) into the entry the report shows."""
    entry.world_size = record.world_size
    entry.placement = record.placement
    entry.why_placed = record.reason
    entry.examples = record.examples
    entry.triage = record.triage
    entry.faults = record.faults
    entry.attempts = list(record.attempts)
    entry.picture = record.picture


class RunnerResult(unittest.TestResult):
    """Turns unittest's calls into one :class:`Entry` per test, and tells the listener as each ends.

    It also measures the time each class spends outside its tests, in ``class_seconds`` (class id
    ``pkg.mod.Class`` -> seconds): its ``setUpClass`` (with a ``setUpModule`` that ran just before it) and
    its ``tearDownClass`` (with a ``tearDownModule`` that ran just after it). Where unittest's fixture steps
    cannot be told apart, the whole gap between two classes' tests counts for the class that comes next,
    and what follows the last test for the last class. ``--update-times`` records it, ``--shard`` and
    ``--jobs`` weigh a class with it.

    Example::

        result = RunnerResult(console, buffer=True, failfast=False, keep_output=False)
        unittest.TestSuite(tests).run(result)
        counts(result.entries)
    """

    def __init__(self, listener: Listener, buffer: bool, failfast: bool, keep_output: bool,
                 run: Any = None) -> None:
        from harness.parent.run import Run

        super().__init__()
        #: the run the tests belong to (harness.parent.run): their settings, ranks and notes
        self.harness_run = run if run is not None else Run()
        self.listener = listener
        self.buffer = buffer
        self.failfast = failfast
        self.keep_output = keep_output  # keep what a test printed (the console shows it under -v)
        self.entries: list[Entry] = []
        self.started = 0
        self._current: Entry | None = None
        self._outcome_seen = False
        self._t0 = 0.0
        self.class_seconds: dict[str, float] = {}
        self._outside_from: float | None = None  # since when no test runs: the last test's end, the run's start
        self._last_class: str | None = None  # the class of the test that ran last

    def startTestRun(self) -> None:
        super().startTestRun()
        self._outside_from = time.monotonic()

    def stopTestRun(self) -> None:
        self._charge(self._last_class, time.monotonic())  # the last class's tearDownClass, where unmeasured
        super().stopTestRun()

    def _charge(self, unit: str | None, now: float) -> None:
        """The time outside tests since the last mark goes to class ``unit`` (None: to no one); mark ``now``."""
        if unit is not None and self._outside_from is not None:
            self.class_seconds[unit] = self.class_seconds.get(unit, 0.0) + max(0.0, now - self._outside_from)
        self._outside_from = now

    def _fixture_ended(self) -> None:
        step, cls = _fixture_step()
        now = time.monotonic()
        if step == _CLASS_TEAR_DOWN:
            self._charge(class_unit(cls) or self._last_class, now)
        elif step == _MODULE_TEAR_DOWN:
            self._charge(self._last_class, now)
        elif step == _CLASS_SET_UP:
            self._charge(class_unit(cls), now)
        # else: a setUpModule (or a step not known): its time waits for the class whose tests come next

    # unittest mirrors buffered output of a failing test to the terminal at once; we show it in the report.
    def _restoreStdout(self) -> None:
        self._mirrorOutput = False
        super()._restoreStdout()
        if self._current is None:  # outside a test: a class or module fixture just ended
            self._fixture_ended()

    def stop_interrupted(self) -> None:
        """After an interrupt inside a test: give the terminal back its stdout."""
        if self._current is not None:
            self._restoreStdout()

    def startTest(self, test: unittest.TestCase) -> None:
        notes = self.harness_run.notes
        self.started += 1
        test_id, classname, method = _split_id(test)
        self._current = Entry(test_id, module_of(test), classname, method, real=not is_load_failure(test))
        self._outcome_seen = False
        found = notes.test_class_seen(test)  # its class still derives from upstream's base: say so on its line
        if found is not None:
            self._current.placement = "upstream"
            self._current.why_placed = found.line()
        self._t0 = time.monotonic()
        unit = class_unit(type(test))
        if unit != self._last_class:  # a class's first test: what is left of the time since the last test is its own
            self._charge(unit, self._t0)
        self._last_class = unit
        if not uses_ranks(test):
            self.harness_run.before_in_process()  # under torchrun: no group of the job's in its way
        if keeping():  # a runner process of the thin parent's: what it runs, should it die (harness.runner.progress)
            test_started(self.started, getattr(self.listener, "total", 0), counts(self.entries), test_id)
        super().startTest(test)

    def _entry_for(self, test: Any, outside: Status = Status.ERROR) -> Entry:
        """The entry of the running test, or a new one for an outcome outside any test (``outside``: its status)."""
        if isinstance(test, unittest.case._SubTest):
            test = test.test_case
        cur = self._current
        if cur is not None and isinstance(test, unittest.TestCase) and test.id() == cur.test_id:
            return cur
        if isinstance(test, unittest.TestCase):
            # a test that is over, failed afterwards: triage found it left state that made a later test fail
            over = [e for e in self.entries if e.real and e.test_id == _split_id(test)[0]]
            if over:
                return over[-1]
        # An error outside any test (setUpClass, setUpModule, ...): a failed entry of its own.
        desc = getattr(test, "description", None) or test.id()
        module = module_of(test)
        entry = Entry(desc, module, module, desc, status=outside, real=False)
        self.entries.append(entry)
        self.listener.test_done(entry, None)
        return entry

    @staticmethod
    def _last_text(bucket: list) -> str:
        return bucket[-1][1] if bucket else ""

    def addSuccess(self, test: unittest.TestCase) -> None:
        self._outcome_seen = True
        super().addSuccess(test)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._outcome_seen = True
        super().addFailure(test, err)
        entry = self._entry_for(test)
        if isinstance(err[1], StrictXPass):  # @pytest.mark.xfail(strict=True) and it passed: as an unexpected success
            entry.status = Status.XPASS if entry.status != Status.ERROR else Status.ERROR
            entry.reason = err[1].reason
            entry.problems.append(Problem(Status.XPASS, entry.test_id, str(err[1])))
            return
        entry.status = Status.FAILED if entry.status != Status.ERROR else Status.ERROR
        entry.problems.append(Problem(Status.FAILED, entry.test_id, self._last_text(self.failures)))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        pytest_outcomes.stop_if_exit(err[1])  # pytest.exit() in a TestCase test: the run stops (no verdict: INTR)
        self._outcome_seen = True
        super().addError(test, err)
        entry = self._entry_for(test)
        entry.status = Status.ERROR
        entry.problems.append(Problem(Status.ERROR, entry.test_id, self._last_text(self.errors)))
        if is_class_error(test):  # under torchrun the other launched processes show it, should they need to
            self.harness_run.class_error(test.id(), entry.problems[-1].text)

    def addSkip(self, test: Any, reason: str) -> None:
        if skipped_unstarted(test, self._current is not None):
            self.startTest(test)
        self._outcome_seen = True
        super().addSkip(test, reason)
        self.harness_run.notes.skip_seen(test, reason)  # "needs a GPU or NCCL" in a test the harness did not run itself
        entry = self._entry_for(test, Status.SKIPPED)  # a class or module skipped in its set-up is a skip
        if is_class_error(test):  # (in this process only, maybe: its tests then run in the others alone)
            self.harness_run.class_error(test.id(), f"skipped: {reason}")
        if isinstance(test, unittest.case._SubTest):
            entry.sub_skipped.append((test._subDescription(), reason))
            self.listener.subtest_done(Status.SKIPPED, test._subDescription(), reason)
        else:
            entry.status = Status.SKIPPED if entry.status not in BAD else entry.status
            entry.reason = reason

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._outcome_seen = True
        super().addExpectedFailure(test, err)
        entry = self._entry_for(test)
        entry.status = Status.XFAIL
        entry.reason = xfail_reason(err[1]) or ""  # pytest's xfail (a mark that held, or pytest.xfail()): its reason

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self._outcome_seen = True
        super().addUnexpectedSuccess(test)
        entry = self._entry_for(test)
        entry.status = Status.XPASS
        entry.problems.append(Problem(Status.XPASS, entry.test_id, "unexpected success: the test is marked "
                                                                   "@expectedFailure but passed"))

    def add_reported(self, test: unittest.TestCase, status: Status, reason: str = "",
                     texts: Sequence[tuple[Status, str]] = (), record: Any = None, output: str = "") -> None:
        """An outcome that another runner decided and worded: pytest's, for a test the runner hands it
        (harness.runner.pytest_items). ``texts``: its failures, each (kind, text); ``record``: where a harness
        test ran (harness.judging.notes), taken by the pytest plugin; ``output``: what it printed."""
        self._outcome_seen = True
        entry = self._entry_for(test)
        entry.status = status
        entry.reason = reason
        for kind, text in texts:
            entry.problems.append(Problem(kind, entry.test_id, text))
            (self.errors if kind == Status.ERROR else self.failures).append((test, text))
        if status == Status.SKIPPED:
            self.skipped.append((test, reason))
        if self.keep_output:
            entry.output = output
        if record is not None:
            _take_record(entry, record)
        if self.failfast and status in BAD:
            self.stop()

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        self._outcome_seen = True
        entry = self._entry_for(test)
        params = subtest._subDescription()
        if err is None:
            entry.sub_passed += 1
            self.listener.subtest_done(Status.PASSED, params, "")
            return
        kind = Status.FAILED if issubclass(err[0], test.failureException) else Status.ERROR
        text = self._last_text(self.failures if kind == Status.FAILED else self.errors)
        entry.sub_failed.append((params, kind, text))
        entry.problems.append(Problem(kind, f"{entry.test_id} {params}", text))
        if entry.status != Status.ERROR:
            entry.status = kind
        self.listener.subtest_done(kind, params, "")

    def _add_elsewhere(self, test: unittest.TestCase, entry: Entry) -> None:
        """Under torchrun: the test ran in every launched process; where it failed in another one, it failed
        (harness.parent.run.Run.elsewhere), with that rank's text beside this one's."""
        own = entry.problems[0].text if entry.problems else entry.reason
        for status, title, text in self.harness_run.elsewhere(test, entry.status, own):
            kind = Status(status)
            entry.problems.append(Problem(kind, title, text))
            (self.errors if kind == Status.ERROR else self.failures).append((test, text))
            if entry.status not in BAD:
                entry.status = kind
            if self.failfast:
                self.stop()

    def stopTest(self, test: unittest.TestCase) -> None:
        entry = self._current or self._entry_for(test)
        if self.keep_output and self.buffer and not entry.output:
            entry.output = "".join(buf.getvalue() for buf in (getattr(self, "_stdout_buffer", None),
                                                              getattr(self, "_stderr_buffer", None)) if buf)
        super().stopTest(test)
        if not self._outcome_seen and entry.status == Status.PASSED and entry is self._current:
            # unittest calls stopTest on the way out of an interrupt that reported nothing: the test was
            # running, it did not pass
            entry.status = Status.INTERRUPTED
            exc = sys.exc_info()[1]
            why = interrupt_reason(exc)
            said = (f"{why}, called by this test or one of its fixtures: the run stopped here"
                    if isinstance(exc, pytest_outcomes.PytestExit) else
                    f"{why} while this test was running; its ranks were stopped")
            entry.problems.append(Problem(Status.INTERRUPTED, entry.test_id, said))
        if isinstance(test, unittest.TestCase) and not uses_ranks(test):
            self._add_elsewhere(test, entry)
        entry.seconds = time.monotonic() - self._t0
        rec = self.harness_run.notes.take_record(short_id(test) if isinstance(test, unittest.TestCase) else entry.test_id)
        if rec is not None:
            _take_record(entry, rec)
        self.entries.append(entry)
        self._current = None
        self.listener.test_done(entry, self.started)
        self._outside_from = time.monotonic()
