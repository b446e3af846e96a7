"""No rank starts tearDown or a cleanup before every rank ended the body, and a rank whose peer failed or hangs
waits no longer than the peer grace: tests/compat/cx_teardown_order.py, under each front end."""
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, under_each_front_end

MOD = "tests.compat.cx_teardown_order"
RUNS = 20  # each FileStore test, in a row in one run (CX_TEARDOWN_RUNS)


class _Checks:
    def test_the_filestore_tests_pass_every_time(self):
        passing = 2 * RUNS + 4  # the FileStore tests and the four probes; the two trouble tests fail
        self.assertMatchesReport({THE_RUNNER: rf"^{passing} passed, 2 failed, 0 skipped$",
                                  RUN_TESTS: rf"^Ran {passing + 2} tests", PYTEST: rf"2 failed, {passing} passed"
                                  }[self.FRONT_END])
        if self.FRONT_END == RUN_TESTS:
            self.assertInReport("FAILED (errors=2)")
        self.assertNotIn("Timeout waiting for key", self.r.output, self.r.describe())

    def test_no_teardown_or_cleanup_before_every_body_ended(self):
        self.assertNotIn("CX-EARLY-TEARDOWN", self.r.output, self.r.describe())

    def test_a_failed_peer_costs_the_grace_not_the_timeout(self):
        self.assertMatchesReport(r"test_peer_fails_while_this_rank_waits \[rank 1/2\] raised on cpu/gloo: RuntimeError: "
                                 r"CX-PEER-FAILED")
        self.assertNotRegex(self._section("test_peer_fails_while_this_rank_waits"), r"timed out")

    def test_a_hung_peer_costs_the_grace_not_the_timeout(self):
        text = self._section("test_peer_hangs_in_a_collective_this_rank_never_calls")
        self.assertIn("HARNESS_PEER_GRACE", text)
        self.assertNotRegex(text, r"timed out after")

    def test_only_the_two_trouble_tests_fail(self):
        failing = ["test_peer_fails_while_this_rank_waits", "test_peer_hangs_in_a_collective_this_rank_never_calls"]
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        for line in self.r.output.splitlines():
            if any(word in line for word in ("FAIL", "ERROR")) and "test_" in line:
                self.assertTrue(any(name in line for name in failing), line)

    def test_nothing_left_behind(self):
        self.check_nothing_left()

    def _section(self, name: str) -> str:
        try:
            return self.r.section(name)
        except Exception:  # noqa: BLE001 - pytest's report has no unittest sections: the whole output
            return self.r.output


ENV = {"CUDA_VISIBLE_DEVICES": "", "HARNESS_PEER_GRACE": "2", "CX_TEARDOWN_RUNS": str(RUNS)}
globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: (), RUN_TESTS: (), PYTEST: ()}, env=ENV))


if __name__ == "__main__":
    unittest.main()
