"""Pure decisions: which skip reasons mean "needs a GPU" in any wording, whose run() a mixed MRO reaches and
what its line says, what create_local_tensor_test_class builds, what the port tool maps. No processes."""
import string
import unittest

from hypothesis import given, settings, strategies as st

import harness
from harness.judging.fallback import gpu_skip
from harness.inprocess.local import LocalDTensorTestBase, create_local_tensor_test_class
from harness.judging.notes import Notes
from harness.port import port_source
from harness.judging.upstream import upstream_base

GPU_WORDS = ["CUDA", "cuda", "GPU", "GPUs", "gpu", "NCCL", "nccl", "accelerator", "accelerators", "multi-gpu"]


class TestGpuSkipAnyWording(unittest.TestCase):
    #: reasons seen in the wild, none of them in the rule's source
    COUNTED = [
        "Not enough CUDA devices",
        "Need at least 8 GPUs to run",
        "Requires 2+ GPUs",
        "test needs a GPU",
        "GPU required",
        "cuda unavailable on this host",
        "NCCL not found",
        "Needs NCCL >= 2.19",
        "No accelerator found",
        "needs an accelerator: pinned memory",
        "CUDA_VISIBLE_DEVICES is empty",
        "cuda:1 does not exist",
        "TEST_MULTIGPU is False: multi-gpu test",
        "torch was built without CUDA",
        "Skipped because it needs to run with CUDA",
        "skip on CPU: needs CUDA",
        "needs CUDA: RuntimeError: FSDP needs a non-CPU accelerator device, but no accelerator device is detected. "
        "(t.py:3)",
    ]
    NOT_COUNTED = [
        "needs zstandard",
        "flaky on ROCm",
        "Test skipped for ROCm",
        "flaky on CUDA",
        "not supported on GPU",
        "skipped on CUDA, see #1234",
        "fails with NCCL 2.18",
        "hangs under NCCL",
        "NCCL hangs on this op",
        "Skipped due to small world size.",
        "Test skipped due to missing import",
        "Skipped because distributed backend is not available.",
        "requires triton",
        "slow test",
        "",
    ]

    def test_reasons_not_in_any_list(self):
        for reason in self.COUNTED:
            self.assertTrue(gpu_skip(reason), reason)
        for reason in self.NOT_COUNTED:
            self.assertFalse(gpu_skip(reason), reason)

    @settings(max_examples=300, derandomize=True, deadline=None)
    @given(st.sampled_from(["", "Skipping: ", "skipped: ", "Test ", "This test "]),
           st.sampled_from(["needs", "requires", "need at least 2", "wants", "no", "not enough", "missing",
                            "only runs with", "must have"]),
           st.sampled_from(["", "a ", "an ", "4 "]),
           st.sampled_from(GPU_WORDS),
           st.sampled_from(["", ".", " devices", " (see issue 42)", " to run", " for fp8"]))
    def test_a_need_for_a_gpu_counts_however_it_is_worded(self, prefix, verb, article, word, suffix):
        reason = f"{prefix}{verb} {article}{word}{suffix}"
        self.assertTrue(gpu_skip(reason), reason)

    @settings(max_examples=300, derandomize=True, deadline=None)
    @given(st.sampled_from(["flaky", "Skipped", "skip", "fails", "broken", "not supported", "disabled", "hangs",
                            "crashes", "not implemented"]),
           st.sampled_from(["on", "for", "with", "under"]),
           st.sampled_from(GPU_WORDS + ["ROCm", "rocm", "HIP"]),
           st.sampled_from(["", ".", " (#1234)", " machines"]))
    def test_where_the_test_does_not_run_is_no_need(self, bad, prep, word, suffix):
        reason = f"{bad} {prep} {word}{suffix}"
        self.assertFalse(gpu_skip(reason), reason)

    @settings(max_examples=300, derandomize=True, deadline=None)
    @given(st.text(alphabet=string.ascii_letters + string.digits + " .,:()-_", max_size=60))
    def test_a_reason_that_names_no_gpu_word_never_counts(self, reason):
        lowered = reason.lower()
        if any(w in lowered for w in ("cuda", "gpu", "nccl", "accelerator")):
            return
        self.assertFalse(gpu_skip(reason), reason)


def _upstream_class(name, module, bases=(unittest.TestCase,)):
    return type(name, bases, {"__module__": module, "__qualname__": name})


def _upstream_local():
    mptc = _upstream_class("MultiProcessTestCase", "torch.testing._internal.common_distributed")
    dtb = _upstream_class("DTensorTestBase", "torch.testing._internal.distributed._tensor.common_dtensor", (mptc,))
    return _upstream_class("LocalDTensorTestBase", "torch.testing._internal.distributed._tensor.common_dtensor", (dtb,))


class TestMixedMro(unittest.TestCase):
    def test_upstream_first_then_the_harness_is_run_by_the_harness(self):
        mixed = type("TWithLocalTensor", (_upstream_local(), harness.DTensorTestBase),
                     {"__module__": "m", "__qualname__": "TWithLocalTensor"})
        found = upstream_base(mixed)
        self.assertEqual(found.runs_on, "harness.classes.case.MultiProcessTestCase")
        line = found.line(28)
        self.assertTrue(line.startswith("m.TWithLocalTensor mixes upstream's torch.testing._internal.distributed."
                                        "_tensor.common_dtensor.LocalDTensorTestBase with the harness's classes: its "
                                        "28 tests ran on distharness's rank processes"), line)
        self.assertNotIn("ran on upstream's harness", line)
        self.assertIn("harness.create_local_tensor_test_class", line)

    def test_mixed_with_the_harness_local_class_says_one_process(self):
        mixed = type("T", (_upstream_local(), LocalDTensorTestBase), {"__module__": "m", "__qualname__": "T"})
        found = upstream_base(mixed)
        self.assertEqual(found.runs_on, "harness.inprocess.local.LocalDTensorTestBase")
        self.assertIn("ran in one process, every rank simulated", found.line(1))

    def test_notes_say_who_ran_each_test_not_what_the_mro_predicts(self):
        mixed = type("T", (_upstream_local(), harness.DTensorTestBase),
                     {"__module__": "m", "__qualname__": "T", "test_a": lambda s: None, "test_b": lambda s: None})
        notes = Notes()
        for name in ("test_a", "test_b"):
            notes.test_class_seen(mixed(name))
        notes.harness_ran("m.T.test_a")  # test_b: the harness's run() never saw it
        lines = notes.upstream_lines()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("its 1 test ran on distharness's rank processes", lines[0])
        self.assertIn("its 1 test ran on upstream's harness, not distharness", lines[1])
        self.assertEqual(notes.upstream_lines("harness"), lines[:1])
        self.assertEqual(notes.upstream_lines("upstream"), lines[1:])
        notes.forget()
        self.assertEqual((notes.upstream_lines(), notes.ran_by_harness), ([], set()))

    def test_upstream_alone_is_still_upstreams(self):
        found = upstream_base(type("T", (_upstream_local(),), {"__module__": "m", "__qualname__": "T"}))
        self.assertEqual(found.runs_on, "")
        self.assertIn("ran on upstream's harness, not distharness", found.line(3))


def _original():
    """A DTensorTestBase class as upstream writes one; made here so that discovery never runs it on ranks."""

    class _Orig(harness.DTensorTestBase):
        world_size = 2

        @harness.with_comms
        def test_a(self):
            return "a"

        @harness.skip_if_lt_x_gpu(2)
        def test_b(self):
            return "b"

        def helper(self):
            return "h"

    return _Orig


class TestCreateLocalTensorTestClass(unittest.TestCase):
    def setUp(self):
        global _Orig
        _Orig = _original()

    def test_name_bases_and_the_original_is_untouched(self):
        twin = create_local_tensor_test_class(_Orig)
        self.assertEqual(twin.__name__, "_OrigWithLocalTensor")
        self.assertEqual(twin.__bases__, (LocalDTensorTestBase, harness.DTensorTestBase))
        self.assertEqual(twin.__module__, _Orig.__module__)
        self.assertIsNot(twin.test_a, _Orig.test_a)
        self.assertIs(twin.helper, _Orig.helper)  # only test_* methods enter LocalTensorMode
        self.assertEqual(twin.world_size, 2)
        self.assertFalse(hasattr(_Orig, "_harness_local"))

    def test_the_marks_survive_the_wrapping(self):
        from harness.testing.decorators import gpus_needed, markers

        twin = create_local_tensor_test_class(_Orig)
        self.assertTrue(markers(twin.test_a)["comms"])
        self.assertEqual(gpus_needed(twin, twin.test_b), 2)

    def test_skipped_tests_skip_with_upstreams_reason(self):
        twin = create_local_tensor_test_class(_Orig, skipped_tests=["test_b"])
        with self.assertRaisesRegex(unittest.SkipTest, "^Skipped test$"):
            twin.test_b(twin("test_b"))

    def test_a_custom_base(self):
        class Base(LocalDTensorTestBase):
            pass

        self.assertIs(create_local_tensor_test_class(_Orig, base_class=Base).__bases__[0], Base)

    def test_mistakes_are_refused_with_the_value(self):
        with self.assertRaisesRegex(harness.UsageError, r"skipped_tests='test_b'.*\['test_b'\]"):
            create_local_tensor_test_class(_Orig, skipped_tests="test_b")
        with self.assertRaisesRegex(harness.UsageError, "pass the test class itself"):
            create_local_tensor_test_class(_Orig("test_a"))
        with self.assertRaisesRegex(harness.UsageError, "base_class=42"):
            create_local_tensor_test_class(_Orig, base_class=42)

    def test_public(self):
        self.assertIn("LocalDTensorTestBase", harness.__all__)
        self.assertIn("create_local_tensor_test_class", harness.__all__)
        self.assertTrue(LocalDTensorTestBase._harness_test_class)


class TestPortMapsTheLocalNames(unittest.TestCase):
    def test_both_names_move_to_harness(self):
        r = port_source("from torch.testing._internal.distributed._tensor.common_dtensor import (\n"
                        "    create_local_tensor_test_class,\n    DTensorTestBase,\n    LocalDTensorTestBase,\n"
                        "    with_comms,\n)\n")
        self.assertEqual(r.unmapped, [])
        self.assertEqual(r.new, "from harness import (\n    create_local_tensor_test_class,\n    DTensorTestBase,\n"
                                "    LocalDTensorTestBase,\n    with_comms,\n)\n")


if __name__ == "__main__":
    unittest.main()
