"""torch's own caches do not carry a test's process groups into the next: tests/fixtures/fx_torch_caches.py.

Without the harness clearing DTensor's sharding-propagation caches after the groups of a test are
destroyed, ``test_2`` fails on every torch version with "Could not resolve the process group
registered under the name N" (on torch 2.11 with a GPU visible, ``test_4`` too), and passes with
``HARNESS_REUSE=0``. The sharded-tensor tests make groups of their own and use sharded tensors on them, test after
test. A group torch names by its ranks meets afresh in each test that makes it: the same name each time, so its
rendezvous in the default group's store must not read what the earlier test's group left there (``test_2`` of
``TestGroupsNamedByTheirRanks`` failed on reused ranks, and triage blamed ``test_1``). The backward tests run
DTensor's backward, which on a GPU runs in autograd's thread for the device, whose caches outlive the test: on CPU
the backward runs in the rank's own thread, so they run on a GPU only (tools/gpu_check.sh runs this file there, on
shared GPUs).
"""
import unittest

from tests._support import FixtureTestCase, gpus

MOD = "tests.fixtures.fx_torch_caches"


class TestMeshesOfDestroyedGroupsAreForgotten(FixtureTestCase):
    ARGS = [f"{MOD}.TestMesh2D", f"{MOD}.TestShardedTensor", f"{MOD}.TestGroupsNamedByTheirRanks", "-v"]

    def test_every_test_passes_on_reused_ranks(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("Ran 12 tests")
        self.assertNotIn("Could not resolve the process group", self.r.output)
        self.assertNotIn("altered the process", self.r.output)

    def test_a_group_named_by_its_ranks_meets_afresh_in_each_test(self):
        # every test's pair met, on the same four processes: no test failed and was taken for one that an earlier
        # test broke (its ranks replaced). Up to torch 2.14 the pair has the same name in each test (a hash of its
        # ranks and of how many groups are up); 2.15 salts it with c10d's group counter instead.
        rows = self.r.rank_lines("PAIR")
        self.assertEqual(len(rows), 12, self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 4, self.r.describe())

    def test_the_same_four_processes_ran_every_test(self):
        rows = self.r.rank_lines("MESH")
        self.assertEqual(len(rows), 24, self.r.describe())
        rows += self.r.rank_lines("SHARDED")
        self.assertEqual(len(rows), 24 + 12, self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 4, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestOnAGpu(FixtureTestCase):
    """On CUDA tensors (shared GPUs under auto on a machine with fewer than 4): sharded tensors on the groups the
    tests make, and DTensor's backward, which runs in autograd's thread for the GPU, whose caches must be emptied
    too."""
    ARGS = [f"{MOD}.TestShardedTensor", f"{MOD}.TestBackward", f"{MOD}.TestRandom", "-v"]
    ENV = {"HARNESS_DEVICE": "auto", "CUDA_VISIBLE_DEVICES": None}

    @classmethod
    def setUpClass(cls) -> None:
        if gpus() < 1:
            raise unittest.SkipTest("needs a GPU: on CPU the backward runs in the rank's own thread, whose caches "
                                    "TestMeshesOfDestroyedGroupsAreForgotten checks")
        super().setUpClass()

    def test_every_test_passes_in_the_same_ranks(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertNotIn("Could not resolve the process group", self.r.output)
        rows = self.r.rank_lines("BACKWARD")
        self.assertEqual(len(rows), 8, self.r.describe())
        rows += self.r.rank_lines("SHARDED")
        self.assertEqual(len(rows), 8 + 12, self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 4, self.r.describe())

    def test_dtensors_rng_tracker_is_made_afresh_in_each_test(self):
        # as in a fresh process: no tracker when the test starts, and one made by its first random op
        rows = self.r.rank_lines("RANDOM")
        self.assertEqual(len(rows), 4, self.r.describe())
        self.assertEqual({(row["fresh"], row["tracker"]) for row in rows}, {("True", "True")}, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
