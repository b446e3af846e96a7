"""``spawn_threads_and_init_comms``: a test method of any TestCase runs on thread ranks with their own default
groups; a failing rank is named, a hang ends after the timeout, every rank skipping skips the test.
And ``get_required_world_size``, the helper a class's ``world_size`` reads ``requires_world_size`` with."""
import unittest

import torch
import torch.distributed as dist

from harness import TestCase, UsageError, get_required_world_size, requires_world_size, spawn_threads_and_init_comms


def _threads_class():
    """The decorated tests, made in a function so that no loader collects them as tests of this module."""

    class _Threads(TestCase):
        seen: list = []

        @spawn_threads_and_init_comms(world_size=3)
        def test_broadcast(self):
            box = [dist.get_rank()]
            dist.broadcast_object_list(box, src=0)
            t = torch.tensor([dist.get_rank() + 1.0])
            dist.all_reduce(t)
            type(self).seen.append((dist.get_rank(), dist.get_world_size(), box[0], t.item()))

        @spawn_threads_and_init_comms
        def test_default_world_of_four(self):
            type(self).seen.append(("default", dist.get_world_size()))

        @spawn_threads_and_init_comms(world_size=4)
        def test_rank_2_fails(self):
            t = torch.ones(1)
            dist.all_reduce(t)
            self.assertNotEqual(dist.get_rank(), 2, "SPAWN-RANK-2")

        @spawn_threads_and_init_comms(world_size=2, timeout=2)
        def test_rank_1_never_comes(self):
            if dist.get_rank() == 0:
                dist.all_reduce(torch.ones(1))

        @spawn_threads_and_init_comms(world_size=2)
        def test_every_rank_skips(self):
            raise unittest.SkipTest("SPAWN-SKIP")

    return _Threads


_Threads = None


def _run(name):
    result = unittest.TestResult()
    _threads()(name).run(result)
    return result


def _threads():
    global _Threads
    if _Threads is None:
        _Threads = _threads_class()
    return _Threads


class TestSpawnThreadsAndInitComms(unittest.TestCase):
    def setUp(self):
        _threads().seen = []

    def test_each_rank_has_its_own_default_group(self):
        result = _run("test_broadcast")
        self.assertTrue(result.wasSuccessful(), result.errors + result.failures)
        self.assertEqual(sorted(_threads().seen), [(0, 3, 0, 6.0), (1, 3, 0, 6.0), (2, 3, 0, 6.0)])
        self.assertFalse(dist.is_initialized())  # the process's own world is untouched

    def test_the_default_world_size_is_four(self):
        self.assertTrue(_run("test_default_world_of_four").wasSuccessful())
        self.assertEqual(_threads().seen, [("default", 4)] * 4)

    def test_a_failing_rank_fails_the_test_and_is_named(self):
        result = _run("test_rank_2_fails")
        self.assertEqual(len(result.failures), 1, result.errors)
        text = result.failures[0][1]
        self.assertIn("SPAWN-RANK-2", text)
        self.assertIn("thread rank 2 of 4 (spawn_threads_and_init_comms)", text)

    def test_a_rank_that_never_comes_ends_the_test_after_the_timeout(self):
        result = _run("test_rank_1_never_comes")
        self.assertEqual(len(result.errors), 1, result.failures)
        self.assertRegex(result.errors[0][1], r"all_reduce|timed out")

    def test_every_rank_skipping_skips_the_test(self):
        result = _run("test_every_rank_skips")
        self.assertEqual([reason for _, reason in result.skipped], ["SPAWN-SKIP"])

    def test_a_bad_world_size_is_refused_by_name(self):
        with self.assertRaisesRegex(UsageError, r"world_size=0.*int >= 1"):
            spawn_threads_and_init_comms(world_size=0)(lambda self: None)


class TestGetRequiredWorldSize(unittest.TestCase):
    class _Sized(unittest.TestCase):
        @requires_world_size(3)
        def test_three(self):
            pass

        def test_plain(self):
            pass

    def test_the_mark_of_the_running_method_else_the_default(self):
        self.assertEqual(get_required_world_size(self._Sized("test_three"), 2), 3)
        self.assertEqual(get_required_world_size(self._Sized("test_plain"), 2), 2)
        self.assertEqual(get_required_world_size(object(), 5), 5)


if __name__ == "__main__":
    unittest.main()
