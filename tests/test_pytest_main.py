"""A test file written for pytest that ends with ``run_tests()``, run as ``python file.py`` (tests/fixtures/pytest_main):
pytest's verdicts and pytest's counts, and ``pytest.exit()`` stopping the run.

``fx_main_mixed.py`` mixes what ported test files mix: ``TestCase`` classes that take pytest's fixtures (an autouse
fixture of the class, ``usefixtures``), a ``TestCase`` that needs none, a harness distributed test that uses a
fixture, test functions, parametrized tests, a skip, a strict xfail, an xpass, a fixture that fails in set-up and a
test that fails and whose fixture then fails in tear-down, a test that takes pytest's ``cache`` (the runner's pytest
sessions keep pytest's cache plugin, with a cache directory of their own). Its own ``run_tests()`` hands pytest what only pytest runs,
as the runner does (harness.runner.pytest_items), and unittest's report counts each verdict as pytest counts it.

``fx_main_exit.py`` calls ``pytest.exit(..., returncode=3)`` in a fixture after a harness distributed test started its
ranks: the run stops there, says so, ends with pytest's exit code, tears the session fixture down and leaves no rank.

CI runs ``python fx_main_mixed.py`` (run_tests()) and the runner on ``fx_main_exit.py``; the nightly tier checks the
table against pytest itself on both files, ``run_tests()`` on ``fx_main_exit.py`` and the runner on it with ``-j 2``.
"""
import os
import re
import shutil
import tempfile
import unittest

from tests._support import FixtureTestCase, nightly

FOLDER = "tests/fixtures/pytest_main"
MIXED = f"{FOLDER}/fx_main_mixed.py"
EXIT = f"{FOLDER}/fx_main_exit.py"
PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED = "passed", "failed", "error", "skipped", "xfailed", "xpassed"

#: every test of fx_main_mixed.py as pytest judges it, by node id (after the file's path): its outcomes (a test whose
#: call failed and whose tear-down erred has both, as pytest counts it) and a skip's reason
PYTEST = {
    "TestCaseWithFixtures::test_fixture_on_self": ((PASSED,), ""),
    "TestCaseWithFixtures::test_uses_fixture": ((PASSED,), ""),
    "TestCasePlain::test_plain": ((PASSED,), ""),
    "TestCasePlain::test_unittest_skip": ((SKIPPED,), "PROJECT-UNITTEST-SKIP"),
    "TestDistributedWithFixture::test_all_reduce": ((PASSED,), ""),
    "TestPlainClass::test_param[a.b]": ((PASSED,), ""),
    "TestPlainClass::test_param[c d]": ((PASSED,), ""),
    "test_function": ((PASSED,), ""),
    "test_cache_fixture": ((PASSED,), ""),
    "test_square[1-1]": ((PASSED,), ""),
    "test_square[2-4]": ((PASSED,), ""),
    "test_square[3-10]": ((FAILED,), ""),
    "test_skips": ((SKIPPED,), "PROJECT-SKIP not on this machine"),
    "test_xfail": ((XFAILED,), ""),
    "test_xpass": ((XPASSED,), ""),
    "test_fixture_error": ((ERROR,), ""),
    "test_fails_then_tear_down_errs": ((FAILED, ERROR), ""),
}
#: the TestCase tests that need no fixture: unittest runs them itself (named as unittest names them)
UNITTEST_RUNS = {"TestCasePlain::test_plain", "TestCasePlain::test_unittest_skip"}


def pytest_counts() -> dict[str, int]:
    """pytest's count line for fx_main_mixed.py, from the table: each outcome of each test counted once."""
    found: dict[str, int] = {}
    for outcomes, _ in PYTEST.values():
        for outcome in outcomes:
            found[outcome] = found.get(outcome, 0) + 1
    return found


class TestRunTestsRunsWhatPytestRuns(FixtureTestCase):
    """``python tests/fixtures/pytest_main/fx_main_mixed.py -v -b``: the file's own ``run_tests()`` (``-b``: what a
    test pytest ran printed is in pytest's report, not unittest's buffer)."""

    RUNNER = MIXED
    ARGS = ["-v", "-b"]
    ENV = {"HARNESS_TRIAGE": "0"}

    def verdicts(self) -> dict[str, tuple[tuple[str, ...], str]]:
        words = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAILED}
        found: dict[str, tuple[tuple[str, ...], str]] = {}
        # (Python 3.10 writes a test's second outcome alone on the next line: "ERROR" after "... FAIL")
        name = None
        for m in re.finditer(r"^(?:(?:\w+ \(__main__\.(\w+)\.(\w+)\)|\S+?\.py::(.+?)) \.\.\. (.*)|(FAIL|ERROR))$",
                             self.r.stderr, re.M):
            if m.group(5) is None:
                name = m.group(3) or f"{m.group(1)}::{m.group(2)}"
            elif name is None:
                continue
            said = (m.group(4) or m.group(5)).strip()
            if said.startswith("skipped "):
                outcome, why = SKIPPED, said[len("skipped "):].strip("'\"")
            else:
                outcome, why = words[said], ""
            if outcome == PASSED and PYTEST.get(name, ((),))[0] == (XPASSED,):
                outcome = XPASSED  # pytest's non-strict XPASS: a pass in unittest's words
            before = found.get(name, ((), ""))
            found[name] = ((*before[0], outcome), why or before[1])
        return found

    def test_each_test_has_pytests_verdict(self):
        self.assertEqual(self.verdicts(), PYTEST, self.r.describe())

    def test_unittest_runs_the_testcase_that_needs_no_fixture_and_pytest_the_rest(self):
        self.assertInReport("test_plain (__main__.TestCasePlain.test_plain) ... ok")
        for name in set(PYTEST) - UNITTEST_RUNS:
            self.assertInReport(f"{MIXED}::{name} ... ")

    def test_the_summary_counts_as_pytest_counts_and_the_exit_code_is_pytests(self):
        c = pytest_counts()
        tests_bad = sum(1 for outcomes, _ in PYTEST.values() if FAILED in outcomes or ERROR in outcomes)
        self.assertInReport(f"Ran {len(PYTEST)} tests in ")
        self.assertInReport(f"FAILED (failures={c[FAILED]}, errors={c[ERROR]}, skipped={c[SKIPPED]}, "
                            f"expected failures={c[XFAILED]})")
        # unittest's passes: pytest's passed and xpassed
        passes = len(re.findall(r" \.\.\. ok$", self.r.stderr, re.M))
        self.assertEqual(passes, c[PASSED] + c[XPASSED], self.r.describe())
        self.assertEqual(len(PYTEST) - tests_bad - c[SKIPPED] - c[XFAILED], passes)
        self.assertEqual(self.r.returncode, 1, self.r.describe())  # pytest's: tests failed

    def test_failures_are_pytests_reports(self):
        self.assertInReport("E       assert (3 * 3) == 10")  # pytest's assertion rewriting: pytest imported it
        self.assertInReport("PROJECT-FIXTURE-ERROR in set-up")
        self.assertInReport("[error in teardown]")
        self.assertInReport("PROJECT-TEARDOWN-ERROR")
        self.assertInReport("PROJECT-OUTPUT of the failing test")
        self.assertNotIn("needs pytest", self.r.output)
        self.assertNotIn("a test whose fixture failed ran", self.r.output)

    def test_the_distributed_test_ran_on_ranks_with_its_fixture(self):
        self.assertInReport("1 test(s) ran on CPU/gloo")

    def test_nothing_left(self):
        self.check_nothing_left()


class _Stops:
    """What a run ``pytest.exit()`` stopped must show, under any front end."""

    STOP = "stopped by pytest.exit('PROJECT-EXIT the service is down', returncode=3)"

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-exit-")
        cls.marker = os.path.join(cls.out_dir, "torn-down")
        cls.ENV = {**cls.ENV, "PROJECT_TEARDOWN_FILE": cls.marker, "HARNESS_TRIAGE": "0"}
        super().setUpClass()
        cls.torn_down = os.path.exists(cls.marker)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def test_the_run_stopped_there(self):
        self.assertNotIn("a test after pytest.exit() ran", self.r.output, self.r.describe())
        self.assertNotIn("a test whose fixture called pytest.exit() ran", self.r.output, self.r.describe())

    def test_the_exit_code_is_pytest_exits(self):
        self.assertEqual(self.r.returncode, 3, self.r.describe())

    def test_the_session_fixture_was_torn_down(self):
        self.assertTrue(self.torn_down, self.r.describe())

    def test_nothing_left(self):
        self.check_nothing_left()


class TestPytestExitUnderTheRunner(_Stops, FixtureTestCase):
    """``python -m harness tests/fixtures/pytest_main/fx_main_exit.py``."""

    RUNNER = "harness"
    ARGS = [EXIT]

    def test_the_report_says_pytest_exit_stopped_it(self):
        self.assertMatchesReport(r"^\[3/5\] INTR\s+fx_main_exit\.test_stops_in_its_fixture ")
        self.assertInReport(f"{self.STOP}, called by this test or one of its fixtures: the run stopped here")
        self.assertInReport(f"{self.STOP}: 2 of 5 selected tests did not run")
        self.assertEqual(self.r.stdout.strip().splitlines()[-1], "2 passed, 1 failed, 0 skipped", self.r.describe())


@nightly("the stop in one runner process (TestPytestExitUnderTheRunner); -j's workers run their share the same way")
class TestPytestExitUnderTheRunnerWithJobs(FixtureTestCase):
    """``python -m harness tests/fixtures/pytest_main/fx_main_exit.py -j 2``: the worker that ran the module's
    functions stops at pytest.exit(); the other finishes its share; the run ends with the stop."""

    RUNNER = "harness"
    ARGS = [EXIT, "-j", "2"]
    ENV = {"HARNESS_TRIAGE": "0"}

    def test_the_worker_stopped_and_the_run_ends_with_pytest_exits_code(self):
        self.assertMatchesReport(r"^j\d \[\s*\d+/\d+\] INTR\s+fx_main_exit\.test_stops_in_its_fixture ")
        self.assertMatchesReport(r"^" + re.escape(_Stops.STOP) + r": \d of 5 selected tests did not run$")
        self.assertNotIn("fx_main_exit.test_after ", self.r.stdout, self.r.describe())  # the function after it
        self.assertEqual(self.r.returncode, 3, self.r.describe())

    def test_nothing_left(self):
        self.check_nothing_left()


@nightly("the same stop under the runner (TestPytestExitUnderTheRunner), through the same pytest run")
class TestPytestExitUnderRunTests(_Stops, FixtureTestCase):
    """``python tests/fixtures/pytest_main/fx_main_exit.py -v``: the file's own ``run_tests()``."""

    RUNNER = EXIT
    ARGS = ["-v"]

    def test_the_report_says_pytest_exit_stopped_it(self):
        self.assertInReport(f"{EXIT}::test_stops_in_its_fixture ... ERROR")
        self.assertInReport(f"{self.STOP}, called by this test or one of its fixtures: the run stopped here")
        self.assertInReport("Ran 3 tests in ")
        self.assertInReport("FAILED (errors=1)")
        self.assertInReport(f"{self.STOP}: 2 of 5 tests did not run")


@nightly("pytest's own run of fx_main_exit.py: the exit code and counts the other classes are held to")
class TestPytestExitUnderPytest(_Stops, FixtureTestCase):
    """``python -m pytest tests/fixtures/pytest_main/fx_main_exit.py``: the reference."""

    RUNNER = "pytest"
    ARGS = [EXIT, "-p", "no:cacheprovider", "-q"]

    def test_the_report_says_pytest_exit_stopped_it(self):
        self.assertInReport("_pytest.outcomes.Exit: PROJECT-EXIT the service is down")
        self.assertMatchesReport(r"^2 passed in ")


@nightly("the table TestRunTestsRunsWhatPytestRuns holds run_tests() to is pytest's: this checks it against pytest")
class TestMixedUnderPytest(FixtureTestCase):
    """``python -m pytest tests/fixtures/pytest_main/fx_main_mixed.py -rA``: the reference."""

    RUNNER = "pytest"
    ENV = {"HARNESS_TRIAGE": "0"}

    @classmethod
    def setUpClass(cls) -> None:
        cls.cache = tempfile.mkdtemp(prefix="distharness-cache-")  # test_cache_fixture needs pytest's cache
        cls.ARGS = [MIXED, "-o", f"cache_dir={cls.cache}", "-q", "-rA"]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.cache, ignore_errors=True)
        super().tearDownClass()

    def test_the_count_line_is_the_tables(self):
        c = pytest_counts()
        words = [f"{c[FAILED]} failed", f"{c[PASSED]} passed", f"{c[SKIPPED]} skipped", f"{c[XFAILED]} xfailed",
                 f"{c[XPASSED]} xpassed", f"{c[ERROR]} errors"]
        self.assertMatchesReport(r"^" + re.escape(", ".join(words)) + r" in ")
        self.assertEqual(self.r.returncode, 1, self.r.describe())

    def test_each_test_is_the_tables(self):
        words = {"PASSED": PASSED, "FAILED": FAILED, "ERROR": ERROR, "XFAIL": XFAILED, "XPASS": XPASSED}
        found: dict[str, set[str]] = {}
        for m in re.finditer(rf"^(PASSED|FAILED|ERROR|XFAIL|XPASS) {re.escape(MIXED)}::(\S+(?: d\])?)", self.r.stdout,
                             re.M):
            found.setdefault(m.group(2), set()).add(words[m.group(1)])
        for m in re.finditer(r"^SKIPPED \[1\] \S+: (.*)$", self.r.stdout, re.M):
            found.setdefault(f"skip: {m.group(1)}", set()).add(SKIPPED)
        expected: dict[str, set[str]] = {}
        for name, (outcomes, why) in PYTEST.items():
            expected[f"skip: {why}" if outcomes == (SKIPPED,) else name] = set(outcomes)
        self.assertEqual(found, expected, self.r.describe())


if __name__ == "__main__":
    unittest.main()
