"""Hypothesis strategies for what a distributed test varies: world size, device mesh, placements, shapes, dtypes.

A test draws its world with them, and the harness runs each example in a world of the drawn size
(every rank gets the same example, drawn in the parent)::

    from hypothesis import given
    from harness import DTensorTestBase, with_comms
    from harness.strategies import shardings

    class TestRoundTrip(DTensorTestBase):
        @with_comms
        @given(case=shardings(world_sizes(1, 8), max_mesh_dims=2, ndim=2))
        def test_round_trip(self, case):
            full = torch.randn(case.shape)
            d = distribute_tensor(full, case.mesh, case.placements)   # case.mesh: the DeviceMesh, built
            self.assertEqual(d.full_tensor(), full)

Every strategy shrinks towards the simplest case: fewer ranks, fewer mesh dims, ``Replicate`` before
``Shard`` before ``Partial``, smaller shapes that divide evenly over the ranks, ``float32``. A value that
says how many ranks it needs (:class:`WorldSize`, :class:`Mesh`, :class:`Sharding`: their
``harness_world_size``) picks the example's world; in the ranks, a :class:`Mesh` (alone, or in a
:class:`Sharding`) is handed to the test body as the ``DeviceMesh`` built from it on the default group.
Each value's ``repr`` is the Python that makes it again, for an ``@example(...)`` line.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

__all__ = ["WorldSize", "Mesh", "Placements", "Sharding", "world_sizes", "meshes", "placements", "shapes",
           "dtypes", "shardings", "DEFAULT_DIM_NAMES", "REDUCE_OPS"]

#: the dim names a drawn mesh of 1, 2 or 3 dims gets (more dims: d0, d1, ...)
DEFAULT_DIM_NAMES: dict[int, tuple[str, ...]] = {1: ("dp",), 2: ("dp", "tp"), 3: ("pp", "dp", "tp")}
#: the reduce ops a ``Partial`` may carry that ``distribute_tensor`` accepts
REDUCE_OPS = ("sum", "avg", "max", "min")


# ---- the values drawn ------------------------------------------------------------------------------


class WorldSize(int):
    """A drawn number of ranks: an ``int`` the harness runs the example on that many ranks for.

    Example::

        @given(world=world_sizes(1, 8))
        def test_x(self, world):            # self.world_size == world, in a world of that size
            ...
    """

    def __new__(cls, value: int) -> "WorldSize":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(f"WorldSize({value!r}): a world has at least 1 rank")
        return super().__new__(cls, value)

    @property
    def harness_world_size(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"WorldSize({int(self)})"

    def __reduce__(self) -> Any:
        return (WorldSize, (int(self),))


@dataclasses.dataclass(frozen=True)
class Mesh:
    """A device mesh as drawn: its ``shape`` (product: the world size) and ``names`` (one per dim).

    In the ranks the test body gets the ``torch.distributed.device_mesh.DeviceMesh`` built from it
    (``init_device_mesh(device_type, shape, mesh_dim_names=names)`` on the default group).

    Example::

        Mesh((2, 3), ("dp", "tp")).size     # 6
    """

    shape: tuple[int, ...]
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape):
            raise InvalidArgument(f"Mesh({self.shape!r}): a mesh shape is a non-empty tuple of ints >= 1")
        names = None if self.names is None else tuple(self.names)
        if names is not None and (len(names) != len(shape) or len(set(names)) != len(names)):
            raise InvalidArgument(f"Mesh({shape!r}, {self.names!r}): one distinct name per mesh dim")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "names", names)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def harness_world_size(self) -> int:
        return self.size

    def build(self, device_type: str) -> Any:
        """The ``DeviceMesh`` of this shape on the default process group (every rank calls it alike)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        if not dist.is_initialized():
            raise InvalidArgument(f"{self!r} is built on the default process group, and there is none: decorate "
                                  "the test with @with_comms (or derive from FSDPTest)")
        if dist.get_world_size() != self.size:
            raise InvalidArgument(f"{self!r} needs {self.size} ranks; this world has {dist.get_world_size()}")
        return init_device_mesh(device_type, self.shape, mesh_dim_names=self.names)

    def harness_in_rank(self, device_type: str) -> Any:
        return self.build(device_type)

    def __repr__(self) -> str:
        return f"Mesh({self.shape!r}, {self.names!r})" if self.names else f"Mesh({self.shape!r})"


def _placement_repr(p: Any) -> str:
    """A placement as the Python that makes it again (torch's ``Partial`` prints as ``Partial(sum)``)."""
    if type(p).__name__ == "Partial" and hasattr(p, "reduce_op"):
        return f"Partial({p.reduce_op!r})"
    return repr(p)


class Placements(tuple):
    """One placement per mesh dim (``Shard(d)``, ``Replicate()``, ``Partial(op)``), as ``distribute_tensor``
    takes them; its ``repr`` is Python that makes them again."""

    def __repr__(self) -> str:
        inner = ", ".join(_placement_repr(p) for p in self)
        return f"Placements(({inner}{',' if len(self) == 1 else ''}))"

    def __reduce__(self) -> Any:
        return (Placements, (tuple(self),))


@dataclasses.dataclass(frozen=True)
class Sharding:
    """One distributed configuration: a tensor of ``shape`` and ``dtype`` placed by ``placements`` on ``mesh``.

    In the ranks, ``mesh`` is the ``DeviceMesh`` built from the drawn :class:`Mesh`.

    Example::

        full = torch.randn(case.shape, dtype=case.dtype)
        dt = distribute_tensor(full, case.mesh, case.placements)
    """

    mesh: Any  # Mesh in the parent, DeviceMesh in the ranks
    placements: Placements
    shape: tuple[int, ...]
    dtype: Any = None  # torch.dtype; None: the default

    @property
    def harness_world_size(self) -> int:
        return self.mesh.harness_world_size if isinstance(self.mesh, Mesh) else int(self.mesh.size())

    def harness_in_rank(self, device_type: str) -> "Sharding":
        return dataclasses.replace(self, mesh=self.mesh.build(device_type)) if isinstance(self.mesh, Mesh) else self

    @property
    def uneven(self) -> bool:
        """Some tensor dim does not divide evenly over the ranks that shard it."""
        shape = self.mesh.shape if isinstance(self.mesh, Mesh) else tuple(self.mesh.shape)
        return any(side % n for side, n in zip(self.shape, shards_per_dim(shape, self.placements, len(self.shape))))

    def __repr__(self) -> str:
        dtype = "" if self.dtype is None else f", dtype={self.dtype!r}"
        return f"Sharding({self.mesh!r}, {self.placements!r}, {self.shape!r}{dtype})"


# ---- the strategies ---------------------------------------------------------------------------------


def _check_int(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgument(f"{name}={value!r}: expected an int >= {least}")
    return value


def world_sizes(min_size: int = 1, max_size: int = 8) -> st.SearchStrategy[WorldSize]:
    """Numbers of ranks from ``min_size`` to ``max_size``, shrinking towards ``min_size``.

    Example::

        @given(world=world_sizes(1, 8))
    """
    _check_int("min_size", min_size, 1)
    _check_int("max_size", max_size, min_size)
    # sampled_from, not integers: drawn first in a composite (shardings, meshes), hypothesis's integers() gave the
    # smallest world about a third of the examples (one rank, where no sharding bug shows); a sample is drawn evenly
    # and shrinks the same way, towards min_size
    return st.sampled_from(range(min_size, max_size + 1)).map(WorldSize)


def _factorizations(n: int, dims: int) -> list[tuple[int, ...]]:
    """Every ordered ``dims``-tuple of ints >= 1 whose product is ``n``, the simplest first: fewest dims
    of size 1, then the dims largest first."""
    if dims == 1:
        return [(n,)]
    found = [(d,) + rest for d in range(1, n + 1) if n % d == 0 for rest in _factorizations(n // d, dims - 1)]
    if dims > 1:
        found.sort(key=lambda s: (s.count(1), [-x for x in s]))
    return found


def _names(dims: int, names: Sequence[str] | None) -> tuple[str, ...] | None:
    if names is None:
        return DEFAULT_DIM_NAMES.get(dims, tuple(f"d{i}" for i in range(dims)))
    return tuple(names)[:dims] if len(names) >= dims else tuple(names) + tuple(f"d{i}" for i in range(len(names), dims))


def meshes(world: int | st.SearchStrategy[int] | None = None, min_dims: int = 1, max_dims: int = 2,
           names: Sequence[str] | None = None) -> st.SearchStrategy[Mesh]:
    """Mesh shapes of ``min_dims`` to ``max_dims`` dims whose product is the world size, with dim names.

    ``world``: an int (that world), a strategy of them, or None (:func:`world_sizes` 1 to 8). ``names``:
    the dim names (default :data:`DEFAULT_DIM_NAMES`). Dims of size 1 are drawn too (HSDP's ``(n, 1)``).
    Shrinks to fewer ranks, then fewer dims, then a shape with fewer dims of size 1.

    Example::

        @given(mesh=meshes(world_sizes(1, 8), max_dims=2))
        def test_x(self, mesh):             # the ranks get the DeviceMesh
            ...
    """
    _check_int("min_dims", min_dims, 1)
    _check_int("max_dims", max_dims, min_dims)
    if names is not None and (isinstance(names, str) or len(set(names)) != len(names)):
        raise InvalidArgument(f"names={names!r}: expected a sequence of distinct dim names")
    if world is None:
        world = world_sizes(1, 8)
    elif not isinstance(world, st.SearchStrategy):
        world = st.just(_check_int("world", world, 1))

    @st.composite
    def draw_mesh(draw: Any) -> Mesh:
        n = int(draw(world))
        dims = draw(st.integers(min_dims, max_dims))
        shapes = _factorizations(n, dims)
        # The same choice picks the same rank of shape in any world (modulo the number of shapes), so that
        # shrinking the world leaves the rest of a failing example as it was.
        return Mesh(shapes[draw(st.integers(0, _CHOICE_BOUND)) % len(shapes)], _names(dims, names))

    return draw_mesh()


def _mesh_dims(mesh: Any) -> tuple[int, ...]:
    """The shape of ``mesh``: a :class:`Mesh`, a ``DeviceMesh``, a tuple of sizes, or a number of dims."""
    if isinstance(mesh, Mesh):
        return mesh.shape
    if isinstance(mesh, int) and not isinstance(mesh, bool):
        return (1,) * _check_int("mesh", mesh, 1)
    if isinstance(mesh, (tuple, list)):
        return tuple(mesh)
    if hasattr(mesh, "shape") and hasattr(mesh, "ndim"):
        return tuple(mesh.shape)
    raise InvalidArgument(f"mesh={mesh!r}: expected a harness.strategies.Mesh, a DeviceMesh, a shape or a "
                          "number of mesh dims")


def _placement_choices(ndim: int, partial: Sequence[str]) -> list[Any]:
    from torch.distributed.tensor import Partial, Replicate, Shard

    return [Replicate()] + [Shard(d) for d in range(ndim)] + [Partial(op) for op in partial]


def placements(mesh: Any, ndim: int, partial: Sequence[str] = ("sum",)) -> st.SearchStrategy[Placements]:
    """One placement per dim of ``mesh`` for a tensor of ``ndim`` dims: ``Replicate()``, ``Shard(d)`` with
    ``d < ndim`` (several mesh dims may shard the same tensor dim), ``Partial(op)`` for each op in
    ``partial`` (of :data:`REDUCE_OPS`; ``()``: none). Shrinks towards ``Replicate``, then ``Shard(0)``.

    ``mesh``: a :class:`Mesh` (drawn ones: use :func:`shardings`, or ``meshes(...).flatmap``), a
    ``DeviceMesh``, a shape, or a number of mesh dims.

    Example::

        placements(Mesh((2, 2)), ndim=2)    # e.g. Placements((Shard(dim=1), Replicate()))
    """
    dims = _mesh_dims(mesh)
    _check_int("ndim", ndim, 0)
    bad = [op for op in partial if op not in REDUCE_OPS]
    if isinstance(partial, str) or bad:
        raise InvalidArgument(f"partial={partial!r}: expected a sequence of reduce ops from {REDUCE_OPS}")
    choices = _placement_choices(ndim, partial)
    return st.tuples(*[st.sampled_from(choices) for _ in dims]).map(Placements)


def shards_per_dim(mesh_shape: Sequence[int], placements: Iterable[Any], ndim: int) -> tuple[int, ...]:
    """How many pieces each tensor dim is cut into: the product of the sizes of the mesh dims that shard it.

    Example::

        shards_per_dim((2, 3), (Shard(0), Shard(0)), 2)     # (6, 1)
    """
    pieces = [1] * ndim
    for size, p in zip(mesh_shape, placements):
        dim = getattr(p, "dim", None)
        if type(p).__name__ == "Shard" and dim is not None and 0 <= dim < ndim:
            pieces[dim] *= size
    return tuple(pieces)


#: the bound of a choice reduced modulo a count that depends on the world (mesh shapes, remainders): the choice
#: stays valid, and means nearly the same, when a failing example's world shrinks
_CHOICE_BOUND = 63


def _side(pieces: int, max_per_shard: int, uneven: bool, empty: bool) -> st.SearchStrategy[int]:
    """One tensor dim cut into ``pieces``: ``pieces * k + r`` rows, simplest first (k = 1, r = 0: even)."""

    @st.composite
    def side(draw: Any) -> int:
        k = draw(st.integers(1, max_per_shard))
        # 0: an even cut; any other choice some remainder (1 for the choice 1, in any world): uneven cuts are
        # what the strategy is for, so they are drawn far more often than even ones
        c = draw(st.integers(0, _CHOICE_BOUND)) if (uneven or empty) and pieces > 1 else 0
        r = 0 if c == 0 else 1 + (c - 1) % (pieces - 1)
        # one draw in four (when ``empty``): fewer rows than pieces, the last shards empty
        if empty and draw(st.integers(0, 3)) == 3:
            return r
        return pieces * k + (r if uneven else 0)

    return side()


def shapes(ndim: int | st.SearchStrategy[int] = 2, mesh: Any = None, placements: Sequence[Any] | None = None,
           max_per_shard: int = 3, uneven: bool = True, empty: bool = True) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of ``ndim`` dims for a tensor placed by ``placements`` on ``mesh``: each dim ``k`` rows per
    shard (1 to ``max_per_shard``), plus a remainder that leaves it uneven (``uneven``), or fewer rows
    than shards so that some shards are empty (``empty``; on an unsharded dim: a dim of size 0). Without
    a mesh, every dim has 1 to ``max_per_shard`` rows (0 with ``empty``). Shrinks towards one row per
    shard: small, even, nothing empty.

    Example::

        shapes(2, Mesh((3,)), (Shard(0),))    # e.g. (4, 2): rank 0 gets 2 rows, ranks 1 and 2 one each
    """
    _check_int("max_per_shard", max_per_shard, 1)
    if isinstance(ndim, st.SearchStrategy):
        return ndim.flatmap(lambda n: shapes(n, mesh, placements, max_per_shard, uneven, empty))
    _check_int("ndim", ndim, 0)
    if (mesh is None) != (placements is None):
        raise InvalidArgument("shapes(): give both mesh and placements, or neither")
    pieces = (1,) * ndim if mesh is None else shards_per_dim(_mesh_dims(mesh), placements or (), ndim)
    return st.tuples(*[_side(n, max_per_shard, uneven, empty) for n in pieces])


_DTYPE_KINDS = {
    "float": ("float32", "float64", "bfloat16", "float16"),
    "int": ("int64", "int32", "int8"),
    "bool": ("bool",),
}


def dtypes(kinds: Sequence[str] = ("float",)) -> st.SearchStrategy[Any]:
    """A few torch dtypes of ``kinds`` (``float``, ``int``, ``bool``), shrinking towards the first
    (``float32``, then ``int64``).

    Example::

        dtypes(("float", "int"))    # torch.float32, torch.float64, torch.bfloat16, ..., torch.int64, ...
    """
    import torch

    if isinstance(kinds, str) or not kinds or any(k not in _DTYPE_KINDS for k in kinds):
        raise InvalidArgument(f"kinds={kinds!r}: expected a non-empty sequence of {tuple(_DTYPE_KINDS)}")
    return st.sampled_from([getattr(torch, name) for kind in kinds for name in _DTYPE_KINDS[kind]])


def shardings(world: int | st.SearchStrategy[int] | None = None, min_mesh_dims: int = 1, max_mesh_dims: int = 2,
              ndim: int | st.SearchStrategy[int] = 2, partial: Sequence[str] = ("sum",), max_per_shard: int = 3,
              uneven: bool = True, empty: bool = True, dtype: st.SearchStrategy[Any] | None = None,
              names: Sequence[str] | None = None) -> st.SearchStrategy[Sharding]:
    """A whole configuration, each part drawn for the ones before: the world (``world``: as :func:`meshes`),
    its mesh, the placements of an ``ndim``-dim tensor on it, the tensor's shape (:func:`shapes`), and its
    dtype (``dtype``: a strategy; None: ``float32``, not drawn).

    Example::

        @given(case=shardings(world_sizes(1, 8), max_mesh_dims=2, ndim=2))
        def test_round_trip(self, case):
            full = torch.randn(case.shape)
            self.assertEqual(distribute_tensor(full, case.mesh, case.placements).full_tensor(), full)
    """
    mesh_strategy = meshes(world, min_mesh_dims, max_mesh_dims, names)
    ndims = ndim if isinstance(ndim, st.SearchStrategy) else st.just(_check_int("ndim", ndim, 0))
    placements(1, 0, partial)  # checks ``partial`` now, not at the first draw

    @st.composite
    def draw_sharding(draw: Any) -> Sharding:
        mesh = draw(mesh_strategy)
        n = draw(ndims)
        where = draw(placements(mesh, n, partial))
        shape = draw(shapes(n, mesh, where, max_per_shard, uneven, empty))
        return Sharding(mesh, where, shape, None if dtype is None else draw(dtype))

    return draw_sharding()
