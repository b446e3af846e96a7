"""No rank starts a test's tearDown (or its cleanups) before every rank has ended the test body.

Upstream runs ``setUp`` and ``tearDown`` in the parent, after every rank process ended. A raw
``MultiProcessTestCase`` that makes its own group on a ``FileStore`` at ``self.file_name`` and removes that
file in ``tearDown`` relies on it: a rank that ran its tearDown while a peer still used the file would pull
the store from under it.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

from harness import MultiProcContinuousTest, MultiProcessTestCase, run_tests, with_comms

#: how many times each FileStore test runs in a row (one test method each)
RUNS = int(os.environ.get("CX_TEARDOWN_RUNS", "20"))


class TestFileStoreRemovedInTearDown(MultiProcessTestCase):
    """Upstream's pattern (``_composable/test_replicate.py``): a group of its own on ``self.file_name``."""

    timeout = 60

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except OSError:
            pass

    def _init_pg(self):
        store = dist.FileStore(self.file_name, self.world_size)
        store.set_timeout(datetime.timedelta(seconds=10))
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size, store=store)
        return store

    def _late_reader(self):
        # Rank 0's body ends at once; rank 1 reads the store a moment later. Had rank 0's tearDown run by then,
        # the file (and the key in it) would be gone, and rank 1 would wait for the key until the store's timeout.
        store = self._init_pg()
        if self.rank == 0:
            store.set("from-rank-0", "CX-KEY")
        else:
            time.sleep(0.1)
            self.assertEqual(store.get("from-rank-0"), b"CX-KEY")

    def _as_upstream(self):
        self._init_pg()
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), self.world_size)


for _i in range(RUNS):
    setattr(TestFileStoreRemovedInTearDown, f"test_late_reader_{_i:02d}", TestFileStoreRemovedInTearDown._late_reader)
    setattr(TestFileStoreRemovedInTearDown, f"test_as_upstream_{_i:02d}", TestFileStoreRemovedInTearDown._as_upstream)


def _marker(test, rank):
    # beside the test's FileStore path (a pool's own directory; torchrun's TMPDIR), named for the test
    folder, name = os.path.split(test.file_name)
    return os.path.join(folder, f"cx-torn-down-{name}-{rank}")


class _Probe:
    """Each rank leaves a marker as its tearDown (or a cleanup) runs; rank 1 looks for rank 0's after a pause."""

    def _check_no_peer_torn_down(self):
        if self.rank == 1:
            time.sleep(0.2)
            self.assertFalse(os.path.exists(_marker(self, 0)), "CX-EARLY-TEARDOWN: rank 0 ran its tearDown first")


class TestTearDownWaits(_Probe, MultiProcessTestCase):
    def tearDown(self):
        open(_marker(self, self.rank), "w").close()
        super().tearDown()

    @with_comms
    def test_teardown_waits_for_every_body(self):
        self._check_no_peer_torn_down()

    def test_without_a_group(self):
        self._check_no_peer_torn_down()


class TestCleanupWaits(_Probe, MultiProcessTestCase):
    def test_cleanup_waits_for_every_body(self):
        self.addCleanup(lambda: open(_marker(self, self.rank), "w").close())
        self._check_no_peer_torn_down()


class TestContinuousTearDownWaits(_Probe, MultiProcContinuousTest):
    world_size = 2

    def tearDown(self):
        open(_marker(self, self.rank), "w").close()
        super().tearDown()

    def test_continuous_teardown_waits(self):
        self._check_no_peer_torn_down()


class TestPeerTrouble(MultiProcessTestCase):
    """A rank whose peer failed or hangs is held no longer than the peer grace."""

    timeout = 120  # the peer grace (the test module sets 2 s) must end these long before

    def tearDown(self):
        super().tearDown()

    @with_comms
    def test_peer_fails_while_this_rank_waits(self):
        if self.rank == 1:
            raise RuntimeError("CX-PEER-FAILED")
        dist.recv(torch.zeros(1), 1)  # never sent: rank 1 failed first

    @with_comms
    def test_peer_hangs_in_a_collective_this_rank_never_calls(self):
        if self.rank == 1:
            dist.all_reduce(torch.ones(1))  # rank 0 ends its body without it (CX-NEVER-CALLED)


if __name__ == "__main__":
    run_tests()
