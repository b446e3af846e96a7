"""A class still on upstream's base is named at the end of the run, under every front end; the same test on
the harness's FSDPTestContinuous runs: tests/compat/cx_upstream_base.py. GPUs are hidden from the run, so
upstream's harness skips (its ranks exit with its skip code 77: "Need at least 2 CUDA devices", or "... accelerator
devices" in a newer torch, read from the installed one) on any machine."""
import re
import unittest

from torch.testing._internal.common_distributed import TEST_SKIPS

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, under_each_front_end

MOD = "tests.compat.cx_upstream_base"
LINE = ("cx_upstream_base.TestStillUpstream derives from upstream's torch.testing._internal.common_fsdp."
        "FSDPTestContinuous: its 1 test ran on upstream's harness, not distharness; derive it from "
        "harness.FSDPTestContinuous instead (`python -m harness.port FILE` rewrites the import)")
NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}
# upstream's words for its skip exit code 77 (two GPUs), as the installed torch has them (its key was renamed too)
UPSTREAM_SKIP = re.escape(next(skip.message for skip in TEST_SKIPS.values() if skip.exit_code == 77))


class _Checks:
    def test_the_upstream_class_is_named_with_its_base_and_the_fix(self):
        self.assertInReport(LINE)

    def test_upstream_harness_ran_it_not_ours(self):
        # upstream's ranks left with its skip code, before the body: skipped with upstream's reason ...
        self.assertMatchesReport(UPSTREAM_SKIP + r": (tests\.compat\.)?cx_upstream_base\."
                                 r"TestStillUpstream\.test_all_reduce")
        # ... where a rank's print would show: the harness's class printed from both of its ranks
        self.assertEqual(sorted(row["_rank"] for row in self.r.rank_lines("HARNESS-RAN")), ["0", "1"],
                         self.r.describe())
        self.assertNotIn("UPSTREAM-RAN", self.r.output)

    def test_the_harness_class_ran_and_its_cuda_subtest_needs_cuda(self):
        self.assertMatchesReport(r"needs CUDA: AssertionError: Torch not compiled with CUDA enabled|needs CUDA: "
                                 r"(RuntimeError|AcceleratorError): (No CUDA GPUs are available|Found no NVIDIA driver|"
                                 r"CUDA error: no CUDA-capable device is detected)")
        self.assertMatchesReport(r"cx_upstream_base.py:\d+\)")
        rows = self.r.rank_lines("HARNESS-RAN")  # its cpu subtest, on both ranks of a gloo group
        self.assertEqual({(row["_rank"], row["device"], row["sum"], row["backend"]) for row in rows},
                         {("0", "cpu", "2", "gloo"), ("1", "cpu", "2", "gloo")}, self.r.describe())

    def test_both_skips_are_counted_with_their_reasons(self):
        line = self.assertMatchesReport(r"2 tests need CUDA, skipped \(a GPU or NCCL was missing\): (.*)$").group(1)
        self.assertEqual(sorted(t.split("cx_upstream_base.")[-1] for t in line.split(", ")),
                         ["TestOnHarness.test_all_reduce", "TestStillUpstream.test_all_reduce"])
        self.assertMatchesReport(r"1 x " + UPSTREAM_SKIP + r": (tests\.compat\.)?cx_upstream_base\."
                                 r"TestStillUpstream\.test_all_reduce")
        self.assertMatchesReport(r"1 x hard-code CUDA, ran on CPU for want of GPUs \(HARNESS_DEVICE=cpu makes them "
                                 r"failures\): (tests\.compat\.)?cx_upstream_base\.TestOnHarness\.test_all_reduce")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _PytestSection:
    def test_in_the_distharness_section(self):
        section = self.r.stdout.split(" distharness ", 1)[-1]
        self.assertIn(LINE.replace("cx_upstream_base.", "tests.compat.cx_upstream_base.", 1), section)


class _RunnerLines:
    def test_its_line_says_upstream(self):
        self.assertMatchesReport(r"SKIP\s+tests\.compat\.cx_upstream_base\.TestStillUpstream\.test_all_reduce\s+"
                                 r"upstream\s")
        self.assertInReport("Ran on upstream's harness, not distharness (1 class(es)):")
        self.assertMatchesReport(r"PASS\s+tests\.compat\.cx_upstream_base\.TestOnHarness\.test_all_reduce\s+cpu/gloo\s+"
                                 r"ws=2 .*\(2 subtests, 1 skipped\)")


# pytest -s, the runner's --verbose: what the ranks print (the output of passing tests) reaches the report
globals().update(under_each_front_end(MOD, _Checks, {RUN_TESTS: (), PYTEST: _PytestSection, THE_RUNNER: _RunnerLines},
                                      env=NO_GPUS, args={PYTEST: ["-rs", "-s"], THE_RUNNER: ["--verbose"]}))


if __name__ == "__main__":
    unittest.main()
