"""--jobs N: how the selected tests are split over the workers, and what a worker is told."""
from __future__ import annotations

import unittest
from pathlib import Path

from hypothesis import given, strategies as st

from harness.runner.jobs import worker_argv
from harness.runner.sharding import class_key, split_by_class
from harness.runner.session import Options

_ids = st.lists(st.tuples(st.sampled_from(["a", "b", "pkg.c"]), st.sampled_from(["T", "U", "V", "W"]),
                          st.integers(0, 5)), unique=True, max_size=40).map(
    lambda rows: [f"{m}.{c}.test_{n}" for m, c, n in rows])


class TestSplitByClass(unittest.TestCase):
    def test_a_class_stays_whole_and_the_load_is_balanced(self):
        ids = ["m.A.t1", "m.A.t2", "m.B.t1", "m.C.t1", "m.C.t2"]
        times = {"m.A.t1": 10.0, "m.A.t2": 10.0, "m.B.t1": 12.0, "m.C.t1": 1.0, "m.C.t2": 1.0}
        self.assertEqual(split_by_class(ids, 2, times), [["m.A.t1", "m.A.t2"], ["m.B.t1", "m.C.t1", "m.C.t2"]])

    def test_more_jobs_than_classes_leaves_no_empty_worker(self):
        self.assertEqual(split_by_class(["m.A.t1", "m.A.t2"], 4, {}), [["m.A.t1", "m.A.t2"]])

    def test_the_class_of_a_test(self):
        self.assertEqual(class_key("pkg.test_mod.TestX.test_y"), "pkg.test_mod.TestX")

    @given(ids=_ids, jobs=st.integers(1, 6), seed=st.integers(0, 1000))
    def test_every_test_runs_once_in_suite_order_with_its_class(self, ids, jobs, seed):
        times = {i: float((hash(i) + seed) % 7) for i in ids[::2]}
        parts = split_by_class(ids, jobs, times)
        self.assertLessEqual(len(parts), jobs)
        self.assertEqual(sorted(i for part in parts for i in part), sorted(ids))
        owner = {class_key(i): n for n, part in enumerate(parts) for i in part}
        for n, part in enumerate(parts):
            self.assertTrue(part)
            self.assertEqual(part, [i for i in ids if owner[class_key(i)] == n])  # whole classes, in order


class TestWorkerArgv(unittest.TestCase):
    def test_a_worker_gets_the_folders_the_settings_and_its_share(self):
        options = Options(root=Path("/p"), folders=("tests",), device="cuda-shared", timeout=60.0,
                          fail_env_changed=True, verbose=True)
        argv = worker_argv(options, "nightly", "/t/job1.ids", "/t/job1.report")
        self.assertEqual(argv[1:], ["-m", "harness", "tests", "--job-of", "/t/job1.ids", "/t/job1.report",
                                    "--hypothesis-profile", "nightly", "--slowest", "0",
                                    "--python-files", "test_*.py", "--python-files", "*_test.py",
                                    "--device", "cuda-shared", "--timeout", "60.0", "--fail-env-changed", "-v"])

    def test_targets_win_over_folders(self):
        argv = worker_argv(Options(root=Path("/p"), targets=("pkg.test_x",), folders=("tests",)), "ci", "i", "r")
        self.assertEqual(argv[3], "pkg.test_x")
        self.assertNotIn("tests", argv)


if __name__ == "__main__":
    unittest.main()
