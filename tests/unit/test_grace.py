"""The peer grace (harness.shared.grace): when it starts, when it ends, what the report says; pure, no process."""
from __future__ import annotations

import unittest

from hypothesis import given, strategies as st

from harness.shared.grace import POST_MARGIN, PeerGrace, Trouble


class TestPeerGrace(unittest.TestCase):
    def test_without_trouble_the_deadline_is_the_limit(self):
        grace = PeerGrace(5.0)
        self.assertFalse(grace.running)
        self.assertIsNone(grace.ends())
        self.assertEqual(grace.limit(deadline=100.0), 100.0)
        self.assertFalse(grace.over(now=1e9))

    def test_trouble_brings_the_limit_forward_to_the_end_of_the_grace(self):
        grace = PeerGrace(5.0)
        grace.start(Trouble(since=10.0, rank=1, what="rank 1 failed"))
        self.assertTrue(grace.running)
        self.assertEqual(grace.ends(), 15.0)
        self.assertEqual(grace.limit(deadline=100.0), 15.0)
        self.assertEqual(grace.limit(deadline=12.0), 12.0)  # the deadline still comes first when it is sooner

    def test_over_only_after_the_grace_ran_out(self):
        grace = PeerGrace(5.0)
        grace.start(Trouble(10.0, 1, "rank 1 failed"))
        self.assertFalse(grace.over(now=15.0))
        self.assertTrue(grace.over(now=15.01))

    def test_the_first_trouble_counts(self):
        grace = PeerGrace(5.0)
        grace.start(Trouble(10.0, 1, "rank 1 failed"))
        grace.start(Trouble(12.0, 0, "rank 0 died"))
        self.assertEqual(grace.trouble, Trouble(10.0, 1, "rank 1 failed"))
        self.assertEqual(grace.ends(), 15.0)

    def test_a_meeting_every_rank_got_through_calls_off_a_combinations_trouble_only(self):
        grace = PeerGrace(5.0)
        grace.start(Trouble(10.0, 1, "rank 1's subtest (step=2) failed", at_meeting=True))
        grace.got_through()
        self.assertFalse(grace.running)
        grace.start(Trouble(11.0, 1, "rank 1 failed"))  # the test itself failed there: the grace stays
        grace.got_through()
        self.assertEqual(grace.ends(), 16.0)

    def test_the_words_the_reports_use(self):
        grace = PeerGrace(3.0)
        grace.start(Trouble(10.0, 1, "rank 1 failed"))
        self.assertEqual(grace.overran(now=13.3),
                         "still running 3.3 s after rank 1 failed; stopped (HARNESS_PEER_GRACE)")
        self.assertEqual(grace.stopped_at_meeting(), "stopped while it waited for the other ranks after rank 1 failed")
        launched = PeerGrace(3.0)
        launched.start(Trouble(10.0, 1, "it raised here", at_meeting=True))
        self.assertEqual(launched.never_finished([0, 2], "step=2"),
                         "rank 0, 2 never finished subtest (step=2) within HARNESS_PEER_GRACE (3 s) after it raised "
                         "here: it is still inside one of that combination's collectives; the test stops here")

    def test_a_launched_rank_waits_for_results_past_the_limit_and_the_grace(self):
        self.assertEqual(PeerGrace(3.0).wait_for_results(60.0), 63.0 + POST_MARGIN)

    @given(seconds=st.floats(0, 1e4), since=st.floats(0, 1e6), deadline=st.floats(0, 1e6))
    def test_the_limit_is_never_past_the_deadline_nor_the_grace(self, seconds, since, deadline):
        grace = PeerGrace(seconds)
        grace.start(Trouble(since, 0, "rank 0 failed"))
        self.assertLessEqual(grace.limit(deadline), deadline)
        self.assertLessEqual(grace.limit(deadline), since + seconds)


if __name__ == "__main__":
    unittest.main()
