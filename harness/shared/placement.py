"""Where one test's ranks run, on which backend, and why: one pure decision for the pool, torchrun and compat.

Three placements, tried in this order under ``HARNESS_DEVICE=auto``:

* ``cuda/nccl``: one GPU per rank (rank r on ``cuda:r``), NCCL. It needs as many GPUs as ranks (and as
  ``skip_if_lt_x_gpu`` asks): NCCL refuses two ranks on one GPU ("Duplicate GPU detected").
* ``cuda-shared/gloo``: fewer GPUs than ranks, but at least one: the ranks share the GPUs round-robin
  (rank r on ``cuda:r % G``) and talk over gloo, which carries CUDA tensors. The test's CUDA code paths
  (streams, pinned memory, CPU offload, the kernels of the ops under test) run on the machine the
  user has, where upstream would skip the test and CPU would not exercise them.
* ``cpu/gloo``: no GPU at all.

``HARNESS_DEVICE`` (or ``--device``) asks for one of them: ``cpu`` always CPU; ``nccl`` one GPU per
rank or skip; ``cuda-shared`` always shared GPUs (skip without a GPU); ``cuda`` any CUDA placement
(``nccl`` when there are enough GPUs, else shared; skip without a GPU). The decision is a pure
function of the world, the GPUs asked for, the mode and the machine's counts, so it is unit-tested
over faked counts.
"""
from __future__ import annotations

import dataclasses

from harness.shared.errors import UsageError

__all__ = ["Placement", "choose_placement", "default_backend", "normalize_backend", "gpu_count", "nccl_available",
           "KINDS"]

#: the placements, as ``Placement.kind`` names them
KINDS = ("cuda", "cuda-shared", "cpu")


def default_backend(device_type: str, shared: bool = False) -> str:
    """The backend for tensors on ``device_type``: CUDA means NCCL, unless the ranks share GPUs (NCCL refuses
    two ranks on one GPU); everything else goes over gloo, which carries CUDA tensors too. The one place this
    is decided: the placement's backend, a test's ``self.backend`` and :func:`normalize_backend` ask here.

    Example::

        default_backend("cuda")               # 'nccl'
        default_backend("cuda", shared=True)  # 'gloo'
        default_backend("cpu")                # 'gloo'
    """
    return "nccl" if device_type == "cuda" and not shared else "gloo"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one test runs, and why: the report prints ``label`` and ``reason``.

    ``shortfall``: the test asked for more GPUs than it got (auto or cuda mode): it runs on CPU or on
    shared GPUs for want of them, so an error that means "needs CUDA" or "needs NCCL" is a skip with that
    reason, and any other failure says where it ran and why.
    """

    device_type: str  # "cuda" or "cpu"
    world_size: int
    reason: str
    skip: str = ""  # non-empty: do not run; this is the skip reason
    shared: bool = False  # ranks share GPUs round-robin over gloo (cuda-shared)
    gpus: int = 0  # GPUs the ranks use (CUDA placements)
    shortfall: bool = False

    @property
    def kind(self) -> str:
        """``cuda``, ``cuda-shared`` or ``cpu``: what a pool of ranks is made for."""
        if self.device_type == "cuda":
            return "cuda-shared" if self.shared else "cuda"
        return "cpu"

    @property
    def backend(self) -> str:
        """The default process group's backend: NCCL with one GPU per rank, else gloo (:func:`default_backend`)."""
        return default_backend(self.device_type, self.shared)

    def backend_for(self, asked: str | None) -> str:
        """The backend to give ``init_process_group`` when a test asks for ``asked`` (None: :attr:`backend`).

        Example::

            Placement("cpu", 2, "").backend_for("cpu:gloo,cuda:nccl")    # 'cpu:gloo'
        """
        return normalize_backend(asked, self.device_type, self.shared)

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.backend}"

    @property
    def ranks_per_gpu(self) -> int:
        """The most ranks one GPU carries (1 unless shared)."""
        if not self.shared or self.gpus < 1:
            return 1
        return -(-self.world_size // self.gpus)


def gpu_count() -> int:
    """GPUs this process can see; never initialises a CUDA context."""
    import torch

    if not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def nccl_available() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_nccl_available())


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _shared(world_size: int, gpus: int, why: str, shortfall: bool) -> Placement:
    used = min(gpus, world_size)
    reason = f"{why}: {_plural(world_size, 'rank')} share {_plural(used, 'GPU')} over gloo (rank r on cuda:r % {used})"
    return Placement("cuda", world_size, reason, shared=True, gpus=used, shortfall=shortfall)


def choose_placement(world_size: int, gpus_needed: int, mode: str, gpus: int | None = None,
                     nccl: bool | None = None) -> Placement:
    """The placement of a test of ``world_size`` ranks that asks for ``gpus_needed`` GPUs (``skip_if_lt_x_gpu``).

    ``mode`` is ``HARNESS_DEVICE``: ``auto``, ``cpu``, ``cuda``, ``nccl`` or ``cuda-shared``. ``gpus``
    and ``nccl`` default to this machine's; a unit test passes them.

    Example::

        choose_placement(4, 0, "auto", gpus=1, nccl=True).label    # 'cuda-shared/gloo'
        choose_placement(4, 0, "auto", gpus=1, nccl=True).reason
        # 'needs 4 GPUs, found 1 (NCCL needs one GPU per rank): 4 ranks share 1 GPU over gloo (rank r on cuda:r % 1)'
    """
    gpus = gpu_count() if gpus is None else gpus
    nccl = nccl_available() if nccl is None else nccl
    need = max(world_size, gpus_needed)
    enough = gpus >= need
    if enough and nccl:
        why_not_nccl = ""
    elif not enough:
        why_not_nccl = f"needs {need} GPUs, found {gpus}"
    else:
        why_not_nccl = "this torch build has no NCCL"
    if mode == "cpu":
        return Placement("cpu", world_size, "HARNESS_DEVICE=cpu")
    if mode == "nccl":
        if why_not_nccl:
            return Placement("cuda", world_size, "HARNESS_DEVICE=nccl", gpus=gpus,
                             skip=f"{why_not_nccl} (HARNESS_DEVICE=nccl: one GPU per rank)")
        return Placement("cuda", world_size, f"HARNESS_DEVICE=nccl: {gpus} GPUs for {need} ranks", gpus=world_size)
    if mode == "cuda-shared":
        if gpus < 1:
            return Placement("cuda", world_size, "HARNESS_DEVICE=cuda-shared", shared=True,
                             skip="needs a GPU, found none (HARNESS_DEVICE=cuda-shared)")
        return _shared(world_size, gpus, "HARNESS_DEVICE=cuda-shared", shortfall=False)
    if mode not in ("auto", "cuda"):
        raise UsageError(f"HARNESS_DEVICE={mode!r}: use auto, cpu, cuda, nccl or cuda-shared")
    if not why_not_nccl:
        return Placement("cuda", world_size, f"{gpus} GPUs for {need} ranks", gpus=world_size)
    if gpus >= 1:
        because = f"{why_not_nccl} (NCCL needs one GPU per rank)" if not enough else why_not_nccl
        return _shared(world_size, gpus, because, shortfall=not enough)
    if mode == "cuda":
        return Placement("cuda", world_size, "HARNESS_DEVICE=cuda", skip="needs a GPU, found none (HARNESS_DEVICE=cuda)")
    return Placement("cpu", world_size, f"{why_not_nccl}: ran on CPU/gloo", shortfall=True)


def normalize_backend(backend: str | None, device_type: str, shared: bool = False) -> str:
    """The backend string to give ``init_process_group`` for this placement.

    Upstream tests name backends per device ("cpu:gloo,cuda:nccl"). On a CPU run the CUDA entries
    cannot be created, so they are dropped; on shared GPUs NCCL cannot carry two ranks on one GPU, so
    CUDA goes over gloo. A bare "nccl" becomes "gloo" there (the parent skips a test that asks for NCCL
    alone unless CPU or shared GPUs were asked for on purpose; the report says so).

    Example::

        normalize_backend("cpu:gloo,cuda:nccl", "cpu")                # 'cpu:gloo'
        normalize_backend("cpu:gloo,cuda:nccl", "cuda", shared=True)  # 'cpu:gloo,cuda:gloo'
    """
    if not backend:
        return default_backend(device_type, shared)
    cuda_default = default_backend("cuda", shared)
    backend = backend.strip().lower()
    if ":" not in backend:
        if backend == "nccl" and default_backend(device_type, shared) != "nccl":
            return "gloo"
        return backend
    pairs = []
    for part in backend.split(","):
        dev, sep, name = part.strip().partition(":")
        if not sep or not dev or not name:
            raise UsageError(f"backend {backend!r}: {part!r} is not 'device:backend' (e.g. 'cpu:gloo,cuda:nccl')")
        if device_type == "cpu" and dev != "cpu":
            continue
        if dev == "cuda" and name == "nccl":
            name = cuda_default
        if (dev, name) not in pairs:
            pairs.append((dev, name))
    if not pairs:
        return "gloo"
    if device_type == "cuda" and not any(d == "cuda" for d, _ in pairs):
        pairs.append(("cuda", cuda_default))
    return ",".join(f"{d}:{n}" for d, n in pairs)
