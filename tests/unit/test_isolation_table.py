"""The table of a rank's process state (harness.ranks.isolation): every row complete, what is put back put back,
what is left named, and one failing restore never stopping the others. In this process, no ranks."""
from __future__ import annotations

import logging
import os
import sys
import threading
import unittest
import warnings

import torch
import torch.distributed as dist

from harness.ranks.isolation import RESOURCES, UNWATCHED, Resource, record, restore


class TestTheTable(unittest.TestCase):
    def test_every_resource_has_a_name_a_record_a_restore_and_a_check(self):
        names = [row.name for row in RESOURCES]
        self.assertEqual(len(names), len(set(names)), "two rows share a name")
        for row in RESOURCES:
            with self.subTest(row.name):
                self.assertTrue(row.name)
                self.assertTrue(callable(row.record) and callable(row.restore) and callable(row.check))

    def test_every_kind_of_state_is_a_row(self):
        names = {row.name for row in RESOURCES}
        for name in ("os.environ", "cwd", "sys.path", "sys.meta_path", "sys.path_hooks", "sys.argv", "sys.stdout",
                     "sys.stderr", "sys.stdin", "sys.excepthook", "sys.settrace / setprofile",
                     "sys.setrecursionlimit", "gc", "umask", "socket.setdefaulttimeout", "warnings",
                     "logging.disable", "loggers", "signal handlers", "interval timer", "torch default device",
                     "torch function modes", "torch dispatch modes", "torch flags", "torch print options",
                     "nn.Module global hooks", "CUDA memory statistics", "torch._dynamo caches",
                     "torch.compile configs", "torch functions", "child processes", "threads"):
            self.assertIn(name, names)

    def test_a_snapshot_has_a_value_for_every_row(self):
        snap = record()
        self.assertEqual(set(snap.saved), {row.name for row in RESOURCES})
        self.assertEqual(restore(snap), [])


class TestPutBack(unittest.TestCase):
    """What tests commonly change is put back silently: nothing is reported."""

    def test_python_state(self):
        path, argv = list(sys.path), list(sys.argv)
        snap = record()
        os.environ["UNIT_ISOLATION_MODE"] = "debug"
        sys.path.insert(0, "/nonexistent-plugins")
        sys.argv = sys.argv + ["--unit-flag"]
        logging.getLogger("unit_isolation.trainer").setLevel(logging.DEBUG)
        warnings.simplefilter("error")
        self.assertEqual(restore(snap), [])
        self.assertNotIn("UNIT_ISOLATION_MODE", os.environ)
        self.assertEqual((sys.path, sys.argv), (path, argv))
        self.assertEqual(logging.getLogger("unit_isolation.trainer").level, logging.NOTSET)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")  # inside the block only: "error" would have raised above it
            warnings.warn("harmless", UserWarning)
        self.assertEqual(len(caught), 1)

    def test_torch_state(self):
        threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
        snap = record()
        torch.set_num_threads(threads + 1)
        torch.set_default_dtype(torch.float64)
        torch.set_printoptions(precision=2)
        self.assertEqual(restore(snap), [])
        self.assertEqual((torch.get_num_threads(), torch.get_default_dtype()), (threads, dtype))
        self.assertEqual(str(torch.tensor([1 / 3])), "tensor([0.3333])")


class TestLeftAltered(unittest.TestCase):
    """What cannot be put back is named, one sentence each, in the words the run's summary prints."""

    def test_a_replaced_torch_function(self):
        original = dist.all_reduce
        snap = record()
        dist.all_reduce = lambda *args, **kwargs: original(*args, **kwargs)
        try:
            self.assertEqual(restore(snap), ["torch.distributed.all_reduce replaced"])
        finally:
            dist.all_reduce = original

    def test_a_thread_left_running(self):
        stop = threading.Event()
        snap = record()
        threading.Thread(target=stop.wait, name="unit-poller", daemon=True).start()
        try:
            self.assertEqual(restore(snap), ["thread 'unit-poller' left running"])
        finally:
            stop.set()


class TestEveryRowRuns(unittest.TestCase):
    """A row whose restore or check fails is reported by name; the rows after it still run."""

    def table(self, calls: list[str]) -> tuple[Resource, ...]:
        def fail(saved: object) -> None:
            raise RuntimeError("cannot put it back")

        def check_fails(saved: object) -> list[str]:
            raise OSError("cannot look")

        return (
            Resource("first", lambda: 1, fail),
            Resource("second", lambda: 2, lambda saved: calls.append(f"restore second {saved}")),
            Resource("unwatched", lambda: UNWATCHED, lambda saved: calls.append("restore unwatched"),
                     lambda saved: ["never said"]),
            Resource("third", lambda: 3, check=check_fails),
            Resource("fourth", lambda: 4, check=lambda saved: [f"fourth left altered ({saved})"]),
        )

    def test_a_failing_restore_or_check_is_named_and_the_others_run(self):
        calls: list[str] = []
        left = restore(record(self.table(calls)))
        self.assertEqual(calls, ["restore second 2"])
        self.assertEqual(left, ["restore first failed: RuntimeError: cannot put it back",
                                "check third failed: OSError: cannot look",
                                "fourth left altered (4)"])

    def test_every_restore_comes_before_every_check(self):
        calls: list[str] = []
        rows = (Resource("a", lambda: None, lambda saved: calls.append("restore a"),
                         lambda saved: calls.append("check a") or []),
                Resource("b", lambda: None, lambda saved: calls.append("restore b"),
                         lambda saved: calls.append("check b") or []))
        restore(record(rows))
        self.assertEqual(calls, ["restore a", "restore b", "check a", "check b"])

    def test_a_real_row_that_fails_does_not_stop_the_rest(self):
        # The environment's restore breaks; the rows after it (sys.path) are still put back.
        rows = tuple(row if row.name != "os.environ" else Resource(row.name, row.record, self._broken)
                     for row in RESOURCES)
        path = list(sys.path)
        snap = record(rows)
        sys.path.append("/nonexistent-after-environ")
        left = restore(snap)
        self.assertEqual(left, ["restore os.environ failed: KeyError: 'broken'"])
        self.assertEqual(sys.path, path)

    @staticmethod
    def _broken(saved: object) -> None:
        raise KeyError("broken")


class TestTorchNotImported(unittest.TestCase):
    def test_torch_rows_watch_nothing_without_torch(self):
        torch_rows = {"torch default device", "torch function modes", "torch dispatch modes", "torch flags",
                      "torch print options", "nn.Module global hooks", "CUDA memory statistics"}
        rows = [row for row in RESOURCES if row.name in torch_rows]
        self.assertEqual(len(rows), len(torch_rows))
        saved = sys.modules.pop("torch")
        try:
            self.assertEqual([row.record() for row in rows], [UNWATCHED] * len(rows))
        finally:
            sys.modules["torch"] = saved


if __name__ == "__main__":
    unittest.main()
