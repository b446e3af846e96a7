"""``python -m harness`` on a user's project outside this repository: their folder, their times file, their cwd."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import uuid
import xml.etree.ElementTree as ET

from tests._support import REPO, RUN_TIMEOUT, TOKEN_VAR, base_env, wait_until_gone

USER_TEST = textwrap.dedent('''
    import torch
    import torch.distributed as dist

    from harness import MultiProcessTestCase, with_comms


    class TestUser(MultiProcessTestCase):
        @property
        def world_size(self) -> int:
            return 2

        @with_comms
        def test_all_reduce(self):
            t = torch.ones(2) * (self.rank + 1)
            dist.all_reduce(t)
            self.assertEqual(t.tolist(), [3.0, 3.0])
            print(f"USER rank={self.rank}")

        def test_not_here(self):
            self.skipTest("USER-SKIP not on this machine")
''')


class TestUserProject(unittest.TestCase):
    """The user's project is a temporary folder with one test module that imports harness as an installed
    package would be (here through PYTHONPATH); the run starts from yet another directory."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="distharness-suite-")
        cls.project = os.path.join(cls.tmp, "their_project")
        cls.elsewhere = os.path.join(cls.tmp, "elsewhere")
        os.makedirs(cls.project)
        os.makedirs(cls.elsewhere)
        with open(os.path.join(cls.project, "test_user.py"), "w") as f:
            f.write(USER_TEST)
        cls.times = os.path.join(cls.tmp, "times.json")
        cls.junit = os.path.join(cls.tmp, "reports", "junit.xml")
        cls.token = uuid.uuid4().hex
        cls.env = base_env(PYTHONPATH=REPO, TMPDIR=cls.tmp, **{TOKEN_VAR: cls.token})
        cls.done = cls.harness([cls.project, "--times-file", cls.times, "--update-times", "--junit-xml", cls.junit],
                              cwd=cls.elsewhere)
        cls.left = wait_until_gone(cls.token)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def harness(cls, args: list[str], cwd: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=cls.env, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT)

    def text(self) -> str:
        return f"exit code {self.done.returncode}\n--- stdout ---\n{self.done.stdout}\n--- stderr ---\n{self.done.stderr}"

    def test_exit_code_and_the_last_line(self):
        self.assertEqual(self.done.returncode, 0, self.text())
        self.assertEqual(self.done.stdout.rstrip().splitlines()[-1], "1 passed, 0 failed, 1 skipped", self.text())

    def test_the_per_test_lines(self):
        out = self.done.stdout
        self.assertRegex(out, r"distharness: 2 tests from 1 modules \(.*their_project\)", self.text())
        self.assertRegex(out, r"\[1/2\] PASS\s+test_user\.TestUser\.test_all_reduce\s+cpu/gloo\s+ws=2\s+\d+\.\d\ds")
        self.assertRegex(out, r"\[2/2\] SKIP\s+test_user\.TestUser\.test_not_here\s.*: USER-SKIP not on this machine")
        self.assertIn("1 x USER-SKIP not on this machine", out)

    def test_the_times_file_and_the_junit_xml(self):
        with open(self.times) as f:
            times = json.load(f)["tests"]
        self.assertEqual(list(times), ["test_user.TestUser.test_all_reduce"], self.text())  # skipped: not timed
        cases = {c.get("name"): c for c in ET.parse(self.junit).getroot().iter("testcase")}
        self.assertEqual(sorted(cases), ["test_all_reduce", "test_not_here"])
        self.assertIsNotNone(cases["test_not_here"].find("skipped"))

    def test_no_target_means_the_current_directory_and_shards_use_the_times_file(self):
        listed = self.harness(["--list", "--shard", "1", "2", "--times-file", self.times], cwd=self.project)
        self.assertEqual(listed.returncode, 0, listed.stdout + listed.stderr)
        self.assertIn("1 tests timed in", listed.stderr)
        other = self.harness(["--list", "--shard", "2", "2", "--times-file", self.times], cwd=self.project)
        self.assertEqual(sorted(listed.stdout.split() + other.stdout.split()),
                         ["test_user.TestUser.test_all_reduce", "test_user.TestUser.test_not_here"])

    def test_nothing_left_behind(self):
        self.assertEqual(self.left, {}, "rank processes still alive")
        self.assertEqual([n for n in os.listdir(self.tmp) if re.match(r"harness-", n)], [])


if __name__ == "__main__":
    unittest.main()
