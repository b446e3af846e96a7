"""A test that asks for GPUs and fails on CPU, where it ran for want of them, is a skip that says it needs them
and what happened when it was tried on CPU; HARNESS_DEVICE=cpu makes it a failure:
tests/compat/cx_gpu_tried_on_cpu.py."""
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, FixtureTestCase, fixture_line, under_each_front_end

MOD = "tests.compat.cx_gpu_tried_on_cpu"
FILE = "cx_gpu_tried_on_cpu.py"
TRIED = "tried on CPU for want of them"


def _tried(gpus: int, why: str, rank: str, error: str, marker: str = "") -> str:
    where = rf" \({FILE}:{fixture_line(MOD, marker)}\)" if marker else r"( \([\w.]+:\d+\))?"
    return rf"needs {gpus} GPUs \({why}\); {TRIED}: rank {rank}: {error}{where}"


class _Checks:
    def test_is_cuda_is_a_skip_with_what_happened(self):
        self.assertMatchesReport(_tried(2, r"skip_if_lt_x_gpu\(2\)", "[01]", r"AssertionError: False is not true",
                                        "CX-IS-CUDA"))

    def test_a_device_from_the_current_index_is_a_skip(self):
        self.assertMatchesReport(_tried(2, r"skip_if_lt_x_gpu\(2\)", "[01]",
                                        r"TypeError: device\(\): argument 'index' \(position 2\) must be int, not str",
                                        "CX-INDEX"))

    def test_a_world_sized_by_the_device_count_is_a_skip(self):
        self.assertMatchesReport(_tried(2, "its world size follows the device count", "[01]",
                                        r"ValueError: CX-ACCELERATOR-ONLY: expects an accelerator mesh"))

    def test_only_the_failing_subtest_is_a_skip(self):
        self.assertMatchesReport(_tried(2, r"skip_if_lt_x_gpu\(2\)", "[01]", r"ValueError: CX-SUB-ACCELERATOR"))

    def test_the_same_failure_in_a_test_that_asks_for_no_gpu_stays_a_failure(self):
        self.assertMatchesReport(r"test_not_written_for_gpus \[rank [01]/2\] failed on cpu/gloo: AssertionError: False "
                                 r"is not true")

    def test_the_summary_counts_them_as_needing_cuda(self):
        if self.FRONT_END == PYTEST:
            self.assertMatchesReport(r"1 failed, \d passed, 4 skipped")
        self.assertMatchesReport(r"4 tests need CUDA \(5 subtests\), skipped|4 tests need CUDA, skipped")
        self.assertMatchesReport(r"\d+ x asked for GPUs and failed when tried on CPU for want of them "
                                 r"\(HARNESS_DEVICE=cpu makes them failures\)")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}
globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: (), RUN_TESTS: (), PYTEST: ()}, env=NO_GPUS,
                                      args={PYTEST: ["-rs"]}))  # pytest shows skip reasons with -rs


class TestStrictUnderDeviceCpu(FixtureTestCase):
    """HARNESS_DEVICE=cpu asked for CPU on purpose: what fails there fails."""

    ARGS = [MOD, "-v"]
    ENV = {**NO_GPUS, "HARNESS_DEVICE": "cpu"}

    def test_they_are_failures(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertMatchesReport(r"test_is_cuda \[rank [01]/2\] failed on cpu/gloo: AssertionError: False is not true")
        self.assertMatchesReport(r"test_device_from_the_current_index \[rank [01]/2\] raised on cpu/gloo: TypeError")
        self.assertMatchesReport(r"test_value_error_only_an_accelerator_raises \[rank [01]/\d\] raised on cpu/gloo: "
                                 r"ValueError: CX-ACCELERATOR-ONLY")
        self.assertNotIn(TRIED, self.r.output)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
