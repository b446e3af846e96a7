"""harness.runner.junit: the XML read back: failures, errors, skips, subtest cases, an interrupted test."""
from __future__ import annotations

import os
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

from harness.runner.junit import first_line, write_junit
from harness.runner.results import Problem
from harness.shared.status import Status
from tests.unit._fakes import entry

SUB_FAIL = "Traceback (most recent call last):\nAssertionError: 1 != 2"
SUB_ERROR = "Traceback (most recent call last):\nRuntimeError: boom"


def entries():
    subtests = entry("pkg.test_b.TestB.test_subtests", Status.FAILED, sub_passed=2,
                     sub_failed=[("(a=1)", Status.FAILED, SUB_FAIL), ("(a=2)", Status.ERROR, SUB_ERROR)],
                     sub_skipped=[("(a=3)", "no GPU")])
    subtests.problems = [Problem(Status.FAILED, "pkg.test_b.TestB.test_subtests (a=1)", SUB_FAIL),
                         Problem(Status.ERROR, "pkg.test_b.TestB.test_subtests (a=2)", SUB_ERROR)]
    interrupted = entry("pkg.test_b.TestB.test_slow", Status.INTERRUPTED, problems=[Problem(
        Status.INTERRUPTED, "pkg.test_b.TestB.test_slow", "terminated (SIGTERM) while this test was running")])
    return [
        entry("pkg.test_a.TestA.test_pass", placement="cpu/gloo", world_size=2, why_placed="HARNESS_DEVICE=cpu"),
        entry("pkg.test_a.TestA.test_fail", Status.FAILED),
        entry("pkg.test_a.TestA.test_error", Status.ERROR),
        entry("pkg.test_a.TestA.test_skip", Status.SKIPPED, reason="needs 4 GPUs\nmore text"),
        entry("pkg.test_a.TestA.test_xfail", Status.XFAIL),
        entry("pkg.test_a.TestA.test_xpass", Status.XPASS, problems=[Problem(
            Status.XPASS, "pkg.test_a.TestA.test_xpass", "unexpected success")]),
        subtests,
        interrupted,
    ]


class TestJUnit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="distharness-unit-")
        path = os.path.join(cls.dir, "reports", "junit.xml")
        write_junit(path, entries(), wall=12.3456)
        cls.root = ET.parse(path).getroot()
        cls.cases = {c.get("name"): c for c in cls.root.iter("testcase")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_a_suite_per_module_and_the_totals(self):
        suites = {s.get("name"): s for s in self.root.iter("testsuite")}
        self.assertEqual(sorted(suites), ["pkg.test_a", "pkg.test_b"])
        self.assertEqual(self.root.get("time"), "12.346")
        a = suites["pkg.test_a"]
        self.assertEqual((a.get("tests"), a.get("failures"), a.get("errors"), a.get("skipped")), ("6", "2", "1", "1"))

    def test_a_passing_test_has_no_result_and_says_where_it_ran(self):
        case = self.cases["test_pass"]
        self.assertEqual(case.get("classname"), "pkg.test_a.TestA")
        self.assertEqual([c.tag for c in case if c.tag != "system-out"], [])
        self.assertIn("placement: cpu/gloo, world size 2 (HARNESS_DEVICE=cpu)", case.find("system-out").text)

    def test_failure_error_skip(self):
        failure = self.cases["test_fail"].find("failure")
        self.assertEqual((failure.get("type"), failure.get("message")),
                         ("AssertionError", "AssertionError: test_fail went wrong"))
        self.assertIn("Traceback", failure.text)
        self.assertEqual(self.cases["test_error"].find("error").get("type"), "Error")
        self.assertEqual(self.cases["test_skip"].find("skipped").get("message"), "needs 4 GPUs")
        self.assertIsNone(self.cases["test_xfail"].find("failure"))
        self.assertEqual(self.cases["test_xpass"].find("failure").get("type"), "UnexpectedSuccess")

    def test_each_failing_subtest_is_a_case_of_its_own(self):
        parent = self.cases["test_subtests"].find("failure")
        self.assertEqual(parent.get("message"), "2 of 5 subtests failed")
        self.assertEqual(self.cases["test_subtests (a=1)"].find("failure").get("message"), "AssertionError: 1 != 2")
        self.assertEqual(self.cases["test_subtests (a=2)"].find("error").get("message"), "RuntimeError: boom")
        self.assertNotIn("test_subtests (a=3)", self.cases)  # a skipped subtest is noted, not a case
        notes = self.cases["test_subtests"].find("system-out").text
        self.assertIn("subtests: 2 passed, 2 failed, 1 skipped", notes)
        self.assertIn("skipped (a=3): no GPU", notes)

    def test_an_interrupted_test_is_an_interrupted_error(self):
        error = self.cases["test_slow"].find("error")
        self.assertEqual(error.get("type"), "Interrupted")
        self.assertIn("terminated (SIGTERM)", error.get("message"))

    def test_first_line_is_the_exception_line(self):
        self.assertEqual(first_line("Traceback (most recent call last):\n  File x\nValueError: bad\n"), "ValueError: bad")
        self.assertEqual(first_line("just text\nmore"), "just text")
        self.assertEqual(first_line(""), "")


if __name__ == "__main__":
    unittest.main()
