"""Each entry point's run carries its own settings, ranks and notes: tests/fixtures/fx_runs.py.

Two runs in one process, with different seeds and HARNESS_SEED set to a third: the ranks of each run
get that run's seed, the runs have their own rank processes, each run's notes hold its own tests, and
closing one run leaves the other's ranks serving it.
"""
import re
import unittest

from tests._support import FixtureTestCase


class TestTwoRunsInOneProcess(FixtureTestCase):
    RUNNER = "tests.fixtures.fx_runs"  # python -m tests.fixtures.fx_runs: the fixture's own driver
    ENV = {"HARNESS_SEED": "33"}

    def driver(self, tag: str) -> dict[str, dict[str, str]]:
        rows = {}
        for m in re.finditer(rf"^{tag} (.*)$", self.r.stdout, re.M):
            row = dict(kv.split("=", 1) for kv in m.group(1).split())
            rows[row["name"]] = row
        return rows

    def test_each_run_ran_its_tests_and_noted_only_its_own(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        runs = self.driver("RUN")
        self.assertEqual(sorted(runs), ["a", "b"], self.r.describe())
        for row in runs.values():
            self.assertEqual((row["ran"], row["ok"], row["needs_cuda"]), ("2", "1", "1"), self.r.describe())
            self.assertEqual(row["records"], "test_seen,test_skipped_for_want_of_gpus", self.r.describe())

    def test_the_ranks_of_each_run_have_that_runs_settings(self):
        runs = self.driver("RUN")
        seeds = {}
        for row in self.r.rank_lines("SEEN"):
            run = next(name for name, r in runs.items() if row["pid"] in r["pids"].split(","))
            seeds.setdefault(run, set()).add(row["seed"])
        self.assertEqual(seeds, {"a": {"11"}, "b": {"22"}}, self.r.describe())

    def test_a_usage_error_of_another_run_leaves_the_ranks_and_their_template(self):
        again, after = self.driver("AGAIN")["b"], self.driver("AFTER_USAGE_ERROR")["b"]
        self.assertEqual((after["code"], after["ok"]), ("2", "1"), self.r.describe())  # USAGE, and b's test passed
        self.assertEqual(after["pids"], again["pids"], "run b's ranks were replaced after the usage error")
        self.assertNotIn("spawn", self.r.stderr)  # still forked from the template, not spawned for want of it

    def test_the_process_group_outlasts_the_class_timeout(self):
        timeouts = {row["group_timeout"] for row in self.r.rank_lines("SEEN")}
        self.assertEqual(timeouts, {"2060"}, self.r.describe())

    def test_runs_have_their_own_ranks_and_closing_one_leaves_the_other(self):
        runs = self.driver("RUN")
        a, b = (set(runs[name]["pids"].split(",")) for name in "ab")
        self.assertEqual((len(a), len(b)), (2, 2), self.r.describe())
        self.assertFalse(a & b, self.r.describe())
        again = self.driver("AGAIN")["b"]
        self.assertEqual(again["ok"], "1", self.r.describe())
        self.assertEqual(set(again["pids"].split(",")), b, self.r.describe())

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestTheDefaultRunReadsTheEnvironment(FixtureTestCase):
    """Plain ``python -m unittest`` makes no run: the process's default run takes HARNESS_SEED as it is."""

    ARGS = ["tests.fixtures.fx_runs"]
    ENV = {"HARNESS_SEED": "33"}

    def test_the_ranks_get_the_environments_settings_and_the_notes_come_at_exit(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertEqual({row["seed"] for row in self.r.rank_lines("SEEN")}, {"33"}, self.r.describe())
        self.assertIn("harness: 1 test needs CUDA, skipped (a GPU or NCCL was missing): "
                      "tests.fixtures.fx_runs.TestRuns.test_skipped_for_want_of_gpus", self.r.stderr)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
