"""The pytest plugin (harness/pytest_plugin.py): a rank's failure reads as its report, and each test says where it ran."""
import os
import re
import shutil
import tempfile
import unittest
from xml.etree import ElementTree

from tests._support import FixtureTestCase, base_env, fixture_line, run_fixture


def failure_text(output: str, test: str) -> str:
    """The body of pytest's report of ``test`` (``Class.method``), up to the next section line."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"_+ {re.escape(test)} _+", line))
    body = []
    for line in lines[start + 1:]:
        if re.match(r"^(-{5,}|_{5,}|={5,}) ", line):
            break
        body.append(line)
    return "\n".join(body)


class TestFailureUnderPytest(FixtureTestCase):
    RUNNER = "pytest"
    ENV = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU seen by the fixture on any machine: the reasons below say "found 0"

    @classmethod
    def setUpClass(cls) -> None:
        cls.out_dir = tempfile.mkdtemp(prefix="distharness-plugin-")
        cls.junit = os.path.join(cls.out_dir, "junit.xml")
        # the default --tb (auto), as a user runs it
        cls.ARGS = ["tests/fixtures/fx_fail.py::TestAFail", "tests/fixtures/fx_pass.py::TestAPass::test_all_reduce",
                    "-p", "no:cacheprovider", "--junit-xml", cls.junit]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.out_dir, ignore_errors=True)
        super().tearDownClass()

    def test_the_report_starts_with_the_ranks_report(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        text = failure_text(self.r.stdout, "TestAFail.test_fail_on_rank1")
        self.assertEqual(text.splitlines()[0], "tests.fixtures.fx_fail.TestAFail.test_fail_on_rank1 [rank 1/2] failed "
                                               "on cpu/gloo: AssertionError: 2 != 3 : FIXTURE-ASSERT rank 1 disagrees",
                         self.r.describe())
        self.assertIn(f'fx_fail.py", line {fixture_line("fx_fail", "FIXTURE-ASSERT")}, in test_fail_on_rank1', text)
        self.assertIn("Other ranks:\n  rank 0: ", text)

    def test_no_harness_or_unittest_frames(self):
        text = failure_text(self.r.stdout, "TestAFail.test_fail_on_rank1")
        # the traceback is there, the test's own frame in it ...
        self.assertIn(f'fx_fail.py", line {fixture_line("fx_fail", "FIXTURE-ASSERT")}, in test_fail_on_rank1', text)
        # ... and none of the machinery that ran it
        self.assertNotRegex(text, r"harness[/\\]\w+\.py")
        self.assertNotIn("unittest/case.py", text)
        self.assertNotIn("_callTestMethod", text)

    def test_the_summary_line_keeps_the_first_line(self):
        self.assertMatchesReport(r"^FAILED tests/fixtures/fx_fail\.py::TestAFail::test_fail_on_rank1 - RankFailure")

    def test_where_it_ran_is_a_section_of_the_report(self):
        self.assertMatchesReport(r"^-+ harness -+\nran on cpu/gloo, world size 2: needs 2 GPUs, found 0: ran on "
                                 r"CPU/gloo$")

    def test_placement_and_world_size_are_junit_properties(self):
        props = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
                 for case in ElementTree.parse(self.junit).iter("testcase")}
        self.assertEqual(props["test_fail_on_rank1"]["harness_placement"], "cpu/gloo", props)
        self.assertEqual(props["test_fail_on_rank1"]["harness_world_size"], "2")
        self.assertEqual(props["test_all_reduce"]["harness_reason"], "needs 2 GPUs, found 0: ran on CPU/gloo")

    def test_the_run_ends_with_the_harness_summary(self):
        self.assertMatchesReport(r"^=+ distharness =+\nharness: tests on ranks: 2 on cpu/gloo with world size 2$")
        # said once, in the summary, not again at exit
        self.assertEqual(self.r.output.count("test(s) ran on CPU/gloo, not GPUs"), 1, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestNativeTracebackIsPytests(unittest.TestCase):
    def test_tb_native_keeps_pytests_rendering(self):
        run = run_fixture(["tests/fixtures/fx_fail.py::TestAFail", "-p", "no:cacheprovider", "--tb=native"],
                          base_env(), "pytest")
        self.assertEqual(run.returncode, 1, run.describe())
        self.assertIn("Traceback (most recent call last):", run.stdout)
        self.assertIn("harness.errors.RankFailure: tests.fixtures.fx_fail.TestAFail.test_fail_on_rank1 [rank 1/2]",
                      run.stdout)
        self.assertEqual((run.leftover_processes, run.leftover_temp), ({}, []))


if __name__ == "__main__":
    unittest.main()
