"""The default group a rank keeps from test to test (harness.ranks.comms), in one process of world size 1.

A failed init_process_group on one rank must not shift that rank's group names (c10d names the default group
by a counter and rendezvous under that name): the next group the harness makes is named "0" on every rank.
Each test finds the default group's store as a fresh process would (no key an earlier test left), and no
DTensor RNG tracker of an earlier test's."""
import os
import shutil
import tempfile
import unittest

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from harness.ranks.comms import ProcessGroupKeeper, forget_destroyed_groups
from harness.shared.protocol import group_timeout


def world_of_one(test: unittest.TestCase) -> ProcessGroupKeeper:
    """A keeper for this process as the one rank of a world, on a FileStore of the test's own."""
    if dist.is_initialized():
        test.skipTest("a default group is already up in this process")
    d = tempfile.mkdtemp(prefix="distharness-keeper-")
    test.addCleanup(shutil.rmtree, d, ignore_errors=True)
    return ProcessGroupKeeper(lambda: dist.FileStore(os.path.join(d, "store"), 1), 0, 1)


class TestGroupNames(unittest.TestCase):
    def test_next_default_group_is_named_0_after_a_failed_init(self):
        keeper = world_of_one(self)
        saved = c10d._world.group_count
        c10d._world.group_count = 1  # what an init_process_group that raised while connecting leaves behind
        try:
            keeper.ensure("gloo", group_timeout(60))
            self.assertEqual(c10d._get_default_group().group_name, "0")
        finally:
            keeper.release()
            c10d._world.group_count = saved


class TestEachTestsStore(unittest.TestCase):
    def test_a_key_an_earlier_test_left_is_not_there(self):
        keeper = world_of_one(self)
        self.addCleanup(keeper.release)
        self.assertFalse(keeper.ensure("gloo", group_timeout(60)))  # the first test: a group made for it
        c10d._get_default_store().set("left", "by the first test")  # as a group torch names by its ranks does
        group = c10d._get_default_group()
        self.assertTrue(keeper.ensure("gloo", group_timeout(60)))  # the next test: the same group, kept
        self.assertIs(c10d._get_default_group(), group)
        self.assertFalse(c10d._get_default_store().check(["left"]))
        c10d._get_default_store().set("left", "by the second test")
        self.assertEqual(c10d._get_default_store().get("left"), b"by the second test")


class TestDTensorsRngTracker(unittest.TestCase):
    def test_forgotten_after_a_test(self):
        import torch.distributed.tensor._random as dtensor_random

        saved = dtensor_random._rng_tracker
        self.addCleanup(setattr, dtensor_random, "_rng_tracker", saved)
        dtensor_random._rng_tracker = object()  # (a real one needs a GPU: tests/test_torch_caches.py TestOnAGpu)
        forget_destroyed_groups()
        self.assertIsNone(dtensor_random._rng_tracker)


if __name__ == "__main__":
    unittest.main()
