"""Functional all-gathers and reduce-scatters, sends and receives staged through the CPU, as ranks on shared GPUs
run them.

gloo cannot run torch's functional all-gather and reduce-scatter on CUDA tensors (the rank dies with
SIGSEGV); on shared GPUs the harness runs them through the CPU (harness.ranks.gloo_cuda). The CUDA case
itself is in tests/test_cuda.py (a GPU machine); here the same kernels, registered for the CPU key in the
fixture's own processes, are checked against the values each collective must give. So are the staged sends and
receives (gloo hands CUDA pointers to its transport as host memory), with the point-to-point, scatter, gather,
all-to-all and object collectives of real files around them; a recorded trace shows each staged collective
once, as the user called it.
"""
import unittest

from tests._support import FixtureTestCase

MOD = "tests.fixtures.fx_gloo_staging"


class TestStagedKernels(FixtureTestCase):
    ARGS = [f"{MOD}.TestStaged", "-v"]
    ENV = {"HARNESS_DEVICE": "cpu"}

    def test_each_staged_collective_gives_the_collectives_values(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        for name in ("test_all_gather", "test_reduce_scatter", "test_every_collective", "test_dtensor_redistributes"):
            with self.subTest(name=name):
                self.assertMatchesReport(rf"^{name} \({MOD}\.TestStaged\.{name}\) \.\.\. ok$")
                self.assertEqual(self.r.output.count(f"STAGED ok {name} "), 4, self.r.describe())

    def test_a_staged_collective_is_recorded_once_as_the_users(self):
        # the trace pinned in the fixture holds: the CPU collectives run inside the staging are not in it
        self.assertMatchesReport(rf"^test_recorded_once \({MOD}\.TestStaged\.test_recorded_once\) \.\.\. ok$")
        self.assertEqual(self.r.output.count("STAGED ok test_recorded_once "), 4, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
