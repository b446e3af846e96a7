"""``python -m harness.port``: only the imports change, the diff is printed, what stays upstream is listed."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness.port import port_source
from tests._support import REPO, base_env

SAMPLE = os.path.join(REPO, "tests", "compat", "upstream_sample.py.in")


class TestPortSource(unittest.TestCase):
    def test_splits_one_statement(self):
        r = port_source("from torch.testing._internal.common_fsdp import FSDPTest, MLP as M\n")
        self.assertEqual(r.new, "from harness import FSDPTest\nfrom torch.testing._internal.common_fsdp import MLP as M\n")
        self.assertEqual(r.mapped, ["torch.testing._internal.common_fsdp.FSDPTest"])
        self.assertEqual(r.unmapped, ["torch.testing._internal.common_fsdp.MLP (line 1)"])

    def test_only_import_lines_change(self):
        with open(SAMPLE) as f:
            source = f.read()
        r = port_source(source, SAMPLE)
        old_lines = [ln for ln in source.splitlines() if "import" not in ln and not ln.startswith((" ", ")"))]
        new_lines = [ln for ln in r.new.splitlines() if "import" not in ln and not ln.startswith((" ", ")"))]
        self.assertEqual(old_lines, new_lines)
        body_old = source[source.index("class TestSampleFSDP"):]
        body_new = r.new[r.new.index("class TestSampleFSDP"):]
        self.assertEqual(body_old, body_new)
        self.assertNotIn("import skip_if_lt_x_gpu", r.new.replace("from harness import", ""))
        for line in r.new.splitlines():
            if line.startswith("from torch.testing._internal"):
                self.assertNotRegex(line, r"FSDPTest|skip_if_lt_x_gpu|run_tests|TestCase|DTensorTestBase|with_comms|"
                                          r"with_temp_dir")

    def test_re_exported_names_move_too(self):
        r = port_source("from torch.testing._internal.distributed._tensor.common_dtensor import (\n"
                        "    DTensorTestBase, skip_if_lt_x_gpu, with_comms)\n"
                        "from torch.testing._internal.common_fsdp import FSDPTest, run_subtests, MLP\n")
        self.assertEqual(r.new, "from harness import DTensorTestBase, skip_if_lt_x_gpu, with_comms\n"
                                "from harness import FSDPTest, run_subtests\n"
                                "from torch.testing._internal.common_fsdp import MLP\n")

    def test_module_import_is_listed(self):
        r = port_source("import torch.testing._internal.common_utils as cu\n")
        self.assertEqual(r.new, "import torch.testing._internal.common_utils as cu\n")
        self.assertIn("import torch.testing._internal.common_utils as cu (line 1)", r.unmapped[0])

    def test_indented_import_keeps_its_indent(self):
        r = port_source("if True:\n    from torch.testing._internal.common_utils import run_tests\n")
        self.assertEqual(r.new, "if True:\n    from harness import run_tests\n")


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
        self.assertIn("2 not mapped", self.port.stderr)
        self.assertIn("torch.testing._internal.common_fsdp.MLP (line 5)", self.port.stderr)
        self.assertIn("import torch.testing._internal.common_utils as common_utils (line 17)", self.port.stderr)

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
