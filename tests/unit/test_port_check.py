"""harness.port maps the names real distributed files take; --check lists what is left and fails while any is."""
import os
import subprocess
import sys
import tempfile
import unittest

import harness
from harness.port import MAPPING, RENAMED, port_source, private_imports

SAMPLE = '''from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests, parametrize, run_tests, TEST_WITH_DEV_DBG_ASAN, HardwareClassification)
from torch.testing._internal.common_distributed import DynamoDistributedMultiProcTestCase, requires_nccl
from torch.testing._internal.common_fsdp import MLP, get_devtype
from torch.testing._internal.distributed._tensor.common_dtensor import MLPModule, ModelArgs, Transformer
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.testing._internal.common_fsdp import FSDP_DEVICES
'''


class TestPort(unittest.TestCase):
    def test_every_mapped_name_is_public(self):
        for module, names in MAPPING.items():
            for name in names:
                with self.subTest(f"{module}.{name}"):
                    self.assertIn(RENAMED.get(name, name), harness.__all__)
                    getattr(harness, RENAMED.get(name, name))

    def test_real_imports_move(self):
        result = port_source(SAMPLE, "t.py")
        self.assertEqual(len(result.unmapped), 1)
        self.assertRegex(result.unmapped[0], r"^torch.testing._internal.common_fsdp.FSDP_DEVICES: not in "
                                             r"torch 2.11-2.15's common_fsdp: .*\(line 7\)$")
        self.assertIn("from harness.upstream_modules.common_utils import HardwareClassification\n", result.new)
        left = private_imports(result.new, "t.py")
        self.assertEqual(left, ["t.py:7: torch.testing._internal.common_fsdp: FSDP_DEVICES"])
        compile(result.new, "t.py", "exec")

    def test_check_exits_non_zero_while_one_is_left(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "sub", "x_test.py")
            os.makedirs(os.path.dirname(path))
            with open(path, "w") as f:
                f.write(SAMPLE)
            run = subprocess.run([sys.executable, "-m", "harness.port", "--check", folder], capture_output=True,
                                 text=True)
            self.assertEqual(run.returncode, 1, run.stderr)
            self.assertIn(f"{path}:3: torch.testing._internal.common_distributed: DynamoDistributedMultiProcTestCase",
                          run.stdout)
            subprocess.run([sys.executable, "-m", "harness.port", "-q", path], check=True, capture_output=True)
            run = subprocess.run([sys.executable, "-m", "harness.port", "--check", folder], capture_output=True,
                                 text=True)
            self.assertEqual(run.returncode, 1)  # FSDP_DEVICES: newer than every supported torch
            self.assertEqual(run.stdout.strip(), f"{path}:7: torch.testing._internal.common_fsdp: FSDP_DEVICES")
            with open(path) as f:
                text = f.read().replace("from torch.testing._internal.common_fsdp import FSDP_DEVICES\n", "")
            with open(path, "w") as f:
                f.write(text)
            run = subprocess.run([sys.executable, "-m", "harness.port", "--check", path], capture_output=True,
                                 text=True)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()
