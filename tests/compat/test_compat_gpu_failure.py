"""A test written for GPUs that fails on CPU, where it ran for want of GPUs, says so on the failure; a rank that
fails and then waits in its cleanup costs the peer grace, not the timeout: tests/compat/cx_gpu_failure.py."""
import unittest

from tests._support import FixtureTestCase

NOTE = ("Note: this test asks for 2 GPUs (skip_if_lt_x_gpu(2)) and ran on CPU/gloo for want of them (this machine "
        "has no GPU).")


class TestGpuWrittenFailure(FixtureTestCase):
    ARGS = ["tests.compat.cx_gpu_failure", "-v"]
    ENV = {"CUDA_VISIBLE_DEVICES": "", "HARNESS_PEER_GRACE": "2"}

    def test_failures_stay_failures(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=3)")

    def test_the_note_is_on_the_failure_under_its_first_line(self):
        text = self.r.section("ERROR: test_bf16_batch_norm")
        first, second = text.strip().splitlines()[:2]
        self.assertIn("raised on cpu/gloo: RuntimeError: mixed dtype (CPU)", first)
        self.assertTrue(second.startswith(NOTE), second)
        self.assertIn("CX-BF16-BN", text)

    def test_no_note_when_the_test_did_not_ask_for_gpus(self):
        text = self.r.section("ERROR: test_same_failure_not_written_for_gpus")
        # the same failure, reported where the note would go, and no note
        first, second = text.strip().splitlines()[:2]
        self.assertIn("test_same_failure_not_written_for_gpus [rank ", first)
        self.assertIn("raised on cpu/gloo: RuntimeError: mixed dtype (CPU)", first)
        self.assertFalse(second.startswith("Note:"), second)
        self.assertNotIn("Note: this test asks for", text)

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
