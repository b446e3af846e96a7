"""A failed init_process_group on one rank must not shift that rank's group names (c10d names the default group
by a counter and rendezvous under that name): the next group the harness makes is named "0" on every rank."""
import os
import shutil
import tempfile
import unittest

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from harness.ranks.comms import ProcessGroupKeeper
from harness.shared.protocol import group_timeout


class TestGroupNames(unittest.TestCase):
    def test_next_default_group_is_named_0_after_a_failed_init(self):
        if dist.is_initialized():
            self.skipTest("a default group is already up in this process")
        d = tempfile.mkdtemp(prefix="distharness-names-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        keeper = ProcessGroupKeeper(lambda: dist.FileStore(os.path.join(d, "store"), 1), 0, 1)
        saved = c10d._world.group_count
        c10d._world.group_count = 1  # what an init_process_group that raised while connecting leaves behind
        try:
            keeper.ensure("gloo", group_timeout(60))
            self.assertEqual(c10d._get_default_group().group_name, "0")
        finally:
            keeper.release()
            c10d._world.group_count = saved


if __name__ == "__main__":
    unittest.main()
