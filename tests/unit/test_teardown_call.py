"""The rule that lets the ranks waiting to start their tearDown go (harness.shared.protocol.teardown_call)."""
import unittest

from harness.shared.protocol import Go, teardown_call


class TestTeardownCall(unittest.TestCase):
    def test_they_wait_until_every_rank_ended_the_body_or_left(self):
        self.assertIsNone(teardown_call(3, {0}, (), trouble=False))
        self.assertIsNone(teardown_call(3, {0, 1}, (), trouble=False))
        self.assertIsInstance(teardown_call(3, {0, 1, 2}, (), trouble=False), Go)
        self.assertIsInstance(teardown_call(3, {0, 1}, {2}, trouble=False), Go)

    def test_a_peers_trouble_lets_them_go_at_once(self):
        self.assertIsInstance(teardown_call(3, {0}, (), trouble=True), Go)

    def test_nobody_waiting_nothing_to_say(self):
        self.assertIsNone(teardown_call(2, set(), {0, 1}, trouble=True))


if __name__ == "__main__":
    unittest.main()
