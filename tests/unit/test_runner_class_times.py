"""RunnerResult measures the time each class spends outside its tests (setUpClass, tearDownClass, module
fixtures) and --update-times records it; real unittest classes whose fixtures sleep a little.

Only lower bounds on times are asserted: a loaded machine makes everything slower, never faster."""
from __future__ import annotations

import sys
import time
import types
import unittest

from harness.runner.results import RunnerResult
from harness.runner.session import times_to_record
from harness.runner.sharding import class_key
from harness.shared.status import Status
from tests.unit._fakes import entry, load_failure

NAP = 0.05


class _Listener:
    def test_done(self, entry, started) -> None:
        pass

    def subtest_done(self, status, params, reason) -> None:
        pass


def _nap(seconds: float):
    def fixture(cls) -> None:
        time.sleep(seconds)
    return classmethod(fixture)


def make_class(module: str, name: str, set_up: float = 0.0, tear_down: float = 0.0, methods=("test_1", "test_2"),
               skip: str = "") -> type:
    """A TestCase class ``module.name`` whose setUpClass/tearDownClass sleep; ``skip``: its setUpClass skips."""
    attrs = {m: (lambda self: None) for m in methods}
    attrs.update(__module__=module, __qualname__=name, tearDownClass=_nap(tear_down))
    if skip:
        def set_up_class(cls) -> None:
            raise unittest.SkipTest(skip)
        attrs["setUpClass"] = classmethod(set_up_class)
    else:
        attrs["setUpClass"] = _nap(set_up)
    return type(name, (unittest.TestCase,), attrs)


def run(tests: list) -> RunnerResult:
    """As the session runs them: startTestRun, one suite, stopTestRun."""
    result = RunnerResult(_Listener(), buffer=True, failfast=False, keep_output=False)
    result.startTestRun()
    try:
        unittest.TestSuite(tests).run(result)
    finally:
        result.stopTestRun()
    return result


def _tests_of(*classes: type) -> list:
    loader = unittest.TestLoader()
    return [t for c in classes for t in loader.loadTestsFromTestCase(c)]


class TestClassTimes(unittest.TestCase):
    def test_set_up_class_is_recorded_under_the_class_id(self):
        a = make_class("pkg.test_m", "TestA", set_up=NAP)
        result = run(_tests_of(a))
        self.assertEqual([e.status for e in result.entries], [Status.PASSED, Status.PASSED])
        self.assertEqual(list(result.class_seconds), ["pkg.test_m.TestA"])
        self.assertEqual(class_key(result.entries[0].test_id), "pkg.test_m.TestA")  # the id --shard weighs it by
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestA"], NAP)

    def test_tear_down_class_counts_for_the_class_that_ran_it(self):
        a = make_class("pkg.test_m", "TestA", set_up=NAP, tear_down=NAP)
        b = make_class("pkg.test_m", "TestB", set_up=NAP, tear_down=NAP)
        c = make_class("pkg.test_m", "TestC")
        result = run(_tests_of(a, b, c))
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestA"], 2 * NAP)
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestB"], 2 * NAP)  # the last one's tear-down too
        self.assertIn("pkg.test_m.TestC", result.class_seconds)

    def test_the_tests_own_time_is_not_the_classes(self):
        def slow(self) -> None:
            time.sleep(NAP)

        a = make_class("pkg.test_m", "TestA", set_up=NAP, methods=("test_slow",))
        a.test_slow = slow
        result = run(_tests_of(a))
        self.assertGreaterEqual(result.entries[0].seconds, NAP)
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestA"], NAP)

    def test_module_fixtures_count_with_the_modules_first_and_last_class(self):
        name = "distharness_unit_fixture_module"
        module = types.ModuleType(name)
        module.setUpModule = lambda: time.sleep(NAP)
        module.tearDownModule = lambda: time.sleep(NAP)
        sys.modules[name] = module
        self.addCleanup(sys.modules.pop, name, None)
        first, last = make_class(name, "TestFirst"), make_class(name, "TestLast")
        result = run(_tests_of(first, last))
        self.assertGreaterEqual(result.class_seconds[f"{name}.TestFirst"], NAP)
        self.assertGreaterEqual(result.class_seconds[f"{name}.TestLast"], NAP)

    def test_a_class_run_twice_adds_up(self):
        a = make_class("pkg.test_m", "TestA", set_up=NAP)
        b = make_class("pkg.test_m", "TestB")
        result = run([*_tests_of(a), *_tests_of(b), *_tests_of(a)])
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestA"], 2 * NAP)

    def test_an_import_failure_has_no_class_record(self):
        a = make_class("pkg.test_m", "TestA", set_up=NAP)
        result = run([load_failure("distharness_no_such_module"), *_tests_of(a)])
        self.assertEqual(list(result.class_seconds), ["pkg.test_m.TestA"])
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestA"], NAP)

    def test_a_class_skipped_in_set_up_class_leaves_the_next_ones_record_whole(self):
        a = make_class("pkg.test_m", "TestA", skip="not here")
        b = make_class("pkg.test_m", "TestB", set_up=NAP)
        result = run(_tests_of(a, b))
        self.assertEqual([e.status for e in result.entries], [Status.SKIPPED, Status.PASSED, Status.PASSED])
        self.assertGreaterEqual(result.class_seconds["pkg.test_m.TestB"], NAP)


class TestWhatUpdateTimesRecords(unittest.TestCase):
    def test_tests_that_ran_and_their_classes(self):
        entries = [entry("m.A.test_1", seconds=1.0), entry("m.A.test_2", Status.FAILED, seconds=2.0),
                   entry("m.B.test_1", Status.SKIPPED), entry("m.C.test_1", seconds=0.5),
                   entry("m.D.setUpClass", Status.ERROR, real=False)]
        tests, classes = times_to_record(entries, {"m.A": 3.0, "m.B": 0.1, "m.C": 0.2, "m.D": 1.0})
        self.assertEqual(tests, {"m.A.test_1": 1.0, "m.A.test_2": 2.0, "m.C.test_1": 0.5})
        self.assertEqual(classes, {"m.A": 3.0, "m.C": 0.2})  # all of B skipped, D never ran a test


if __name__ == "__main__":
    unittest.main()
