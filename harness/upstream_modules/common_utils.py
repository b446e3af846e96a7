"""``torch.testing._internal.common_utils`` as distributed test files use it: the harness's ``TestCase``,
``run_tests`` and ``parametrize``, upstream's seed, the machine's flags and the skips that read them."""
from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import socket
import statistics
import sys
import tempfile
import time
import unittest
import warnings
from enum import Enum
from typing import Any, Callable, Iterator

import torch

from harness.main import run_tests
from harness.testing.assertions import TestCase
from harness.testing.parametrize import decorateIf, instantiate_parametrized_tests, parametrize, subtest
from harness.testing.requirements import flag, retry_on_connect_failures

__all__ = ["run_tests", "TestCase", "parametrize", "instantiate_parametrized_tests", "subtest", "decorateIf",
           "retry_on_connect_failures", "SEED", "IS_FBCODE", "IS_SANDCASTLE", "IS_WINDOWS", "IS_LINUX", "IS_MACOS",
           "TEST_WITH_DEV_DBG_ASAN", "TEST_WITH_ASAN", "TEST_WITH_TSAN", "TEST_WITH_ROCM", "TEST_CUDA", "TEST_HPU",
           "TEST_XPU", "TEST_MULTIGPU", "skipIfRocm", "skipIfHpu", "skip_but_pass_in_sandcastle_if",
           "skip_but_pass_in_sandcastle", "get_cycles_per_ms", "find_free_port", "TemporaryFileName",
           "TemporaryDirectoryName", "dtype_name", "TEST_WITH_TORCHDYNAMO", "TEST_WITH_TORCHINDUCTOR", "TEST_WITH_SLOW",
           "TEST_WITH_UBSAN", "NO_MULTIPROCESSING_SPAWN", "MI300_ARCH", "skipIfTorchDynamo", "skipIfTorchInductor",
           "skipIfRocmArch", "skipIfXpu", "slowTest", "xfailIf", "serialTest", "requires_cuda_p2p_access",
           "sandcastle_skip_if", "torch_release", "ADDRESS_IN_USE", "CONNECT_TIMEOUT", "load_tests", "LazyVal",
           "lazy_skip_if", "IS_CI", "IS_JETSON", "TEST_ACCELERATOR", "TEST_MULTIACCELERATOR", "requires_cuda",
           "suppress_warnings", "wrapSwapTensorsTest", "xfailIfTorchDynamo", "getRocmVersion", "isRocmArchAnyOf",
           "skipIfRocmVersionLessThan", "runOnRocmArch", "skipIfWindows", "MI350_ARCH", "MI200_ARCH",
           "TEST_CUDA_PYTHON_BINDINGS", "requires_cuda_python_bindings", "TEST_CUDA_GRAPH", "device_sleep", "check_leaked_tensors",
           "FILE_SCHEMA", "HardwareClassification", "requires_accelerator", "IS_PYTORCH_CI", "IS_IN_CI"]


def torch_release() -> tuple[int, int]:
    """The installed torch's (major, minor): ``(2, 15)`` for ``2.15.0+cu132`` and ``2.15.0a0+git...`` alike. A
    counterpart of an upstream value that changed between releases gives the installed release's value.

    Example::

        torch_release() >= (2, 14)
    """
    match = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    if match is None:
        raise RuntimeError(f"torch.__version__ {torch.__version__!r} does not start with MAJOR.MINOR")
    return int(match.group(1)), int(match.group(2))


class LazyVal:
    """A value computed when a test first reads it (as a bool, a comparison, ``str``), never at import: a flag
    that asks the GPU (its capability, its count) must not touch CUDA in a process that forks ranks afterwards.

    Example::

        TEST_MULTIACCELERATOR = LazyVal(lambda: torch.accelerator.device_count() > 1)
        if TEST_MULTIACCELERATOR: ...
    """

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute = compute
        self._value: Any = None
        self._known = False

    def value(self) -> Any:
        if not self._known:
            self._value, self._known = self._compute(), True
        return self._value

    def __bool__(self) -> bool:
        return bool(self.value())

    def __eq__(self, other: object) -> bool:
        return self.value() == (other.value() if isinstance(other, LazyVal) else other)

    def __hash__(self) -> int:
        return hash(self.value())

    def __str__(self) -> str:
        return str(self.value())

    __repr__ = __str__


def _skip_where(condition: Callable[[], bool], reason: str) -> Callable[[Any], Any]:
    """Skip a test (checked when it runs) or a class (checked when decorated) where ``condition()`` holds."""
    def decorator(fn: Any) -> Any:
        if isinstance(fn, type):
            return unittest.skipIf(condition(), reason)(fn)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if condition():
                raise unittest.SkipTest(reason)
            return fn(*args, **kwargs)
        return checked
    return decorator


lazy_skip_if = _skip_where  # upstream's name (2.13 on): the same rule

#: the prefix of a ``file://`` init method or store path: a third slash before a Windows drive letter
FILE_SCHEMA: str = "file:///" if sys.platform == "win32" else "file://"


class HardwareClassification(Enum):
    """What hardware a test class needs, as its ``hw_classification`` class attribute names it (torch 2.15 on):
    device-agnostic logic (``GENERIC``), behaviour every accelerator must share (``ACCELERATOR``), or one device.
    The harness runs every class whatever it declares; the attribute is metadata here, read by nothing.

    Example::

        class TestFoo(TestCase):
            hw_classification = HardwareClassification.ACCELERATOR
    """

    GENERIC = "generic"
    ACCELERATOR = "accelerator"
    CPU = "cpu"
    CUDA = "cuda"
    MPS = "mps"
    XPU = "xpu"


#: upstream's CI flag: on wherever ``CI`` is set to anything non-empty (GitHub sets CI=true)
IS_CI: bool = bool(os.environ.get("CI"))
#: NVIDIA's embedded boards, by the words upstream looks for in the platform's name
IS_JETSON: bool = any(word in platform.platform() for word in
                      ("orin", "concord", "galen", "xavier", "nano", "jetson", "tegra", "thor"))
#: an accelerator of any kind, two or more of them: asked when a test first reads them
TEST_ACCELERATOR = LazyVal(lambda: torch.accelerator.is_available())
TEST_MULTIACCELERATOR = LazyVal(lambda: torch.accelerator.device_count() > 1)

#: upstream's "needs CUDA" skip, decided at decoration time as upstream's is
requires_cuda = unittest.skipUnless(torch.cuda.is_available(), "Requires CUDA")
#: upstream's "needs an accelerator of any kind" skip (torch 2.15 on): asked when the test runs (a class: when
#: decorated), so a module that forks ranks after importing this has not asked the device at import
requires_accelerator = _skip_where(lambda: not torch.accelerator.is_available(), "requires accelerator")

#: older releases' CI flags, with the meaning they had there: ``IS_PYTORCH_CI`` is on wherever the variable
#: ``IS_PYTORCH_CI`` is set to anything non-empty (PyTorch's old Jenkins scripts set it), ``IS_IN_CI`` where
#: ``IN_CI`` is exactly ``"1"``
IS_PYTORCH_CI: bool = bool(os.environ.get("IS_PYTORCH_CI"))
IS_IN_CI: bool = os.environ.get("IN_CI") == "1"


def suppress_warnings(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run the test with every warning ignored (returns None, as upstream's wrapper does)."""
    @functools.wraps(fn)
    def quiet(*args: Any, **kwargs: Any) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*args, **kwargs)
    return quiet


def wrapSwapTensorsTest(swap: bool | None = None) -> Callable[[Any], Any]:
    """Run the test with ``torch.__future__``'s swap-module-params-on-conversion set to ``swap`` (left as it is
    for None), put back after it."""
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def swapped(*args: Any, **kwargs: Any) -> None:
            before = torch.__future__.get_swap_module_params_on_conversion()
            if swap is not None:
                torch.__future__.set_swap_module_params_on_conversion(swap)
            try:
                fn(*args, **kwargs)
            finally:
                torch.__future__.set_swap_module_params_on_conversion(before)
        return swapped
    return decorator


def xfailIfTorchDynamo(fn: Any) -> Any:
    """``unittest.expectedFailure`` when the suite runs under dynamo (``PYTORCH_TEST_WITH_DYNAMO=1``)."""
    return unittest.expectedFailure(fn) if TEST_WITH_TORCHDYNAMO else fn


def getRocmVersion() -> tuple[int, ...]:
    """The ROCm release torch was built with, ``(6, 4)``; ``(0, 0)`` on a build that is not ROCm's."""
    if not TEST_WITH_ROCM:
        return (0, 0)
    words = getattr(torch.version, "rocm", None) or torch.version.hip
    if not words:
        return (0, 0)
    return tuple(int(part) for part in words.split("-", 1)[0].split(".") if part.isdigit())


def isRocmArchAnyOf(arch: tuple[str, ...]) -> bool:
    """Whether GPU 0 is a ROCm GPU of one of the architectures ``arch`` (``MI300_ARCH``, ...)."""
    if not torch.version.hip:
        return False
    name = torch.cuda.get_device_properties(0).gcnArchName
    return any(a in name for a in arch)


def skipIfRocmVersionLessThan(version: tuple[int, ...] | list[int] | None = None) -> Callable[[Any], Any]:
    """Skip on a ROCm build older than ``version`` (always on ROCm when ``version`` is None); runs elsewhere."""
    def older() -> bool:
        return TEST_WITH_ROCM and (version is None or getRocmVersion() < tuple(version))
    return _skip_where(older, f"ROCm version less than {version} required")


def runOnRocmArch(arch: tuple[str, ...]) -> Callable[[Any], Any]:
    """On ROCm, run the test only on the architectures ``arch`` (skip on others); elsewhere run it."""
    return _skip_where(lambda: TEST_WITH_ROCM and not isRocmArchAnyOf(arch), f"skipIfRocm: test only runs on {arch}")


def _cuda_python_bindings() -> bool:
    """NVIDIA's ``cuda.bindings`` (cuda-python) is installed and speaks to this build's GPU runtime (CUDA, or
    ROCm through its HIP port of the package)."""
    import importlib.util

    try:
        if importlib.util.find_spec("cuda.bindings") is None:
            return False
    except (ImportError, ValueError):
        return False
    if torch.version.cuda is not None:
        return True
    if torch.version.hip is not None:
        import cuda.bindings.runtime

        return bool(getattr(cuda.bindings.runtime, "HIP_PYTHON", False))
    return False


TEST_CUDA_PYTHON_BINDINGS: bool = _cuda_python_bindings()
requires_cuda_python_bindings = unittest.skipUnless(TEST_CUDA_PYTHON_BINDINGS, "requires cuda-python (cuda.bindings)")


#: CUDA graphs can be captured here: CUDA (or ROCm) available and ``PYTORCH_TEST_SKIP_CUDAGRAPH`` not set to 1
TEST_CUDA_GRAPH: bool = (torch.cuda.is_available() and os.environ.get("PYTORCH_TEST_SKIP_CUDAGRAPH", "0") != "1"
                         and bool(torch.version.cuda or torch.version.hip))


def device_sleep(device: str, cycles: int) -> None:
    """Keep ``device`` busy for about ``cycles`` of its ``_sleep`` (``get_cycles_per_ms`` converts): a GPU's own
    sleep kernel, on the CPU a spin of the calling thread."""
    if device == "cpu":
        getattr(torch.cpu, "_sleep", _spin)(cycles)
    else:
        torch.get_device_module(device)._sleep(cycles)


@contextlib.contextmanager
def check_leaked_tensors(limit: int = 1, matched_type: type = torch.Tensor) -> Iterator[list[Any]]:
    """Find tensors the block leaves in reference cycles: the garbage collector keeps what it frees during the block,
    and the list yielded is filled, after the block, with the ``matched_type`` objects among it (a warning says how
    many). ``limit`` is how many graphs upstream draws with objgraph where it is installed; here it only says so.

    Example::

        with check_leaked_tensors() as garbage:
            schedule.step(x)
        self.assertEqual(len(garbage), 0)
    """
    import gc

    gc.collect()
    before = len(gc.garbage)
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
        gc.collect()
        found.extend(obj for obj in gc.garbage[before:] if isinstance(obj, matched_type))
        if found:
            warnings.warn(f"{len(found)} tensors were found in the garbage. Did you introduce a reference cycle?",
                          stacklevel=3)
    finally:
        gc.set_debug(0)
        del gc.garbage[before:]  # what DEBUG_SAVEALL kept for the check, freed again


def skipIfWindows(func: Any = None, *, msg: str = "test doesn't currently work on the Windows stack") -> Any:
    decorator = _skip_where(lambda: IS_WINDOWS, f"skipIfWindows: {msg}")
    return decorator(func) if func is not None else decorator


#: the connection errors upstream's files match (``retry_on_connect_failures(connect_errors=(ADDRESS_IN_USE,))``):
#: lower-case from torch 2.14, the words torch's own errors use (the match is case-sensitive)
ADDRESS_IN_USE = "address already in use" if torch_release() >= (2, 14) else "Address already in use"
CONNECT_TIMEOUT = "connect() timed out."

#: upstream's default seed (its ``--seed`` flag changes it there; the harness seeds each test itself)
SEED = 1234


def _env_on(name: str) -> bool:
    return os.environ.get(name, "0") == "1"


#: upstream's internal-infrastructure flags: True only where their variables say so (never on a public machine)
IS_FBCODE: bool = _env_on("PYTORCH_TEST_FBCODE")
IS_SANDCASTLE: bool = _env_on("SANDCASTLE") or os.environ.get("TW_JOB_USER") == "sandcastle"
IS_WINDOWS = sys.platform == "win32"
IS_LINUX = sys.platform == "linux"
IS_MACOS = sys.platform == "darwin"

TEST_WITH_DEV_DBG_ASAN: bool = flag("TEST_WITH_DEV_DBG_ASAN")
TEST_WITH_ASAN: bool = flag("TEST_WITH_ASAN")
TEST_WITH_TSAN: bool = flag("TEST_WITH_TSAN")
TEST_WITH_ROCM: bool = flag("TEST_WITH_ROCM")
TEST_CUDA: bool = flag("TEST_CUDA")
TEST_MULTIGPU: bool = flag("TEST_MULTIGPU")
#: Intel Gaudi (``torch.hpu``, present only where its plugin is installed) and Intel GPUs
TEST_HPU: bool = bool(hasattr(torch, "hpu") and torch.hpu.is_available())
TEST_XPU: bool = bool(hasattr(torch, "xpu") and torch.xpu.is_available())
TEST_WITH_TORCHINDUCTOR: bool = _env_on("PYTORCH_TEST_WITH_INDUCTOR")
TEST_WITH_TORCHDYNAMO: bool = (_env_on("PYTORCH_TEST_WITH_DYNAMO") or TEST_WITH_TORCHINDUCTOR
                               or _env_on("PYTORCH_TEST_WITH_AOT_EAGER"))
TEST_WITH_SLOW: bool = _env_on("PYTORCH_TEST_WITH_SLOW")
TEST_WITH_UBSAN: bool = _env_on("PYTORCH_TEST_WITH_UBSAN")
NO_MULTIPROCESSING_SPAWN = False
#: AMD GPU architectures by family, as upstream's skips name them
MI350_ARCH = ("gfx950",)
MI300_ARCH = ("gfx942",)
MI200_ARCH = ("gfx90a",)


def _skip_if(condition: bool, reason: str) -> Callable[[Any], Any]:
    """``unittest.skipIf`` that keeps a decorated class a class (upstream's lazy skips do the same)."""
    return unittest.skipIf(condition, reason)


def skipIfRocm(func: Any = None, *, msg: str = "test doesn't currently work on the ROCm stack") -> Any:
    """Skip on ROCm builds (``TEST_WITH_ROCM``), with upstream's reason; bare or called, on a test or a class.

    Example::

        @skipIfRocm
        def test_nccl_only(self): ...
    """
    decorator = _skip_if(TEST_WITH_ROCM, f"skipIfRocm: {msg}")
    return decorator(func) if func is not None else decorator


def skipIfHpu(fn: Any) -> Any:
    """Skip where an HPU is present (``TEST_HPU``), with upstream's reason."""
    return _skip_if(TEST_HPU, "test doesn't currently work with HPU")(fn)


def skipIfRocmArch(arch: tuple[str, ...]) -> Callable[[Any], Any]:
    """Skip on ROCm GPUs of the architectures ``arch`` (``MI300_ARCH``, ...)."""
    on_arch = TEST_WITH_ROCM and torch.cuda.is_available() and any(
        a in torch.cuda.get_device_properties(0).gcnArchName for a in arch)
    return _skip_if(on_arch, f"skipIfRocm: test skipped on {arch}")


def skipIfXpu(func: Any = None, *, msg: str = "test doesn't currently work on the XPU stack") -> Any:
    decorator = _skip_if(TEST_XPU, f"skipIfXpu: {msg}")
    return decorator(func) if func is not None else decorator


def skipIfTorchDynamo(msg: str = "test doesn't currently work with dynamo") -> Callable[[Any], Any]:
    """Skip when the suite runs under dynamo (``PYTORCH_TEST_WITH_DYNAMO=1``); a test or a class."""
    if not isinstance(msg, str):
        raise TypeError(f"skipIfTorchDynamo({msg!r}): call it with a message, @skipIfTorchDynamo()")
    return _skip_if(TEST_WITH_TORCHDYNAMO, msg)


def skipIfTorchInductor(msg: str = "test doesn't currently work with torchinductor",
                        condition: bool = TEST_WITH_TORCHINDUCTOR) -> Callable[[Any], Any]:
    """Skip when the suite runs under inductor (``PYTORCH_TEST_WITH_INDUCTOR=1``), or where ``condition``."""
    return _skip_if(condition, msg)


def slowTest(fn: Any) -> Any:
    """Skip unless ``PYTORCH_TEST_WITH_SLOW=1``, with upstream's reason."""
    decorated = _skip_if(not TEST_WITH_SLOW, "test is slow; run with PYTORCH_TEST_WITH_SLOW to enable test")(fn)
    decorated.__dict__["slow_test"] = True
    return decorated


def xfailIf(condition: bool) -> Callable[[Any], Any]:
    """``unittest.expectedFailure`` where ``condition`` holds."""
    return lambda fn: unittest.expectedFailure(fn) if condition else fn


def serialTest(condition: bool = True) -> Callable[[Any], Any]:
    """Upstream marks the test for its serial CI shard (a pytest mark); the harness runs every test in its own
    ranks, so the mark changes nothing here."""
    if not isinstance(condition, bool):
        raise TypeError(f"serialTest({condition!r}): call it, @serialTest() or @serialTest(condition)")
    return lambda fn: fn


def requires_cuda_p2p_access() -> Callable[[Any], Any]:
    """Skip unless every pair of two or more GPUs of compute capability 8.0 or more can reach each other."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    available = count >= 2 and torch.cuda.get_device_capability() >= (8, 0) and all(
        torch.cuda.can_device_access_peer(i, j) for i in range(count) for j in range(i + 1, count))
    return skip_but_pass_in_sandcastle_if(not available, "cuda p2p access is not available")


def skip_but_pass_in_sandcastle_if(condition: bool, reason: str) -> Callable[[Any], Any]:
    """Upstream's: ``unittest.skipIf`` everywhere but its internal CI (``IS_SANDCASTLE``), where the test passes
    without running."""
    if not (condition and IS_SANDCASTLE):
        return unittest.skipIf(condition, reason)

    def passing(fn: Any) -> Any:
        @functools.wraps(fn)
        def skipped(*args: Any, **kwargs: Any) -> None:
            print(f"Skipping {fn.__name__} on sandcastle for following reason: {reason}", file=sys.stderr)
        return skipped
    return passing


def skip_but_pass_in_sandcastle(reason: str) -> Callable[[Any], Any]:
    return skip_but_pass_in_sandcastle_if(True, reason)


sandcastle_skip_if = skip_but_pass_in_sandcastle_if  # its name in older torch


def _spin(cycles: int) -> None:
    for _ in range(cycles):
        pass


@functools.lru_cache
def get_cycles_per_ms(device: str = "cuda") -> float:
    """About how many cycles of the device's ``_sleep`` make one millisecond (the mean of 10 measures without
    the 2 highest and 2 lowest), cached: tests sleep a known time on a stream with ``torch.cuda._sleep(n)``.

    Example::

        torch.cuda._sleep(int(50 * get_cycles_per_ms()))   # about 50 ms of GPU time
    """
    cycles = 1_000_000
    if device == "cpu":
        def measure() -> float:
            start = time.perf_counter()
            sleep = getattr(torch.cpu, "_sleep", _spin)
            sleep(cycles)
            elapsed = (time.perf_counter() - start) * 1000
            return cycles / elapsed if elapsed > 0 else float(cycles)
    else:
        module = torch.get_device_module(device)

        def measure() -> float:
            start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
            start.record()
            module._sleep(cycles)
            end.record()
            end.synchronize()
            return cycles / start.elapsed_time(end)
    values = sorted(measure() for _ in range(10))
    return statistics.mean(values[2:8])


def find_free_port() -> int:
    """A TCP port free on localhost now (another process may take it before the caller binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def TemporaryFileName(*args: Any, **kwargs: Any) -> Iterator[str]:
    """The name of a temporary file that exists during the ``with`` block and is removed after it."""
    with tempfile.NamedTemporaryFile(*args, delete=False, **kwargs) as f:
        name = f.name
    try:
        yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


@contextlib.contextmanager
def TemporaryDirectoryName(suffix: str | None = None) -> Iterator[str]:
    """A temporary directory's path, removed with what it holds after the ``with`` block."""
    with tempfile.TemporaryDirectory(suffix=suffix) as path:
        yield path


def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None) -> unittest.TestSuite:
    """unittest's ``load_tests`` protocol, as upstream's files re-export it (``load_tests = load_tests``): the
    module's tests, empty groups left out. Upstream's also checks each test is defined in the script it runs
    (its own CI's sharding); the harness selects and shards tests itself, so there is nothing to check."""
    suite = unittest.TestSuite()
    for group in tests:
        if not isinstance(group, unittest.TestSuite) or group.countTestCases():
            suite.addTest(group)
    return suite


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``, as upstream names a dtype in a test's name."""
    return str(dtype).split(".")[1]
