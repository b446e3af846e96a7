"""--jobs N: how the selected tests are split over the workers, and what a worker is told."""
from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import unittest
from pathlib import Path

from hypothesis import given, strategies as st

from harness.runner.jobs import Claims, _write_queue, claiming_suite, worker_argv
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


def _queue(parts: list[list[str]], times: dict[str, float]) -> str:
    tmp = tempfile.mkdtemp(prefix="jobs-claims-test-")
    ids = [i for part in parts for i in part]
    weights = {}
    for i in ids:
        weights[class_key(i)] = weights.get(class_key(i), 0.0) + times.get(i, 1.0)
    return _write_queue(tmp, parts, {i: class_key(i) for i in ids}, weights)


def _drain(queue: str, share: int, out: "multiprocessing.Queue") -> None:
    claims = Claims(queue, share)
    while (ids := claims.next()) is not None:
        out.put((share, class_key(ids[0])))
    out.put((share, None))


class TestClaims(unittest.TestCase):
    """A worker runs its own share's classes in suite order, then takes what is left of the others' shares."""

    def setUp(self):
        self.parts = [["m.A.t1", "m.A.t2", "m.B.t1"], ["m.C.t1", "m.D.t1", "m.E.t1"]]
        self.times = {"m.A.t1": 5.0, "m.A.t2": 5.0, "m.B.t1": 9.0, "m.C.t1": 1.0, "m.D.t1": 1.0, "m.E.t1": 2.0}
        self.queue = _queue(self.parts, self.times)
        self.addCleanup(shutil.rmtree, str(Path(self.queue).parent), True)

    def test_its_own_share_first_in_suite_order_then_the_fullest_shares_last_class(self):
        first, second = Claims(self.queue, 0), Claims(self.queue, 1)
        self.assertEqual(first.next(), ["m.A.t1", "m.A.t2"])
        self.assertEqual([second.next(), second.next(), second.next()], [["m.C.t1"], ["m.D.t1"], ["m.E.t1"]])
        self.assertEqual(second.next(), ["m.B.t1"])  # share 0's last class: its worker is still in m.A
        self.assertIsNone(first.next())
        self.assertEqual(first.taken(), {"m.A": 0, "m.B": 1, "m.C": 1, "m.D": 1, "m.E": 1})

    def test_the_suite_runs_what_it_claims_as_it_claims_it(self):
        class T(unittest.TestCase):
            def test_a(self):
                pass

        tests = {i: T("test_a") for part in self.parts for i in part}
        for i, t in tests.items():
            t.id = (lambda i=i: i)  # the ids of the split
        suite = claiming_suite(list(tests.values()), Claims(self.queue, 1))
        self.assertEqual(suite.countTestCases(), 6)  # counting claims nothing
        self.assertEqual(Claims(self.queue, 0).taken(), {})
        self.assertEqual([t.id() for t in suite], ["m.C.t1", "m.D.t1", "m.E.t1", "m.B.t1", "m.A.t1", "m.A.t2"])

    def test_workers_at_once_run_every_class_once(self):
        out = multiprocessing.get_context("fork").Queue()
        workers = [multiprocessing.get_context("fork").Process(target=_drain, args=(self.queue, k, out))
                   for k in (0, 1)]
        for w in workers:
            w.start()
        got, ended = [], 0
        while ended < 2:
            share, unit = out.get(timeout=30)
            if unit is None:
                ended += 1
            else:
                got.append(unit)
        for w in workers:
            w.join(10)
        self.assertEqual(sorted(got), ["m.A", "m.B", "m.C", "m.D", "m.E"])


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
