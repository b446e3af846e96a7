"""pytest's marks read by the runner without pytest's runner (harness/parent/pytest_marks.py), on plain unittest tests.

A small project is written to a temporary folder (a test module, its pyproject.toml with ``xfail_strict``), its
tests collected as the runner collects them and run through the runner's own result object; each test's outcome
and reason is what pytest gives it (tests/test_pytest_marks.py holds the distributed classes to pytest itself).
"""
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

from harness.errors import RankError
from harness.parent.pytest_marks import honoured, xfail_of_rank_failure
from harness.runner.console import Console
from harness.runner.results import RunnerResult
from harness.runner.selection import load_target
from harness.shared.status import Status

MODULE = "distharness_marks_project"

SOURCE = '''
import os
import unittest

import pytest

LIMIT = 3
pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif("os.environ.get('MARKS_PROJECT_OFF') == '1'", reason="project off")]


class Base(unittest.TestCase):
    pass


@pytest.mark.xfail(reason="a base class's mark")
class Marked(Base):
    pass


class TestMarks(Marked):
    def test_inherited_xfail(self):
        raise ValueError("known")

    @pytest.mark.skipif("LIMIT > 2")
    def test_string_in_module_globals(self):
        raise AssertionError("ran")

    # outside pytest no option was given: getoption gives its default (pytest, without the conftest.py that adds
    # the option, refuses the name)
    @pytest.mark.skipif("config.getoption('--run-slow') is None", reason="give --run-slow")
    def test_config_option_not_given(self):
        raise AssertionError("ran")

    @pytest.mark.skipif(True)
    def test_bool_without_reason(self):
        pass

    @pytest.mark.skip("a positional reason")
    def test_skip_positional(self):
        raise AssertionError("ran")

    @pytest.mark.skip(because="x")
    def test_skip_bad_argument(self):
        pass

    @pytest.mark.skipif("1 +")
    def test_bad_syntax(self):
        pass

    @pytest.mark.xfail(raises=(KeyError, IndexError), reason="either")
    def test_tuple_raises(self):
        raise IndexError(0)

    @pytest.mark.xfail(reason="strict by the project's xfail_strict")
    def test_ini_strict(self):
        pass

    @pytest.mark.xfail(strict=False, reason="the mark's strict=False wins")
    def test_mark_not_strict(self):
        pass

    @pytest.mark.xfail(False, reason="a condition that does not hold")
    def test_condition_false(self):
        pass

    def test_subtest_skip(self):
        with self.subTest(part=1):
            pytest.skip("part 1 has no data")

    def test_fail(self):
        pytest.fail("by hand")


@pytest.mark.skip(reason="class off")
class TestClassOff(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("setUpClass of a class its mark skips ran")

    def test_in_it(self):
        raise AssertionError("ran")


class TestFixtureOfItsClass(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _inject(self, tmp_path):
        self.tmp = tmp_path

    def test_needs_it(self):
        self.tmp.exists()
'''


NO_PYTEST = importlib.util.find_spec("pytest") is None


@unittest.skipIf(NO_PYTEST, "needs pytest installed (pip install -e '.[test]')")
class TestMarksOnPlainTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.folder = Path(tempfile.mkdtemp(prefix="distharness-marks-unit-"))
        (cls.folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
        (cls.folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\nxfail_strict = true\n")
        sys.path.insert(0, str(cls.folder))
        try:
            tests = load_target(str(cls.folder / f"{MODULE}.py"), cls.folder)
            cls.out = io.StringIO()
            cls.result = RunnerResult(Console(cls.out, len(tests), False), buffer=True, failfast=False,
                                      keep_output=False)
            with honoured(tests):
                unittest.TestSuite(tests).run(cls.result)
            cls.tests = tests
        finally:
            sys.path.remove(str(cls.folder))
            sys.modules.pop(MODULE, None)
        cls.entries = {e.method: e for e in cls.result.entries}

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.folder, ignore_errors=True)

    def outcome(self, method: str) -> tuple[Status, str]:
        e = self.entries[method]
        return e.status, e.reason

    def test_a_base_classs_mark_reaches_its_subclasses(self):
        self.assertEqual(self.outcome("test_inherited_xfail"), (Status.XFAIL, "a base class's mark"))

    def test_string_conditions_see_the_modules_globals_and_config(self):
        self.assertEqual(self.outcome("test_string_in_module_globals"), (Status.SKIPPED, "condition: LIMIT > 2"))
        self.assertEqual(self.outcome("test_config_option_not_given"), (Status.SKIPPED, "give --run-slow"))

    def test_a_mark_pytest_refuses_fails_the_test_in_pytests_words(self):
        for method, words in [("test_bool_without_reason", "you need to specify reason=STRING when using booleans"),
                              ("test_skip_bad_argument", "maybe you meant pytest.mark.skipif?"),
                              ("test_bad_syntax", "Error evaluating 'skipif' condition\n    1 +")]:
            entry = self.entries[method]
            self.assertEqual(entry.status, Status.ERROR, method)
            self.assertIn(words, entry.problems[0].text, method)

    def test_skip_takes_its_reason_as_pytest_does(self):
        self.assertEqual(self.outcome("test_skip_positional"), (Status.SKIPPED, "a positional reason"))

    def test_xfail_raises_a_tuple_and_the_strict_default_of_the_project(self):
        self.assertEqual(self.outcome("test_tuple_raises"), (Status.XFAIL, "either"))
        self.assertEqual(self.entries["test_ini_strict"].status, Status.XPASS)
        self.assertEqual(self.entries["test_ini_strict"].problems[0].text,
                         "[XPASS(strict)] strict by the project's xfail_strict")
        self.assertEqual(self.entries["test_mark_not_strict"].status, Status.PASSED)

    def test_an_xfail_whose_condition_does_not_hold_falls_to_the_next_mark(self):
        # the function's xfail(False) does not hold; the base class's unconditional xfail does: strict by the ini
        self.assertEqual(self.entries["test_condition_false"].status, Status.XPASS)

    def test_outcomes_raised_in_the_body(self):
        self.assertEqual(self.entries["test_subtest_skip"].sub_skipped, [("(part=1)", "part 1 has no data")])
        # pytest.fail() under the class's xfail is an expected failure, as pytest has it
        self.assertEqual(self.outcome("test_fail"), (Status.XFAIL, "a base class's mark"))

    def test_an_autouse_fixture_of_the_class_needs_pytest(self):
        status, reason = self.outcome("test_needs_it")
        self.assertEqual(status, Status.SKIPPED)
        self.assertTrue(reason.startswith("needs pytest: fixtures _inject (autouse, class TestFixtureOfItsClass); "
                                          "run it with: python -m pytest "), reason)
        self.assertTrue(reason.endswith(f"{MODULE}.py::TestFixtureOfItsClass::test_needs_it"), reason)

    def test_a_class_its_mark_skips_is_skipped_before_its_set_up_and_put_back_after(self):
        self.assertEqual(self.outcome("test_in_it"), (Status.SKIPPED, "class off"))
        self.assertEqual([e.test_id for e in self.result.entries if not e.real], [])  # no setUpClass error
        for test in self.tests:
            self.assertNotIn("run", test.__dict__)
            self.assertNotIn("__unittest_skip__", type(test).__dict__)


@unittest.skipIf(NO_PYTEST, "needs pytest installed (pip install -e '.[test]')")
class TestRanksExceptionUnderPytest(unittest.TestCase):
    """The pytest plugin's part: an xfail mark's ``raises=`` matched against the class a rank raised, which
    pytest's own check never sees (it gets the parent's RankError)."""

    def error(self, *names: str) -> RankError:
        error = RankError("m.T.t [rank 1/2] raised on cpu/gloo: RuntimeError: not supported")
        error.exc_types = names
        return error

    def test_the_rank_exceptions_class_or_a_base_matches(self):
        import pytest

        marks = [pytest.mark.xfail(raises=RuntimeError, reason="gloo lacks it").mark]
        raised = self.error("builtins.NotImplementedError", "builtins.RuntimeError", "builtins.Exception")
        self.assertEqual(xfail_of_rank_failure(marks, {}, raised), "gloo lacks it")
        self.assertIsNone(xfail_of_rank_failure(marks, {}, self.error("builtins.ValueError", "builtins.Exception")))

    def test_a_condition_that_does_not_hold_or_no_raises_leaves_it_to_pytest(self):
        import pytest

        raised = self.error("builtins.RuntimeError", "builtins.Exception")
        off = [pytest.mark.xfail("sys.platform == 'nowhere'", raises=RuntimeError, reason="r").mark]
        self.assertIsNone(xfail_of_rank_failure(off, {"sys": sys}, raised))
        self.assertIsNone(xfail_of_rank_failure([pytest.mark.xfail(reason="any").mark], {}, raised))


@unittest.skipIf(NO_PYTEST, "needs pytest installed (pip install -e '.[test]')")
class TestImportorskipOfAFile(unittest.TestCase):
    def test_a_file_that_skips_itself_is_one_skipped_entry(self):
        folder = Path(tempfile.mkdtemp(prefix="distharness-marks-unit-"))
        self.addCleanup(shutil.rmtree, folder, True)
        (folder / "distharness_skips_itself.py").write_text(
            "import pytest\npytest.importorskip('distharness_no_such_package')\n")
        self.addCleanup(sys.modules.pop, "distharness_skips_itself", None)
        self.addCleanup(lambda: sys.path.remove(str(folder)) if str(folder) in sys.path else None)
        tests = load_target(str(folder / "distharness_skips_itself.py"), Path(os.getcwd()))
        self.assertEqual([t.id() for t in tests], ["distharness_skips_itself"])
        result = unittest.TestResult()
        unittest.TestSuite(tests).run(result)
        self.assertEqual([why for _, why in result.skipped],
                         ["could not import 'distharness_no_such_package': No module named "
                          "'distharness_no_such_package'"])


if __name__ == "__main__":
    unittest.main()
