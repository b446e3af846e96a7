"""The world a hypothesis example draws: which of its values sets the number of ranks, checked to agree.

A value drawn from ``harness.strategies`` (``WorldSize``, ``Mesh``, ``Sharding``) says how many ranks it
needs in its ``harness_world_size``; ``harness.parent.testrun`` runs such an example in a world of that size
(one of the run's worlds, reused from example to example and test to test). This module reads the
values by that attribute alone, so it needs nothing of the strategies themselves.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from harness.shared.errors import UsageError

__all__ = ["drawn_world", "draws_world", "refused"]


def _size(value: Any) -> int | None:
    try:
        size = value.harness_world_size
    except Exception:  # noqa: BLE001 - any value without the attribute (or whose property fails) draws no world
        return None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def draws_world(kwargs: dict[str, Any]) -> bool:
    """Some value of the example sets its world size."""
    return any(_size(v) is not None for v in kwargs.values())


def drawn_world(kwargs: dict[str, Any], test_id: str) -> int | None:
    """The world size the example's values draw (None: none draws one; the test's ``world_size`` holds).

    Several values may draw it (``world=world_sizes()`` and ``mesh=meshes(...)``): they must agree.

    Example::

        drawn_world({"case": Sharding(Mesh((3,)), ...), "seed": 4}, "m.T.t")    # 3
    """
    sizes = {name: size for name, value in kwargs.items() if (size := _size(value)) is not None}
    if not sizes:
        return None
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"{name}={kwargs[name]!r} ({size} ranks)" for name, size in sizes.items())
        raise UsageError(f"{test_id}: the example draws worlds of different sizes: {shown}; draw one world and "
                         "the rest from it (harness.strategies.meshes(world) or shardings(world))")
    size = next(iter(sizes.values()))
    if size < 1:
        raise UsageError(f"{test_id}: the example draws a world of {size} ranks; a world has at least 1")
    return size



@contextlib.contextmanager
def refused(fn: Any, test_id: str, where: str) -> Iterator[None]:
    """While the ``@given`` test ``fn`` runs in this process (``where``: the class family, in words), an
    example that draws its world fails with a UsageError that says why, instead of running in the
    class's fixed world with an unbuilt mesh."""
    hyp = getattr(fn, "hypothesis", None)
    inner = getattr(hyp, "inner_test", None)
    if inner is None:
        yield
        return

    @functools.wraps(inner)
    def checked(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if draws_world(kwargs):
            shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if _size(v) is not None)
            raise UsageError(f"{test_id}: the example draws its world ({shown}), but {where} run every example in "
                             "the one world the class sets up before hypothesis draws; draw worlds in a rank-process "
                             "class (MultiProcessTestCase, DTensorTestBase, FSDPTest and their continuous kinds)")
        return inner(*args, **kwargs)

    hyp.inner_test = checked
    try:
        yield
    finally:
        hyp.inner_test = inner
