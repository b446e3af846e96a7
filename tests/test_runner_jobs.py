"""run_tests.py -j 2: two runner processes share a module's classes and the parent reports once."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import uuid
import xml.etree.ElementTree as ET

from tests._support import REPO, RUN_TIMEOUT, TOKEN_VAR, base_env, wait_until_gone


class TestTwoJobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp(prefix="distharness-suite-")
        cls.token = uuid.uuid4().hex
        junit = os.path.join(cls.tmp, "junit.xml")
        env = base_env(TMPDIR=cls.tmp, **{TOKEN_VAR: cls.token})
        cls.proc = subprocess.run([sys.executable, "run_tests.py", "tests.fixtures.fx_pass", "-j", "2",
                                   "--junit-xml", junit], cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=RUN_TIMEOUT)
        cls.out = cls.proc.stdout + cls.proc.stderr
        cls.xml = ET.parse(junit).getroot() if os.path.exists(junit) else None
        cls.left = wait_until_gone(cls.token)
        cls.leftover_temp = sorted(n for n in os.listdir(cls.tmp) if n.startswith("harness-"))
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_same_verdict_as_one_runner(self):
        self.assertEqual(self.proc.returncode, 0, self.out)
        self.assertEqual(self.proc.stdout.rstrip().splitlines()[-1], "8 passed, 0 failed, 2 skipped", self.out)

    def test_each_class_ran_in_one_job(self):
        workers = {}
        for line in self.out.splitlines():
            if line.startswith("j") and "tests.fixtures.fx_pass." in line:
                job, test_id = line.split()[0], next(w for w in line.split() if w.startswith("tests.fixtures"))
                workers.setdefault(test_id.rpartition(".")[0], set()).add(job)
        # (which job ran what depends on the load: a job whose share is done takes the rest of the other's, and a
        # job slow to start may find none left)
        self.assertLessEqual({j for jobs in workers.values() for j in jobs}, {"j1", "j2"}, self.out)
        self.assertEqual(len(workers), 6, self.out)  # the six classes of fx_pass
        self.assertTrue(all(len(jobs) == 1 for jobs in workers.values()), workers)

    def test_the_summary_says_how_long_each_job_took(self):
        # the split is by the recorded times: what each job really took shows how well it balanced them
        self.assertRegex(self.out, r"jobs: j1 ran \d+ tests in \d+ s, j2 ran \d+ tests in \d+ s \(split by ")

    def test_one_summary_and_one_junit_file_for_all_of_them(self):
        self.assertEqual(self.out.count("SUMMARY ("), 1, self.out)
        self.assertIsNotNone(self.xml, self.out)
        self.assertEqual(len(list(self.xml.iter("testcase"))), 10)

    def test_nothing_left_behind(self):
        self.assertEqual(self.left, {})
        self.assertEqual(self.leftover_temp, [])


class TestAJobThatEnds(unittest.TestCase):
    """A job whose runner process ends in a test (os._exit) is an error naming the job and the tests it had taken;
    the classes it had not taken run in the other job."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp(prefix="distharness-suite-")
        cls.token = uuid.uuid4().hex
        env = base_env(TMPDIR=cls.tmp, **{TOKEN_VAR: cls.token})
        cls.proc = subprocess.run([sys.executable, "-m", "harness", "tests/fixtures/fx_jobs_exit.py", "-j", "2",
                                   "--times-file", os.path.join(cls.tmp, "none.json")], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=RUN_TIMEOUT)
        cls.out = cls.proc.stdout + cls.proc.stderr
        cls.left = wait_until_gone(cls.token)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_job_and_the_tests_it_had_taken_are_named(self):
        self.assertEqual(self.proc.returncode, 1, self.out)
        m = re.search(r"job (\d) ended \(exit code 3\) without reporting its (\d) tests \(([^)]*)\)", self.out)
        self.assertIsNotNone(m, self.out)
        self.assertIn("tests.fixtures.fx_jobs_exit.TestBEndsItsJob.test_exits", m.group(3))

    def test_every_class_it_had_not_taken_ran(self):
        m = re.search(r"without reporting its \d tests \(([^)]*)\)", self.out)
        taken = m.group(1) if m else ""
        for name in ("TestAPasses.test_a", "TestCPasses.test_c", "TestDPasses.test_d"):
            if name not in taken:
                self.assertRegex(self.out, rf"j\d \[\s*\d+/4\] PASS\s+tests\.fixtures\.fx_jobs_exit\.{re.escape(name)}\b",
                                 self.out)

    def test_nothing_left_behind(self):
        self.assertEqual(self.left, {})


class TestARunnerThatCrashes(unittest.TestCase):
    """One runner process, crashed by a test that runs in it: the run names the test, how far it got and its Python
    stack, counts it as failed, and leaves nothing behind."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.mkdtemp(prefix="distharness-suite-")
        cls.token = uuid.uuid4().hex
        env = base_env(TMPDIR=cls.tmp, **{TOKEN_VAR: cls.token})
        cls.proc = subprocess.run([sys.executable, "-m", "harness", "tests/fixtures/fx_runner_crash.py"], cwd=REPO,
                                  env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        cls.out = cls.proc.stdout + cls.proc.stderr
        cls.left = wait_until_gone(cls.token)
        cls.leftover_temp = sorted(n for n in os.listdir(cls.tmp) if n.startswith("harness-"))
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_test_and_how_far_the_run_got_are_named(self):
        self.assertEqual(self.proc.returncode, 1, self.out)
        self.assertIn("the runner process ended (killed by SIGSEGV", self.out)
        self.assertIn("in tests.fixtures.fx_runner_crash.TestBCrashes.test_crashes (test 2 of 3)", self.out)
        self.assertIn("the 1 after it did not run", self.out)
        self.assertIn("-k TestBCrashes.test_crashes", self.out)
        self.assertEqual(self.proc.stdout.rstrip().splitlines()[-1], "1 passed, 1 failed, 0 skipped", self.out)

    def test_the_crash_shows_its_python_stack(self):
        self.assertRegex(self.out, r"Fatal Python error: Segmentation fault[\s\S]*fx_runner_crash\.py\", line \d+ in "
                                   r"test_crashes", self.out)

    def test_nothing_left_behind(self):
        self.assertEqual(self.left, {})
        self.assertEqual(self.leftover_temp, [])


if __name__ == "__main__":
    unittest.main()
