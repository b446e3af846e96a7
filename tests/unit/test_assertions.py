"""Upstream's TestCase surface on harness.TestCase (harness/assertions.py), checked in this process.

The one helper that loads a file in a subprocess (``_attempt_load_from_subprocess``) is checked in
tests/compat/test_compat_assertions.py.
"""
import os
import shutil
import tempfile
import unittest
import warnings

import torch
from torch.distributed.tensor import Replicate, Shard

from harness import TestCase
from tests.unit._fakes import InFakeGroup


def _probe() -> TestCase:
    """A harness TestCase to call the assertions on (made here, so no runner collects it as a test)."""

    class Probe(TestCase):
        def runTest(self):
            pass

    return Probe()


class TestAssertEqual(unittest.TestCase):
    def setUp(self):
        self.t = _probe()

    def ok(self, a, b, **kw):
        self.t.assertEqual(a, b, **kw)

    def bad(self, a, b, needle="", **kw):
        with self.assertRaises(AssertionError) as cm:
            self.t.assertEqual(a, b, **kw)
        self.assertIn(needle, str(cm.exception))

    def test_sequences_compare_by_items_not_type(self):
        self.ok((Shard(0),), [Shard(0)])
        self.ok((Shard(0), Replicate()), [Shard(0), Replicate()])
        self.bad((Shard(0),), [Shard(1)], "Shard(dim=0) != Shard(dim=1) at [0]")
        self.bad([1, 2], [1, 2, 3], "the lengths differ")

    def test_nested_containers_with_str_and_int_leaves(self):
        self.ok({"a": [1, "x", (2, 3)], "b": {"c": "d"}}, {"a": (1, "x", [2, 3]), "b": {"c": "d"}})
        self.bad({"a": [1, "x"]}, {"a": [1, "y"]}, "'x' != 'y' at ['a'][1]")
        self.bad({"a": 1}, {"b": 1}, "the keys differ")
        self.bad("1", 1)

    def test_tensors_and_numbers(self):
        self.ok(torch.tensor(3.0), 3)
        self.ok(3, torch.tensor(3.0))
        self.ok(torch.ones(3), 1)
        self.ok(torch.tensor([1.0, 2.0]), [1.0, 2.0])
        self.bad(torch.ones(3), 2, "not close")
        self.ok(1, 1.0)
        self.ok(True, 1)
        self.ok(1.0, 1.0 + 1e-7)
        self.bad(1.0, 1.1, "1.0 != 1.1")
        self.bad(2, 3, "2 != 3")

    def test_tolerances_and_exactness(self):
        a, b = torch.ones(2), torch.ones(2) + 1e-3
        self.bad(a, b)
        self.ok(a, b, atol=1e-2, rtol=0)
        self.bad(torch.ones(2), torch.ones(2, dtype=torch.float64), "dtype")
        self.ok(torch.ones(2), torch.ones(2, dtype=torch.float64), exact_dtype=False)
        self.ok(torch.ones(2), torch.ones(2), exact_device=True)
        with self.assertRaises(ValueError):
            self.t.assertEqual(a, b, atol=1.0)

    def test_precision_and_rel_tol_are_floors(self):
        a, b = torch.ones(2), torch.ones(2) + 1e-3
        self.t.precision = 1e-2
        self.ok(a, b)
        self.ok(1.0, 1.001)
        self.t.precision = 0
        self.t.rel_tol = 1e-2
        self.ok(a, b)
        self.t.rel_tol = 0
        self.bad(a, b)

    def test_message_is_added_or_called(self):
        self.bad([1], [2], "EXTRA", msg="EXTRA")
        with self.assertRaises(AssertionError) as cm:
            self.t.assertEqual(1, 2, lambda generated: f"CALLED({generated})")
        self.assertEqual(str(cm.exception), "CALLED(1 != 2)")

    def test_assert_not_equal(self):
        self.t.assertNotEqual(torch.ones(2), torch.zeros(2))
        self.t.assertNotEqual((1,), [2])
        with self.assertRaises(AssertionError):
            self.t.assertNotEqual((1,), [1])


class TestDTensors(InFakeGroup):
    """DTensors compare by layout, then by their shards; against a plain tensor, the error says which to take
    (rank 0 of a world of 2 in torch's fake group: the layouts and local shards, no peer needed)."""

    def test_layout_then_shards(self):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import distribute_tensor

        t, mesh = _probe(), init_device_mesh("cpu", (2,))
        a = distribute_tensor(torch.arange(4.0), mesh, [Shard(0)], src_data_rank=None)
        t.assertEqual(a, distribute_tensor(torch.arange(4.0), mesh, [Shard(0)], src_data_rank=None))
        with self.assertRaisesRegex(AssertionError, "DTensor placements differ"):
            t.assertEqual(a, distribute_tensor(torch.arange(4.0), mesh, [Replicate()], src_data_rank=None))
        with self.assertRaisesRegex(TypeError, r"is ambiguous: call \.full_tensor\(\)"):
            t.assertEqual(a, torch.arange(2.0))


class TestWarningsAndExpect(unittest.TestCase):
    def setUp(self):
        self.t = _probe()

    def test_assert_not_warn(self):
        self.t.assertNotWarn(lambda: None)
        with self.assertRaises(AssertionError) as cm:
            self.t.assertNotWarn(lambda: warnings.warn("CX-WARNED"), "while loading")
        self.assertIn("while loading: expected no warning, got 1: UserWarning: CX-WARNED", str(cm.exception))

    def test_assert_warns_once_regex(self):
        with self.t.assertWarnsOnceRegex(UserWarning, "CX-.*once"):
            warnings.warn("CX-warned once")
        with self.assertRaises(AssertionError):
            with self.t.assertWarnsOnceRegex(UserWarning, "CX"):
                pass
        with self.assertRaises(AssertionError):
            with self.t.assertWarnsOnceRegex(DeprecationWarning, "CX"):
                warnings.warn("CX-user warning")
        with self.assertRaises(AssertionError):
            with self.t.assertWarnsOnceRegex(UserWarning, "nomatch"):
                warnings.warn("CX-user warning")

    def test_assert_expected_raises_reads_the_expect_file(self):
        here = tempfile.mkdtemp(prefix="distharness-expect-")
        self.addCleanup(shutil.rmtree, here, True)
        module = type(self.t).__module__
        import sys

        saved = sys.modules[module].__file__
        sys.modules[module].__file__ = os.path.join(here, "test_x.py")
        self.addCleanup(setattr, sys.modules[module], "__file__", saved)
        name = self.t.id()[len(module) + 1:]
        os.makedirs(os.path.join(here, "expect"))
        with open(os.path.join(here, "expect", name + "-boom.expect"), "w") as f:
            f.write("CX boom")

        def boom():
            raise ValueError("CX boom")

        self.t.assertExpectedRaises(ValueError, boom, subname="boom")
        with self.assertRaises(AssertionError):
            self.t.assertExpectedRaises(ValueError, lambda: None, subname="boom")
        with self.assertRaises(AssertionError) as cm:
            self.t.assertExpected("other", "missing")
        self.assertIn("no expect file", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
