"""Pure decisions: which skip reasons mean "needs a GPU or NCCL", which classes still run on upstream's
harness, what the port tool maps them to, and the needs-CUDA summary lines. No processes."""
import unittest

import harness
from harness.judging.notes import Notes
from harness.judging.fallback import gpu_skip
from harness.port import MAPPING, port_source
from harness.judging.upstream import HARNESS_NAMES, upstream_base


class TestGpuSkip(unittest.TestCase):
    def test_upstream_words_count(self):
        for reason in [
            "Need at least 2 CUDA devices",  # TEST_SKIPS["multi-gpu-2"]
            "Need at least 1 CUDA device",
            "Need at least 2 accelerator devices",  # TEST_SKIPS["multi-device-2"], a newer torch's words
            "Need at least 1 accelerator device",
            "c10d was not compiled with the NCCL backend",  # requires_nccl()
            "c10d not compiled with NCCL support",  # TEST_SKIPS["nccl"]
            "CUDA is not available.",  # TEST_SKIPS["no_cuda"]
            "accelerator is not available.",  # TEST_SKIPS["no_accelerator"]
            "No accelerator communication backend available among ['nccl', 'xccl', 'hccl']",
            "Test skipped because no GPU peer access",
            "CUDA not available",
            "Test requires CUDA",
        ]:
            self.assertTrue(gpu_skip(reason), reason)

    def test_the_installed_torchs_device_skips_count(self):
        # upstream's own table, as this torch has it: each skip that stands for missing devices (its words changed
        # from "CUDA devices" to "accelerator devices", its keys from multi-gpu-N to multi-device-N)
        from torch.testing._internal.common_distributed import TEST_SKIPS

        device_skips = {k: s.message for k, s in TEST_SKIPS.items() if k.startswith(("multi-gpu", "multi-device"))}
        self.assertGreaterEqual(len(device_skips), 8, TEST_SKIPS)
        for key, message in device_skips.items():
            self.assertTrue(gpu_skip(message), f"TEST_SKIPS[{key!r}]: {message!r}")

    def test_the_harness_words_count(self):
        for reason in [
            "needs CUDA: AssertionError: Torch not compiled with CUDA enabled (test_x.py:12)",
            "needs at least 2 CUDA devices (sys.exit(77) in the test: upstream's skip exit code)",
            "needs 2 GPUs, found 0 (HARNESS_DEVICE=cuda)",
            "this torch build has no NCCL (HARNESS_DEVICE=cuda)",
            "needs an accelerator: CPU offload",
            "NCCL needs a GPU, found none (this CUDA build of torch has NCCL, the machine has no GPU)",
        ]:
            self.assertTrue(gpu_skip(reason), reason)

    def test_other_skips_do_not(self):
        for reason in ["Skipped due to small world size.", "Skipped due to odd world size.", "Test skipped for ROCm",
                       "Test skipped due to missing import", "not implemented for this dtype", "",
                       "Test skipped at subprocess level, look at subprocess log for skip reason",
                       "Skipped because distributed backend is not available."]:
            self.assertFalse(gpu_skip(reason), reason)


def _upstream_class(name, module, bases=(unittest.TestCase,)):
    """A class named and placed as upstream's would be (nothing is imported from torch.testing._internal)."""
    return type(name, bases, {"__module__": module, "__qualname__": name})


class TestUpstreamBase(unittest.TestCase):
    def test_each_known_base_names_the_harness_class(self):
        for name, harness_name in HARNESS_NAMES.items():
            base = _upstream_class(name, "torch.testing._internal.common_distributed")
            test_cls = type("TestX", (base,), {"__module__": "test_mod", "__qualname__": "TestX"})
            found = upstream_base(test_cls)
            self.assertIsNotNone(found, name)
            self.assertEqual(found.cls, "test_mod.TestX")
            self.assertEqual(found.base, f"torch.testing._internal.common_distributed.{name}")
            self.assertEqual(found.harness, f"harness.{harness_name}")
            self.assertIn(harness_name, harness.__all__)  # the class to use exists and is public

    def test_typo_spelling_maps_to_the_right_name(self):
        base = _upstream_class("MultiProcContinousTest", "torch.testing._internal.common_distributed")
        found = upstream_base(type("T", (base,), {"__module__": "m"}))
        self.assertEqual(found.harness, "harness.MultiProcContinuousTest")

    def test_nearest_upstream_class_and_what_it_is_built_on(self):
        mptc = _upstream_class("MultiProcessTestCase", "torch.testing._internal.common_distributed")
        dtb = _upstream_class("DTensorOpTestBase", "torch.testing._internal.distributed._tensor.common_dtensor", (mptc,))
        local = _upstream_class("LocalDTensorOpTestBase", "torch.testing._internal.distributed._tensor.common_dtensor",
                                (dtb,))
        found = upstream_base(type("TestLocal", (local,), {"__module__": "m", "__qualname__": "TestLocal"}))
        self.assertEqual(found.base,
                         "torch.testing._internal.distributed._tensor.common_dtensor.LocalDTensorOpTestBase")
        self.assertEqual((found.via, found.harness), ("DTensorOpTestBase", "harness.DTensorOpTestBase"))
        self.assertIn("the harness has no LocalDTensorOpTestBase; derive it from harness.DTensorOpTestBase",
                      found.line())

    def test_upstream_local_base_points_at_the_harness_twin_maker(self):
        mptc = _upstream_class("MultiProcessTestCase", "torch.testing._internal.common_distributed")
        dtb = _upstream_class("DTensorTestBase", "torch.testing._internal.distributed._tensor.common_dtensor", (mptc,))
        local = _upstream_class("LocalDTensorTestBase", "torch.testing._internal.distributed._tensor.common_dtensor",
                                (dtb,))
        found = upstream_base(type("TestLocal", (local,), {"__module__": "m", "__qualname__": "TestLocal"}))
        self.assertEqual((found.via, found.harness, found.runs_on), ("", "harness.LocalDTensorTestBase", ""))
        self.assertIn("ran on upstream's harness, not distharness; make the twin with "
                      "harness.create_local_tensor_test_class", found.line())

    def test_the_line_says_class_base_and_fix(self):
        base = _upstream_class("FSDPTestContinuous", "torch.testing._internal.common_fsdp")
        found = upstream_base(type("TestGradAcc", (base,), {"__module__": "test_g", "__qualname__": "TestGradAcc"}))
        self.assertEqual(found.line(), "test_g.TestGradAcc derives from upstream's torch.testing._internal.common_fsdp."
                                       "FSDPTestContinuous: its tests ran on upstream's harness, not distharness; "
                                       "derive it from harness.FSDPTestContinuous instead (`python -m harness.port "
                                       "FILE` rewrites the import)")

    def test_harness_and_plain_classes_are_not_flagged(self):
        for cls in (harness.FSDPTestContinuous, harness.MultiProcessTestCase, harness.DTensorOpTestBase,
                    unittest.TestCase, type("T", (unittest.TestCase,), {})):
            self.assertIsNone(upstream_base(cls), cls)
        # a same-named class outside torch.testing._internal is not upstream's
        self.assertIsNone(upstream_base(_upstream_class("FSDPTest", "my_project.common")))
        self.assertIsNone(upstream_base(object()))


class TestPortMapsEveryMirroredBase(unittest.TestCase):
    MODULES = {
        "MultiProcessTestCase": "common_distributed", "MultiProcContinuousTest": "common_distributed",
        "MultiProcContinousTest": "common_distributed", "MultiThreadedTestCase": "common_distributed",
        "FSDPTest": "common_fsdp", "FSDPTestMultiThread": "common_fsdp", "FSDPTestContinuous": "common_fsdp",
        "DTensorTestBase": "distributed._tensor.common_dtensor",
        "DTensorContinuousTestBase": "distributed._tensor.common_dtensor",
        "DTensorOpTestBase": "distributed._tensor.common_dtensor",
        "LocalDTensorTestBase": "distributed._tensor.common_dtensor",
        "ShardedTensorTestBase": "distributed._shard.sharded_tensor",
    }

    def test_every_base_is_moved_to_harness(self):
        self.assertEqual(set(self.MODULES), set(HARNESS_NAMES))
        for name, module in self.MODULES.items():
            r = port_source(f"from torch.testing._internal.{module} import {name}\n")
            self.assertEqual(r.unmapped, [], name)
            self.assertIn(name, MAPPING[f"torch.testing._internal.{module}"])
            expected = name if HARNESS_NAMES[name] == name else f"{HARNESS_NAMES[name]} as {name}"
            self.assertEqual(r.new, f"from harness import {expected}\n")

    def test_typo_with_its_own_alias(self):
        r = port_source("from torch.testing._internal.common_distributed import MultiProcContinousTest as Base\n")
        self.assertEqual(r.new, "from harness import MultiProcContinuousTest as Base\n")


class TestNeedsCudaLines(unittest.TestCase):
    def setUp(self):
        self.notes = Notes()

    def test_grouped_by_reason(self):
        for test_id, reason, fallback in [
                ("m.T.test_a", "needs CUDA: AssertionError: Torch not compiled with CUDA enabled (m.py:3)", True),
                ("m.T.test_b", "Need at least 2 CUDA devices", False),
                ("m.T.test_c", "Need at least 2 CUDA devices", False),
                ("m.T.test_c", "Need at least 2 CUDA devices", False)]:
            self.notes.needs_cuda_for(test_id, reason, fallback=fallback)
        self.assertEqual(self.notes.needs_cuda_lines(), [
            "3 tests need CUDA (4 subtests), skipped (a GPU or NCCL was missing): m.T.test_a, m.T.test_b, m.T.test_c",
            "  3 x Need at least 2 CUDA devices: m.T.test_b, m.T.test_c",
            "  1 x hard-code CUDA, ran on CPU for want of GPUs (HARNESS_DEVICE=cpu makes them failures): m.T.test_a",
        ])

    def test_none(self):
        self.assertEqual(self.notes.needs_cuda_lines(), [])
        self.assertEqual(self.notes.end_of_run_lines(), [])

    def test_skips_of_other_classes_are_counted_by_their_reason_and_said_once(self):
        class Plain(unittest.TestCase):
            def test_x(self):
                pass

        self.notes.skip_seen(Plain("test_x"), "Need at least 2 CUDA devices")
        self.notes.skip_seen(Plain("test_x"), "not today")  # not a GPU reason: not counted
        self.assertEqual(list(self.notes.needs_cuda.values()), [["Need at least 2 CUDA devices"]])
        self.notes.forget()
        self.assertEqual(self.notes.end_of_run_lines(), [])


if __name__ == "__main__":
    unittest.main()
