"""The runner's exit codes: one per way a run can end, from the entries, the interrupt and the command line."""
from __future__ import annotations

import contextlib
import io
import unittest

from harness.parent.pool import Terminated
from harness.runner import main
from harness.runner.results import exit_code, interrupt_reason
from harness.shared.status import ExitCode, Status
from tests.unit._fakes import entry


class TestExitCode(unittest.TestCase):
    def test_the_documented_numbers(self):
        self.assertEqual([int(c) for c in (ExitCode.OK, ExitCode.FAILED, ExitCode.USAGE, ExitCode.NO_TESTS,
                                           ExitCode.INTERRUPTED, ExitCode.TERMINATED)], [0, 1, 2, 5, 130, 143])

    def test_from_the_entries(self):
        ok, skip = entry("m.T.test_ok"), entry("m.T.test_skip", Status.SKIPPED)
        cases = {
            ExitCode.OK: [[ok], [ok, skip], [entry("m.T.test_x", Status.XFAIL)]],
            ExitCode.FAILED: [[ok, entry("m.T.test_f", Status.FAILED)], [entry("m.T.test_e", Status.ERROR)],
                              [ok, entry("m.T.test_xp", Status.XPASS)],
                              [entry("m.T.setUpClass", Status.ERROR, real=False), skip]],
            ExitCode.NO_TESTS: [[], [skip, skip]],
        }
        for code, runs in cases.items():
            for entries in runs:
                self.assertEqual(exit_code(entries), code, [(e.test_id, e.status) for e in entries])

    def test_an_interrupt_wins_over_failures(self):
        failed = [entry("m.T.test_f", Status.FAILED), entry("m.T.test_i", Status.INTERRUPTED)]
        self.assertEqual(exit_code(failed, interrupt_reason(KeyboardInterrupt())), ExitCode.INTERRUPTED)
        self.assertEqual(exit_code(failed, interrupt_reason(Terminated())), ExitCode.TERMINATED)
        self.assertEqual(exit_code([], "interrupted (Ctrl-C)"), ExitCode.INTERRUPTED)


class _Listener:
    def test_done(self, entry, result) -> None:
        pass

    def subtest_done(self, status, description, reason) -> None:
        pass


class TestClassSetUp(unittest.TestCase):
    """A class whose setUpClass skips is a skip with its reason, and one that raises is an error."""

    def run_classes(self, *classes: type) -> list:
        from harness.runner.results import RunnerResult

        result = RunnerResult(_Listener(), buffer=False, failfast=False, keep_output=False)
        loader = unittest.TestLoader()
        unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in classes]).run(result)
        return result.entries

    def test_a_skipped_class_is_a_skip_not_an_error(self):
        class NeedsAGpu(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise unittest.SkipTest("the fixture server is not installed")

            def test_x(self):
                pass

        [e] = self.run_classes(NeedsAGpu)
        self.assertEqual((e.status, e.reason, e.real), (Status.SKIPPED, "the fixture server is not installed", False))
        self.assertEqual(exit_code([e]), ExitCode.NO_TESTS)

    def test_a_class_whose_set_up_raises_is_an_error(self):
        class Broken(unittest.TestCase):
            @classmethod
            def setUpClass(cls):
                raise RuntimeError("fixture did not start")

            def test_x(self):
                pass

        [e] = self.run_classes(Broken)
        self.assertEqual((e.status, e.real), (Status.ERROR, False))


class TestUsage(unittest.TestCase):
    """Usage errors end with 2 and the count line, before any test is collected."""

    def run_main(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
        return code, out.getvalue(), err.getvalue()

    def test_bad_values_name_the_flag(self):
        for argv, says in [(["--shard", "3", "2"], "--shard 3 2: need N >= 1 and 1 <= I <= N"),
                           (["--shard", "1", "0"], "--shard 1 0"),
                           (["--timeout", "0"], "--timeout 0: must be a number of seconds >= 0.1"),
                           # the bound HARNESS_TIMEOUT has, named by the flag (it once passed here and was then
                           # refused naming the variable)
                           (["--timeout", "0.05"], "--timeout 0.05: must be a number of seconds >= 0.1"),
                           (["--timeout", "nan"], "--timeout nan: must be a number of seconds >= 0.1"),
                           (["--slowest", "-1"], "--slowest -1: must be >= 0")]:
            code, out, err = self.run_main(*argv)
            self.assertEqual(code, ExitCode.USAGE, argv)
            self.assertIn(f"python -m harness: error: {says}", err)
            self.assertEqual(out, "0 passed, 0 failed, 0 skipped\n")

    def test_argparse_errors_are_usage_errors_too(self):
        code, _, err = self.run_main("--device", "gpu")
        self.assertEqual(code, ExitCode.USAGE)
        self.assertIn("invalid choice: 'gpu'", err)


if __name__ == "__main__":
    unittest.main()


class _Skipped(unittest.TestCase):
    @unittest.skip("not on this machine")
    def test_skipped(self):
        pass

    def test_passes(self):
        pass


class TestASkipWithoutAStart(unittest.TestCase):
    """Python 3.12.1's unittest skips a test marked ``@skip`` (or of a class so marked) without calling
    ``startTest``, yet calls ``stopTest`` after it (3.11, 3.12.0, 3.12.2 and later start it). Each result gives
    the same lines and counts as on every other Python: one skip, no error, the skipped test counted as run."""

    def skip_as_3_12_1_does(self, result: unittest.TestResult) -> None:
        test = _Skipped("test_skipped")
        result.addSkip(test, "not on this machine")
        result.stopTest(test)
        passing = _Skipped("test_passes")
        passing.run(result)

    def test_the_runners_result(self):
        from harness.runner.results import RunnerResult

        result = RunnerResult(_Listener(), buffer=False, failfast=False, keep_output=False)
        self.skip_as_3_12_1_does(result)
        self.assertEqual([(e.test_id.rpartition(".")[2], e.status, e.reason, e.real) for e in result.entries],
                         [("test_skipped", Status.SKIPPED, "not on this machine", True),
                          ("test_passes", Status.PASSED, "", True)])
        self.assertEqual((result.testsRun, result.errors, len(result.skipped)), (2, [], 1))
        self.assertEqual(exit_code(result.entries), ExitCode.OK)

    def test_run_tests_result(self):
        from harness.main import _Result
        from harness.parent.run import Run

        out = io.StringIO()
        result = _Result(unittest.runner._WritelnDecorator(out), True, 2)
        result.harness_run = Run()
        self.skip_as_3_12_1_does(result)
        self.assertEqual((result.testsRun, result.errors, result.failures, len(result.skipped)), (2, [], [], 1))
        self.assertIn("test_skipped (", out.getvalue())
        self.assertIn("skipped 'not on this machine'", out.getvalue())

