"""Every ``torch.testing._internal`` name PyTorch's own distributed tests import has a counterpart the port finds, in
every import form: the names tools/scan_upstream_imports.py found in a sample of upstream's test/distributed
(docs/upstream-names.txt), and the ones the wider sample named most often. A name is a counterpart (moved to
``harness`` or to ``harness.upstream_modules``), an upstream test body the port keeps (``harness.port.KEPT``: the RPC
agent suites, ``DistributedTest``'s c10d bodies and OpInfo's ``op_db``, nothing else), or a name the installed torch
does not have (another release's)."""
from __future__ import annotations

import importlib
import pathlib
import sys
import unittest

from harness.port import KEPT, NAMESPACES, port_source, private_imports

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from scan_upstream_imports import imported_names, status  # noqa: E402

_U = "torch.testing._internal"
#: the names most often kept private by the wider sample of upstream's test/distributed (219 files)
MOST_KEPT = [f"{_U}.{dotted}" for dotted in (
    "inductor_utils.HAS_GPU", "inductor_utils.GPU_TYPE",
    "common_utils.requires_cuda", "common_utils.IS_CI", "common_utils.TEST_MULTIACCELERATOR",
    "common_utils.suppress_warnings", "common_utils.wrapSwapTensorsTest", "common_utils.xfailIfTorchDynamo",
    "common_utils.skipIfRocmVersionLessThan", "common_utils.runOnRocmArch",
    "common_distributed.requires_nccl_version", "common_distributed.create_device",
    "common_distributed.sm_is_or_higher_than", "common_distributed.requires_multicast_support",
    "common_distributed.SaveForwardInputsModel", "common_distributed.skip_if_rocm_ver_lessthan_multiprocess",
    "distributed._tensor.common_dtensor.map_local_tensor_for_rank", "distributed._tensor.common_dtensor.NUM_DEVICES",
    "distributed._tensor.common_dtensor.DTensorConverter", "distributed._tensor.common_dtensor.patched_distribute_tensor",
    "distributed._tensor.common_dtensor.generate_shard_orders",
    "distributed._tensor.common_dtensor.LocalDTensorOpTestBase", "distributed._tensor.common_dtensor.RMSNormPython",
    "common_fsdp.subtest_name", "common_fsdp._assert_module_states", "common_fsdp.DummyProcessGroup",
    "common_cuda.SM90OrLater", "common_cuda.PLATFORM_SUPPORTS_FP8", "common_cuda.PLATFORM_SUPPORTS_BF16",
    "common_cuda.PLATFORM_SUPPORTS_FLASH_ATTENTION", "common_cuda.PLATFORM_SUPPORTS_MEM_EFF_ATTENTION",
    "common_device_type.ops", "common_device_type.e4m3_type",
    # the names upstream's other c10d and checkpoint tests take with them
    "common_distributed.DistTestCases", "common_distributed.C10dTorchCommsTestBase",
    "common_distributed.initialize_temp_directories", "common_distributed.cleanup_temp_dir",
    "distributed.checkpoint_utils.Rot13Example", "distributed.checkpoint_utils.get_test_extension_registry",
    "distributed.checkpoint_utils.with_checkpoint_logging")]
#: the upstream test bodies the port may keep: the RPC agent suites (their dist_init setup, and the DDP-with-RPC,
#: pipeline and remote-module bodies that run on them), DistributedTest's c10d bodies, OpInfo's op_db (the data @ops
#: and DTensorConverter take)
BODIES = {f"{_U}.distributed.rpc.", f"{_U}.distributed.rpc_utils", f"{_U}.dist_utils",
          f"{_U}.distributed.ddp_under_dist_autograd_test",
          f"{_U}.distributed.pipe_with_ddp_test", f"{_U}.distributed.nn.", f"{_U}.distributed.distributed_test",
          f"{_U}.common_methods_invocations", f"{_U}.opinfo."}
#: names with no counterpart yet, and why (none now: a name added here needs its reason)
GAPS: dict[str, str] = {}


def _listed() -> list[str]:
    lines = (ROOT / "docs" / "upstream-names.txt").read_text().splitlines()
    return sorted({line.split()[1] for line in lines if line.strip() and not line.startswith("#")} | set(MOST_KEPT))


class TestEveryNameHasACounterpart(unittest.TestCase):
    def test_each_name_is_mapped_kept_or_of_another_release(self):
        private = [d for d in _listed() if d not in GAPS and status(*d.rsplit(".", 1)) == "private"]
        self.assertEqual(private, [], "names the port leaves private: give each a counterpart in "
                                      "harness/upstream_modules/ (or list an upstream test body in harness.port.KEPT)")

    def test_only_upstream_test_bodies_are_kept(self):
        self.assertEqual(set(KEPT), BODIES)
        for dotted in (f"{_U}.common_device_type.ops", f"{_U}.distributed._tensor.common_dtensor.DTensorConverter"):
            with self.subTest(dotted):
                self.assertEqual(status(*dotted.rsplit(".", 1)), "namespace")

    def test_every_import_form_ports_to_nothing_private(self):
        for dotted in _listed():
            module, name = dotted.rsplit(".", 1)
            if status(module, name) not in ("harness", "namespace"):
                continue
            package, leaf = module.rsplit(".", 1)
            forms = [f"from {module} import {name}\nx = {name}\n",
                     f"from {package} import {leaf} as m\nx = m.{name}\n",
                     f"import {module} as m\nx = m.{name}\n"]
            if module in NAMESPACES:
                forms.append(f"import {module}\nx = {module}.{name}\n")
            for source in forms:
                with self.subTest(source=source):
                    ported = port_source(source, "t.py")
                    self.assertEqual(private_imports(ported.new, "t.py"), [], ported.new)

    def test_each_counterpart_resolves(self):
        for dotted in _listed():
            module, name = dotted.rsplit(".", 1)
            if status(module, name) == "namespace":
                with self.subTest(dotted):
                    namespace = importlib.import_module(f"harness.upstream_modules.{NAMESPACES[module]}")
                    self.assertTrue(hasattr(namespace, name))

    def test_the_scan_reads_every_import_form(self):
        source = (f"from {_U}.common_utils import run_tests\n"
                  f"from {_U} import common_fsdp\n"
                  f"import {_U}.common_distributed as cd\n"
                  f"import {_U}.inductor_utils\n"
                  "a = common_fsdp.subtest_name\nb = cd.create_device\n"
                  f"c = torch.testing._internal.inductor_utils.HAS_GPU\n")
        self.assertEqual(imported_names(source), {(f"{_U}.common_utils", "run_tests"),
                                                  (f"{_U}.common_fsdp", "subtest_name"),
                                                  (f"{_U}.common_distributed", "create_device"),
                                                  (f"{_U}.inductor_utils", "HAS_GPU")})


if __name__ == "__main__":
    unittest.main()
