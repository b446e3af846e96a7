"""pytest's marks and outcomes under every front end: tests/fixtures/pytest_style, a project's tests written for pytest.

The same files run under the runner (``python -m harness``, ``run_tests.py``), a module's own ``run_tests()`` and
pytest with the plugin, and every front end gives each test the same verdict and the same reason: skip and skipif
marks on a method, a class (whose ``setUpClass`` does not run) and a module's ``pytestmark``, xfail marks (strict,
``raises=`` matched against the class a rank raised, ``run=False``), ``pytest.skip``/``xfail``/``fail`` in a rank's
body (one rank skipping), ``pytest.importorskip`` at a module's top. The tests that need pytest's fixtures the runner
and a module's own ``run_tests()`` hand to pytest (harness.runner.pytest_items), with pytest's verdicts; without
pytest they are skips that name the command that runs them (tests/unit/test_pytest_items.py).

Every front end is held to one table, pytest's verdicts: CI runs the fixture once, under the runner; the nightly
tier under pytest (which checks the table itself), ``run_tests.py`` and ``run_tests()``.
"""
import ast
import os
import re
import shutil
import tempfile
import unittest
from xml.etree import ElementTree

from tests._support import FixtureTestCase, nightly

FOLDER = "tests/fixtures/pytest_style"
PREFIX = "tests.fixtures.pytest_style."
PASSED, FAILED, SKIPPED, XFAILED = "passed", "failed", "skipped", "xfailed"

#: every test of the folder as pytest judges it, the same under every front end: (outcome, reason); a failure's
#: reason is not compared (each front end words its report its own way)
SAME = {
    "fx_marks.TestOnGpus.test_on_gpu": (SKIPPED, "needs CUDA"),
    "fx_marks.TestMarks.test_plain": (PASSED, ""),
    "fx_marks.TestMarks.test_skip_mark": (SKIPPED, "not on this project's CI"),
    "fx_marks.TestMarks.test_skipif_string": (SKIPPED, "condition: WORLD == 2"),
    "fx_marks.TestMarks.test_xfail_raises": (XFAILED, "gloo lacks it"),
    "fx_marks.TestMarks.test_xfail_other_error": (FAILED, ""),
    "fx_marks.TestMarks.test_xpass": (PASSED, ""),
    "fx_marks.TestMarks.test_xpass_strict": (FAILED, ""),
    "fx_marks.TestMarks.test_xfail_not_run": (XFAILED, "[NOTRUN] hangs"),
    "fx_marks.TestMarks.test_skip_on_one_rank": (SKIPPED, "skipped on rank 1 (rank 1 has no shard) but ran and passed "
                                                          "on rank 0: only part of the world ran this test"),
    "fx_marks.TestMarks.test_skip_in_body": (SKIPPED, "no data for world size 2"),
    "fx_marks.TestMarks.test_xfail_in_body": (XFAILED, "known to fail on gloo"),
    "fx_marks.TestMarks.test_fail_in_body": (FAILED, ""),
    "fx_module_mark.TestOldPython.test_old": (SKIPPED, "the project's old-Python checks"),
    "fx_importorskip": (SKIPPED, "could not import 'distharness_no_such_package': No module named "
                                 "'distharness_no_such_package'"),
}

#: the tests that need pytest's fixtures: skips where pytest is not importable (run_tests() under torchrun too) ...
NEEDS_PYTEST = {
    "fx_marks.TestMarks.test_fixture_argument": "needs pytest: fixtures tmp_path (argument); run it with: python -m "
                                                "pytest tests/fixtures/pytest_style/fx_marks.py::TestMarks::"
                                                "test_fixture_argument (pytest gives no fixture to a unittest."
                                                "TestCase method's arguments either: take them in an autouse fixture "
                                                "of the class, e.g. @pytest.fixture(autouse=True) def _set(self, "
                                                "tmp_path): ...)",
    "fx_marks.TestMarks.test_uses_fixture": "needs pytest: fixtures tmp_path (usefixtures); run it with: python -m "
                                            "pytest tests/fixtures/pytest_style/fx_marks.py::TestMarks::"
                                            "test_uses_fixture",
    "autouse.fx_autouse.TestWithAutouse.test_env_from_conftest": (
        "needs pytest: fixtures project_env (autouse, tests/fixtures/pytest_style/autouse/conftest.py); run it with: "
        "python -m pytest tests/fixtures/pytest_style/autouse/fx_autouse.py::TestWithAutouse::test_env_from_conftest"),
}
#: ... and what pytest makes of them, under pytest, the runner and run_tests() (pytest gives no fixture to a
#: unittest.TestCase method's arguments either)
UNDER_PYTEST = {"fx_marks.TestMarks.test_fixture_argument": (FAILED, ""),
                "fx_marks.TestMarks.test_uses_fixture": (PASSED, ""),
                "autouse.fx_autouse.TestWithAutouse.test_env_from_conftest": (PASSED, "")}


def _key(test_id: str) -> str:
    """A test's key in the tables: its id in the folder (a node id, ``path.py::Class::test``, as its dotted id)."""
    if ".py::" in test_id:
        path, _, rest = test_id.partition(".py::")
        test_id = path.replace("/", ".") + "." + rest.replace("::", ".")
    return test_id.removeprefix(PREFIX).replace("__main__.", "fx_marks.")


class _Checks:
    """What every front end must say: each test's verdict and reason, as pytest's."""

    run_result: object
    #: the modules this front end ran (run_tests() runs its own module only)
    MODULES = ("fx_marks", "fx_module_mark", "fx_importorskip", "autouse.fx_autouse")

    def verdicts(self) -> dict[str, tuple[str, str]]:
        raise NotImplementedError

    def expected(self) -> dict[str, tuple[str, str]]:
        table = {**SAME, **{k: (SKIPPED, why) for k, why in NEEDS_PYTEST.items()}}
        return {k: v for k, v in table.items() if k.split(".TestMarks")[0].split(".Test")[0] in self.MODULES}

    def _compared(self, table: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        # a failure's words are each front end's; a long reason is cut on a console line: its start is compared
        return {k: (outcome, "" if outcome == FAILED else why[:150]) for k, (outcome, why) in table.items()}

    def test_each_test_has_pytests_verdict_and_reason(self):
        self.assertEqual(self._compared(self.verdicts()), self._compared(self.expected()), self.r.describe())

    def test_a_class_or_module_its_marks_skip_never_sets_up(self):
        self.assertNotIn("setUpClass of a", self.r.output, self.r.describe())
        self.assertNotIn("a test its", self.r.output, self.r.describe())  # no skipped or not-run body ran

    def test_the_exit_status_says_tests_failed(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())


class _Runner(_Checks):
    """The runner: its per-test lines, its JUnit XML and its summary."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-marks-")
        cls.junit = os.path.join(cls.out_dir, "junit.xml")
        cls.ARGS = [FOLDER, "--python-files", "fx_*.py", "--no-triage", "--junit-xml", cls.junit]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def expected(self) -> dict[str, tuple[str, str]]:
        return {**super().expected(), **UNDER_PYTEST}  # pytest runs them (harness.runner.pytest_items)

    def verdicts(self) -> dict[str, tuple[str, str]]:
        words = {"PASS": PASSED, "FAIL": FAILED, "ERROR": FAILED, "XPASS": FAILED, "SKIP": SKIPPED,
                 "XFAIL": XFAILED}
        found = {}
        for m in re.finditer(r"^\[\s*[\d-]+/\d+\] (\w+)\s+(\S+)\s.*?\s\d+\.\d\ds(?:[^:\n]*: (.*))?$", self.r.stdout,
                             re.M):
            found[_key(m.group(2))] = (words[m.group(1)], m.group(3) or "")
        return found

    def test_junit_shows_xfail_as_an_expected_failure_and_strict_xpass_as_a_failure(self):
        cases = {f"{c.get('classname')}.{c.get('name')}": c for c in ElementTree.parse(self.junit).iter("testcase")}
        xfail = cases[PREFIX + "fx_marks.TestMarks.test_xfail_raises"]
        self.assertEqual([child.tag for child in xfail if child.tag in ("failure", "error", "skipped")], [])
        self.assertIn("expected failure (xfail): gloo lacks it", xfail.findtext("system-out") or "")
        xpass = cases[PREFIX + "fx_marks.TestMarks.test_xpass_strict"].find("failure")
        self.assertIsNotNone(xpass, self.r.describe())
        self.assertEqual(xpass.get("type"), "UnexpectedSuccess")
        self.assertIn("[XPASS(strict)] fixed since, strictly", xpass.get("message"))
        skipped = cases[PREFIX + "fx_importorskip.import"].find("skipped")  # the module's stand-in
        self.assertIn("could not import 'distharness_no_such_package'", skipped.get("message"))

    def test_the_summary_counts_xfail_as_passed_and_strict_xpass_as_failed(self):
        self.assertInReport("XPASS: tests.fixtures.pytest_style.fx_marks.TestMarks.test_xpass_strict")
        self.assertInReport("[XPASS(strict)] fixed since, strictly")
        # passed: plain, xpass, three xfails, uses_fixture, the autouse one; failed: fail_in_body, other_error,
        # xpass_strict, fixture_argument; the rest skipped
        self.assertEqual(self.r.stdout.strip().splitlines()[-1], "7 passed, 4 failed, 7 skipped", self.r.describe())

    def test_a_rank_that_called_pytest_fail_is_the_root_cause(self):
        self.assertInReport("test_fail_in_body [rank 1/2] failed on cpu/gloo: Failed: checksum mismatch")


class TestUnderTheRunner(_Runner, FixtureTestCase):
    """``python -m harness tests/fixtures/pytest_style``: the runner, a folder of a project."""

    RUNNER = "harness"


@nightly("the same runner as python -m harness (TestUnderTheRunner), with this repository's defaults")
class TestUnderRunTestsPy(_Runner, FixtureTestCase):
    """``python run_tests.py tests/fixtures/pytest_style``: the runner with this repository's defaults."""

    RUNNER = "run_tests"


@nightly("the runner is held to the same table by TestUnderTheRunner; the plugin's raises= check is in tests/unit/test_pytest_marks.py")
class TestUnderPytest(_Checks, FixtureTestCase):
    """``python -m pytest tests/fixtures/pytest_style``: pytest itself, the reference every front end is held to (and
    the plugin's part: an xfail mark's ``raises=`` matched against the class a rank raised)."""

    RUNNER = "pytest"
    ENV = {"HARNESS_TRIAGE": "0"}  # as the runner's --no-triage: its failures are the fixture's own

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-marks-")
        cls.junit = os.path.join(cls.out_dir, "junit.xml")
        cls.ARGS = [FOLDER, "-o", "python_files=fx_*.py", "-p", "no:cacheprovider", "-q", "--junit-xml", cls.junit]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def expected(self) -> dict[str, tuple[str, str]]:
        return {**super().expected(), **UNDER_PYTEST}

    def verdicts(self) -> dict[str, tuple[str, str]]:
        found = {}
        for case in ElementTree.parse(self.junit).iter("testcase"):
            test_id = f"{case.get('classname')}.{case.get('name')}".strip(".")
            outcome, why = PASSED, ""
            for child in case:
                if child.tag in ("failure", "error"):
                    outcome = FAILED
                elif child.tag == "skipped":
                    outcome = XFAILED if child.get("type") == "pytest.xfail" else SKIPPED
                    why = child.get("message") or ""
                    if why == "collection skipped":  # a module skipped at import: (path, line, "Skipped: reason")
                        why = str(ast.literal_eval(child.text)[2]).removeprefix("Skipped: ")
            found[_key(test_id)] = (outcome, why)
        return found


@nightly("the same fixture's verdicts under the runner (TestUnderTheRunner), held to the same table")
class TestUnderRunTests(_Checks, FixtureTestCase):
    """``python -m tests.fixtures.pytest_style.fx_marks -v``: the module's own ``run_tests()``."""

    RUNNER = "tests.fixtures.pytest_style.fx_marks"
    ARGS = ["-v"]
    ENV = {"HARNESS_TRIAGE": "0"}
    MODULES = ("fx_marks",)

    def verdicts(self) -> dict[str, tuple[str, str]]:
        words = {"ok": PASSED, "FAIL": FAILED, "ERROR": FAILED, "expected failure": XFAILED,
                 "unexpected success": FAILED}
        found = {}
        # a test unittest ran: "test_x (module.Class.test_x)"; one pytest ran: its node id
        for m in re.finditer(r"^(?:test\w* \(([\w.]+)\)|(\S+\.py::\S+)) \.\.\. (.*)$", self.r.stderr, re.M):
            said, key = m.group(3).strip(), _key(m.group(1) or m.group(2))
            if said.startswith("skipped "):
                found[key] = (SKIPPED, ast.literal_eval(said[len("skipped "):]))
            else:
                found[key] = (words[said], "")
        return found

    def expected(self) -> dict[str, tuple[str, str]]:
        # pytest runs what needs its fixtures (harness.runner.pytest_items); unittest's text result says "expected
        # failure" without its reason
        table = {**super().expected(), **{k: v for k, v in UNDER_PYTEST.items() if k.startswith(self.MODULES)}}
        return {k: (outcome, "" if outcome == XFAILED else why) for k, (outcome, why) in table.items()}


if __name__ == "__main__":
    unittest.main()
