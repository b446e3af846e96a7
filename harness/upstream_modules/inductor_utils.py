"""``torch.testing._internal.inductor_utils`` as distributed test files use it: which GPU inductor compiles for
(``GPU_TYPE``), whether it can (``HAS_GPU``: a GPU and triton), and the skips that read them."""
from __future__ import annotations

import functools
import unittest
from typing import Any, Callable

import torch

from harness.upstream_modules.common_utils import LazyVal

__all__ = ["HAS_TRITON", "HAS_CUDA_AND_TRITON", "HAS_XPU_AND_TRITON", "HAS_GPU", "HAS_GPU_AND_TRITON", "HAS_MPS",
           "HAS_CPU", "HAS_MULTIGPU", "GPU_TYPE", "GPU_TYPES", "IS_A100", "IS_H100", "HAS_CUDA", "requires_gpu",
           "requires_triton", "skipDeviceIf", "skipCUDAIf", "skipXPUIf", "skipCPUIf", "clone_preserve_strides_offset"]

#: the device types inductor compiles for with triton, in torch's order
GPU_TYPES = ("cuda", "mps", "xpu", "mtia")


def _available(kind: str) -> bool:
    module = getattr(torch, kind, None)
    return bool(module is not None and hasattr(module, "is_available") and module.is_available())


def _triton() -> bool:
    from torch.utils._triton import has_triton

    return has_triton()


HAS_TRITON: bool = _triton()
HAS_CUDA_AND_TRITON: bool = torch.cuda.is_available() and HAS_TRITON
HAS_XPU_AND_TRITON: bool = _available("xpu") and HAS_TRITON
HAS_MPS: bool = _available("mps")
#: a GPU inductor can compile for with triton (CUDA, XPU or MTIA)
HAS_GPU: bool = HAS_CUDA_AND_TRITON or HAS_XPU_AND_TRITON or (_available("mtia") and HAS_TRITON)
#: an older release's name for HAS_CUDA_AND_TRITON, with the meaning it had there: CUDA and triton
HAS_CUDA: bool = HAS_CUDA_AND_TRITON


def _shared_memory() -> int:
    """GPU 0's largest shared memory per block, as triton's driver reports it (inductor's own query)."""
    from torch._inductor.utils import get_gpu_shared_memory

    return get_gpu_shared_memory()


#: an A100 or an H100 as GPU 0, told apart as upstream tells them, by the shared memory triton reports (164 KiB and
#: 227 KiB); False without CUDA and triton. Asked when a test first reads them, never at import.
IS_A100 = LazyVal(lambda: HAS_CUDA_AND_TRITON and _shared_memory() == 166912)
IS_H100 = LazyVal(lambda: HAS_CUDA_AND_TRITON and _shared_memory() == 232448)
HAS_GPU_AND_TRITON: bool = HAS_GPU


def _gpu_type() -> str:
    found = [kind for kind in GPU_TYPES if _available(kind)]
    if len(found) == 1:
        return found[0]
    if not found:
        return "cuda"  # upstream's default: tests build "cuda" tensors and skip on HAS_GPU
    current = torch.accelerator.current_accelerator()
    return current.type if current is not None and current.type in found else found[0]


#: the GPU's device type ("cuda", "xpu", ...): "cuda" where there is none
GPU_TYPE: str = _gpu_type()
HAS_MULTIGPU: bool = any(_available(kind) and getattr(torch, kind).device_count() >= 2
                         for kind in ("cuda", "xpu", "mtia"))


def _compiles_cpp() -> bool:
    """Whether inductor's C++ backend works here (a compiler it can call): asked when a test first reads it."""
    from torch._inductor.codecache import CppCodeCache

    try:
        CppCodeCache.load("")
        return True
    except Exception:  # noqa: BLE001 - no compiler, or one inductor rejects: no CPU backend either way
        return False


HAS_CPU = LazyVal(_compiles_cpp)

#: skip a test without a GPU (or an Apple GPU), or without triton
requires_gpu = functools.partial(unittest.skipIf, not (HAS_GPU or HAS_MPS), "requires gpu")
requires_triton = functools.partial(unittest.skipIf, not HAS_TRITON, "requires triton")


def skipDeviceIf(cond: Any, msg: str, *, device: str) -> Callable[[Any], Any]:
    """Skip a test method with ``msg`` when ``cond`` holds and the test runs on ``device``: the test's own
    ``self.device`` (an attribute or property of the class, e.g. FSDP tests' device), read when it runs. With
    ``cond`` false the method is left as it was. Unlike ``common_device_type.skipCUDAIf`` this reads ``self.device``,
    not the device type a device-type test was instantiated for.

    On a class it skips each of the class's tests the same way; a class without ``device`` runs on the machine's
    accelerator (``cuda`` where there is one, else ``cpu``). (Upstream's turns the class into a function: its
    tests vanish on every device, and a later ``instantiate_parametrized_tests`` of it finds no class.)

    Example::

        @skipCUDAIf(not SM90OrLater, "needs sm90")
        def test_x(self): ...
    """
    def decorate(fn: Any) -> Any:
        if not cond:
            return fn
        if isinstance(fn, type):
            for name in dir(fn):
                method = getattr(fn, name, None)
                if name.startswith("test") and callable(method):
                    setattr(fn, name, _skipped_on(method, msg, device, on_class=True))
            return fn
        return _skipped_on(fn, msg, device, on_class=False)
    return decorate


def _skipped_on(fn: Callable[..., Any], msg: str, device: str, on_class: bool) -> Callable[..., Any]:
    @functools.wraps(fn)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hasattr(self, "device"):
            runs_on = str(self.device)
        elif on_class:
            runs_on = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            raise AttributeError(f"{type(self).__name__}.{fn.__name__}: skip{device.upper()}If reads self.device, "
                                 "which this test class does not have; in a device-type test use "
                                 "common_device_type's decorator of the same name")
        if runs_on == device:
            raise unittest.SkipTest(msg)
        return fn(self, *args, **kwargs)
    return checked


skipCUDAIf = functools.partial(skipDeviceIf, device="cuda")
skipXPUIf = functools.partial(skipDeviceIf, device="xpu")
skipCPUIf = functools.partial(skipDeviceIf, device="cpu")


def clone_preserve_strides_offset(x: Any, device: Any = None) -> Any:
    """A copy of tensor ``x`` with its sizes, strides and storage offset: its whole storage copied (to ``device``
    where one is given) and viewed as ``x`` views its own, so that a kernel reading past ``x``'s elements reads the
    same bytes. Anything but a tensor comes back as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    whole = x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    copied = whole.to(device, copy=True) if device else whole.clone()
    return copied.as_strided(x.size(), x.stride(), x.storage_offset())
