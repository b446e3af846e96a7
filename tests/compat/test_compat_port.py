"""``python -m harness.port``: the diff is printed, what stays upstream is listed, the ported file runs and passes.

What port_source makes of the source, checked on strings, is in tests/unit/test_port.py.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests._support import REPO, base_env

SAMPLE = os.path.join(REPO, "tests", "compat", "upstream_sample.py.in")


class TestPortCommand(unittest.TestCase):
    """Port the sample with the command, then run the ported file: it passes on this machine."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="distharness-port-")
        cls.target = os.path.join(cls.dir, "test_upstream_sample.py")
        shutil.copy(SAMPLE, cls.target)
        env = base_env(PYTHONPATH=REPO)
        cls.port = subprocess.run([sys.executable, "-m", "harness.port", cls.target], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=120)
        cls.run_ = subprocess.run([sys.executable, "-m", "unittest", "test_upstream_sample", "-v"], cwd=cls.dir,
                                  env=dict(env, TMPDIR=cls.dir), capture_output=True, text=True, timeout=600)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_prints_the_diff(self):
        self.assertEqual(self.port.returncode, 0, self.port.stderr)
        self.assertIn("-from torch.testing._internal.common_distributed import skip_if_lt_x_gpu", self.port.stdout)
        self.assertIn("+from harness import skip_if_lt_x_gpu", self.port.stdout)
        self.assertIn("+from harness import run_tests, TestCase", self.port.stdout)

    def test_lists_what_it_could_not_map(self):
        self.assertNotIn("not mapped", self.port.stderr)
        self.assertNotIn("common_fsdp.MLP", self.port.stderr)  # upstream's test models have public twins (harness.models)
        # a module imported whole becomes its harness.upstream_modules namespace
        self.assertIn("+import harness.upstream_modules.common_utils as common_utils", self.port.stdout)

    def test_ported_file_runs_and_passes(self):
        out = self.run_.stdout + self.run_.stderr
        self.assertEqual(self.run_.returncode, 0, out)
        self.assertIn("Ran 4 tests", out)
        self.assertRegex(out, r"\[rank 1\] SAMPLE rank=1 ws=2 ")
        # skip_if_lt_x_gpu imported from common_dtensor is the harness's: the test runs on CPU, not skipped
        self.assertRegex(out, r"\[rank 3\] SAMPLEDT rank=3 shared=1")
        self.assertIn("SAMPLEPLAIN dir=1", out)  # with_temp_dir on a single-process TestCase


if __name__ == "__main__":
    unittest.main()
