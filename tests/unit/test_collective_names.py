"""One table of collective names (harness/shared/collective_names.py): the names a fault and a sweep count calls by
(the Python functions, harness.ranks.collective_calls) are the names a pinned trace shows (the dispatched ops,
harness.testing.collectives), alias for alias; and on a one-rank gloo group the same calls are named alike at both
levels."""
from __future__ import annotations

import os
import tempfile
import unittest

from harness.ranks import collective_calls
from harness.shared import collective_names as names


class TestOneTable(unittest.TestCase):
    def test_the_faults_table_is_the_shared_one(self):
        self.assertIs(collective_calls.OPS, names.CALLS)
        self.assertIs(collective_calls.FUNCOL_OPS, names.FUNCTIONAL_CALLS)

    def test_every_tensor_call_has_the_name_a_trace_gives_it(self):
        traced = set(names.OPS.values()) | set(names.PROCESS_GROUP_METHODS.values())
        called = set(names.CALLS.values()) | set(names.FUNCTIONAL_CALLS.values())
        self.assertEqual(called - names.OBJECT_CALLS, traced)
        self.assertFalse(names.OBJECT_CALLS & traced, "an object collective is its tensor collectives in a trace")

    def test_a_function_and_the_op_it_dispatches_share_a_name(self):
        for function, op in [("all_gather_single", "c10d._allgather_base_.default"), ("isend", "c10d::send"),
                             ("irecv", "c10d::recv_"), ("all_reduce_coalesced", "c10d::allreduce_coalesced_"),
                             ("all_gather_coalesced", "c10d::allgather_coalesced_"),
                             ("reduce_scatter_single", "c10d::_reduce_scatter_base_"),
                             ("monitored_barrier", "c10d::monitored_barrier_"),
                             ("all_gather_tensor", "_c10d_functional::all_gather_into_tensor")]:
            with self.subTest(function):
                self.assertEqual(names.call_name(function), names.user_name(op))


class TestBothLevelsOnOneRank(unittest.TestCase):
    """The same calls, seen by the faults' interception and by the recorder at once, on a one-rank gloo group."""

    def test_each_tensor_call_is_named_alike(self):
        import torch
        import torch.distributed as dist

        from harness.testing.collectives import record_collectives

        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1)
            seen: list[str] = []
            try:
                collective_calls.install(seen.append)
                with record_collectives() as record:
                    t = torch.ones(2)
                    dist.all_reduce(t)
                    dist.all_gather([torch.empty(2)], t)
                    # the aliases where this torch has them (2.13 on), else the names they stand for
                    getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(torch.empty(2), t)
                    getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(torch.empty(2), torch.ones(2))
                    dist.broadcast(t, 0)
                    dist.reduce(t, 0)
                    dist.all_to_all_single(torch.empty(2), torch.ones(2))
                    dist.barrier()
            finally:
                collective_calls.uninstall()
                dist.destroy_process_group()
        traced = [line.split("(", 1)[0] for line in record.lines()]
        self.assertEqual(seen, traced)
        self.assertEqual(seen, ["all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
                                "broadcast", "reduce", "all_to_all_single", "barrier"])
