"""harness.judging.triage's decisions over made-up outcomes: the bisection, what a finding says. No process."""
import math
import unittest

from hypothesis import given, settings, strategies as st

from harness.shared.outcome import FAILED, PASSED, RankResult, SubtestOutcome
from harness.shared.placement import choose_placement
from harness.shared.protocol import Task
from harness.judging.triage import FLAKY, OWN, POLLUTED, UNDECIDED, Finding, Ran, bisect, check
from harness.judging.verdict import Facts, judge


def fails(results):
    """What the parent gives triage: whether a run failed, as the test's verdict says (subtests included)."""
    return judge(results, Facts("c", 2, choose_placement(2, 0, "cpu"))).fails


class Oracle:
    """fails(subset): the test fails after ``subset`` when every culprit of ``culprits`` is in it."""

    def __init__(self, culprits):
        self.culprits = set(culprits)
        self.calls = 0

    def __call__(self, subset):
        self.calls += 1
        return self.culprits <= set(subset)


class TestBisect(unittest.TestCase):
    def test_one_culprit_among_many(self):
        oracle = Oracle({"t17"})
        earlier = [f"t{i}" for i in range(30)]
        self.assertEqual(bisect(earlier, oracle), ["t17"])
        self.assertLessEqual(oracle.calls, 2 * math.ceil(math.log2(30)))

    def test_the_only_earlier_test_needs_no_run(self):
        oracle = Oracle({"a"})
        self.assertEqual(bisect(["a"], oracle), ["a"])
        self.assertEqual(oracle.calls, 0)

    def test_two_that_fail_only_together_are_both_named_in_their_order(self):
        earlier = ["a", "b", "c", "d", "e", "f", "g", "h"]
        self.assertEqual(bisect(earlier, Oracle({"b", "g"})), ["b", "g"])
        self.assertEqual(bisect(earlier, Oracle({"g", "b"})), ["b", "g"])

    @settings(max_examples=200, deadline=None)
    @given(n=st.integers(1, 64), data=st.data())
    def test_any_single_culprit_is_found(self, n, data):
        culprit = data.draw(st.integers(0, n - 1))
        earlier = list(range(n))
        oracle = Oracle({culprit})
        self.assertEqual(bisect(earlier, oracle), [culprit])
        self.assertLessEqual(oracle.calls, 2 * max(1, math.ceil(math.log2(n))))

    @settings(max_examples=200, deadline=None)
    @given(n=st.integers(2, 48), data=st.data())
    def test_any_pair_needed_together_is_found(self, n, data):
        pair = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        found = bisect(list(range(n)), Oracle(pair))
        self.assertEqual(found, sorted(pair))


class FakeWorld:
    """A world that "runs" a sequence of tasks by the rule given: no process (the real ones are in tests/)."""

    made = 0

    def __init__(self, rule):
        self.rule = rule
        self.ran = []
        self.pg_suspect = False
        self.broken = False
        FakeWorld.made += 1

    def test_files(self, temp_dir):
        import contextlib

        return contextlib.nullcontext((None, "store"))

    def run(self, task, grace):
        self.ran.append(task.test_id)
        status = FAILED if self.rule(list(self.ran)) else PASSED
        return [RankResult(rank=r, status=status, exc_type="AssertionError" if status == FAILED else "",
                           message="boom" if status == FAILED else "") for r in range(2)]

    def close(self):
        pass


def task(name):
    return Task(module="m", module_file=None, qualname="T", method=name, seed=0, test_id=name)


def failing():
    return [RankResult(rank=0, status=FAILED, exc_type="AssertionError", message="boom"),
            RankResult(rank=1, status=PASSED)]


class TestCheck(unittest.TestCase):
    def history(self, *names):
        return [Ran(task(n), test=None) for n in names]

    def test_fails_alone_is_its_own(self):
        f = check(task("c"), self.history("a", "b"), failing(), lambda: FakeWorld(lambda ran: True), fails, 1, 60)
        self.assertEqual((f.kind, f.reruns, f.failed, f.runs), (OWN, 1, 2, 2))
        self.assertIn("the test's own failure", f.line())

    def test_fails_after_one_earlier_test_names_it(self):
        rule = lambda ran: ran[-1] == "c" and "a" in ran  # noqa: E731
        f = check(task("c"), self.history("x", "a", "b", "y"), failing(), lambda: FakeWorld(rule), fails, 1, 60)
        self.assertEqual(f.kind, POLLUTED)
        self.assertEqual(f.culprit_ids, ["a"])
        self.assertEqual({r.status for r in f.fresh}, {PASSED})  # the verdict fresh ranks give
        self.assertIn("fails after a in shared ranks; passes in fresh ranks", f.line())

    def test_passes_everywhere_again_is_flaky(self):
        f = check(task("c"), self.history("a"), failing(), lambda: FakeWorld(lambda ran: False), fails, 1, 60)
        self.assertEqual((f.kind, f.failed, f.runs), (FLAKY, 1, 3))
        self.assertIn("flaky: failed 1 of 3 runs", f.line())

    def test_a_spent_budget_stops_after_the_run_alone(self):
        rule = lambda ran: ran[-1] == "c" and "a" in ran  # noqa: E731
        f = check(task("c"), self.history("a", "b"), failing(), lambda: FakeWorld(rule), fails, 1,
                  budget_left=0.0)
        self.assertEqual(f.kind, UNDECIDED)
        self.assertEqual(f.line(), "not checked in fresh ranks: the run's triage budget is spent (HARNESS_TRIAGE_BUDGET)")

    def test_a_budget_spent_while_bisecting_says_it_passed_alone(self):
        rule = lambda ran: ran[-1] == "c" and "a" in ran  # noqa: E731
        clock = iter(range(100))
        import harness.judging.triage as t

        real = t.time.monotonic
        t.time.monotonic = lambda: float(next(clock))  # each look at the clock: a second later
        try:
            f = check(task("c"), self.history("a", "b", "d"), failing(), lambda: FakeWorld(rule), fails, 1, 2.5)
        finally:
            t.time.monotonic = real
        self.assertEqual(f.kind, UNDECIDED)
        self.assertTrue(f.line().startswith("passed alone in fresh ranks; the cause was not found"), f.line())

    def test_a_different_failure_alone_is_said(self):
        class Other(FakeWorld):
            def run(self, task, grace):
                return [RankResult(rank=0, status=FAILED, exc_type="KeyError", message="'x'")]

        f = check(task("c"), self.history("a"), failing(), lambda: Other(None), fails, 1, 60)
        self.assertEqual(f.kind, OWN)
        self.assertIn("differently: KeyError", f.line())


    def test_a_subtest_that_fails_in_every_run_is_the_tests_own(self):
        # the ranks pass the test itself; one run_subtests combination fails on both, every time
        class Subtests(FakeWorld):
            def run(self, task, grace):
                self.ran.append(task.test_id)
                sub = SubtestOutcome({"a": 2}, FAILED, "AssertionError", "12.0 != -1.0")
                return [RankResult(rank=r, status=PASSED, subtests=[sub]) for r in range(2)]

        first = Subtests(None).run(task("c"), 1)
        f = check(task("c"), self.history("a", "b"), first, lambda: Subtests(None), fails, 1, 60)
        self.assertEqual((f.kind, f.runs, f.failed), (OWN, 2, 2))
        self.assertIn("the test's own failure", f.line())


class TestFindingWords(unittest.TestCase):
    def test_two_culprits_are_named_together(self):
        f = Finding(POLLUTED, "m.T.c", culprits=[Ran(task("m.T.a"), None), Ran(task("m.T.b"), None)])
        self.assertIn("fails after m.T.a and m.T.b (together) in shared ranks", f.line())


if __name__ == "__main__":
    unittest.main()
