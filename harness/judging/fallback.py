"""A test written for GPUs, run on CPU for want of them: the world size it asks for, and errors that mean "needs CUDA"."""
from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterator

__all__ = ["DEFAULT_GPUS", "pretend_device_count", "needs_cuda", "needs_nccl", "gpu_skip", "test_line",
           "upstream_skip", "TRIED_ON_CPU", "TRIED_ON_SHARED", "tried_on_cpu", "was_tried"]

#: GPUs "a machine with enough GPUs" has when a test names no number itself (no ``skip_if_lt_x_gpu``).
#: Upstream's multi-GPU CI machines and DTensor's ``NUM_DEVICES`` use 4.
DEFAULT_GPUS = 4


@contextlib.contextmanager
def pretend_device_count(count: int) -> Iterator[None]:
    """While the parent evaluates ``world_size``, device counts say ``count``.

    Upstream tests size their world from the device count (``min(4, torch.cuda.device_count())``,
    ``torch.get_device_module(device_type).device_count()`` with ``device_type`` "cpu" on a CPU build,
    ``torch.accelerator.device_count()``). Only the parent's evaluation sees these numbers; the ranks
    see the machine as it is.

    Example::

        with pretend_device_count(4):
            ws = test.world_size    # min(4, torch.cuda.device_count()) -> 4
    """
    import torch

    targets: list[tuple[Any, str]] = [(torch.cuda, "device_count"), (torch.cpu, "device_count")]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "device_count"):
        targets.append((accelerator, "device_count"))
    saved = [(obj, name, getattr(obj, name)) for obj, name in targets]

    def fake() -> int:
        return count

    try:
        for obj, name, _ in saved:
            setattr(obj, name, fake)
        yield
    finally:
        for obj, name, original in saved:
            setattr(obj, name, original)


# What a rank says when the test hard-codes CUDA (or pinned memory, or NCCL) and runs on a CPU build, or on
# a CUDA build on a machine without GPUs (no driver: NCCL, streams and device indices fail in their own words;
# a driver with its GPUs hidden, CUDA_VISIBLE_DEVICES="": torch 2.11 and later raise AcceleratorError with CUDA's
# own cudaErrorNoDevice text, "CUDA error: no CUDA-capable device is detected").
_NEEDS_CUDA = re.compile(
    r"Torch not compiled with CUDA enabled|"
    r"Found no NVIDIA driver|No CUDA GPUs are available|requires CUDA support|"
    r"no CUDA-capable device is detected|cudaErrorNoDevice|CUDA driver initialization failed|"
    r"nccl2? requires at least one CUDA device|ProcessGroupNCCL is only supported with GPUs|"
    r"CUDA driver version is insufficient for CUDA runtime version|"
    r"number of accelerators available: 0\b|"
    r"Cannot access accelerator device when none is available|"
    r"no pinned memory allocator is available|pin_memory=True requires a CUDA|"
    r"FSDP needs a non-CPU accelerator|"
    r"device_ids and output_device arguments only work with|"
    r"Distributed package doesn't have NCCL built in|"
    r"module 'torch\._C' has no attribute '_cuda_|"
    r"Tried to instantiate dummy base class (Stream|Event)",
)


def needs_cuda(exc_type: str, message: str) -> str:
    """The phrase that shows a rank's error comes from hard-coded CUDA, or "" when it does not."""
    m = _NEEDS_CUDA.search(f"{exc_type}: {message}")
    return m.group(0) if m else ""


# What a rank says when the test needs NCCL (or one GPU per rank) and runs with its ranks sharing GPUs over gloo.
_NEEDS_NCCL = re.compile(
    r"Duplicate GPU detected|"
    r"ProcessGroupNCCL|NCCL (is )?not available|"
    r"ProcessGroupGloo does not support|does not support \w+ (on|for) (the )?gloo|"
    r"gloo does not support|not supported (by|with|on) (the )?gloo|"
    r"No backend type associated with device type cuda",
    re.IGNORECASE,
)

# Skip reasons that mean "needs a GPU or NCCL", in any wording: a reason that names CUDA, a GPU, NCCL or an
# accelerator ("Need at least 2 CUDA devices", "Not enough CUDA devices", "c10d was not compiled with the NCCL
# backend", "No accelerator communication backend available ...", "needs an accelerator: CPU offload", the
# harness's "needs CUDA: ..." and "needs 2 GPUs, found 0"), not a list of upstream's phrasings.
_GPU_WORD = re.compile(r"\b(cuda|gpu|nccl|accelerator|multi-gpu)", re.IGNORECASE)
# ... unless it names them as where the test does NOT run: "flaky on CUDA", "not supported on GPU", "skipped
# for NCCL", "fails with NCCL", "Test skipped for ROCm" (a GPU platform the test avoids is no need for a GPU),
# "NCCL hangs here". Such a skip means the test would be skipped on a GPU machine too.
_NOT_A_NEED = re.compile(
    r"\b(skip\w*|flaky|flakey|fail\w*|broken|unsupported|not supported|disabled|hangs?|slow|crash\w*|timeouts?|"
    r"times out|not implemented|doesn'?t work|does not work|not work\w*|excluded|known issue|bug\w*|wrong|"
    r"incorrect|ooms?)\b(?:(?!\b(?:needs?|requires?|required|only|must|wants?)\b)[^.;:,]){0,40}?"
    r"\b(on|for|with|under|in|by|when using) (the |a |an |multiple |multi-)?"
    r"(cuda|gpu|nccl|accelerator|rocm|hip)|"
    r"\b(cuda|gpus?|nccl\w*|accelerators?)\b[^.;:,]{0,25}?\b(is |are )?(flaky|broken|hangs?|crash\w*)\b|"
    r"\b(on|for|with|under|in) rocm\b|\brocm\b[^.;:,]{0,25}?\b(skip\w*|flaky|fail\w*|unsupported|not supported)",
    re.IGNORECASE,
)
def needs_nccl(exc_type: str, message: str) -> str:
    """The phrase that shows a rank's error comes from needing NCCL (one GPU per rank), or "" when it does not.

    Example::

        needs_nccl("DistBackendError", "... Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0")
        # 'Duplicate GPU detected'
    """
    m = _NEEDS_NCCL.search(f"{exc_type}: {message}")
    return m.group(0) if m else ""


def gpu_skip(reason: str) -> bool:
    """True when a skip's reason means the test needs a GPU or NCCL (and so would run on a machine with them).

    The rule, not a list of phrasings: the reason names CUDA, a GPU, NCCL or an accelerator, and not as
    where the test is kept from running ("flaky on CUDA", "not supported on GPU", "skipped on ROCm").

    Example::

        gpu_skip("Not enough CUDA devices")                         # True
        gpu_skip("c10d was not compiled with the NCCL backend")     # True (upstream's requires_nccl)
        gpu_skip("flaky on CUDA")                                   # False: it would be skipped with a GPU too
        gpu_skip("Skipped due to small world size.")                # False
    """
    if not reason or not _GPU_WORD.search(reason):
        return False
    if reason.startswith(("needs CUDA:", "needs NCCL")) or was_tried(reason):
        return True  # the harness's own (its error text may say anything)
    return not _NOT_A_NEED.search(reason)


#: what a skip's reason says of a test that asks for GPUs and failed on CPU, where it ran for want of them
TRIED_ON_CPU = "tried on CPU for want of them"
#: ... and of one that failed on the GPUs its ranks shared for want of one GPU per rank
TRIED_ON_SHARED = "its ranks shared for want of them"


def was_tried(reason: str) -> bool:
    """True when a skip's reason is the harness's "asked for GPUs, tried without enough of them, failed"."""
    return TRIED_ON_CPU in reason or TRIED_ON_SHARED in reason


def tried_on_cpu(wanted: int, gpus_asked: int, what: str, where: str = "", shared_gpus: int = 0) -> str:
    """The skip's reason for a test that asks for ``wanted`` GPUs (``gpus_asked``: its ``skip_if_lt_x_gpu``
    number, 0: its world size follows the device count) and failed on CPU, or on the ``shared_gpus`` GPUs its
    ranks shared (0: CPU), where it ran for want of them: ``what`` happened there (the rank and its error line),
    at ``where`` (``file:line``).

    Upstream skips such a test on a machine with too few GPUs; trying it there is worth it (it often passes),
    but a failure there (a device named by index, a tensor on ``cuda:0`` beside one on CPU, a sharded tensor
    placed on ``rank:0/cpu``) says nothing about the test on enough GPUs. ``HARNESS_DEVICE=cpu`` (or
    ``cuda-shared``) makes it a failure.

    Example::

        tried_on_cpu(2, 2, "rank 1: TypeError: device(): argument 'index' must be int, not str", "t.py:12")
        # "needs 2 GPUs (skip_if_lt_x_gpu(2)); tried on CPU for want of them: rank 1: TypeError: ... (t.py:12)"
        tried_on_cpu(4, 4, "rank 1: RuntimeError: weight is on cuda:0, ...", shared_gpus=1)
        # "needs 4 GPUs (skip_if_lt_x_gpu(4)); tried on 1 GPU its ranks shared for want of them: rank 1: ..."
    """
    why = f"skip_if_lt_x_gpu({gpus_asked})" if gpus_asked else "its world size follows the device count"
    if shared_gpus:
        tried = f"tried on {shared_gpus} GPU{'s' if shared_gpus != 1 else ''} {TRIED_ON_SHARED}"
    else:
        tried = TRIED_ON_CPU
    return f"needs {wanted} GPUs ({why}); {tried}: {what}" + (f" ({where})" if where else "")


def test_line(traceback_text: str, module_file: str | None) -> str:
    """``file:line`` of the innermost frame in the test's own file (where the test asked for CUDA)."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', traceback_text or "")
    if not frames:
        return ""
    if module_file:
        own = os.path.realpath(module_file)
        mine = [(f, n) for f, n in frames if os.path.realpath(f) == own]
        if mine:
            return f"{os.path.basename(mine[-1][0])}:{mine[-1][1]}"
    outside = [(f, n) for f, n in frames if "site-packages" not in f and "/harness/" not in f]
    f, n = (outside or frames)[-1]
    return f"{os.path.basename(f)}:{n}"


# Upstream tests skip from inside a rank with ``sys.exit(TEST_SKIPS[...].exit_code)``: exit code -> reason.
_UPSTREAM_SKIP_CODES = {
    72: "distributed backend not available", 73: "world size too small", 74: "CUDA is not available",
    75: "needs at least 1 CUDA device", 76: "c10d not compiled with NCCL", 77: "needs at least 2 CUDA devices",
    78: "skipped on ROCm", 79: "no GPU peer access", 80: "needs at least 3 CUDA devices",
    81: "needs at least 4 CUDA devices", 82: "needs at least 5 CUDA devices", 83: "needs at least 6 CUDA devices",
    84: "needs at least 7 CUDA devices", 85: "needs at least 8 CUDA devices", 86: "skipped in the rank",
    87: "odd world size", 88: "missing import", 89: "no accelerator available",
}


def upstream_skip(exc_type: str, message: str) -> str:
    """The skip reason when a rank left with upstream's ``sys.exit(<skip exit code>)``, else ""."""
    if exc_type != "SystemExit":
        return ""
    try:
        code = int(message.strip())
    except ValueError:
        return ""
    reason = _UPSTREAM_SKIP_CODES.get(code)
    return f"{reason} (sys.exit({code}) in the test: upstream's skip exit code)" if reason else ""
