"""``torch.testing._internal.distributed.distributed_utils``: ``with_dist`` and ``with_fake_comms``, one
process acting as one rank of a world without peers, for code that only asks the world its size and rank."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch.distributed as dist

from harness.testing.fake_store import FakeStore

__all__ = ["with_dist", "with_fake_comms"]


@contextlib.contextmanager
def with_dist(rank: int = 0, world_size: int = 2) -> Iterator[None]:
    """The default process group, in this process, as rank ``rank`` of ``world_size``, for the block.

    Upstream registers a mock process group whose only use is answering size and rank; this is torch's own
    ``fake`` group, which answers them too and lets collectives return at once (nothing is exchanged).

    Example::

        with with_dist(rank=1, world_size=4):
            assert dist.get_world_size() == 4
    """
    if dist.is_initialized():
        raise RuntimeError(f"with_dist(rank={rank}, world_size={world_size}): a default process group is up "
                           "already; call it where none is (a plain TestCase, not a multi-process class's test)")
    dist.init_process_group(backend="fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def with_fake_comms(func: Callable[..., Any] | None = None, rank: int = 0, world_size: int = 2) -> Any:
    """Run the decorated test method inside :func:`with_dist` (bare, or with ``rank=`` and ``world_size=``).

    Example::

        @with_fake_comms(world_size=4)
        def test_plan(self):
            self.assertEqual(dist.get_world_size(), 4)
    """
    if func is None:
        return functools.partial(with_fake_comms, rank=rank, world_size=world_size)

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        with with_dist(rank, world_size):
            func(self, *args, **kwargs)

    return wrapper
