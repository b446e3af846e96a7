"""``harness.port.port_source``: only the imports change, re-exported names move too, what stays is listed.

Checked on strings in this process; tests/compat/test_compat_port.py runs the command on a file and runs the result.
"""
import os
import subprocess
import sys
import unittest

from harness.port import port_source, private_imports
from tests._support import REPO

SAMPLE = os.path.join(REPO, "tests", "compat", "upstream_sample.py.in")


class TestPortSource(unittest.TestCase):
    def test_splits_one_statement(self):
        r = port_source("from torch.testing._internal.common_fsdp import FSDPTest, patch_all_gather as M, Nope\n")
        self.assertEqual(r.new, "from harness import FSDPTest\nfrom harness.upstream_modules.common_fsdp import patch_all_gather as M\n"
                                "from torch.testing._internal.common_fsdp import Nope\n")
        self.assertEqual(r.mapped, ["torch.testing._internal.common_fsdp.FSDPTest",
                                    "torch.testing._internal.common_fsdp.patch_all_gather"])
        self.assertEqual(r.unmapped, ["torch.testing._internal.common_fsdp.Nope: not in the installed torch's "
                                      "common_fsdp (a name of another torch release): it fails at import under "
                                      "upstream's harness too (line 1)"])

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
                                "from harness.upstream_modules.common_fsdp import patch_all_gather\n")

    def test_module_import_with_a_name_it_lacks_is_listed(self):
        r = port_source("import torch.testing._internal.common_utils as cu\nx = cu.SEED + cu.NOT_THERE\n")
        self.assertEqual(r.new, "import torch.testing._internal.common_utils as cu\nx = cu.SEED + cu.NOT_THERE\n")
        self.assertEqual(r.unmapped, ["import torch.testing._internal.common_utils as cu (line 1): uses NOT_THERE, "
                                      "which harness.upstream_modules.common_utils does not offer"])

    def test_a_module_without_a_namespace_is_listed(self):
        r = port_source("import torch.testing._internal.common_quantization as cq\n")
        self.assertEqual(r.new, "import torch.testing._internal.common_quantization as cq\n")
        self.assertIn("no namespace", r.unmapped[0])

    def test_an_upstream_test_body_is_kept_saying_why(self):
        r = port_source("import torch.testing._internal.common_methods_invocations as cmi\n"
                        "from torch.testing._internal.distributed.rpc.rpc_test import RpcTest\n")
        self.assertEqual(r.new, "import torch.testing._internal.common_methods_invocations as cmi\n"
                                "from torch.testing._internal.distributed.rpc.rpc_test import RpcTest\n")
        self.assertIn("kept: OpInfo's op_db", r.unmapped[0])
        self.assertIn("kept: the RPC agent suites", r.unmapped[1])

    def test_indented_import_keeps_its_indent(self):
        r = port_source("if True:\n    from torch.testing._internal.common_utils import run_tests\n")
        self.assertEqual(r.new, "if True:\n    from harness import run_tests\n")


class TestSubmodulesUpstreamImported(unittest.TestCase):
    """A file that reads a torch submodule which only upstream's harness had imported for it gets that import."""

    SOURCE = ("import torch._dynamo\n"
              "from torch.testing._internal.common_distributed import skip_if_lt_x_gpu\n"
              "\n"
              "class TestX(torch._dynamo.test_case.TestCase):\n"
              "    pass\n")

    def test_it_is_imported_after_the_rewritten_imports(self):
        r = port_source(self.SOURCE)
        self.assertEqual(r.new, "import torch._dynamo\n"
                                "from harness import skip_if_lt_x_gpu\n"
                                "import torch._dynamo.test_case"
                                "  # imported by torch.testing._internal before the port\n"
                                "\n"
                                "class TestX(torch._dynamo.test_case.TestCase):\n"
                                "    pass\n")
        self.assertEqual(r.added, ["torch._dynamo.test_case (reads torch._dynamo.test_case.TestCase)"])
        # the ported file imports (without the added line: AttributeError, no attribute 'test_case')
        proc = subprocess.run([sys.executable, "-c", r.new], capture_output=True, text=True, cwd=REPO, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])

    def test_submodules_loaded_anyway_are_left_alone(self):
        source = ("import torch\n"
                  "from torch.distributed.fsdp import FullyShardedDataParallel\n"
                  "from torch.testing._internal.common_fsdp import FSDPTest\n"
                  "x = torch.nn.functional.relu, torch.distributed.fsdp._runtime_utils\n")
        r = port_source(source)
        self.assertEqual(r.added, [])
        self.assertNotIn("# imported by torch.testing._internal", r.new)

    def test_a_file_the_port_leaves_alone_gets_nothing(self):
        source = "import torch._dynamo\nclass TestX(torch._dynamo.test_case.TestCase):\n    pass\n"
        r = port_source(source)
        self.assertEqual((r.new, r.added), (source, []))


class TestStarImports(unittest.TestCase):
    """``from torch.testing._internal.X import *``: the names the file reads that the star import gives."""

    def test_moves_to_the_namespace_when_it_offers_every_name_the_file_takes(self):
        r = port_source("from torch.testing._internal.common_utils import *\n"
                        "from torch.testing._internal.common_distributed import *\n"
                        "class T(MultiProcessTestCase):\n    pass\nrun_tests()\n")
        self.assertEqual(r.new.splitlines()[:2], ["from harness.upstream_modules.common_utils import *",
                                                  "from harness.upstream_modules.common_distributed import *"])
        self.assertEqual(r.mapped, ["torch.testing._internal.common_utils.run_tests",
                                    "torch.testing._internal.common_distributed.MultiProcessTestCase"])
        self.assertEqual(r.unmapped, [])

    def test_stays_naming_what_the_namespace_lacks(self):
        source = "from torch.testing._internal.common_utils import *\nx = np.zeros(1)\nrun_tests()\n"
        r = port_source(source)
        self.assertEqual(r.new, source)
        self.assertEqual(r.unmapped, ["from torch.testing._internal.common_utils import * (line 1): uses np, which "
                                      "harness.upstream_modules.common_utils does not offer"])


class TestModuleImports(unittest.TestCase):
    """A module imported whole, in each form real files use, becomes an import of its harness.upstream_modules namespace."""

    def check(self, source: str, expected: str) -> None:
        r = port_source(source, "t.py")
        self.assertEqual(r.new, expected)
        self.assertEqual(r.unmapped, [])
        self.assertEqual(private_imports(r.new, "t.py"), [])
        namespace: dict = {}
        exec(compile(r.new, "t.py", "exec"), namespace)  # the ported file runs: each name resolves
        return namespace

    def test_from_package_import_module(self):
        ns = self.check("from torch.testing._internal import common_utils\nseed = common_utils.SEED\n",
                        "from harness.upstream_modules import common_utils\nseed = common_utils.SEED\n")
        self.assertEqual(ns["seed"], 1234)

    def test_from_package_import_module_as_alias(self):
        ns = self.check("from torch.testing._internal import common_utils as cu, common_distributed\n"
                        "skips = common_distributed.TEST_SKIPS\nfb = cu.IS_FBCODE\n",
                        "from harness.upstream_modules import common_utils as cu, common_distributed\n"
                        "skips = common_distributed.TEST_SKIPS\nfb = cu.IS_FBCODE\n")
        self.assertEqual(ns["skips"]["no_cuda"].exit_code, 74)

    def test_from_subpackage_import_module(self):
        self.check("from torch.testing._internal.distributed import fake_pg\nstore = fake_pg.FakeStore()\n",
                   "from harness.upstream_modules import fake_pg\nstore = fake_pg.FakeStore()\n")
        self.check("from torch.testing._internal.distributed._shard.sharded_tensor import _test_st_common\n"
                   "n = _test_st_common.DEFAULT_GPU_NUM\n",
                   "from harness.upstream_modules import st_common as _test_st_common\nn = _test_st_common.DEFAULT_GPU_NUM\n")

    def test_import_module_as_alias(self):
        ns = self.check("import torch.testing._internal.common_utils as common\nseed = common.SEED\n",
                        "import harness.upstream_modules.common_utils as common\nseed = common.SEED\n")
        self.assertEqual(ns["seed"], 1234)

    def test_import_module_dotted(self):
        # the file spells the module out: those references change with the import, and torch stays bound
        ns = self.check("import torch.testing._internal.common_distributed\n"
                        "code = torch.testing._internal.common_distributed.TEST_SKIPS['nccl'].exit_code\n"
                        "t = torch.zeros(1)\n",
                        "import harness.upstream_modules.common_distributed\nimport torch\n"
                        "code = harness.upstream_modules.common_distributed.TEST_SKIPS['nccl'].exit_code\n"
                        "t = torch.zeros(1)\n")
        self.assertEqual(ns["code"], 76)

    def test_import_module_dotted_beside_import_torch(self):
        self.check("import torch\nimport torch.testing._internal.common_utils\n"
                   "s = torch.testing._internal.common_utils.SEED\n",
                   "import torch\nimport harness.upstream_modules.common_utils\ns = harness.upstream_modules.common_utils.SEED\n")

    def test_names_a_namespace_offers_move_there(self):
        self.check("from torch.testing._internal.common_utils import SEED, get_cycles_per_ms, skipIfRocm, run_tests\n"
                   "from torch.testing._internal.two_tensor import TwoTensor\n",
                   "from harness import run_tests\n"
                   "from harness.upstream_modules.common_utils import SEED, get_cycles_per_ms, skipIfRocm\n"
                   "from harness.upstream_modules.two_tensor import TwoTensor\n")

    def test_a_name_torch_removed_says_why(self):
        r = port_source("from torch.testing._internal.common_fsdp import FSDP_DEVICES, FSDPTest\n")
        self.assertEqual(r.new, "from harness import FSDPTest\nfrom torch.testing._internal.common_fsdp import "
                                "FSDP_DEVICES\n")
        self.assertIn("not in torch 2.11-2.15's common_fsdp", r.unmapped[0])

    def test_a_name_upstream_has_but_the_harness_does_not_is_listed_plainly(self):
        r = port_source("from torch.testing._internal.common_distributed import ProcessLocalGroup\n")
        self.assertEqual(r.unmapped, ["torch.testing._internal.common_distributed.ProcessLocalGroup "
                                      "(line 1)"])

    def test_every_namespace_offers_what_it_says(self):
        import importlib

        from harness.port import NAMESPACES, offered

        for upstream, name in NAMESPACES.items():
            module = importlib.import_module(f"harness.upstream_modules.{name}")
            with self.subTest(upstream):
                self.assertEqual(offered(upstream), frozenset(module.__all__))
                for attr in module.__all__:
                    getattr(module, attr)


if __name__ == "__main__":
    unittest.main()
