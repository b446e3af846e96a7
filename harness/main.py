"""``run_tests()``: the ``__main__`` of a test module, as upstream's ``run_tests``."""
from __future__ import annotations

import fnmatch
import sys
import unittest
from types import ModuleType
from typing import Any

__all__ = ["run_tests"]


def run_tests(argv: list[str] | None = None) -> None:
    """Run the calling module's tests with unittest and exit non-zero when any failed. What only pytest runs (test
    functions, classes that are no ``TestCase``, parametrized tests, tests that need fixtures) pytest runs, as under
    the runner (harness.runner.pytest_items), each with pytest's verdict in unittest's report.

    Example::

        if __name__ == "__main__":
            run_tests()
    """
    from harness.shared import launcher
    from harness.parent.pool import install_sigterm_handler
    from harness.parent.run import Run

    install_sigterm_handler()  # SIGTERM unwinds like Ctrl-C, in a test on ranks or in this process alike
    run = Run()
    run.warm()
    if not launcher.launched():
        from harness.parent import template

        template.tell()  # the calling module, imported by now, says what the template should import too

    class Runner(unittest.TextTestRunner):
        resultclass = _Result

        def _makeResult(self) -> unittest.TextTestResult:
            return run.attach(super()._makeResult())

        def run(self, test: Any) -> unittest.TestResult:
            from harness.parent.pytest_marks import honoured
            from harness.runner.pytest_items import in_session
            from harness.runner.selection import iter_tests

            suite = _Stoppable(test)
            done: list[unittest.TestResult] = []
            with honoured(test):  # pytest's marks and outcomes, where pytest is importable
                # the tests pytest runs (harness.runner.pytest_items) run in one pytest session around the suite
                in_session(list(iter_tests(test)), run, lambda: done.append(super(Runner, self).run(suite)))
            if suite.stopped is not None:  # pytest.exit(): the run stopped, as pytest's does, with pytest's code
                self.stream.writeln(f"{suite.stopped}: {suite.not_run} of {suite.count} tests did not run")
                self.stream.flush()
                raise SystemExit(suite.stopped.code)
            return done[0]

    try:
        if launcher.launched():
            from harness.torchrun.job import main_module_entry

            main_module_entry(argv, Runner)
        else:
            _Program(module="__main__", argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
                     testRunner=Runner)
    finally:  # unittest.main exits: the run's notes come after its summary, on stderr (rank 0's under torchrun)
        run.close()
        if launcher.launched_rank() == 0:
            run.notes.say()


class _Result(unittest.TextTestResult):
    """unittest's text result, and what the harness says at the end of the run about tests it did not run
    itself: classes still on upstream's harness, skips for want of a GPU or NCCL (the run's notes)."""

    harness_run: Any = None
    #: the test running, and whether it has an outcome yet (pytest.exit() may stop it before it has one)
    harness_test: Any = None
    harness_seen = False
    _harness_started = False  # between startTest and stopTest

    def startTest(self, test: unittest.TestCase) -> None:
        self.harness_run.notes.test_class_seen(test)
        self.harness_test, self.harness_seen, self._harness_started = test, False, True
        self._harness_before = (len(self.failures), len(self.errors), len(self.skipped))
        from harness.runner.results import uses_ranks

        if not uses_ranks(test):
            self.harness_run.before_in_process()  # under torchrun: no group of the job's in its way
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        self._harness_started = False
        super().stopTest(test)
        from harness.runner.results import uses_ranks

        if self.harness_seen and not uses_ranks(test):
            self._add_elsewhere(test)

    def _add_elsewhere(self, test: unittest.TestCase) -> None:
        """Under torchrun: the test ran in every launched process; where it failed in another, it failed here
        too (harness.parent.run.Run.elsewhere), reported with that rank's text."""
        from harness.shared.status import Status

        failures, errors, skipped = self._harness_before
        if len(self.errors) > errors:
            own, text = Status.ERROR, self.errors[-1][1]
        elif len(self.failures) > failures:
            own, text = Status.FAILED, self.failures[-1][1]
        else:
            own, text = (Status.SKIPPED, "") if len(self.skipped) > skipped else (Status.PASSED, "")
        for status, title, said in self.harness_run.elsewhere(test, own, text):
            (self.errors if status == Status.ERROR else self.failures).append((test, said))
            if self.showAll:
                self.stream.writeln(f"  {title}: {status}")
                self.stream.flush()
            if self.failfast:
                self.stop()

    def addSuccess(self, test: unittest.TestCase) -> None:
        self.harness_seen = True
        super().addSuccess(test)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self.harness_seen = True
        super().addFailure(test, err)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        from harness.shared.pytest_outcomes import stop_if_exit

        stop_if_exit(err[1])  # pytest.exit() in a TestCase test: the run stops
        self.harness_seen = True
        super().addError(test, err)
        from harness.runner.results import is_class_error

        if is_class_error(test):  # under torchrun the other launched processes show it, should they need to
            self.harness_run.class_error(test.id(), self.errors[-1][1])

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        self.harness_seen = True
        super().addExpectedFailure(test, err)

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self.harness_seen = True
        super().addUnexpectedSuccess(test)

    def add_stopped(self, exc: BaseException) -> None:
        """pytest.exit() stopped the run: the test it stopped, which has no outcome, an error that says so (the
        runner's ``INTR``); a test whose verdict came before (a tear-down called it) keeps it."""
        if self.harness_test is not None and not self.harness_seen:
            self.addError(self.harness_test, _reported(f"{exc}, called by this test or one of its fixtures: the run "
                                                       "stopped here"))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        from harness.runner.results import skipped_unstarted

        if skipped_unstarted(test, self._harness_started):
            self.startTest(test)
        self.harness_seen = True
        super().addSkip(test, reason)
        self.harness_run.notes.skip_seen(test, reason)
        from harness.runner.results import is_class_error

        if is_class_error(test):  # (in this process only, maybe: its tests then run in the others alone)
            self.harness_run.class_error(test.id(), f"skipped: {reason}")

    def add_reported(self, test: unittest.TestCase, status: Any, reason: str = "", texts: Any = (),
                     record: Any = None, output: str = "") -> None:  # noqa: ARG002 - the runner's result's call
        """A verdict pytest gave (harness.runner.pytest_items), as unittest's outcomes, counted as pytest counts
        it: each failure text a failure (a strict XPASS too), each error text an error (a test whose call failed and
        whose tear-down erred is both, as pytest's ``1 failed, 1 error``), an xfail an expected failure, an XPASS
        that is not strict a pass (pytest fails no run on it)."""
        from harness.shared.status import Status

        if status == Status.SKIPPED:
            self.addSkip(test, reason)
        elif status == Status.XFAIL:
            self.addExpectedFailure(test, _reported(f"xfail: {reason}"))
        elif not texts:
            self.addSuccess(test)
        for kind, text in texts:
            if kind == Status.ERROR:
                self.addError(test, _reported(text))
            else:
                self.addFailure(test, _reported(text))
        self._mirrorOutput = False  # (-b) what it printed is in pytest's report: pytest's capture held it, not ours

    def _exc_info_to_string(self, err: Any, test: unittest.TestCase) -> str:
        if isinstance(err[1], _Reported):
            return str(err[1]) + "\n"  # pytest's words already
        return super()._exc_info_to_string(err, test)


class _Reported(Exception):
    """An outcome pytest worded: its text, as unittest's report shows an exception's traceback."""


def _reported(text: str) -> tuple[type, _Reported, None]:
    return _Reported, _Reported(text), None


class _Program(unittest.TestProgram):
    """unittest's ``main``, its tests collected as the runner collects a file's (harness.runner.pytest_items.expand):
    in a pytest-style module, every item pytest collects, in pytest's order; the names and ``-k`` patterns given
    select among them as unittest selects (a name: a test, a class, a function, ``test_f[param]``)."""

    def createTests(self, from_discovery: bool = False, Loader: Any = None) -> None:  # noqa: N802, N803 - unittest's
        from harness.runner.pytest_items import expand, pytest_style
        from harness.runner.selection import iter_tests, module_of, within

        module = self.module
        if from_discovery or not isinstance(module, ModuleType):
            return super().createTests(from_discovery, Loader)
        whole = list(iter_tests(unittest.TestLoader().loadTestsFromModule(module)))
        if not pytest_style(module, whole):
            return super().createTests(from_discovery, Loader)
        tests = expand(whole, [module], module_of)
        prefix = module.__name__ + "."
        out: list[unittest.TestCase] = []
        for name in self.testNames or ():
            chosen = [t for t in tests if within(t.id(), prefix + name)]
            # a name that names nothing: unittest's own error for it
            out += chosen or list(iter_tests(self.testLoader.loadTestsFromName(name, module)))
        if self.testNames is None:
            out = tests
        if self.testNamePatterns:
            out = [t for t in out if any(fnmatch.fnmatchcase(t.id(), p) for p in self.testNamePatterns)]
        self.test = unittest.TestSuite(list(dict.fromkeys(out)))


class _Stoppable:
    """A suite that ``pytest.exit()`` stops: what stopped it (harness.shared.pytest_outcomes.PytestExit) and how many
    of its tests did not run, for :func:`run_tests` to say."""

    def __init__(self, suite: Any) -> None:
        self.suite = suite
        self.count = suite.countTestCases()
        self.stopped: Any = None
        self.not_run = 0

    def __call__(self, result: unittest.TestResult) -> Any:
        from harness.shared.pytest_outcomes import PytestExit

        before = result.testsRun
        try:
            return self.suite(result)
        except PytestExit as exc:
            self.stopped = exc
            self.not_run = self.count - (result.testsRun - before)
            stopped = getattr(result, "add_stopped", None)
            if stopped is not None:
                stopped(exc)
            result.stop()
            return result
