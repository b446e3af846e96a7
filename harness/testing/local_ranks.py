"""``map_local_for_rank``: a value computed per rank, in a rank and in the local-tensor classes' one process alike."""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["map_local_for_rank"]


def map_local_for_rank(rank: Any, func: Callable[[int], Any]) -> Any:
    """``func(rank)``: in a rank process, for its rank; under the local-tensor classes (every rank simulated in
    one process, ``self.rank`` a per-rank value), for each simulated rank, as one per-rank value.

    Example::

        expected = map_local_for_rank(self.rank, lambda r: torch.full((2,), float(r)))
    """
    from torch.distributed._local_tensor import maybe_run_for_local_tensor

    return maybe_run_for_local_tensor(lambda r, f: f(r))(rank, func)
