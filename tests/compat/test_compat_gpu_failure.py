"""A test written for GPUs that fails on CPU, where it ran for want of GPUs, is a skip that says what was tried
(HARNESS_DEVICE=cpu: a failure); a rank that fails and then waits in its cleanup costs the peer grace, not the
timeout: tests/compat/cx_gpu_failure.py."""
import unittest

from tests._support import FixtureTestCase, nightly

TRIED = "tried on CPU for want of them"


class TestGpuWrittenFailure(FixtureTestCase):
    """On CPU for want of GPUs (HARNESS_DEVICE=auto): a test that asks for GPUs and fails there is a skip."""

    ARGS = ["tests.compat.cx_gpu_failure", "-v"]
    ENV = {"CUDA_VISIBLE_DEVICES": "", "HARNESS_PEER_GRACE": "2"}

    def test_failures_of_tests_written_for_gpus_are_skips(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=1, skipped=2)")

    def test_the_skip_says_what_was_tried(self):
        self.assertMatchesReport(r"test_bf16_batch_norm \(.*\) \.\.\. skipped 'needs 2 GPUs \(skip_if_lt_x_gpu\(2\)\); "
                                 rf"{TRIED}: rank [01]: RuntimeError: mixed dtype \(CPU\)")
        self.assertMatchesReport(r"test_fails_then_waits_in_teardown \(.*\) \.\.\. skipped 'needs 2 GPUs "
                                 rf"\(skip_if_lt_x_gpu\(2\)\); {TRIED}: rank 1: RuntimeError: CX-RANK1-FAILED")

    def test_the_same_failure_in_a_test_not_written_for_gpus_stays_a_failure(self):
        text = self.r.section("ERROR: test_same_failure_not_written_for_gpus")
        first, second = text.strip().splitlines()[:2]
        self.assertIn("test_same_failure_not_written_for_gpus [rank ", first)
        self.assertIn("raised on cpu/gloo: RuntimeError: mixed dtype (CPU)", first)
        self.assertFalse(second.startswith("Note:"), second)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("the strict rule (HARNESS_DEVICE=cpu: a failure, not a skip) by tests.compat.test_compat_gpu_tried_on_cpu."
         "TestStrictUnderDeviceCpu and tests.unit.test_verdict")
@nightly("the strict rule (HARNESS_DEVICE=cpu: a failure, not a skip) by tests.compat.test_compat_gpu_tried_on_cpu."
         "TestStrictUnderDeviceCpu and tests.unit.test_verdict; the peer grace after a failure by TestGpuWrittenFailure")
class TestGpuWrittenFailureUnderDeviceCpu(FixtureTestCase):
    """HARNESS_DEVICE=cpu: they are failures, and a rank that fails then waits in a cleanup costs the grace."""

    ARGS = ["tests.compat.cx_gpu_failure", "-v"]
    ENV = {"CUDA_VISIBLE_DEVICES": "", "HARNESS_PEER_GRACE": "2", "HARNESS_DEVICE": "cpu"}

    def test_failures_stay_failures(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=3)")
        self.assertNotIn(TRIED, self.r.output)

    def test_failure_then_waiting_rank_costs_the_peer_grace(self):
        text = self.r.section("ERROR: test_fails_then_waits_in_teardown")
        self.assertIn("[rank 1/2] raised on cpu/gloo: RuntimeError: CX-RANK1-FAILED before sending", text)
        self.assertIn("After this failure the rank did not finish (tearDown, cleanups) and was stopped", text)
        self.assertRegex(text, r"rank 0: still running [\d.]+ s after rank 1 failed; stopped \(HARNESS_PEER_GRACE\)")
        self.assertNotIn("timed out", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
