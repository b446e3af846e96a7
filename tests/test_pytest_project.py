"""A project written for pytest (tests/fixtures/pytest_project) under the runner: pytest's verdict for every test.

The folder is laid out as a pytest-based project lays out its tests: no package, a ``conftest.py`` with a fixture of
the widest scope and an autouse fixture of each module, plain test functions, a class that is no ``TestCase``,
parametrized tests, a failing, an erroring, a skipping, an xfail and an xpass test, a ``TestCase`` that only pytest
gives the autouse fixture to, and harness distributed tests that use a fixture (one failing on a rank). The runner
hands pytest what only pytest runs (harness.runner.pytest_items) and reports every test itself: each test's verdict
is pytest's, in the per-test lines, the count line and the JUnit XML, and a harness test's failure is its rank
report.

Its files are named ``fx_*.py`` (``--python-files``, pytest's ``python_files``), so that no discovery of this
repository's tests collects them. CI runs the folder once under the runner. The nightly tier checks the table itself under pytest, and the runner under
``-j 2`` (its workers collect and run their share the same way).
"""
import os
import re
import shutil
import tempfile
import unittest
from xml.etree import ElementTree

from tests._support import FixtureTestCase, nightly

FOLDER = "tests/fixtures/pytest_project"
PASSED, FAILED, ERROR, SKIPPED, XFAILED, XPASSED = "passed", "failed", "error", "skipped", "xfailed", "xpassed"

#: every test of the folder as pytest judges it: (outcome, reason); a failure's words are not compared
PYTEST = {
    "fx_pt_classes.TestPlainClass.test_method": (PASSED, ""),
    "fx_pt_classes.TestPlainClass.test_param[a.b]": (PASSED, ""),
    "fx_pt_classes.TestPlainClass.test_param[c d]": (PASSED, ""),
    "fx_pt_classes.TestPlainClass.test_marked_skip": (SKIPPED, "not written yet"),
    "fx_pt_classes.TestCaseWithAutouse.test_env_from_conftest": (PASSED, ""),
    "fx_pt_distributed.TestDistributed.test_all_reduce_with_fixtures": (PASSED, ""),
    "fx_pt_distributed.TestDistributed.test_rank_one_fails": (FAILED, ""),
    "fx_pt_functions.test_plain": (PASSED, ""),
    "fx_pt_functions.test_autouse_env": (PASSED, ""),
    "fx_pt_functions.test_session_fixture": (PASSED, ""),
    "fx_pt_functions.test_session_fixture_set_up_once": (PASSED, ""),
    "fx_pt_functions.test_local_fixture": (PASSED, ""),
    "fx_pt_functions.test_square[1-1]": (PASSED, ""),
    "fx_pt_functions.test_square[2-4]": (PASSED, ""),
    "fx_pt_functions.test_square[3-9]": (PASSED, ""),
    "fx_pt_functions.test_fails": (FAILED, ""),
    "fx_pt_functions.test_skips": (SKIPPED, "not on this machine"),
    "fx_pt_functions.test_xfail": (XFAILED, "known bug"),
    "fx_pt_functions.test_xpass": (XPASSED, "fixed since"),
    "fx_pt_functions.test_fixture_error": (ERROR, ""),
}
#: the runner's count line for it: xfail and xpass count as passed, an error as failed
COUNT_LINE = "15 passed, 3 failed, 2 skipped"


class _Runner:
    """The runner on the project: its per-test lines, its count line and its JUnit XML."""

    EXTRA: list[str] = []

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-project-")
        cls.junit = os.path.join(cls.out_dir, "junit.xml")
        cls.ARGS = [FOLDER, "--python-files", "fx_*.py", "--no-triage", "--junit-xml", cls.junit, *cls.EXTRA]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def verdicts(self) -> dict[str, tuple[str, str]]:
        words = {"PASS": PASSED, "FAIL": FAILED, "ERROR": ERROR, "XPASS": FAILED, "SKIP": SKIPPED, "XFAIL": XFAILED}
        found = {}
        for m in re.finditer(r"^(?:j\d )?\[\s*[\d-]+/\d+\] (\w+)\s+(.+?)\s{2,}.*?\s\d+\.\d\ds(?:: (.*))?$", self.r.stdout,
                             re.M):
            word, why = words[m.group(1)], m.group(3) or ""
            if word == PASSED and why.startswith("XPASS (not strict): "):  # pytest's XPASS: a pass, said
                word, why = XPASSED, why.removeprefix("XPASS (not strict): ")
            found[m.group(2)] = (word, "" if word in (FAILED, ERROR) else why)
        return found

    def test_each_test_has_pytests_verdict(self):
        self.assertEqual(self.verdicts(), PYTEST, self.r.describe())

    def test_the_count_line_and_the_exit_status(self):
        self.assertEqual(self.r.stdout.strip().splitlines()[-1], COUNT_LINE, self.r.describe())
        self.assertEqual(self.r.returncode, 1, self.r.describe())

    def test_junit_names_each_test_as_pytest_does(self):
        cases = {}
        for case in ElementTree.parse(self.junit).iter("testcase"):
            outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "")
            cases[f"{case.get('classname')}.{case.get('name')}"] = outcome
        tags = {PASSED: "", XFAILED: "", XPASSED: "", FAILED: "failure", ERROR: "error", SKIPPED: "skipped"}
        self.assertEqual(cases, {k: tags[outcome] for k, (outcome, _) in PYTEST.items()}, self.r.describe())

    def test_a_harness_tests_failure_is_its_rank_report(self):
        self.assertInReport("fx_pt_distributed.TestDistributed.test_rank_one_fails [rank 1/2] raised on cpu/gloo: "
                            "ValueError: PROJECT-RANK-FAILURE on rank 1")
        self.assertMatchesReport(r"PASS\s+fx_pt_distributed\.TestDistributed\.test_all_reduce_with_fixtures\s+cpu/gloo"
                                 r"\s+ws=2")

    def test_a_functions_failure_is_pytests_report_with_its_output(self):
        self.assertInReport("E       assert [1, 2] == [1, 3]")  # pytest's assertion rewriting: pytest imported it
        self.assertInReport("PROJECT-OUTPUT of the failing test")
        self.assertInReport("PROJECT-FIXTURE-ERROR in set-up")

    def test_nothing_left(self):
        self.check_nothing_left()


class TestUnderTheRunner(_Runner, FixtureTestCase):
    """``python -m harness tests/fixtures/pytest_project``."""

    RUNNER = "harness"


@nightly("the same table under the runner in one process (TestUnderTheRunner); -j's workers collect as it does")
class TestUnderTheRunnerWithJobs(_Runner, FixtureTestCase):
    """``python -m harness tests/fixtures/pytest_project -j 2``: two workers, each its share in its own pytest run."""

    RUNNER = "harness"
    EXTRA = ["-j", "2"]


@nightly("the table TestUnderTheRunner holds the runner to is pytest's: this checks it against pytest itself")
class TestUnderPytest(FixtureTestCase):
    """``python -m pytest tests/fixtures/pytest_project``: the reference."""

    RUNNER = "pytest"
    ENV = {"HARNESS_TRIAGE": "0"}

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-project-")
        cls.junit = os.path.join(cls.out_dir, "junit.xml")
        cls.ARGS = [FOLDER, "-o", "python_files=fx_*.py", "-p", "no:cacheprovider", "-q", "-rA", "--junit-xml",
                    cls.junit]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def test_the_table_is_pytests(self):
        found = {}
        for case in ElementTree.parse(self.junit).iter("testcase"):
            key = f"{case.get('classname')}.{case.get('name')}".removeprefix("tests.fixtures.pytest_project.")
            outcome, why = PASSED, ""
            for child in case:
                if child.tag == "failure":
                    outcome = FAILED
                elif child.tag == "error":
                    outcome = ERROR
                elif child.tag == "skipped":
                    outcome = XFAILED if child.get("type") == "pytest.xfail" else SKIPPED
                    why = child.get("message") or ""
            found[key] = (outcome, why)
        # pytest's JUnit XML writes an XPASS as a pass: its summary line tells it apart
        self.assertIn("XPASS tests/fixtures/pytest_project/fx_pt_functions.py::test_xpass", self.r.stdout)
        found["fx_pt_functions.test_xpass"] = (XPASSED, "fixed since")
        self.assertEqual(found, PYTEST, self.r.describe())


if __name__ == "__main__":
    unittest.main()
