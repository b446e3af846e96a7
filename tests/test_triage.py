"""A failure in reused ranks is checked in fresh ranks: caused by an earlier test (named), its own, or flaky."""
import os
import re
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

from tests._support import TRIAGE_ON, nightly, FixtureTestCase, base_env, run_fixture

FX = "tests.fixtures.fx_triage"
POLLUTER = f"{FX}.TestPolluted.test_a_fills_the_cache"
INNOCENT = f"{FX}.TestPolluted.test_b_all_reduce"
VICTIM = f"{FX}.TestPolluted.test_c_expects_an_empty_cache"


class TriageCase(FixtureTestCase):
    """Triage on, as a user's run has it (base_env turns it off for the fixtures of other tests)."""

    ENV = TRIAGE_ON


class _FlakyDir:
    @classmethod
    def setUpClass(cls):
        cls.flaky_dir = tempfile.mkdtemp(prefix="fx-flaky-")
        cls.ENV = {**cls.ENV, "FX_FLAKY_DIR": cls.flaky_dir}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.flaky_dir, ignore_errors=True)
        super().tearDownClass()


class TestUnderTheRunner(_FlakyDir, TriageCase):
    ARGS = [FX, "--junit-xml", os.path.join(tempfile.gettempdir(), f"fx-triage-{os.getpid()}.xml")]
    RUNNER = "harness"

    def line(self, test_id: str) -> str:
        m = re.search(rf"^\[\s*\d+/\d+\] (\w+)\s+{re.escape(test_id)}\s.*\n(        triage: .*)?", self.r.stdout, re.M)
        self.assertIsNotNone(m, self.r.describe())
        return m.group(0)

    def test_the_polluted_test_passes_as_in_fresh_ranks_and_names_the_polluter(self):
        line = self.line(VICTIM)
        self.assertTrue(line.startswith("[") and " PASS " in line, line)
        self.assertIn(f"triage: fails after {POLLUTER} in shared ranks; passes in fresh ranks", line)
        self.assertNotIn(INNOCENT, line)  # the all_reduce that also ran before it is not blamed

    def test_the_polluter_is_named_as_having_altered_the_process(self):
        self.assertRegex(self.r.stdout, rf"Altered the process[^\n]*\n(  .*\n)*  {re.escape(POLLUTER)} altered the "
                                        rf"process: left state behind that made {re.escape(VICTIM)} fail")
        self.assertNotRegex(self.r.stdout, rf"  {re.escape(INNOCENT)} altered")

    def test_the_own_failure_is_labelled_and_stays_a_failure(self):
        line = self.line(f"{FX}.TestOwn.test_b_always_fails")
        self.assertIn(" FAIL ", line)
        self.assertIn("triage: fails in fresh ranks too (alone): the test's own failure", line)
        self.assertIn("Triage: fails in fresh ranks too (alone): the test's own failure", self.r.stdout)

    def test_the_flaky_test_is_labelled_and_stays_a_failure(self):
        line = self.line(f"{FX}.TestFlaky.test_b_fails_the_first_time")
        self.assertIn(" FAIL ", line)
        self.assertIn("triage: flaky: failed 1 of 3 runs", line)

    def test_the_summary_says_what_triage_found_and_what_it_cost(self):
        self.assertRegex(self.r.stdout, r"triage: 3 failure\(s\) in reused ranks checked in fresh ranks: 1 their own, "
                                        r"1 caused by an earlier test, 1 flaky \(\d+ re-runs, \d+\.\d s\)")
        self.assertEqual(self.r.stdout.rstrip().splitlines()[-1], "5 passed, 2 failed, 0 skipped", self.r.describe())
        self.assertEqual(self.r.returncode, 1)

    def test_the_junit_xml_has_the_findings_as_properties(self):
        root = ET.parse(self.ARGS[-1]).getroot()
        props = {c.get("name"): p.get("value") for c in root.iter("testcase")
                 for p in c.iter("property") if p.get("name") == "harness_triage"}
        self.assertIn(f"fails after {POLLUTER}", props["test_c_expects_an_empty_cache"])
        self.assertIn("the test's own failure", props["test_b_always_fails"])
        self.assertIn("flaky", props["test_b_fails_the_first_time"])
        self.assertNotIn("test_a_fills_the_cache", props)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestFailEnvChanged(TriageCase):
    """--fail-env-changed: the polluter fails (after the fact), the test it made fail passes. In CI: its verdict is
    its own (a result wrapped for pytest's marks once lost it, and only the nightly tier saw)."""

    ARGS = [f"{FX}.TestPolluted", "--fail-env-changed"]
    RUNNER = "harness"

    def test_the_polluter_fails_and_the_victim_passes(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertEqual(self.r.stdout.rstrip().splitlines()[-1], "2 passed, 1 failed, 0 skipped", self.r.describe())
        self.assertRegex(self.r.stdout, rf"FAIL\S*\s+{re.escape(POLLUTER)}|{re.escape(POLLUTER)}.*HARNESS_ENV_CHANGED=fail")
        self.assertIn("HARNESS_ENV_CHANGED=fail", self.r.stdout)
        self.check_nothing_left()


class TestNoTriage(TriageCase):
    """--no-triage: as before, the reused ranks' verdict and nothing re-run."""

    ARGS = [f"{FX}.TestPolluted", "--no-triage"]
    RUNNER = "harness"

    def test_the_victim_fails_and_nothing_is_said_of_triage(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertRegex(self.r.stdout, rf"FAIL\s+{re.escape(VICTIM)}")
        self.assertNotIn("triage:", self.r.stdout)
        self.assertNotIn("Triage:", self.r.output)


@nightly("triage's findings by TestUnderTheRunner")
class TestUnderPlainUnittest(TriageCase):
    ARGS = [f"{FX}.TestPolluted", f"{FX}.TestOwn"]

    def test_findings_in_the_report_and_at_the_end(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertIn("FAILED (failures=1)", self.r.stderr)
        self.assertIn("Triage: fails in fresh ranks too (alone): the test's own failure",
                      self.r.section("test_b_always_fails"))
        self.assertIn(f"harness: triage: {VICTIM} fails after {POLLUTER} in shared ranks; passes in fresh ranks",
                      self.r.stderr)
        self.assertRegex(self.r.stderr, r"harness: triage: 2 failure\(s\) in reused ranks checked")


@nightly("triage's findings by TestUnderTheRunner")
class TestUnderRunTests(TriageCase):
    """``python -m MODULE``: the module's own ``run_tests()``, with HARNESS_ENV_CHANGED=fail."""

    RUNNER = FX
    ARGS = ["TestPolluted"]
    ENV = {**TRIAGE_ON, "HARNESS_ENV_CHANGED": "fail"}

    def test_the_polluter_fails_in_unittests_own_summary(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertIn("FAIL: test_a_fills_the_cache", self.r.stderr)
        self.assertIn("HARNESS_ENV_CHANGED=fail", self.r.stderr)
        self.assertNotIn("FAIL: test_c_expects_an_empty_cache", self.r.stderr)


@nightly("triage's findings by TestUnderTheRunner; pytest's sections of the harness by tests.test_pytest_plugin")
class TestUnderPytest(TriageCase):
    ARGS = ["tests/fixtures/fx_triage.py", "-k", "TestPolluted or TestOwn", "-rA", "-p", "no:cacheprovider",
            "--junit-xml", os.path.join(tempfile.gettempdir(), f"fx-triage-pytest-{os.getpid()}.xml")]
    RUNNER = "pytest"

    def test_the_findings_in_properties_and_the_distharness_section(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertRegex(self.r.stdout, r"1 failed, 4 passed")
        self.assertIn(f"harness: triage: {VICTIM} fails after {POLLUTER}", self.r.stdout)
        root = ET.parse(self.ARGS[-1]).getroot()
        props = {c.get("name"): p.get("value") for c in root.iter("testcase")
                 for p in c.iter("property") if p.get("name") == "harness_triage"}
        self.assertIn("fails after", props["test_c_expects_an_empty_cache"])
        self.assertIn("the test's own failure", props["test_b_always_fails"])


if __name__ == "__main__":
    unittest.main()
