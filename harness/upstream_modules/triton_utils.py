"""``torch.testing._internal.triton_utils`` as distributed test files use it: the skips for a GPU inductor compiles
for with triton. (Its triton kernels are test bodies for inductor's own tests, not offered here.)"""
from __future__ import annotations

import unittest

from harness.upstream_modules.inductor_utils import HAS_CUDA_AND_TRITON, HAS_GPU, HAS_XPU_AND_TRITON

__all__ = ["requires_cuda_and_triton", "requires_xpu_and_triton", "requires_gpu_and_triton", "requires_gpu"]

requires_cuda_and_triton = unittest.skipUnless(HAS_CUDA_AND_TRITON, "requires cuda and triton")
requires_xpu_and_triton = unittest.skipUnless(HAS_XPU_AND_TRITON, "requires xpu and triton")
#: HAS_GPU is already "a CUDA, XPU or MTIA GPU, and triton"
requires_gpu_and_triton = unittest.skipUnless(HAS_GPU, "requires gpu and triton")
requires_gpu = unittest.skipUnless(HAS_GPU, "requires gpu")
