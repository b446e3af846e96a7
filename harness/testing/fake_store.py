"""``FakeStore``: a store for torch's ``fake`` process group (one rank, no peers, collectives that return at once)."""
from __future__ import annotations

import torch.distributed as dist

__all__ = ["FakeStore"]


class FakeStore(dist.Store):
    """A store that holds nothing, for ``init_process_group("fake", store=FakeStore(), rank=r, world_size=n)``:
    one process acts as rank ``r`` of ``n`` (tracing, sharding plans), no communication. Importing this
    module registers the ``fake`` backend with torch when torch has not yet.

    Example::

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
        mesh = init_device_mesh("cpu", (2, 4))
    """


def _register_fake_backend() -> None:
    if "fake" in dist.Backend._plugins:  # registered already (torch's own testing module, an earlier import)
        return
    from torch._C._distributed_c10d import FakeProcessGroup  # torch's C++ fake group: the only one there is

    def create(common_opts, backend_opts):  # type: ignore[no-untyped-def]
        return FakeProcessGroup._create_internal(common_opts.group_rank, common_opts.group_size, backend_opts)

    dist.Backend.register_backend("fake", create, extended_api=True, devices=["cpu", "cuda", "hpu", "xpu"])


_register_fake_backend()
