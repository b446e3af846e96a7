"""Inside a rank: the GPU between two tests: a CUDA context a test broke, memory it left referenced, statistics reset.

A reused rank must start each test with the GPU a fresh process would have. Three things a test can
leave behind there, and what the harness does (``rank_task.run_task`` calls :func:`after_test` once the
test, its frames and its exception are gone):

* **A broken CUDA context.** After a *sticky* error (a device-side assert, an illegal address, a
  launch failure, an uncorrectable ECC error, ...) every later CUDA call in the process fails, the
  harness's own ``torch.manual_seed`` included: the next, innocent test would fail too. The context is
  probed after every test that used CUDA (``torch.cuda.synchronize``); a failure, or a test error whose
  text is one of CUDA's sticky errors, is reported as what the test left, and the parent replaces the
  ranks before the next test and names the test that broke it.
* **CUDA memory left referenced** (a tensor in a module global, a class attribute, a cache): after
  ``gc.collect()``, freeing cuBLAS workspaces and ``empty_cache()``, the caching allocator still holds
  more than before the test. The test is named with how much it held, and the ranks are replaced, so
  the next test starts at zero.
* **Allocator state an out-of-memory error leaves** (not sticky): the cache is released and the
  peak and accumulated statistics reset after every test, so the next one starts at zero allocated
  and zero peak, and a peak-memory assertion measures that test alone (:func:`reset_statistics`; a
  local test, run in the parent, gets the same reset from ``harness.ranks.isolation``).
"""
from __future__ import annotations

import gc
import re
from typing import Any

__all__ = ["is_sticky", "is_out_of_memory", "in_use", "before_test", "after_test", "reset_statistics",
           "describe_bytes", "broken_sentence"]

# CUDA's sticky errors (the context is unusable afterwards; cudaGetLastError does not clear them), in the
# words CUDA and torch use for them (cudaGetErrorString, the cudaError_t names, and torch's own wording).
_STICKY = re.compile(
    r"device-side assert(ion)? triggered|cudaErrorAssert|"
    r"illegal memory access|cudaErrorIllegalAddress|"
    r"unspecified launch failure|cudaErrorLaunchFailure|"
    r"misaligned address|cudaErrorMisalignedAddress|"
    r"illegal instruction|cudaErrorIllegalInstruction|"
    r"invalid program counter|cudaErrorInvalidPc|"
    r"operation not supported on global/shared address space|cudaErrorInvalidAddressSpace|"
    r"hardware stack error|cudaErrorHardwareStackError|"
    r"uncorrectable ECC error|cudaErrorECCUncorrectable|"
    r"uncorrectable NVLink error|cudaErrorNvlinkUncorrectable|"
    r"the launch timed out and was terminated|cudaErrorLaunchTimeout|"
    r"cudaErrorContained|cudaErrorTensorMemoryLeak|"
    r"CUDA error: unknown error|CUDA driver error: unknown error",
    re.IGNORECASE,
)
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation",
                  re.IGNORECASE)


def is_sticky(text: str) -> str:
    """The phrase that marks ``text`` (an error) as a sticky CUDA error, or "".

    Example::

        is_sticky("RuntimeError: CUDA error: device-side assert triggered")   # 'device-side assert triggered'
        is_sticky("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB")  # ''
    """
    m = _STICKY.search(text or "")
    return m.group(0) if m else ""


def is_out_of_memory(text: str) -> bool:
    """True when ``text`` is a CUDA out-of-memory error (not sticky: the process can go on)."""
    return bool(_OOM.search(text or ""))


def describe_bytes(n: int) -> str:
    """``1536`` -> '1.5 KiB'."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


def _cuda() -> Any:
    """torch.cuda when this process has a CUDA context, else None (never creates one)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda


def in_use() -> dict[int, int]:
    """Bytes the caching allocator holds for live tensors, per device, after freeing what nothing holds."""
    cuda = _cuda()
    if cuda is None:
        return {}
    import torch

    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()  # cuBLAS keeps a workspace per handle in the caching allocator; a fresh process has none
    cuda.empty_cache()
    return {d: cuda.memory_allocated(d) for d in range(cuda.device_count())}


def before_test() -> dict[int, int]:
    """What the allocator holds before the test (usually nothing): the baseline :func:`after_test` compares to."""
    cuda = _cuda()
    if cuda is None:
        return {}
    return {d: cuda.memory_allocated(d) for d in range(cuda.device_count())}


def after_test(baseline: dict[int, int], error_text: str = "") -> tuple[str, list[str]]:
    """After a test (its frames gone): ``(broken, left)``.

    ``broken``: why the CUDA context is unusable ("" when it is fine). ``left``: sentences for what the
    test left that only fresh ranks can undo (memory still referenced). The allocator's cache is
    released and its statistics reset either way, so a reused rank starts the next test at zero.
    """
    cuda = _cuda()
    if cuda is None:
        return "", []
    try:
        cuda.synchronize()
        held = in_use()
    except Exception as exc:  # noqa: BLE001 - whatever CUDA raised, the context cannot be trusted
        first = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first}"[:300], []
    sticky = is_sticky(error_text)
    if sticky:
        # The probe passed, yet the test reported an error CUDA defines as sticky: trust CUDA's word.
        return f"the test raised a sticky CUDA error ({sticky})", []
    left = []
    grown = {d: n - baseline.get(d, 0) for d, n in held.items() if n > baseline.get(d, 0)}
    if grown:
        where = ", ".join(f"{describe_bytes(n)} on cuda:{d}" for d, n in sorted(grown.items()))
        left.append(f"CUDA memory left referenced after the test: {where} (a tensor kept in a module global, a "
                    "class attribute or a cache outlives the test; free it in tearDown or a cleanup)")
    try:
        reset_statistics()
    except Exception:  # noqa: BLE001 - statistics are best effort; the probe above already passed
        pass
    return "", left


def reset_statistics() -> None:
    """Reset the caching allocator's peak and accumulated statistics on every device (when this process has
    a CUDA context), so that a peak-memory assertion in the next test measures that test alone.

    Example::

        reset_statistics()
        torch.cuda.max_memory_allocated()    # what is allocated now, not the last test's peak
    """
    cuda = _cuda()
    if cuda is None:
        return
    for d in range(cuda.device_count()):
        cuda.reset_peak_memory_stats(d)
        cuda.reset_accumulated_memory_stats(d)


def broken_sentence(why: str) -> str:
    """The line the run ends with for a test that broke the CUDA context (see :func:`after_test`)."""
    return (f"the CUDA context broken ({why}): a sticky CUDA error leaves the process unable to use the GPU, "
            "so every later test in it would fail")
