"""harness.runner.sharding: every test in exactly one shard, the same split on every machine, and the times file."""
from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import unittest

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runner.sharding import load_times, save_times, shard, split
from tests.unit._fakes import make_tests

test_ids = st.lists(st.builds("m{}.T{}.test_{}".format, *[st.integers(0, 9)] * 3), unique=True, max_size=40)
seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw):
    """A test list, a times file (some of the tests, and some tests no longer there) and a shard count."""
    ids = draw(test_ids)
    timed = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    times = {i: draw(seconds) for i in timed}
    times.update(draw(st.dictionaries(st.text(min_size=1, max_size=8), seconds, max_size=5)))
    return ids, times, draw(st.integers(min_value=1, max_value=8))


class TestSplit(unittest.TestCase):
    @settings(max_examples=100, deadline=None)
    @given(cases())
    def test_every_test_in_exactly_one_shard(self, case):
        ids, times, count = case
        how = split(ids, count, times)
        self.assertEqual(len(how.owners), len(ids))
        self.assertTrue(all(0 <= o < count for o in how.owners))
        shards = [[i for i, o in zip(ids, how.owners) if o == s] for s in range(count)]
        self.assertEqual(sorted(i for s in shards for i in s), sorted(ids))

    @settings(max_examples=100, deadline=None)
    @given(cases(), st.randoms(use_true_random=False))
    def test_the_same_split_on_every_machine(self, case, rng):
        """Neither the times file's key order nor the order the tests come in changes who runs what."""
        ids, times, count = case
        mine = dict(zip(ids, split(ids, count, times).owners))
        items = list(times.items())
        rng.shuffle(items)
        order = list(ids)
        rng.shuffle(order)
        theirs = dict(zip(order, split(order, count, dict(items)).owners))
        self.assertEqual(mine, theirs)

    @settings(max_examples=100, deadline=None)
    @given(cases())
    def test_shards_of_a_suite_run_every_test_once(self, case):
        ids, times, count = case
        tests = make_tests({"m": {"T": [f"test_{n}" for n in range(len(ids))]}})
        ran = [t for index in range(1, count + 1) for t in shard(tests, index, count, times)[0]]
        self.assertEqual(sorted(t.id() for t in ran), sorted(t.id() for t in tests))

    def test_longest_first_each_to_the_least_loaded(self):
        how = split(["a", "b", "c", "d"], 2, {"a": 10.0, "b": 6.0, "c": 5.0, "d": 1.0})
        self.assertEqual(how.owners, [0, 1, 1, 0])
        self.assertEqual(how.loads, [11.0, 11.0])

    def test_an_untimed_test_weighs_the_mean_of_the_timed(self):
        how = split(["a", "b", "new"], 2, {"a": 4.0, "b": 2.0})
        self.assertEqual((how.default, how.known), (3.0, 2))
        self.assertEqual(sorted(how.loads), [4.0, 5.0])

    def test_the_shard_keeps_suite_order_and_says_what_it_runs(self):
        tests = make_tests({"m": {"T": ["test_a", "test_b", "test_c"]}})
        mine, how = shard(tests, 2, 2, {"m.T.test_a": 5.0, "m.T.test_b": 1.0, "m.T.test_c": 2.0})
        self.assertEqual([t.id() for t in mine], ["m.T.test_b", "m.T.test_c"])
        self.assertIn("shard 2/2: 2 of 3 tests, about 3 s expected", how.note(2, "times.json"))


class TestTimesFile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="distharness-unit-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "sub", "times.json")

    def test_missing_is_empty_and_save_merges(self):
        self.assertEqual(load_times(self.path), {})
        save_times(self.path, {"m.T.test_a": 1.23456})
        save_times(self.path, {"m.T.test_b": 2.0})
        self.assertEqual(load_times(self.path), {"m.T.test_a": 1.235, "m.T.test_b": 2.0})
        with open(self.path) as f:
            self.assertEqual(json.load(f)["version"], 1)

    def test_unreadable_is_empty(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            f.write("{not json")
        self.assertEqual(load_times(self.path), {})

    def test_a_flat_mapping_is_read_too(self):
        with open(os.path.join(self.dir, "flat.json"), "w") as f:
            json.dump({"m.T.test_a": 3, "bad": "x"}, f)
        self.assertEqual(load_times(os.path.join(self.dir, "flat.json")), {"m.T.test_a": 3.0})


if __name__ == "__main__":
    unittest.main()
