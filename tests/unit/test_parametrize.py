"""harness.parametrize against upstream's: the same generated names, values and decorators (no processes)."""
import unittest

import torch

from harness import UsageError, decorateIf, instantiate_parametrized_tests, parametrize, subtest


CALLS = []


def _classes(p, inst, sub):
    class T(unittest.TestCase):
        @p("x", [1, 2.5, "a", True, None])
        def test_one(self, x):
            CALLS.append(("one", x))

        @p("dtype", [torch.float32, torch.bfloat16])
        @p("dev", [torch.device("cpu")])
        @p("a, b", [(1, 2), sub((3, 4), name="named"), sub((5, 6), decorators=[unittest.expectedFailure])])
        def test_stacked(self, dtype, dev, a, b):
            CALLS.append(("stacked", dtype, dev, a, b))

        @p("flag", [False, True], name_fn=lambda flag: "on" if flag else "off")
        def test_named(self, flag):
            CALLS.append(("named", flag))

        def test_plain(self):
            CALLS.append("plain")

    inst(T)
    return T


def _tests(cls):
    return {name: getattr(cls, name) for name in dir(cls) if name.startswith("test")}


class TestSameAsUpstream(unittest.TestCase):
    def setUp(self):
        from torch.testing._internal import common_utils as up

        self.ours = _tests(_classes(parametrize, instantiate_parametrized_tests, subtest))
        self.theirs = _tests(_classes(up.parametrize, up.instantiate_parametrized_tests, up.subtest))

    def test_generated_names(self):
        self.assertEqual(sorted(self.ours), sorted(self.theirs))
        self.assertIn("test_stacked_float32_cpu_a_1_b_2", self.ours)
        self.assertIn("test_stacked_bfloat16_cpu_named", self.ours)
        self.assertIn("test_named_on", self.ours)

    def test_each_passes_its_values(self):
        for name, fn in self.theirs.items():
            with self.subTest(name):
                CALLS.clear()
                self.ours[name](None)
                fn(None)
                self.assertEqual(len(CALLS), 2)
                self.assertEqual(CALLS[0], CALLS[1])

    def test_subtest_decorators_mark_only_their_case(self):
        marked = {n for n, f in self.ours.items() if getattr(f, "__unittest_expecting_failure__", False)}
        theirs = {n for n, f in self.theirs.items() if getattr(f, "__unittest_expecting_failure__", False)}
        self.assertEqual(marked, theirs)
        self.assertEqual(len(marked), 2)

    def test_upstream_device_instantiation_reads_ours(self):
        # a file that keeps instantiate_device_type_tests (upstream) with the harness's parametrize
        from torch.testing._internal.common_device_type import instantiate_device_type_tests

        class TestDev(unittest.TestCase):
            @parametrize("n", [1, 2])
            def test_d(self, device, n):
                CALLS.append((device, n))

        scope = {"TestDev": TestDev}
        instantiate_device_type_tests(TestDev, scope, only_for="cpu")
        cls = scope["TestDevCPU"]
        CALLS.clear()
        cls("test_d_n_2_cpu").test_d_n_2_cpu()
        self.assertEqual(CALLS, [("cpu", 2)])


class TestUsage(unittest.TestCase):
    def test_empty_values(self):
        class T(unittest.TestCase):
            @parametrize("x", [])
            def test_x(self, x):
                pass

        with self.assertRaisesRegex(UsageError, r"@parametrize\('x'\) on .*test_x: no values"):
            instantiate_parametrized_tests(T)

    def test_wrong_arity(self):
        class T(unittest.TestCase):
            @parametrize("x, y", [(1, 2, 3)])
            def test_x(self, x, y):
                pass

        with self.assertRaisesRegex(UsageError, "case 0 is .*3 values for 2 names"):
            instantiate_parametrized_tests(T)

    def test_same_name_twice(self):
        class T(unittest.TestCase):
            @parametrize("x", [1, 2], name_fn=lambda x: "same")
            def test_x(self, x):
                pass

        with self.assertRaisesRegex(UsageError, "made the test name 'test_x_same' twice"):
            instantiate_parametrized_tests(T)

    def test_not_a_string(self):
        with self.assertRaisesRegex(UsageError, "comma-separated, in one string"):
            parametrize(["x"], [1])

    def test_decorate_if(self):
        class T(unittest.TestCase):
            @decorateIf(unittest.expectedFailure, lambda p: p["x"] == 2)
            @parametrize("x", [1, 2])
            def test_x(self, x):
                pass

        instantiate_parametrized_tests(T)
        self.assertFalse(getattr(T.test_x_x_1, "__unittest_expecting_failure__", False))
        self.assertTrue(T.test_x_x_2.__unittest_expecting_failure__)


if __name__ == "__main__":
    unittest.main()
