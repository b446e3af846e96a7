"""Device and backend choice for a test, and process-group set-up and reuse inside a rank."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Callable

from harness.errors import UsageError

__all__ = ["Placement", "choose_placement", "normalize_backend", "ProcessGroupKeeper", "gpu_count"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one test runs, and why: the report prints ``reason``."""

    device_type: str  # "cuda" or "cpu"
    world_size: int
    reason: str
    skip: str = ""  # non-empty: do not run; this is the skip reason

    @property
    def label(self) -> str:
        return f"{self.device_type}/{'nccl' if self.device_type == 'cuda' else 'gloo'}"


def gpu_count() -> int:
    """GPUs this process can see; never initialises a CUDA context."""
    import torch

    if not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def choose_placement(world_size: int, gpus_needed: int, mode: str, gpus: int | None = None) -> Placement:
    """CUDA/NCCL when there are enough GPUs (or it is forced), CPU/gloo otherwise."""
    import torch.distributed as dist

    gpus = gpu_count() if gpus is None else gpus
    need = max(world_size, gpus_needed)
    nccl = dist.is_nccl_available()
    if mode == "cpu":
        return Placement("cpu", world_size, "HARNESS_DEVICE=cpu")
    if mode == "cuda":
        if gpus < need or not nccl:
            why = f"needs {need} GPUs, found {gpus}" if gpus < need else "this torch build has no NCCL"
            return Placement("cuda", world_size, "HARNESS_DEVICE=cuda", skip=f"{why} (HARNESS_DEVICE=cuda)")
        return Placement("cuda", world_size, "HARNESS_DEVICE=cuda")
    if gpus >= need and nccl:
        return Placement("cuda", world_size, f"{gpus} GPUs for {need} ranks")
    why = f"needs {need} GPUs, found {gpus}" if gpus < need else "this torch build has no NCCL"
    return Placement("cpu", world_size, f"{why}: ran on CPU/gloo")


def normalize_backend(backend: str | None, device_type: str) -> str:
    """The backend string to give ``init_process_group`` for this device.

    Upstream tests name backends per device ("cpu:gloo,cuda:nccl"); on a CPU run the CUDA entries
    cannot be created, so they are dropped. A bare "nccl" asked on CPU becomes "gloo" (the harness
    chose CPU because there were not enough GPUs; the report says so).
    """
    if not backend:
        return "nccl" if device_type == "cuda" else "gloo"
    backend = backend.strip().lower()
    if ":" not in backend:
        if device_type == "cpu" and backend == "nccl":
            return "gloo"
        return backend
    pairs = []
    for part in backend.split(","):
        dev, sep, name = part.strip().partition(":")
        if not sep or not dev or not name:
            raise UsageError(f"backend {backend!r}: {part!r} is not 'device:backend' (e.g. 'cpu:gloo,cuda:nccl')")
        if device_type == "cpu" and dev != "cpu":
            continue
        if (dev, name) not in pairs:
            pairs.append((dev, name))
    if not pairs:
        return "gloo"
    if device_type == "cuda" and not any(d == "cuda" for d, _ in pairs):
        pairs.append(("cuda", "nccl"))
    return ",".join(f"{d}:{n}" for d, n in pairs)


class ProcessGroupKeeper:
    """Keeps the default process group of a rank alive from test to test while the backend is the same.

    Every rank of a pool receives the same tasks in the same order, so the generation counter that
    names each new rendezvous (a prefix in one FileStore) stays the same on every rank without talking.
    """

    def __init__(self, store_factory: Callable[[], Any], rank: int, world_size: int, timeout_s: float = 1800.0,
                 local_rank: int | None = None):
        self.store_factory = store_factory  # FileStore in a pool; torchrun's env:// store when launched
        self.local_rank = rank if local_rank is None else local_rank
        self.rank = rank
        self.world_size = world_size
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.generation = 0
        self.backend: str | None = None  # backend of the group we created, None when we own none
        self._store = None

    def base_store(self) -> Any:
        if self._store is None:
            self._store = self.store_factory()
        return self._store

    def ensure(self, backend: str, device_type: str) -> bool:
        """Make sure the default group exists with ``backend``; returns True when it was reused."""
        import torch.distributed as dist

        if dist.is_initialized() and self.backend == backend:
            return True
        self.release()
        _reset_group_names()
        self.generation += 1
        store = dist.PrefixStore(f"harness/pg{self.generation}", self.base_store())
        kwargs = {}
        if device_type == "cuda":
            import torch

            kwargs["device_id"] = torch.device("cuda", self.local_rank % max(1, torch.cuda.device_count()))
        dist.init_process_group(backend=backend, store=store, rank=self.rank, world_size=self.world_size,
                                timeout=self.timeout, **kwargs)
        self.backend = backend
        return False

    def release(self) -> None:
        """Destroy the default group if one exists (ours or one a test made and left)."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self.backend = None

    def forget_if_gone(self) -> None:
        """A test may destroy the default group itself; then the next test makes a new one."""
        import torch.distributed as dist

        if not dist.is_initialized():
            self.backend = None

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


def _reset_group_names() -> None:
    """No default group is up: c10d names the next one "0", on every rank.

    c10d names a group by a counter (and rendezvous under that name) and resets it when the default group is
    destroyed. An ``init_process_group`` that failed on one rank (its peer closed the connection while it
    was still connecting) counted without making a group, so that rank's next group had another name than
    its peers' and the next test hung in ``init_process_group`` until its timeout.
    """
    from torch.distributed import distributed_c10d as c10d

    c10d._world.group_count = 0
