"""Every skip that means "needs a GPU or NCCL" is counted, with its reason: tests/compat/cx_gpu_skips.py.
GPUs are hidden from the run; whether this torch has NCCL is read from it."""
import unittest

import torch.distributed as dist

from tests._support import RUN_TESTS, THE_RUNNER, UNITTEST, nightly, under_each_front_end

MOD = "tests.compat.cx_gpu_skips"
NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}


class _Checks:
    def expected(self):
        tests = ["TestGpuSkips.test_skip_in_upstream_words", "TestGpuSkips.test_subtest_skip",
                 "TestGpuSkips.test_upstream_skip_code"]
        if not dist.is_nccl_available():  # upstream's requires_nccl() skips only then
            tests.append("TestGpuSkips.test_requires_nccl")
        # a plain TestCase's skip is seen by run_tests and the runner; under plain unittest it is unittest's alone
        if self.FRONT_END != UNITTEST:
            tests.append("TestPlain.test_cuda_only")
        return tests

    def test_counted_with_reasons(self):
        line = self.assertMatchesReport(r"(\d+) tests? needs? CUDA( \(\d+ subtests\))?, skipped \(a GPU or NCCL was "
                                        r"missing\): (.*)$")
        ids = sorted(t.split("cx_gpu_skips.")[-1] for t in line.group(3).split(", "))
        self.assertEqual(ids, sorted(self.expected()), self.r.describe())
        self.assertMatchesReport(r"1 x Need at least 4 CUDA devices: .*test_skip_in_upstream_words")
        self.assertMatchesReport(r"1 x needs at least 2 CUDA devices \(sys\.exit\(77\) in the test: upstream's skip "
                                 r"exit code\): .*test_upstream_skip_code")
        self.assertMatchesReport(r"1 x needs an accelerator: CPU offload: .*test_subtest_skip")
        if not dist.is_nccl_available():
            self.assertMatchesReport(r"1 x c10d was not compiled with the NCCL backend: .*test_requires_nccl")

    def test_a_skip_not_about_gpus_is_not_counted(self):
        # it ran and was skipped, with its reason ...
        self.assertMatchesReport(r"(test_small_world \(.*\) \.\.\. skipped|SKIP\s+\S+\.test_small_world) .*Skipped due "
                                 r"to small world size\.")
        # ... and is in no needs-CUDA line
        self.assertNotRegex(self.r.output, r"need.? CUDA.*test_small_world")
        self.assertNotIn("x Skipped due to small world size.: ", self.r.output)  # no needs-CUDA kind line

    def test_nothing_left_behind(self):
        self.check_nothing_left()


globals().update(under_each_front_end(MOD, _Checks, {RUN_TESTS: (), THE_RUNNER: (), UNITTEST: ()}, env=NO_GPUS))
# in CI the needs-CUDA line, with each skip's reason in any wording, is checked on tests/compat/cx_local_tensor.py
globals()["TestUnderRunTests"] = nightly(
    "the needs-CUDA count and its reasons in any wording by tests.compat.test_compat_local_tensor.TestUnderRunTests."
    "test_gpu_skips_in_any_wording_are_counted_and_others_are_not; upstream's skip exit code by "
    "tests.compat.test_compat_members; each wording by tests.unit.test_local_and_gpu_words",
)(globals()["TestUnderRunTests"])


if __name__ == "__main__":
    unittest.main()
