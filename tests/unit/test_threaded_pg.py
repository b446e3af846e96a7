"""The thread ranks' in-process group (harness.inprocess.threaded_pg): each collective's result on real threads, and the
runner's guess that a file needs no rank processes (harness.runner.session._in_process_only)."""
from __future__ import annotations

import os
import tempfile
import threading
import unittest

import torch
import torch.distributed as dist

from harness.inprocess import threaded_pg
from harness.runner.session import _in_process_only


def on_threads(world_size: int, body, timeout: float = 30.0) -> dict[int, object]:
    """``body(rank)`` on ``world_size`` thread ranks, each with its own default group; their results (or errors)."""
    out: dict[int, object] = {}
    store = dist.HashStore()
    world = threaded_pg.ThreadWorld(world_size, timeout)

    def run(rank: int) -> None:
        threaded_pg.bind(rank)
        try:
            dist.init_process_group(threaded_pg.BACKEND, rank=rank, world_size=world_size, store=store)
            out[rank] = body(rank)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[rank] = exc
            world.abort(f"rank {rank} failed")
        finally:
            threaded_pg.unbind()

    with threaded_pg.installed(world):
        threads = [threading.Thread(target=run, args=(r,)) for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout + 60)  # a bound for a broken group only; a wait past ``timeout`` raises in the thread
    return out


class TestCollectives(unittest.TestCase):
    def test_all_reduce_broadcast_all_gather(self):
        def body(rank):
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t)
            b = torch.tensor([rank])
            dist.broadcast(b, src=2)
            g = torch.empty(4, dtype=torch.long)
            dist.all_gather_into_tensor(g, torch.tensor([rank * 10]))
            parts = [torch.empty(1) for _ in range(4)]
            dist.all_gather(parts, torch.tensor([float(rank)]))
            return t.item(), b.item(), g.tolist(), [p.item() for p in parts], dist.get_rank(), dist.get_world_size()

        out = on_threads(4, body)
        for rank in range(4):
            self.assertEqual(out[rank], (10.0, 2, [0, 10, 20, 30], [0.0, 1.0, 2.0, 3.0], rank, 4))

    def test_reduce_scatter_and_all_to_all(self):
        def body(rank):
            out = torch.empty(2)
            dist.reduce_scatter_tensor(out, torch.arange(8, dtype=torch.float) + rank)
            a2a = torch.empty(4, dtype=torch.long)
            dist.all_to_all_single(a2a, torch.arange(4) + 10 * rank)
            return out.tolist(), a2a.tolist()

        out = on_threads(4, body)
        for rank in range(4):
            reduced, a2a = out[rank]
            self.assertEqual(reduced, [4.0 * (2 * rank) + 6, 4.0 * (2 * rank + 1) + 6])
            self.assertEqual(a2a, [rank + 10 * src for src in range(4)])

    def test_subgroups_meet_apart(self):
        def body(rank):
            evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
            mine = evens if rank % 2 == 0 else odds
            t = torch.tensor([float(rank)])
            dist.all_reduce(t, group=mine)
            return t.item()

        self.assertEqual(on_threads(4, body), {0: 2.0, 1: 4.0, 2: 2.0, 3: 4.0})

    def test_each_thread_has_its_own_default_group_and_the_process_none_after(self):
        out = on_threads(2, lambda rank: dist.get_rank())
        self.assertEqual(out, {0: 0, 1: 1})
        self.assertFalse(dist.is_initialized())

    def test_a_mismatch_names_each_ranks_collective(self):
        def body(rank):
            t = torch.ones(1)
            if rank == 0:
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)

        out = on_threads(2, body)
        for rank in range(2):
            self.assertIsInstance(out[rank], threaded_pg.CollectiveError)
            self.assertIn("rank 0 called broadcast, rank 1 called all_reduce", str(out[rank]))

    def test_a_wait_past_the_timeout_names_the_collective_and_the_missing_rank(self):
        def body(rank):
            if rank == 0:
                dist.all_reduce(torch.ones(1))

        out = on_threads(2, body, timeout=0.5)
        self.assertIsInstance(out[0], threaded_pg.CollectiveTimeout)
        self.assertRegex(str(out[0]), r"rank 0 timed out after 0.5 s in all_reduce .*group rank\(s\) \[1\] never called it")

    def test_a_group_is_made_by_all_its_ranks_together_as_upstreams_threaded_backend_makes_it(self):
        # upstream's threaded backend ends each group's creation with a store barrier: a rank that never makes the
        # group holds its peers there, and is named
        def body(rank):
            if rank == 0:
                dist.new_group([0, 1])

        out = on_threads(2, body, timeout=0.5)
        self.assertIsInstance(out[0], threaded_pg.CollectiveTimeout)
        self.assertRegex(str(out[0]), r"rank 0 timed out after 0.5 s in group creation \(group .* ranks \[0, 1\]\): "
                                      r"group rank\(s\) \[1\] never called it")

    def test_the_creation_is_no_collective_the_groups_calls_count_from_0(self):
        def body(rank):
            group = dist.new_group([0, 1])
            t = torch.ones(1)
            if rank == 0:
                dist.broadcast(t, src=0, group=group)
            else:
                dist.all_reduce(t, group=group)

        out = on_threads(2, body)
        self.assertRegex(str(out[0]), r"rank 0 called broadcast, rank 1 called all_reduce \(call #0 on group ")

    def test_the_backend_outside_a_threaded_test_says_what_it_is_for(self):
        from torch.distributed import distributed_c10d as c10d

        threaded_pg._register()
        with self.assertRaisesRegex(Exception, "harness's threaded classes"):
            threaded_pg._create(c10d._DistributedBackendOptions())


class TestThreadEnd(unittest.TestCase):
    def test_a_thread_rank_ends_with_no_torch_mode_on_its_stacks(self):
        # a mode left there is released after join, as the OS thread ends: during the interpreter's exit that
        # aborts the process (exit status 134) after every test passed
        from harness.inprocess.threaded import _drop_thread_modes

        seen: dict[str, int] = {}

        def rank() -> None:
            torch.set_default_device("cpu")  # what upstream's perThreadSetUp does (TestHSDPWithCustomHook)
            seen["before"] = torch._C._len_torch_function_stack()
            _drop_thread_modes()
            seen["after"] = torch._C._len_torch_function_stack()

        main_before = torch._C._len_torch_function_stack()
        thread = threading.Thread(target=rank)
        thread.start()
        thread.join(60)
        self.assertGreater(seen["before"], 0)
        self.assertEqual(seen["after"], 0)
        self.assertEqual(torch._C._len_torch_function_stack(), main_before)  # the main thread's own stack is its own


class TestInProcessOnly(unittest.TestCase):
    def write(self, text: str) -> str:
        fd, path = tempfile.mkstemp(suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def test_a_file_of_threaded_classes_only(self):
        self.assertTrue(_in_process_only((self.write("class T(FSDPTestMultiThread):\n    pass\n"),)))

    def test_a_file_that_also_has_a_class_on_ranks(self):
        self.assertFalse(_in_process_only((self.write("class T(FSDPTestMultiThread): pass\nclass U(FSDPTest): pass\n"),)))

    def test_folders_modules_and_files_naming_neither(self):
        self.assertFalse(_in_process_only(()))
        self.assertFalse(_in_process_only(("tests",)))
        self.assertFalse(_in_process_only(("tests.compat.cx_threaded",)))
        self.assertFalse(_in_process_only((self.write("class T(MyBase): pass\n"),)))


if __name__ == "__main__":
    unittest.main()
