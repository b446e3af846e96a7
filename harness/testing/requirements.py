"""What a test needs (a backend, a world size, a platform) and the machine flags tests branch on, as upstream names them."""
from __future__ import annotations

import functools
import os
import random
import sys
import time
import unittest
from typing import Any, Callable, Iterable, Sequence, TypeVar

from harness.shared.errors import UsageError

__all__ = ["FLAGS", "flag", "get_devtype", "skip_unless_torch_gpu", "skip_if_win32", "skip_if_rocm_multiprocess", "requires_nccl",
           "requires_gloo", "requires_accelerator_dist_backend", "requires_world_size", "get_required_world_size", "skip_if_odd_worldsize",
           "skip_if_small_worldsize", "retry_on_connect_failures", "with_dist_debug_levels", "WORLD_SIZE_ATTR"]

F = TypeVar("F", bound=Callable[..., Any])

#: on a test function: the world size ``requires_world_size`` asks for (the parent reads it)
WORLD_SIZE_ATTR = "_required_world_size"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0") == "1"  # upstream's rule for a flag that defaults to off


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _rocm() -> bool:
    import torch

    return _env_flag("PYTORCH_TEST_WITH_ROCM") or torch.version.hip is not None


#: the machine flags upstream's files import, each computed when first read (never at ``import harness``)
FLAGS: dict[str, Callable[[], bool]] = {
    "TEST_WITH_DEV_DBG_ASAN": lambda: _env_flag("PYTORCH_TEST_WITH_DEV_DBG_ASAN"),
    "TEST_WITH_ASAN": lambda: _env_flag("PYTORCH_TEST_WITH_ASAN"),
    "TEST_WITH_TSAN": lambda: _env_flag("PYTORCH_TEST_WITH_TSAN"),
    "TEST_WITH_ROCM": _rocm,
    "TEST_CUDA": _cuda,
    "TEST_MULTIGPU": lambda: _cuda() and __import__("torch").cuda.device_count() >= 2,
}
_values: dict[str, bool] = {}


def flag(name: str) -> bool:
    """The value of one of :data:`FLAGS` on this machine (computed once).

    Example::

        flag("TEST_CUDA")    # False on a CPU machine
    """
    if name not in _values:
        _values[name] = bool(FLAGS[name]())
    return _values[name]


def __getattr__(name: str) -> Any:
    if name in FLAGS:
        return flag(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_devtype() -> Any:
    """The device type tests of this run use, as a ``torch.device``: the accelerator's where the harness runs
    ranks on it, else CPU (``HARNESS_DEVICE=cpu``, or no GPU): the device the ranks' tensors go to.

    Example::

        device_type = get_devtype()
        model = MLP(8).to(device_type)
    """
    import torch

    if os.environ.get("HARNESS_DEVICE", "auto") == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def skip_unless_torch_gpu(fn: F) -> F:
    """Upstream's DTensor decorator: the test wants a GPU per rank (4). On fewer the harness runs it on
    CPU, as ``skip_if_lt_x_gpu(4)``."""
    from harness.testing.decorators import skip_if_lt_x_gpu

    return skip_if_lt_x_gpu(4)(fn)


def _skip_decorator(skip: bool, reason: str) -> Callable[[F], F]:
    return unittest.skipIf(skip, reason) if skip else (lambda fn: fn)


def skip_if_win32() -> Callable[[F], F]:
    """Skip on Windows (a decorator factory, as upstream's: ``@skip_if_win32()``)."""
    return _skip_decorator(sys.platform == "win32", "This unit test case is not supported on Windows platform")


def skip_if_rocm_multiprocess(fn: F) -> F:
    """Skip on ROCm builds (``TEST_WITH_ROCM``)."""
    return _skip_decorator(flag("TEST_WITH_ROCM"), "Test skipped for ROCm")(fn)


#: the skip of a test that needs NCCL where torch has it but the machine has no GPU (a CUDA build of torch on a
#: machine without GPUs: NCCL is compiled in, and refuses to start)
NCCL_WITHOUT_GPU = "NCCL needs a GPU, found none (this CUDA build of torch has NCCL, the machine has no GPU)"


def _nccl_missing() -> str:
    """Why NCCL cannot run here ("" when it can): not compiled in (a CPU build), or no GPU to run it on."""
    from harness.shared.placement import gpu_count, nccl_available

    if not nccl_available():
        return "c10d was not compiled with the NCCL backend"  # upstream's words, on a CPU build
    return "" if gpu_count() else NCCL_WITHOUT_GPU


def requires_nccl() -> Callable[[F], F]:
    """Skip unless NCCL can run here (``@requires_nccl()``): torch has it and the machine has a GPU. A CUDA
    build without GPUs is treated as the CPU build it behaves as: the test is skipped, and the skip counts
    among the tests that need CUDA. With NCCL and too few GPUs for one per rank, the test runs where the
    harness places it and an error that comes from NCCL counts there too."""
    why = _nccl_missing()
    return _skip_decorator(bool(why), why)


def requires_gloo() -> Callable[[F], F]:
    """Skip unless torch has gloo (``@requires_gloo()``)."""
    import torch.distributed as dist

    return _skip_decorator(not dist.is_gloo_available(), "c10d was not compiled with the Gloo backend")


def requires_accelerator_dist_backend(backends: Sequence[str] | None = None) -> Callable[[F], F]:
    """Skip unless torch has one of the accelerator backends (default: NCCL, XCCL, HCCL) and the device it
    runs on (NCCL compiled into a CUDA build on a machine without GPUs does not count).

    Example::

        @requires_accelerator_dist_backend(["nccl"])
        def test_all_to_all(self): ...
    """
    import torch.distributed as dist

    if isinstance(backends, str):
        raise UsageError(f"requires_accelerator_dist_backend({backends!r}): give a list of backends, "
                         f"[{backends!r}]")
    backends = list(backends or ("nccl", "xccl", "hccl"))
    checks = {"nccl": lambda: not _nccl_missing(), "xccl": getattr(dist, "is_xccl_available", lambda: False),
              "hccl": lambda: hasattr(__import__("torch"), "hpu") and __import__("torch").hpu.is_available()}
    found = any(checks.get(b, lambda: False)() for b in backends)
    return _skip_decorator(not found, f"No accelerator communication backend available among {backends}")


def requires_world_size(n: int) -> Callable[[F], F]:
    """Mark the test as needing ``n`` ranks, one GPU each, as upstream's does: the mark is what
    :func:`get_required_world_size` reads; the world size itself is still the class's ``world_size`` (upstream's
    harness reads no mark either), so a class that sizes its world per test returns
    ``get_required_world_size(self, default)`` from it. On fewer than ``n`` GPUs the harness runs the test on
    CPU, as ``skip_if_lt_x_gpu(n)`` (upstream skips it).

    Example::

        class TestGroups(MultiProcessTestCase):
            @property
            def world_size(self):
                return get_required_world_size(self, 2)

            @requires_world_size(4)
            def test_four(self): ...       # 4 ranks; the class's other tests 2
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(f"requires_world_size({n!r}): the world size must be an int >= 1")
    from harness.testing.decorators import skip_if_lt_x_gpu

    def mark(fn: F) -> F:
        fn = skip_if_lt_x_gpu(n)(fn)
        setattr(fn, WORLD_SIZE_ATTR, n)
        return fn

    return mark


def get_required_world_size(test: Any, default: int) -> int:
    """The world size ``@requires_world_size(n)`` asked for on the test method ``test`` runs now, else ``default``
    (upstream's helper, for a class's ``world_size`` property).

    Example::

        @property
        def world_size(self):
            return get_required_world_size(self, 2)
    """
    name = getattr(test, "_testMethodName", None)
    method = getattr(test, name, None) if isinstance(name, str) else None
    value = getattr(method, WORLD_SIZE_ATTR, None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _rank_world(args: tuple[Any, ...], name: str) -> int:
    test = args[0] if args else None
    size = getattr(test, "world_size", None)
    if not isinstance(size, int) or isinstance(size, bool):
        size = int(os.environ.get("WORLD_SIZE", "0") or 0)
    if size < 1:
        raise UsageError(f"@{name}: the test's world size is unknown here; put it on a test method of a harness "
                         "class (its ranks know their world size)")
    return size


def skip_if_odd_worldsize(fn: F) -> F:
    """Skip, in the ranks, a test whose world size is odd (upstream's reason)."""

    @functools.wraps(fn)
    def odd_world_test(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get("BACKEND") != "mpi" and _rank_world(args, "skip_if_odd_worldsize") % 2 == 1:
            raise unittest.SkipTest("Skipped due to odd world size.")
        return fn(*args, **kwargs)

    return odd_world_test  # type: ignore[return-value]


def skip_if_small_worldsize(fn: F) -> F:
    """Skip, in the ranks, a test whose world size is under 8 (upstream's reason)."""

    @functools.wraps(fn)
    def small_world_test(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get("BACKEND") != "mpi" and _rank_world(args, "skip_if_small_worldsize") < 8:
            raise unittest.SkipTest("Skipped due to small world size.")
        return fn(*args, **kwargs)

    return small_world_test  # type: ignore[return-value]


#: errors a rendezvous can hit when a port or address is taken between choosing it and binding it
CONNECT_ERRORS = ("Address already in use",)


def retry_on_connect_failures(func: F | None = None, connect_errors: Iterable[str] | str = CONNECT_ERRORS,
                              tries: int = 10) -> Any:
    """Run the test again (up to ``tries`` times in all) when it raises a RuntimeError that says one of
    ``connect_errors``: a port taken between choosing and binding it. Other errors fail at once.

    Example::

        @retry_on_connect_failures
        def test_tcp_store(self): ...

        @retry_on_connect_failures(connect_errors=("Address already in use", "connect() timed out."))
        def test_rendezvous(self): ...
    """
    errors = (connect_errors,) if isinstance(connect_errors, str) else tuple(connect_errors)
    if func is None:
        return functools.partial(retry_on_connect_failures, connect_errors=errors, tries=tries)

    @functools.wraps(func)
    def retrying_test(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, tries + 1):
            try:
                return func(*args, **kwargs)
            except RuntimeError as exc:
                if attempt == tries or not any(e in str(exc) for e in errors):
                    raise
                time.sleep(random.random())
        raise AssertionError("unreachable")

    return retrying_test


def with_dist_debug_levels(levels: Sequence[str]) -> Callable[[F], F]:
    """Run the test once per ``TORCH_DISTRIBUTED_DEBUG`` level (``OFF``, ``INFO``, ``DETAIL``), every rank
    meeting at a barrier after each; the level is put back afterwards.

    Example::

        @with_comms
        @with_dist_debug_levels(levels=["OFF", "INFO", "DETAIL"])
        def test_ddp_logging(self): ...
    """
    if isinstance(levels, str):
        raise UsageError(f"with_dist_debug_levels({levels!r}): give a list of levels, [{levels!r}]")
    levels = list(levels)
    wrong = [lv for lv in levels if lv not in ("OFF", "INFO", "DETAIL")]
    if wrong or not levels:
        raise UsageError(f"with_dist_debug_levels({levels!r}): each level is one of 'OFF', 'INFO', 'DETAIL'")

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        def debug_levels_test(*args: Any, **kwargs: Any) -> Any:
            import torch.distributed as dist

            old = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
            result = None
            try:
                for level in levels:
                    os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
                    dist.set_debug_level_from_env()
                    result = fn(*args, **kwargs)
                    if dist.is_initialized():
                        dist.barrier()
            finally:
                if old is None:
                    os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
                else:
                    os.environ["TORCH_DISTRIBUTED_DEBUG"] = old
                dist.set_debug_level_from_env()
            return result

        return debug_levels_test  # type: ignore[return-value]

    return decorator
