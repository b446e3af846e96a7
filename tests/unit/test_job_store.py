"""torchrun's store as the launched ranks speak it (harness.torchrun.job_store): the key scheme, the step numbers every
rank keeps in lockstep, typed messages over a real in-process store, and the order of the ranks' failures."""
from __future__ import annotations

import unittest

from hypothesis import given, strategies as st

from harness.torchrun.job_store import Collectives, Example, JobOver, JobStore, Keys, Leaving, Seed, Steps, TempDir
from harness.shared.outcome import FAILED, PASSED, RankResult, SubtestOutcome
from harness.judging.verdict import merge
from harness.shared.protocol import Done, Meet


def _store() -> JobStore:
    import torch.distributed as dist

    return JobStore(dist.PrefixStore("harness", dist.HashStore()))  # as the job wraps torchrun's


def _all_keys(keys: Keys, world_size: int = 3, meetings: int = 3) -> set[str]:
    per_rank = [keys.result(r) for r in range(world_size)] + [keys.collectives(r) for r in range(world_size)]
    meets = [keys.meet(i, r) for i in range(1, meetings + 1) for r in range(world_size)]
    return {keys.temp_dir, keys.seed, keys.example, keys.arrivals, *per_rank, *meets}


class TestKeys(unittest.TestCase):
    def test_the_scheme(self):
        keys = Keys(7)
        self.assertEqual(keys.prefix, "t7")
        self.assertEqual(keys.temp_dir, "t7/temp_dir")
        self.assertEqual(keys.seed, "t7/hypothesis_seed")
        self.assertEqual(keys.example, "t7/example")
        self.assertEqual(keys.arrivals, "t7/arrivals")
        self.assertEqual(keys.result(1), "t7/result/1")
        self.assertEqual(keys.results(2), ["t7/result/0", "t7/result/1"])
        self.assertEqual(keys.meet(2, 0), "t7/meet/2/0")
        self.assertEqual(keys.collectives(1), "t7/fr/1")
        self.assertEqual(Keys.leaving(3), "exit/3")
        self.assertEqual(Keys.DONE, "done")
        self.assertEqual((Keys.class_errors(1), Keys.class_error(1, 2)), ("class_errors/1", "class_error/1/2"))

    def test_steps_are_numbered_from_one(self):
        with self.assertRaisesRegex(ValueError, "numbered from 1, got 0"):
            Keys(0)

    def test_one_steps_keys_are_all_different(self):
        keys = Keys(3)
        self.assertEqual(len(_all_keys(keys)), 4 + 2 * 3 + 3 * 3)

    @given(st.integers(1, 10**6), st.integers(1, 10**6))
    def test_two_steps_share_no_key(self, a, b):
        if a != b:
            self.assertEqual(_all_keys(Keys(a)) & _all_keys(Keys(b)), set())  # t1/... is not t12/...

    def test_the_jobs_own_keys_are_no_steps(self):
        # (a set-up that raised in one process takes no step: that process would be a step behind the others)
        job = {Keys.DONE, *(k for r in range(3) for k in (Keys.leaving(r), Keys.class_errors(r), Keys.class_error(r, 1)))}
        self.assertEqual(job & _all_keys(Keys(1)), set())


class TestSteps(unittest.TestCase):
    def test_numbers_follow_each_other_from_one(self):
        steps = Steps()
        self.assertEqual([steps.next() for _ in range(3)], [Keys(1), Keys(2), Keys(3)])
        self.assertEqual(steps.taken, 3)

    def test_ranks_that_take_the_same_steps_name_the_same_keys(self):
        ranks = [Steps(), Steps()]
        for _ in range(5):  # test_files, start_examples, same_example, run...: the same calls on every rank
            mine, theirs = (s.next() for s in ranks)
            self.assertEqual(mine.temp_dir, theirs.temp_dir)

    def test_a_step_one_rank_skips_shifts_every_later_key(self):
        # why a step must be taken on every rank or on none (Steps' docstring)
        rank0, rank1 = Steps(), Steps()
        rank0.next()  # a step rank 1 did not take
        self.assertNotEqual(rank0.next().result(0), rank1.next().result(0))


class TestJobStore(unittest.TestCase):
    def test_messages_go_through_pickled_and_come_back_typed(self):
        store, keys = _store(), Keys(1)
        outcome = SubtestOutcome(params={"step": 2}, status=FAILED)
        messages = {keys.temp_dir: TempDir("/tmp/x"), keys.seed: Seed(42), keys.example: Example({"n": 3}),
                    keys.meet(2, 1): Meet(2, outcome), keys.result(1): Done(RankResult(rank=1, status=PASSED)),
                    keys.collectives(1): Collectives({"entries": []}), Keys.leaving(1): Leaving(), Keys.DONE: JobOver()}
        for key, message in messages.items():
            store.post(key, message)
        for key, message in messages.items():
            self.assertEqual(store.read(key), message)
        self.assertTrue(store.has(*messages))

    def test_read_posted_does_not_wait(self):
        store, keys = _store(), Keys(1)
        self.assertIsNone(store.read_posted(keys.result(0)))
        self.assertFalse(store.has(keys.result(0), keys.result(1)))
        store.post(keys.result(0), Done(RankResult(rank=0, status=PASSED)))
        self.assertEqual(store.read_posted(keys.result(0)).result.rank, 0)
        self.assertFalse(store.has(keys.result(0), keys.result(1)))  # every key, not any

    def test_tickets_are_handed_out_once_whichever_rank_asks(self):
        import torch.distributed as dist

        shared = dist.HashStore()
        rank0, rank1 = (JobStore(dist.PrefixStore("harness", shared)) for _ in range(2))
        counter = Keys(4).arrivals
        self.assertEqual([rank1.ticket(counter), rank0.ticket(counter), rank1.ticket(counter)], [1, 2, 3])
        self.assertEqual(rank0.ticket(Keys(5).arrivals), 1)  # each test counts its own


class TestAtMeeting(unittest.TestCase):
    """Who reached a run_subtests meeting, read from the store by a rank waiting there."""

    def test_a_peer_that_got_through_the_meeting_and_ended_its_test_was_there(self):
        # a fast peer: it met this rank's post, went on, and posted its result before this rank looked again;
        # taken for a rank that left, it stopped a passing test ("rank 1 left the test ... while this rank waited")
        store, keys, passed = _store(), Keys(3), SubtestOutcome(params={}, status=PASSED)
        store.post(keys.meet(2, 0), Meet(2, passed))
        store.post(keys.meet(2, 1), Meet(2, passed))
        store.post(keys.result(1), Done(RankResult(rank=1, status=PASSED)))
        self.assertEqual(store.at_meeting(keys, 2, [1]), ({1}, set()))

    def test_a_peer_that_ended_without_reaching_the_meeting_left(self):
        store, keys, passed = _store(), Keys(3), SubtestOutcome(params={}, status=PASSED)
        store.post(keys.meet(1, 1), Meet(1, passed))
        store.post(keys.result(1), Done(RankResult(rank=1, status=FAILED)))
        self.assertEqual(store.at_meeting(keys, 2, [1]), (set(), {1}))

    def test_a_peer_still_inside_the_combination_is_neither(self):
        store, keys, passed = _store(), Keys(3), SubtestOutcome(params={}, status=PASSED)
        store.post(keys.meet(2, 1), Meet(2, passed))
        self.assertEqual(store.at_meeting(keys, 2, [1, 2]), ({1}, set()))


class TestArrivalOrder(unittest.TestCase):
    """Under torchrun a rank's result carries its place in the order of failures (RankResult.arrived), so the
    verdict names the rank that failed first, not the lowest rank (tests/test_torchrun.py runs it for real)."""

    def test_the_rank_that_failed_first_is_named_first(self):
        from harness.torchrun.job import _Arrival

        store, keys = _store(), Keys(1)
        arrivals = {r: _Arrival(store, keys) for r in range(2)}
        arrivals[1].failing(RankResult(rank=1, status=FAILED))  # rank 1's notice, while its tearDown runs
        results = [RankResult(rank=0, status=FAILED, exc_type="AssertionError", message="LATER"),
                   RankResult(rank=1, status=FAILED, exc_type="AssertionError", message="FIRST")]
        for r in (0, 1):  # rank 0's result is ready before rank 1's: rank 1's failure was known first all the same
            results[r].arrived = arrivals[r].known()
        self.assertEqual([r.arrived for r in results], [2.0, 1.0])
        verdict = merge("m.T.test", results, 2, "cpu/gloo")
        self.assertEqual(verdict.root_rank, 1)
        self.assertTrue(verdict.text.startswith("m.T.test [rank 1/2] failed on cpu/gloo: AssertionError: FIRST"))

    def test_a_rank_takes_its_place_once(self):
        from harness.torchrun.job import _Arrival

        arrival = _Arrival(_store(), Keys(1))
        arrival.failing(RankResult(rank=0, status=FAILED))
        arrival.failing(RankResult(rank=0, status=FAILED))  # a second problem (tearDown) keeps the first place
        self.assertEqual(arrival.known(), 1.0)


class TestOneJobAProcess(unittest.TestCase):
    def test_a_second_run_in_a_launched_process_is_refused_with_the_fix(self):
        # A rank joins torchrun's rendezvous once (harness.parent.run.Run.worlds makes the job): a second run that asks
        # for ranks is told to share the first, before it touches the environment or the store.
        from harness.shared.config import settings
        from harness.errors import HarnessError
        from harness.torchrun.job import LaunchedJob

        self.addCleanup(setattr, LaunchedJob, "_joined", LaunchedJob._joined)
        LaunchedJob._joined = True
        with self.assertRaisesRegex(HarnessError, r"already joined its torchrun job .* hand that run to every test"):
            LaunchedJob(settings())


if __name__ == "__main__":
    unittest.main()
