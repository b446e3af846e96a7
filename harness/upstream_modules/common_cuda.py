"""``torch.testing._internal.common_cuda`` as distributed test files use it: the machine's CUDA flags, the GPU's
compute capability (``SM90OrLater``, ...) and what the platform supports (``PLATFORM_SUPPORTS_FP8``, ...). Every
flag that asks the GPU is computed when a test first reads it, never at import."""
from __future__ import annotations

import torch

from harness.testing.requirements import flag
from harness.upstream_modules.common_utils import LazyVal, getRocmVersion, isRocmArchAnyOf, torch_release

__all__ = ["TEST_CUDA", "TEST_MULTIGPU", "SM53OrLater", "SM60OrLater", "SM70OrLater", "SM75OrLater", "SM80OrLater",
           "SM89OrLater", "SM90OrLater", "SM100OrLater", "SM120OrLater", "PLATFORM_SUPPORTS_FLASH_ATTENTION",
           "PLATFORM_SUPPORTS_MEM_EFF_ATTENTION", "PLATFORM_SUPPORTS_CUDNN_ATTENTION",
           "PLATFORM_SUPPORTS_FUSED_ATTENTION", "PLATFORM_SUPPORTS_BF16", "PLATFORM_SUPPORTS_FP8",
           "PLATFORM_SUPPORTS_MX_GEMM", "_get_torch_rocm_version", "_get_torch_cuda_version", "CUDA11OrLater"]

TEST_CUDA: bool = flag("TEST_CUDA")
TEST_MULTIGPU: bool = flag("TEST_MULTIGPU")
#: an older release's flag: torch was built with CUDA 11.0 or newer (False for a CPU or ROCm build). It reads the
#: build's version string, not the GPU, so it is known at import without touching CUDA
CUDA11OrLater: bool = bool(torch.version.cuda) and tuple(
    int(part) for part in str(torch.version.cuda).split(".")[:2]) >= (11, 0)


def _capability_at_least(major: int, minor: int) -> LazyVal:
    return LazyVal(lambda: torch.cuda.is_available() and torch.cuda.get_device_capability() >= (major, minor))


#: GPU 0's compute capability is at least this one (False without CUDA; a ROCm GPU reports its own numbers)
SM53OrLater = _capability_at_least(5, 3)
SM60OrLater = _capability_at_least(6, 0)
SM70OrLater = _capability_at_least(7, 0)
SM75OrLater = _capability_at_least(7, 5)
SM80OrLater = _capability_at_least(8, 0)
SM89OrLater = _capability_at_least(8, 9)
SM90OrLater = _capability_at_least(9, 0)
SM100OrLater = _capability_at_least(10, 0)
SM120OrLater = _capability_at_least(12, 0)

# the ROCm architectures upstream's attention kernels support (AOTriton's list)
_ROCM_ATTENTION = ("gfx90a", "gfx942", "gfx1100", "gfx1201", "gfx950")


def _rocm() -> bool:
    return torch.version.hip is not None and torch.cuda.is_available()


def _nvidia() -> bool:
    return torch.version.hip is None and torch.cuda.is_available()


def _xpu() -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def _flash() -> bool:
    if _rocm():
        return isRocmArchAnyOf(_ROCM_ATTENTION)
    return bool(SM80OrLater) if _nvidia() else False


def _mem_efficient() -> bool:
    if _rocm():
        return isRocmArchAnyOf(_ROCM_ATTENTION)
    return _nvidia() or _xpu()


def _cudnn_attention() -> bool:
    version = torch.backends.cudnn.version() if _nvidia() and torch.backends.cudnn.is_available() else 0
    return bool(SM80OrLater) and (version or 0) >= 90000


def _bf16() -> bool:
    if torch.version.cuda:
        return bool(SM80OrLater)
    return torch.version.hip is not None or _xpu()


def _fp8() -> bool:
    if _rocm():
        archs = ("gfx94", "gfx95", "gfx120") if getRocmVersion() >= (6, 5) else ("gfx94",)
        return isRocmArchAnyOf(archs)
    if _nvidia():
        return bool(SM90OrLater) or torch.cuda.get_device_capability() == (8, 9)
    # a machine without CUDA: the CPU's float8 counts from torch 2.12 on
    return _xpu() or torch_release() >= (2, 12)


def _mx_gemm() -> bool:
    if _rocm():
        return getRocmVersion() >= (7, 0) and isRocmArchAnyOf(("gfx950",))
    if _nvidia():
        return bool(SM100OrLater)
    return _xpu()


PLATFORM_SUPPORTS_FLASH_ATTENTION = LazyVal(_flash)
PLATFORM_SUPPORTS_MEM_EFF_ATTENTION = LazyVal(_mem_efficient)
PLATFORM_SUPPORTS_CUDNN_ATTENTION = LazyVal(_cudnn_attention)
PLATFORM_SUPPORTS_FUSED_ATTENTION = LazyVal(lambda: bool(PLATFORM_SUPPORTS_FLASH_ATTENTION)
                                            or bool(PLATFORM_SUPPORTS_MEM_EFF_ATTENTION)
                                            or bool(PLATFORM_SUPPORTS_CUDNN_ATTENTION))
PLATFORM_SUPPORTS_BF16 = LazyVal(_bf16)
PLATFORM_SUPPORTS_FP8 = LazyVal(_fp8)
PLATFORM_SUPPORTS_MX_GEMM = LazyVal(_mx_gemm)


def _get_torch_rocm_version() -> tuple[int, ...]:
    """The ROCm release torch was built with, ``(0, 0)`` elsewhere."""
    return getRocmVersion()


def _get_torch_cuda_version() -> tuple[int, ...]:
    """The CUDA release torch was built with, ``(12, 8)``; ``(0, 0)`` on a build without CUDA."""
    if not torch.version.cuda:
        return (0, 0)
    return tuple(int(part) for part in torch.version.cuda.split("."))
