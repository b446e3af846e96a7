"""What the runner hands pytest (harness/runner/pytest_items.py), without a process: which files read as pytest-style,
which modules are, and what a run without pytest makes of a test only pytest runs.

The runs themselves (pytest collecting and running a project's tests inside the runner) are in
tests/test_pytest_project.py.
"""
import io
import os
import shutil
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

from harness.runner import pytest_items
from harness.runner.console import Console
from harness.runner.results import RunnerResult
from harness.runner.selection import collect
from harness.shared.status import Status

PLAIN = '''
import unittest

SOURCE = """
def test_in_a_string():
    pass
"""


class TestPlain(unittest.TestCase):
    def test_a(self):
        self.assertTrue(True)
'''

FUNCTIONS = '''
import unittest


def test_addition():
    assert 1 + 1 == 2


class TestNoBase:
    def test_method(self):
        assert True


class TestCaseToo(unittest.TestCase):
    def test_b(self):
        self.assertTrue(True)
'''


class TestWithoutPytest(unittest.TestCase):
    """A project's test file with plain test functions, run where pytest is not installed."""

    def setUp(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="distharness-items-"))
        self.addCleanup(shutil.rmtree, self.folder, True)
        (self.folder / "test_items_plain.py").write_text(PLAIN)
        (self.folder / "test_items_functions.py").write_text(FUNCTIONS)
        for name in ("test_items_plain", "test_items_functions"):
            self.addCleanup(sys.modules.pop, name, None)

    def collect(self):
        with mock.patch.dict(sys.modules, {"pytest": None}):
            self.assertFalse(pytest_items.available())
            return collect([str(self.folder)], [], self.folder)

    def test_a_function_or_class_only_pytest_runs_is_a_skip_that_says_so(self):
        tests = self.collect()
        result = RunnerResult(Console(io.StringIO(), len(tests), False), buffer=True, failfast=False,
                              keep_output=False)
        unittest.TestSuite(tests).run(result)
        got = {e.test_id: (e.status, e.reason) for e in result.entries}
        self.assertEqual(got["test_items_plain.TestPlain.test_a"], (Status.PASSED, ""))
        self.assertEqual(got["test_items_functions.TestCaseToo.test_b"], (Status.PASSED, ""))
        for test_id, node in (("test_items_functions.test_addition", "test_items_functions.py::test_addition"),
                              ("test_items_functions.TestNoBase", "test_items_functions.py::TestNoBase")):
            status, reason = got[test_id]
            self.assertEqual(status, Status.SKIPPED)
            self.assertTrue(reason.startswith("needs pytest, which is not installed: pytest runs it: python -m pytest "),
                            reason)
            self.assertTrue(reason.endswith(node), reason)


class TestWhatReadsAsPytestStyle(unittest.TestCase):
    def setUp(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="distharness-items-"))
        self.addCleanup(shutil.rmtree, self.folder, True)

    def write(self, name: str, text: str) -> str:
        path = self.folder / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    def test_unittest_files_do_not_even_in_their_strings(self):
        plain = self.write("test_plain.py", PLAIN)
        self.assertEqual(pytest_items.candidates([plain], [], self.folder, ["test_*.py"]), [])

    def test_functions_fixtures_usefixtures_and_classes_of_no_base_do(self):
        files = [self.write("test_f.py", "def test_x():\n    pass\n"),
                 self.write("test_c.py", "class TestX:\n    def test_y(self):\n        pass\n"),
                 self.write("test_fx.py", "import pytest\n\n@pytest.fixture\ndef thing():\n    return 1\n"),
                 self.write("test_use.py", "import pytest, unittest\n\n@pytest.mark.usefixtures('tmp_path')\n"
                                           "class T(unittest.TestCase):\n    def test_z(self):\n        pass\n")]
        self.assertEqual(pytest_items.candidates([str(self.folder)], [], self.folder, ["test_*.py"]),
                         sorted(str(Path(f).resolve()) for f in files))

    def test_a_conftest_with_an_autouse_fixture_makes_every_file_below_it_one(self):
        plain = self.write("test_plain.py", PLAIN)
        self.write("conftest.py", "import pytest\n\n@pytest.fixture(autouse=True)\ndef env():\n    yield\n")
        self.assertEqual(pytest_items.candidates([], ["."], self.folder, ["test_*.py"]), [str(Path(plain).resolve())])


class TestThisRepository(unittest.TestCase):
    def test_its_own_tests_read_as_unittests_so_no_pytest_starts_for_them(self):
        repo = Path(__file__).resolve().parents[2]
        self.assertEqual(pytest_items.candidates([], ["test_distributed", "tests"], repo, ["test_*.py", "*_test.py"]), [])


class TestNoRanksWanted(unittest.TestCase):
    def test_a_project_whose_files_never_name_the_harness_starts_no_template(self):
        from harness.runner.session import Options, may_start_ranks

        folder = Path(tempfile.mkdtemp(prefix="distharness-items-"))
        self.addCleanup(shutil.rmtree, folder, True)
        (folder / "test_plain.py").write_text("def test_a():\n    assert True\n")
        options = Options(root=folder, folders=(".",))
        self.assertFalse(may_start_ranks(options))
        (folder / "conftest.py").write_text("from harness import MultiProcessTestCase\n")
        self.assertTrue(may_start_ranks(options))


class TestPytestsPythonFiles(unittest.TestCase):
    def test_a_folders_discovery_takes_pytests_python_files_where_the_project_sets_no_other(self):
        from harness.runner.cli import project_file_patterns

        folder = Path(tempfile.mkdtemp(prefix="distharness-items-"))
        self.addCleanup(shutil.rmtree, folder, True)
        (folder / "pytest.ini").write_text("[pytest]\npython_files = check_*.py test_*.py\n")
        self.assertEqual(project_file_patterns(folder), ("check_*.py", "test_*.py"))
        (folder / "setup.cfg").write_text("[tool:distharness]\npython_files = only_*.py\n")
        self.assertEqual(project_file_patterns(folder), ("only_*.py",))


class TestJudge(unittest.TestCase):
    """One test's reports as pytest's terminal counts them."""

    class Report:
        def __init__(self, when: str, outcome: str, longrepr: object = None, **extra: object) -> None:
            self.when, self.outcome, self.longrepr, self.sections = when, outcome, longrepr, []
            self.passed, self.failed, self.skipped = outcome == "passed", outcome == "failed", outcome == "skipped"
            self.longreprtext = longrepr if isinstance(longrepr, str) else ""
            self.__dict__.update(extra)

    class Config:
        class hook:  # noqa: N801 - pytest's attribute
            @staticmethod
            def pytest_report_teststatus(report, config):
                if report.failed and report.when != "call":
                    return "error", "E", "ERROR"
                if hasattr(report, "wasxfail"):
                    return ("xfailed", "x", "XFAIL") if report.skipped else ("xpassed", "X", "XPASS")
                return (report.outcome if report.when == "call" or report.skipped else ""), "", ""

    def judge(self, *reports):
        return pytest_items.judge(reports, self.Config())

    def test_each_of_pytests_outcomes(self):
        R = self.Report
        ok = [R("setup", "passed"), R("teardown", "passed")]
        self.assertEqual(self.judge(ok[0], R("call", "passed"), ok[1])[:2], (Status.PASSED, ""))
        self.assertEqual(self.judge(ok[0], R("call", "failed", "E assert 1 == 2"), ok[1])[0], Status.FAILED)
        self.assertEqual(self.judge(R("setup", "failed", "fixture broke"), ok[1])[0], Status.ERROR)
        self.assertEqual(self.judge(ok[0], R("call", "passed"), R("teardown", "failed", "teardown broke"))[0],
                         Status.ERROR)
        self.assertEqual(self.judge(R("setup", "skipped", ("f.py", 3, "Skipped: no GPU")), ok[1])[:2],
                         (Status.SKIPPED, "no GPU"))
        self.assertEqual(self.judge(ok[0], R("call", "skipped", wasxfail="known"), ok[1])[:2], (Status.XFAIL, "known"))
        self.assertEqual(self.judge(ok[0], R("call", "passed", wasxfail="fixed"), ok[1])[:2],
                         (Status.PASSED, "XPASS (not strict): fixed"))
        self.assertEqual(self.judge(ok[0], R("call", "failed", "[XPASS(strict)] fixed"), ok[1])[:2],
                         (Status.XPASS, "fixed"))


if __name__ == "__main__":
    unittest.main()
