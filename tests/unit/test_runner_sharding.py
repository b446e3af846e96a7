"""harness.runner.sharding: every test in exactly one shard, each class whole, the same split on every machine,
class set-up time in a class's weight, and the times file."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.runner.sharding import class_key, load_times, save_times, shard, split, split_by_class, unit_of
from tests.unit._fakes import load_failure, make_tests

test_ids = st.lists(st.builds("m{}.T{}.test_{}".format, *[st.integers(0, 9)] * 3), unique=True, max_size=40)
seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw):
    """A test list, a times file (some of the tests, some classes' set-up, and some ids no longer there) and a
    shard count."""
    ids = draw(test_ids)
    timed = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    times = {i: draw(seconds) for i in timed}
    classes = sorted({class_key(i) for i in ids})
    set_up = draw(st.lists(st.sampled_from(classes), unique=True)) if classes else []  # class set-up records
    times.update({c: draw(seconds) for c in set_up})
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
    def test_a_class_is_never_split(self, case):
        ids, times, count = case
        owners = split(ids, count, times).owners
        shard_of: dict[str, set[int]] = {}
        for test_id, owner in zip(ids, owners):
            shard_of.setdefault(class_key(test_id), set()).add(owner)
        self.assertEqual({c: len(s) for c, s in shard_of.items()}, {c: 1 for c in shard_of})

    @settings(max_examples=100, deadline=None)
    @given(cases())
    def test_shards_of_a_suite_run_every_test_once_classes_whole_in_suite_order(self, case):
        ids, times, count = case
        spec: dict[str, dict[str, list[str]]] = {}
        for test_id in ids:
            module, cls, method = test_id.split(".")
            spec.setdefault(module, {}).setdefault(cls, []).append(method)
        tests = make_tests(spec)
        shards = [shard(tests, index, count, times)[0] for index in range(1, count + 1)]
        self.assertEqual(sorted(t.id() for s in shards for t in s), sorted(t.id() for t in tests))
        position = {t.id(): n for n, t in enumerate(tests)}
        for mine in shards:
            self.assertEqual([t.id() for t in mine], sorted((t.id() for t in mine), key=position.__getitem__))
        owner = {unit_of(t): n for n, mine in enumerate(shards) for t in mine}
        for n, mine in enumerate(shards):
            self.assertEqual([t.id() for t in mine], [t.id() for t in tests if owner[unit_of(t)] == n])

    @settings(max_examples=100, deadline=None)
    @given(cases())
    def test_jobs_and_shards_make_the_same_split(self, case):
        ids, times, count = case
        owners = split(ids, count, times).owners
        parts = [[i for i, o in zip(ids, owners) if o == s] for s in range(count)]
        self.assertEqual(split_by_class(ids, count, times), [p for p in parts if p])

    def test_longest_first_each_to_the_least_loaded(self):
        how = split(["a", "b", "c", "d"], 2, {"a": 10.0, "b": 6.0, "c": 5.0, "d": 1.0})
        self.assertEqual(how.owners, [0, 1, 1, 0])
        self.assertEqual(how.loads, [11.0, 11.0])

    def test_an_untimed_test_weighs_the_mean_of_the_timed(self):
        how = split(["a", "b", "new"], 2, {"a": 4.0, "b": 2.0})
        self.assertEqual((how.default, how.known), (3.0, 2))
        self.assertEqual(sorted(how.loads), [4.0, 5.0])

    def test_the_class_set_up_time_counts_in_the_weight(self):
        ids = ["m.A.t1", "m.A.t2", "m.B.t1", "m.C.t1"]
        times = {"m.A.t1": 1.0, "m.A.t2": 1.0, "m.B.t1": 3.0, "m.C.t1": 2.5}
        without = split(ids, 2, times)
        self.assertEqual((without.owners, without.loads), ([1, 1, 0, 1], [3.0, 4.5]))  # B; then C, A
        with_set_up = split(ids, 2, {**times, "m.A": 4.0})  # A weighs 1 + 1 + 4
        self.assertEqual((with_set_up.owners, with_set_up.loads), ([0, 0, 1, 1], [6.0, 5.5]))
        self.assertEqual((with_set_up.known, with_set_up.known_classes), (4, 1))

    def test_a_class_record_is_not_a_test_record(self):
        """The mean an untimed test weighs is taken over the tests' records only."""
        how = split(["m.A.t1", "m.A.t2", "m.B.t1"], 2, {"m.A.t1": 2.0, "m.A": 10.0})
        self.assertEqual((how.default, how.known, how.known_classes), (2.0, 1, 1))
        self.assertEqual(sorted(how.loads), [2.0, 14.0])

    def test_import_failures_and_function_tests_are_units_of_their_own(self):
        funcs = [unittest.FunctionTestCase(f) for f in (_func_a, _func_b)]
        tests = [load_failure("no_such_module_one"), load_failure("no_such_module_two"), *funcs]
        self.assertEqual(len({unit_of(t) for t in tests}), 4)
        times = {t.id(): 5.0 for t in tests}
        mine, how = shard(tests, 1, 2, times)
        self.assertEqual(how.loads, [10.0, 10.0])
        self.assertEqual(len(mine), 2)

    def test_the_shard_keeps_suite_order_and_says_what_it_runs(self):
        tests = make_tests({"m": {"T": ["test_a", "test_b"], "U": ["test_c"], "V": ["test_d"]}})
        times = {"m.T.test_a": 5.0, "m.T.test_b": 1.0, "m.U.test_c": 2.0, "m.V.test_d": 2.0, "m.V": 1.0}
        mine, how = shard(tests, 2, 2, times)
        self.assertEqual([t.id() for t in mine], ["m.U.test_c", "m.V.test_d"])
        self.assertIn("shard 2/2: 2 of 4 tests in 2 of 3 classes, about 5 s expected (shards: 6, 5 s; 4 tests "
                      "timed in times.json (and the set-up of 1 classes), the others counted at 2.5 s)",
                      how.note(2, "times.json"))
        self.assertIn("shard 1/2: 2 of 4 tests in 1 of 3 classes", how.note(1, "times.json"))


def _func_a():
    pass


def _func_b():
    pass


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
            self.assertEqual(json.load(f)["version"], 2)

    def test_class_records_round_trip_in_their_own_section(self):
        save_times(self.path, {"m.T.test_a": 1.0}, {"m.T": 3.21})
        save_times(self.path, {"m.U.test_b": 2.0}, {"m.U": 0.5, "m.T": 4.0})
        with open(self.path) as f:
            data = json.load(f)
        self.assertEqual(data["tests"], {"m.T.test_a": 1.0, "m.U.test_b": 2.0})
        self.assertEqual(data["classes"], {"m.T": 4.0, "m.U": 0.5})
        times = load_times(self.path)
        self.assertEqual(times, {"m.T.test_a": 1.0, "m.U.test_b": 2.0, "m.T": 4.0, "m.U": 0.5})
        self.assertEqual(split(["m.T.test_a", "m.U.test_b"], 2, times).loads, [5.0, 2.5])

    def test_a_version_1_file_and_ids_no_longer_there(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            json.dump({"version": 1, "tests": {"m.T.test_a": 2.0, "gone.Gone.test_x": 9.0}}, f)
        times = load_times(self.path)
        self.assertEqual(times, {"m.T.test_a": 2.0, "gone.Gone.test_x": 9.0})
        self.assertEqual(split(["m.T.test_a", "m.T.test_b"], 2, times).loads, [4.0, 0.0])

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
