"""``map_local_for_rank``, ``map_local_tensor_for_rank``: a value computed per rank, in a rank and in the local-tensor
classes' one process alike."""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["map_local_for_rank", "map_local_tensor_for_rank"]


def map_local_for_rank(rank: Any, func: Callable[[int], Any]) -> Any:
    """``func(rank)``: in a rank process, for its rank; under the local-tensor classes (every rank simulated in
    one process, ``self.rank`` a per-rank value), for each simulated rank, as one per-rank value.

    Example::

        expected = map_local_for_rank(self.rank, lambda r: torch.full((2,), float(r)))
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor

    return maybe_run_for_local_tensor(lambda r, f: f(r))(rank, func)


def map_local_tensor_for_rank(tensor: Any, rank: Any, func: Callable[[Any, int], Any]) -> Any:
    """``func(tensor, rank)``: in a rank process, for its rank; under the local-tensor classes, for each simulated
    rank with its own piece of ``tensor`` (a list of tensors, one per rank, is handed whole), as one per-rank value.

    Example::

        pieces = list(torch.chunk(full, self.world_size))
        self.assertEqual(dtensor.to_local(), map_local_tensor_for_rank(pieces, self.rank, lambda ps, r: ps[r]))
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor

    return maybe_run_for_local_tensor(lambda t, r, f: f(t, r))(tensor, rank, func)
