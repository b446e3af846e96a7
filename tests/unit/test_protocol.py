"""The rules both transports follow (harness.shared.protocol): the run_subtests meeting, the process group's timeout."""
from __future__ import annotations

import pickle
import unittest

from hypothesis import given, settings, strategies as st

from harness.shared.outcome import PASSED, RankResult, SubtestOutcome
from harness.shared.protocol import (Done, Failing, Go, Meet, Ready, Shutdown, StartFailed, Stop, Task, group_timeout,
                              meeting_call)


class TestMeetingCall(unittest.TestCase):
    def test_every_rank_at_the_same_meeting_goes_on(self):
        self.assertEqual(meeting_call(3, {0: 2, 1: 2, 2: 2}, ()), Go())

    def test_a_rank_still_inside_the_combination_is_waited_for(self):
        self.assertIsNone(meeting_call(3, {0: 2, 2: 2}, ()))
        self.assertIsNone(meeting_call(3, {}, ()))

    def test_a_rank_that_left_stops_the_others_and_is_named(self):
        call = meeting_call(3, {0: 2, 2: 2}, {1})
        self.assertIsInstance(call, Stop)
        self.assertIn("rank 1 left the test", call.why)
        self.assertIn("give run_subtests the same config on every rank", call.why)

    def test_waiting_for_a_rank_that_left_while_another_runs_waits(self):
        self.assertIsNone(meeting_call(3, {0: 2}, {1}))  # rank 2 may still get there: the pool's grace decides

    def test_ranks_at_different_meetings_are_stopped(self):
        call = meeting_call(2, {0: 2, 1: 3}, ())
        self.assertIsInstance(call, Stop)
        self.assertIn("different run_subtests meetings (rank 0 after combination 2, rank 1 after combination 3)",
                      call.why)

    @settings(deadline=None)
    @given(st.integers(1, 6), st.data())
    def test_go_only_when_every_rank_is_there_at_one_meeting(self, world_size, data):
        ranks = list(range(world_size))
        left = set(data.draw(st.lists(st.sampled_from(ranks), unique=True)))
        at = {r: data.draw(st.integers(1, 3)) for r in ranks if r not in left and data.draw(st.booleans())}
        call = meeting_call(world_size, at, left)
        if isinstance(call, Go):
            self.assertEqual(set(at), set(ranks))
            self.assertEqual(len(set(at.values())), 1)
        elif isinstance(call, Stop):
            self.assertEqual(set(at), set(ranks) - left)  # only once every rank still in the test is waiting
        else:  # a rank still inside a combination, or no rank waiting at all
            self.assertTrue(not at or set(at) != set(ranks) - left, (at, left))


class TestGroupTimeout(unittest.TestCase):
    def test_always_above_the_tests_own_limit(self):
        for limit in (0.1, 5, 300, 1800, 3600, 86400):
            with self.subTest(limit=limit):
                self.assertGreater(group_timeout(limit), limit)
        self.assertEqual(group_timeout(300), 1800.0)
        self.assertEqual(group_timeout(3600), 3660.0)


class TestEachFactOnce(unittest.TestCase):
    """The Task carries the test's time limit and nothing a rank already has (its placement)."""

    def test_a_task_names_no_placement(self):
        import dataclasses

        fields = {f.name for f in dataclasses.fields(Task)}
        self.assertFalse(fields & {"device_type", "shared", "placement"}, fields)
        self.assertIn("timeout", fields)

    def test_a_world_takes_the_time_limit_from_the_task_alone(self):
        import inspect

        from harness.parent.pool import RankPool
        from harness.torchrun.job import LaunchedJob
        from harness.shared.world import World

        for world in (World, RankPool, LaunchedJob):
            with self.subTest(world.__name__):
                self.assertEqual(list(inspect.signature(world.run).parameters), ["self", "task", "peer_grace"])

    def test_the_process_groups_timeout_has_one_floor(self):
        import inspect

        from harness.ranks.comms import ProcessGroupKeeper

        # the keeper is told the group's timeout (group_timeout) every time; it has no default of its own
        self.assertIs(inspect.signature(ProcessGroupKeeper.ensure).parameters["timeout_s"].default,
                      inspect.Parameter.empty)
        self.assertEqual(group_timeout(0), group_timeout(1))


class TestMessages(unittest.TestCase):
    def test_every_message_crosses_a_pipe(self):
        outcome = SubtestOutcome({"x": 1}, PASSED)
        task = Task(module="m", module_file=None, qualname="T", method="test_x", seed=1,
                    timeout=30.0)
        for message in (task, Ready(1), StartFailed(("E", "m", "tb")), Failing(RankResult(0, PASSED)),
                        Meet(1, outcome), Done(RankResult(0, PASSED)), Go(), Stop("why"), Shutdown()):
            with self.subTest(type(message).__name__):
                self.assertEqual(pickle.loads(pickle.dumps(message)), message)


if __name__ == "__main__":
    unittest.main()
