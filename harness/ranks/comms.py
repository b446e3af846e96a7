"""Inside a rank: the default process group set up and kept from test to test, and what a test made torn down.

Where a test runs and on which backend is decided in ``harness.shared.placement``.
"""
from __future__ import annotations

import datetime
import functools
import threading
from typing import Any, Callable


__all__ = ["ProcessGroupKeeper", "forget_destroyed_groups"]


class ProcessGroupKeeper:
    """Keeps the default process group of a rank alive from test to test while the backend is the same.

    Every rank of a pool receives the same tasks in the same order, so the generation counter that
    names each new rendezvous (a prefix in one FileStore) stays the same on every rank without talking.
    """

    def __init__(self, store_factory: Callable[[], Any], rank: int, world_size: int):
        self.store_factory = store_factory  # FileStore in a pool; torchrun's env:// store when launched
        self.rank = rank
        self.world_size = world_size
        self.timeout = datetime.timedelta(0)  # the group's: only ever raised (ensure's timeout_s)
        self.generation = 0
        self.backend: str | None = None  # backend of the group we created, None when we own none
        self._store = None
        self.tests = 0  # tests given the default group, each a store namespace of its own (_own_namespace)
        self._group: Any = None  # the default group we made, and the store torch keeps for it
        self._group_store: Any = None

    def base_store(self) -> Any:
        if self._store is None:
            self._store = self.store_factory()
        return self._store

    def ensure(self, backend: str, timeout_s: float, device_id: int | None = None) -> bool:
        """Make sure the default group exists with ``backend``, and that its collectives wait at least
        ``timeout_s`` (``protocol.group_timeout``: the test's own limit stays the first to fire); returns True
        when it was reused. ``device_id``: the GPU to bind an NCCL communicator to (None: none is bound)."""
        import torch.distributed as dist

        wanted = datetime.timedelta(seconds=timeout_s)
        if dist.is_initialized() and self.backend == backend:
            if wanted > self.timeout:
                try:
                    dist.distributed_c10d._set_pg_timeout(wanted)
                    self.timeout = wanted
                    self._own_namespace()
                    return True
                except Exception:
                    pass  # a torch without it: a new group with the longer timeout
            else:
                self._own_namespace()
                return True
        self.timeout = max(self.timeout, wanted)
        self.release()
        _reset_group_names()
        self.generation += 1
        store = dist.PrefixStore(f"harness/pg{self.generation}", self.base_store())
        kwargs = {}
        if device_id is not None:
            import torch

            kwargs["device_id"] = torch.device("cuda", device_id)
        dist.init_process_group(backend=backend, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=self.timeout, **kwargs)
        self.backend = backend
        self._own_namespace()
        return False

    def _own_namespace(self) -> None:
        """Give the test about to run a namespace of its own in the default group's store, for the groups it makes.

        torch names some groups by their ranks rather than by a counter (``new_group(...,
        use_local_synchronization=True)``, ``split_group``, a device mesh's groups made that way), and a group meets
        under its name in the default group's store (gloo's ranks post their addresses there). The same ranks in a
        later test on the same default group give the same name: its ranks read the addresses the earlier test's
        group left, and connect to sockets closed since (a test that passes in fresh ranks fails after another,
        which the earlier test is blamed for). A fresh process has a fresh store; here each test gets a prefix of
        its own in it (the same on every rank: they run the same tests in the same order), and what it reads
        through ``_get_default_store()`` is its own too.
        """
        from torch.distributed import distributed_c10d as c10d

        default = c10d._get_default_group()
        backend, store = c10d._world.pg_map[default]
        if default is not self._group:  # a group just made: the store torch keeps for it
            self._group, self._group_store = default, store
        self.tests += 1
        c10d._world.pg_map[default] = (backend, c10d.PrefixStore(f"test{self.tests}", self._group_store))

    def release(self) -> None:
        """Destroy the default group if one exists (ours or one a test made and left)."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.backend = None
        self._group = self._group_store = None

    def forget_if_gone(self) -> None:
        """A test may destroy the default group itself; then the next test makes a new one."""
        import torch.distributed as dist

        if not dist.is_initialized():
            self.backend = None
            self._group = self._group_store = None

    def destroy_subgroups(self) -> None:
        """Remove process groups a test created beyond the default one, so the next test starts clean."""
        import torch.distributed as dist

        if not dist.is_initialized():
            return
        from torch.distributed import distributed_c10d as c10d

        default = c10d._get_default_group()
        for pg in list(c10d._world.pg_map.keys()):
            if pg is not default:
                try:
                    dist.destroy_process_group(pg)
                except Exception:
                    pass


def forget_destroyed_groups() -> None:
    """Drop torch's caches that can hand a later test a device mesh whose process groups are gone.

    A ``DeviceMesh`` compares equal to another of the same shape, device type and dimension names,
    whatever process groups each holds. DTensor's sharding propagation caches (the Python one and the
    C++ fast path) are keyed by those meshes and return output specs that hold the mesh of the test
    that filled them: after that test's groups are destroyed, the next test's ``init_device_mesh`` of
    the same shape gets outputs on the old mesh, and their first collective fails with "Could not
    resolve the process group registered under the name N" (torch 2.11 with CUDA available makes a new
    group even for a 1-D mesh over the world; every version does for a 2-D mesh). A fresh process has
    empty caches; so does a reused rank after this. DTensor's RNG tracker goes too: a fresh process has none.
    """
    import sys

    if "torch.distributed.tensor" not in sys.modules:
        return  # nothing imported DTensor, so nothing was cached
    random = sys.modules.get("torch.distributed.tensor._random")
    if getattr(random, "_rng_tracker", None) is not None:
        # DTensor's RNG tracker (made by the first random op on a GPU mesh, its seed broadcast from rank 0; a test
        # may turn its distribute region off): a fresh process has none, and the next test makes its own
        random._rng_tracker = None
    try:
        from torch.distributed.tensor._api import DTensor

        _forget_in_every_thread(DTensor._op_dispatcher.sharding_propagator)
    except Exception:
        pass
    try:
        import torch

        torch._C._clear_DTensor_sharding_propagator_cache()  # the C++ fast path (where the build has one)
        _forget_in_autograd_device_thread(torch)
    except Exception:
        pass
    for module, path in (("torch.distributed.tensor._collective_utils", ("MeshTopoInfo", "build_from_mesh")),
                         ("torch.distributed.tensor._redistribute", ("_gen_transform_infos",))):
        target = sys.modules.get(module)
        for name in path:
            target = getattr(target, name, None)
        clear = getattr(target, "cache_clear", None)
        if clear is not None:
            try:
                clear()
            except Exception:
                pass


def _forget_in_every_thread(propagator: Any) -> None:
    """Empty DTensor's Python sharding-propagation cache in every thread, not only this one.

    The cache is a ``threading.local`` (torch's ``LocalLRUCache``): ``cache_clear()`` empties the calling
    thread's alone. Threads that outlive a test keep theirs: autograd's device threads, which run the
    backward of CUDA tensors (DTensor's ops in FSDP2's and tensor parallel's backward among them), and any
    pool a test module keeps. A fresh cache object leaves every thread's old entries behind at once.
    """
    cache = propagator.propagate_op_sharding
    fresh = getattr(propagator, "propagate_op_sharding_non_cached", None)
    if isinstance(cache, threading.local) and fresh is not None:
        propagator.propagate_op_sharding = type(cache)(fresh)
    else:
        cache.cache_clear()  # a torch whose cache is one lru_cache for every thread


def _forget_in_autograd_device_thread(torch: Any) -> None:
    """Empty DTensor's C++ sharding-propagation cache in autograd's thread for this rank's GPU.

    That cache is ``thread_local`` and torch clears only the calling thread's. The backward of CUDA tensors
    runs in autograd's thread for their device, which lives as long as the process: the DTensor ops of one
    test's backward (FSDP2, tensor parallel, a sharded loss) leave it output specs on that test's meshes, and
    the next test's backward on an equal mesh gets them back ("Could not resolve the process group registered
    under the name 1"). A one-element backward through a function that clears the cache runs there.
    """
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    x = torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device()), requires_grad=True)
    _clear_in_backward().apply(x).sum().backward()


@functools.cache
def _clear_in_backward() -> Any:
    """An autograd function whose backward clears the calling thread's C++ sharding-propagation cache (made once:
    each class made costs autograd a class of its own)."""
    import torch

    class ClearInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            torch._C._clear_DTensor_sharding_propagator_cache()  # in autograd's thread for the device
            return grad

    return ClearInBackward


def _reset_group_names() -> None:
    """No default group is up: c10d names the next one "0", on every rank.

    c10d names a group by a counter (and rendezvous under that name) and resets it when the default group is
    destroyed. An ``init_process_group`` that failed on one rank (its peer closed the connection while it
    was still connecting) counted without making a group, so that rank's next group had another name than
    its peers' and the next test hung in ``init_process_group`` until its timeout.
    """
    from torch.distributed import distributed_c10d as c10d

    c10d._world.group_count = 0
