"""``harness.port.port_source``: only the imports change, re-exported names move too, what stays is listed.

Checked on strings in this process; tests/compat/test_compat_port.py runs the command on a file and runs the result.
"""
import os
import unittest

from harness.port import port_source
from tests._support import REPO

SAMPLE = os.path.join(REPO, "tests", "compat", "upstream_sample.py.in")


class TestPortSource(unittest.TestCase):
    def test_splits_one_statement(self):
        r = port_source("from torch.testing._internal.common_fsdp import FSDPTest, patch_all_gather as M\n")
        self.assertEqual(r.new, "from harness import FSDPTest\nfrom torch.testing._internal.common_fsdp import patch_all_gather as M\n")
        self.assertEqual(r.mapped, ["torch.testing._internal.common_fsdp.FSDPTest"])
        self.assertEqual(r.unmapped, ["torch.testing._internal.common_fsdp.patch_all_gather (line 1)"])

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
                        "from torch.testing._internal.common_fsdp import FSDPTest, run_subtests, patch_all_gather\n")
        self.assertEqual(r.new, "from harness import DTensorTestBase, skip_if_lt_x_gpu, with_comms\n"
                                "from harness import FSDPTest, run_subtests\n"
                                "from torch.testing._internal.common_fsdp import patch_all_gather\n")

    def test_module_import_is_listed(self):
        r = port_source("import torch.testing._internal.common_utils as cu\n")
        self.assertEqual(r.new, "import torch.testing._internal.common_utils as cu\n")
        self.assertIn("import torch.testing._internal.common_utils as cu (line 1)", r.unmapped[0])

    def test_indented_import_keeps_its_indent(self):
        r = port_source("if True:\n    from torch.testing._internal.common_utils import run_tests\n")
        self.assertEqual(r.new, "if True:\n    from harness import run_tests\n")


if __name__ == "__main__":
    unittest.main()
