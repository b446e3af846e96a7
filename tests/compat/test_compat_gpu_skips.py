"""Every skip that means "needs a GPU or NCCL" is counted, with its reason: tests/compat/cx_gpu_skips.py.
GPUs are hidden from the run; whether this torch has NCCL is read from it."""
import unittest

import torch.distributed as dist

from tests._support import FixtureTestCase

MOD = "tests.compat.cx_gpu_skips"
NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}


class _Checks:
    def expected(self):
        tests = ["TestGpuSkips.test_skip_in_upstream_words", "TestGpuSkips.test_subtest_skip",
                 "TestGpuSkips.test_upstream_skip_code"]
        if not dist.is_nccl_available():  # upstream's requires_nccl() skips only then
            tests.append("TestGpuSkips.test_requires_nccl")
        return tests

    def test_counted_with_reasons(self):
        line = self.assertMatchesReport(r"(\d+) tests? needs? CUDA( \(\d+ subtests\))?, skipped \(a GPU or NCCL was "
                                        r"missing\): (.*)$")
        ids = sorted(t.split("cx_gpu_skips.")[-1] for t in line.group(3).split(", "))
        self.assertEqual(ids, sorted(self.expected() + self.plain()), self.r.describe())
        self.assertMatchesReport(r"1 x Need at least 4 CUDA devices: .*test_skip_in_upstream_words")
        self.assertMatchesReport(r"1 x needs at least 2 CUDA devices \(sys\.exit\(77\) in the test: upstream's skip "
                                 r"exit code\): .*test_upstream_skip_code")
        self.assertMatchesReport(r"1 x needs an accelerator: CPU offload: .*test_subtest_skip")
        if not dist.is_nccl_available():
            self.assertMatchesReport(r"1 x c10d was not compiled with the NCCL backend: .*test_requires_nccl")

    def test_a_skip_not_about_gpus_is_not_counted(self):
        self.assertNotRegex(self.r.output, r"need.? CUDA.*test_small_world")
        self.assertNotIn("x Skipped due to small world size.: ", self.r.output)  # no needs-CUDA kind line

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestUnderRunTests(_Checks, FixtureTestCase):
    RUNNER = MOD
    ARGS = ["-v"]
    ENV = NO_GPUS

    def plain(self):
        return ["TestPlain.test_cuda_only"]  # a plain TestCase: run_tests sees its skip too


class TestUnderTheRunner(_Checks, FixtureTestCase):
    RUNNER = "harness"
    ARGS = ["tests/compat/cx_gpu_skips.py"]
    ENV = NO_GPUS

    def plain(self):
        return ["TestPlain.test_cuda_only"]


class TestUnderUnittest(_Checks, FixtureTestCase):
    """``python -m unittest``: the harness counts what it runs itself (a plain TestCase is unittest's alone)."""

    ARGS = [MOD, "-v"]
    ENV = NO_GPUS

    def plain(self):
        return []


if __name__ == "__main__":
    unittest.main()
