"""harness.strategies: every drawn configuration is valid, and each strategy shrinks to the simplest case.

Pure draws, in this process (no ranks): the configurations' validity on real ranks is checked by
tests/fixtures/fx_drawn_worlds.py, whose every draw distributes a tensor and gathers it back.
"""
from __future__ import annotations

import math
import pickle
import unittest

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from torch.distributed.tensor import Partial, Replicate, Shard

from harness.strategies import (Mesh, Placements, Sharding, WorldSize, dtypes, meshes, placements, shapes,
                                shardings, shards_per_dim, world_sizes)

# The checks below draw hundreds of configurations in this process: quick, and the same every run.
MANY = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _is(p: object, kind: type) -> bool:
    return type(p) is kind


class TestValid(unittest.TestCase):
    @MANY
    @given(w=world_sizes(2, 6))
    def test_world_sizes_stay_in_range(self, w):
        self.assertIsInstance(w, WorldSize)
        self.assertTrue(2 <= w <= 6)
        self.assertEqual(w.harness_world_size, int(w))

    @MANY
    @given(mesh=meshes(world_sizes(1, 8), min_dims=1, max_dims=3))
    def test_a_meshs_product_is_its_world_and_its_dims_are_named(self, mesh):
        self.assertTrue(1 <= mesh.ndim <= 3)
        self.assertTrue(1 <= mesh.size <= 8)
        self.assertEqual(math.prod(mesh.shape), mesh.harness_world_size)
        self.assertEqual(len(mesh.names), mesh.ndim)
        self.assertEqual(len(set(mesh.names)), mesh.ndim)

    @MANY
    @given(data=st.data(), world=st.integers(1, 8), dims=st.integers(1, 3))
    def test_every_shape_of_a_world_is_drawn(self, data, world, dims):
        mesh = data.draw(meshes(world, dims, dims))
        self.assertEqual((mesh.size, mesh.ndim), (world, dims))

    @MANY
    @given(data=st.data(), ndim=st.integers(0, 3), mesh_dims=st.integers(1, 3))
    def test_placements_are_valid_for_the_tensor(self, data, ndim, mesh_dims):
        where = data.draw(placements(mesh_dims, ndim, partial=("sum", "max")))
        self.assertIsInstance(where, Placements)
        self.assertEqual(len(where), mesh_dims)
        for p in where:
            self.assertTrue(_is(p, Replicate) or _is(p, Partial) or (_is(p, Shard) and 0 <= p.dim < ndim), where)
            if _is(p, Partial):
                self.assertIn(p.reduce_op, ("sum", "max"))

    @MANY
    @given(case=shardings(world_sizes(1, 8), max_mesh_dims=2, ndim=st.integers(0, 3), dtype=dtypes()))
    def test_a_sharding_fits_together(self, case):
        self.assertIsInstance(case, Sharding)
        self.assertEqual(len(case.placements), case.mesh.ndim)
        self.assertEqual(case.harness_world_size, case.mesh.size)
        self.assertTrue(all(side >= 0 for side in case.shape))
        self.assertTrue(all(p.dim < len(case.shape) for p in case.placements if _is(p, Shard)))

    @MANY
    @given(data=st.data(), mesh=meshes(world_sizes(1, 8), max_dims=2))
    def test_shapes_without_uneven_or_empty_divide_evenly(self, data, mesh):
        where = data.draw(placements(mesh, 2, partial=()))
        shape = data.draw(shapes(2, mesh, where, uneven=False, empty=False))
        for side, pieces in zip(shape, shards_per_dim(mesh.shape, where, 2)):
            self.assertEqual(side % pieces, 0, (mesh, where, shape))
            self.assertGreater(side, 0)

    def test_uneven_and_empty_shards_are_drawn(self):
        three = Mesh((3,))
        uneven = find(shapes(1, three, (Shard(0),), empty=False), lambda s: s[0] % 3)
        self.assertEqual(uneven, (4,))  # one row per rank, plus one: rank 0 gets two
        empty = find(shapes(1, three, (Shard(0),)), lambda s: s[0] < 3)
        self.assertEqual(empty, (0,))
        self.assertEqual(find(shapes(2), lambda s: 0 in s), (1, 0))

    def test_every_value_is_its_own_replay_line(self):
        from harness import strategies as module

        case = Sharding(Mesh((2, 3), ("dp", "tp")), Placements((Shard(1), Partial("max"))), (4, 7), None)
        names = {**vars(module), "Shard": Shard, "Replicate": Replicate, "Partial": Partial}
        for value in (WorldSize(5), Mesh((4,)), Mesh((2, 2), ("a", "b")), case, case.placements):
            self.assertEqual(eval(repr(value), names), value, repr(value))
            self.assertEqual(pickle.loads(pickle.dumps(value)), value)
        self.assertEqual(repr(case), "Sharding(Mesh((2, 3), ('dp', 'tp')), Placements((Shard(dim=1), "
                                     "Partial('max'))), (4, 7))")

    def test_bad_arguments_say_what_is_allowed(self):
        for call, words in [(lambda: world_sizes(0, 4), r"min_size=0: expected an int >= 1"),
                            (lambda: world_sizes(4, 2), r"max_size=2: expected an int >= 4"),
                            (lambda: meshes(4, min_dims=3, max_dims=2), r"max_dims=2: expected an int >= 3"),
                            (lambda: placements(Mesh((2,)), 2, partial=("mean",)), r"reduce ops from"),
                            (lambda: placements("dp", 2), r"expected a harness.strategies.Mesh"),
                            (lambda: shapes(2, Mesh((2,))), r"give both mesh and placements"),
                            (lambda: dtypes(("complex",)), r"kinds=\('complex',\)"),
                            (lambda: Mesh((2, 0)), r"ints >= 1"),
                            (lambda: WorldSize(0), r"at least 1 rank")]:
            with self.subTest(words=words), self.assertRaisesRegex(InvalidArgument, words):
                call()


class TestShrinking(unittest.TestCase):
    """Each strategy's simplest case is what a failure shrinks to."""

    def test_fewer_ranks(self):
        self.assertEqual(find(world_sizes(1, 8), lambda w: True), WorldSize(1))
        self.assertEqual(find(world_sizes(1, 8), lambda w: w % 2 == 1 and w > 1), WorldSize(3))

    def test_fewer_mesh_dims_then_no_dims_of_one(self):
        self.assertEqual(find(meshes(world_sizes(1, 8)), lambda m: True), Mesh((1,), ("dp",)))
        self.assertEqual(find(meshes(world_sizes(1, 8)), lambda m: m.size == 4), Mesh((4,), ("dp",)))
        self.assertEqual(find(meshes(world_sizes(1, 8)), lambda m: m.ndim == 2 and m.size > 1),
                         Mesh((2, 1), ("dp", "tp")))
        self.assertEqual(find(meshes(world_sizes(1, 8)), lambda m: m.ndim == 2 and m.size == 4),
                         Mesh((2, 2), ("dp", "tp")))

    def test_replicate_before_shard_before_partial(self):
        self.assertEqual(find(placements(Mesh((2, 2)), 2), lambda p: True), (Replicate(), Replicate()))
        self.assertEqual(find(placements(Mesh((2, 2)), 2), lambda p: Replicate() not in p), (Shard(0), Shard(0)))
        self.assertEqual(find(placements(Mesh((2,)), 2), lambda p: _is(p[0], Partial)), (Partial("sum"),))

    def test_smaller_even_shapes(self):
        mesh = Mesh((2, 3))
        self.assertEqual(find(shapes(2, mesh, (Shard(0), Shard(1))), lambda s: True), (2, 3))
        self.assertEqual(find(shapes(2, mesh, (Shard(0), Shard(0))), lambda s: True), (6, 1))
        self.assertEqual(find(shapes(2), lambda s: True), (1, 1))

    def test_float32_first(self):
        import torch

        self.assertEqual(find(dtypes(("float", "int")), lambda d: True), torch.float32)
        self.assertEqual(find(dtypes(("float", "int")), lambda d: not d.is_floating_point), torch.int64)

    def test_a_whole_configuration(self):
        self.assertEqual(find(shardings(world_sizes(1, 8)), lambda c: True),
                         Sharding(Mesh((1,), ("dp",)), Placements((Replicate(),)), (1, 1)))
        # the planted bug's configuration: an odd world, an uneven shard
        odd_uneven = find(shardings(world_sizes(1, 8)), lambda c: c.mesh.size % 2 and c.mesh.size > 1 and c.uneven)
        self.assertEqual(odd_uneven, Sharding(Mesh((3,), ("dp",)), Placements((Shard(0),)), (4, 1)))


if __name__ == "__main__":
    unittest.main()


class TestTheParentReadsTheDrawnWorld(unittest.TestCase):
    """harness.parent.drawn and the report's replay line, on drawn values (no ranks)."""

    def test_the_world_an_example_draws(self):
        from harness.parent.drawn import drawn_world

        case = Sharding(Mesh((3,)), Placements((Shard(0),)), (4, 1))
        self.assertEqual(drawn_world({"case": case, "seed": 7}, "m.T.t"), 3)
        self.assertEqual(drawn_world({"world": WorldSize(4), "mesh": Mesh((2, 2))}, "m.T.t"), 4)
        self.assertIsNone(drawn_world({"seed": 7, "n": 3}, "m.T.t"))

    def test_values_that_draw_different_worlds_are_named(self):
        from harness.errors import UsageError
        from harness.parent.drawn import drawn_world

        with self.assertRaisesRegex(UsageError, r"m\.T\.t: the example draws worlds of different sizes: "
                                                r"world=WorldSize\(3\) \(3 ranks\), mesh=Mesh\(\(2, 2\)\) \(4 ranks\)"):
            drawn_world({"world": WorldSize(3), "mesh": Mesh((2, 2))}, "m.T.t")

    def test_the_replay_line_is_python(self):
        from harness.judging.report_text import example_note, replay_text

        self.assertEqual(replay_text((Shard(0), Partial("avg"))), "(Shard(dim=0), Partial('avg'))")
        note = example_note({"case": Sharding(Mesh((3,), ("dp",)), Placements((Partial(),)), (4, 1))},
                            "m.TestX.test_y", None, 3, 1234)
        self.assertEqual(note.splitlines(), [
            "Hypothesis example: case=Sharding(Mesh((3,), ('dp',)), Placements((Partial('sum'),)), (4, 1))",
            "  drawn world: 3 ranks; ranks seeded with HARNESS_SEED=1234",
            "Reproduce it: put @example(case=Sharding(Mesh((3,), ('dp',)), Placements((Partial('sum'),)), (4, 1))) "
            "above @given (from hypothesis import example; from harness.strategies import Mesh, Placements, Sharding; "
            "from torch.distributed.tensor import Partial) and run python -m harness m -k TestX.test_y."])
