"""A CUDA build of torch on a machine without GPUs is a CPU machine: NCCL compiled in decides nothing, the GPUs there
are decide. The choice over faked counts, and the installed torch in a child process with the GPUs hidden (the
CUDA build that ``pip install torch`` gives, on the machine most users have; the CPU build in CI)."""
from __future__ import annotations

import json
import subprocess
import sys
import unittest

from harness.judging.fallback import gpu_skip, needs_cuda
from harness.shared.placement import choose_placement
from harness.testing.requirements import NCCL_WITHOUT_GPU
from tests._support import REPO, base_env, nccl_skip_reason

# In a child with CUDA_VISIBLE_DEVICES="": the decisions every class family takes, and the errors that code written
# for GPUs meets there. The unit test's own process never touches CUDA.
PROBE = r"""
import json, unittest
import torch, torch.distributed as dist
from harness import DynamoDistributedSingleProcTestCase, get_devtype, requires_accelerator_dist_backend, requires_nccl
from harness.shared.placement import choose_placement, gpu_count, nccl_available
from harness.testing.requirements import flag

out = {"nccl_compiled_in": nccl_available(), "gpus": gpu_count(), "devtype": str(get_devtype()),
       "TEST_CUDA": flag("TEST_CUDA"), "placements": {}, "errors": {}}
for ws in (1, 2, 4, 8):
    for asked in (0, ws):
        pl = choose_placement(ws, asked, "auto")
        out["placements"][f"{ws}/{asked}"] = [pl.label, pl.shortfall, pl.skip]

def skip_of(decorator):
    fn = decorator(lambda self: None)
    return getattr(fn, "__unittest_skip_why__", "") if getattr(fn, "__unittest_skip__", False) else ""

out["requires_nccl"] = skip_of(requires_nccl())
out["requires_accelerator_dist_backend"] = skip_of(requires_accelerator_dist_backend(["nccl"]))

class T(DynamoDistributedSingleProcTestCase):
    def test_x(self):
        pass

T.setUpClass()
out["single_proc"] = [T.device, T.device_ids, dist.get_backend()]
T.tearDownClass()

for label, call in {
        "a tensor on cuda": lambda: torch.ones(1, device="cuda"),
        "pinned memory": lambda: torch.ones(1).pin_memory(),
        "a CUDA stream": lambda: torch.cuda.Stream(),
        "set_device": lambda: torch.cuda.set_device(0),
        "an NCCL group": lambda: dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)}.items():
    try:
        call()
    except Exception as exc:
        out["errors"][label] = [type(exc).__name__, str(exc)]
    else:
        out["errors"][label] = None
print("PROBE " + json.dumps(out))
"""


class TestTheChoiceOverCounts(unittest.TestCase):
    """NCCL compiled in (a CUDA build) and no GPU: every world, whatever GPUs it asks for, runs on CPU/gloo under
    auto, for want of GPUs; a mode that asks for GPUs skips, naming what is missing."""

    def test_auto_is_cpu_gloo_for_every_world(self):
        for nccl in (True, False):  # a CUDA build and a CPU build: the same choice
            for ws in range(1, 9):
                for asked in range(0, 9):
                    with self.subTest(nccl=nccl, ws=ws, asked=asked):
                        pl = choose_placement(ws, asked, "auto", gpus=0, nccl=nccl)
                        self.assertEqual((pl.label, pl.backend, pl.skip, pl.shortfall), ("cpu/gloo", "gloo", "", True))

    def test_modes_that_ask_for_gpus_skip_saying_none_were_found(self):
        for mode in ("cuda", "nccl", "cuda-shared"):
            with self.subTest(mode=mode):
                pl = choose_placement(2, 0, mode, gpus=0, nccl=True)
                self.assertRegex(pl.skip, r"found 0|found none")
        self.assertEqual(choose_placement(2, 0, "cpu", gpus=0, nccl=True).label, "cpu/gloo")

    def test_every_wording_of_a_machine_without_a_usable_gpu_means_needs_cuda(self):
        # as each torch says it: a CPU build; a CUDA build without a driver; with a driver and its GPUs hidden
        # (torch 2.11 and later: AcceleratorError, CUDA's own text); a driver that cannot start
        for exc_type, message in (
                ("AssertionError", "Torch not compiled with CUDA enabled"),
                ("RuntimeError", "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"),
                ("RuntimeError", "No CUDA GPUs are available"),
                ("AcceleratorError", "CUDA error: no CUDA-capable device is detected\nCUDA kernel errors might be "
                                     "asynchronously reported at some other API call, so the stacktrace below might "
                                     "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"),
                ("torch.AcceleratorError", "CUDA error: cudaErrorNoDevice"),
                ("RuntimeError", "CUDA driver initialization failed, you might not have a CUDA gpu.")):
            with self.subTest(exc_type=exc_type, message=message[:40]):
                self.assertTrue(needs_cuda(exc_type, message))
        self.assertEqual(needs_cuda("AcceleratorError", "CUDA error: an illegal memory access was encountered"), "")

    def test_the_nccl_skip_counts_among_the_tests_that_need_cuda(self):
        self.assertTrue(gpu_skip(NCCL_WITHOUT_GPU))
        self.assertTrue(gpu_skip("c10d was not compiled with the NCCL backend"))


class TestTheInstalledTorchWithGpusHidden(unittest.TestCase):
    """The installed torch, GPUs hidden: a CUDA build here is what ``pip install torch`` gives a laptop or a CI
    runner; a CPU build answers the same (except for what NCCL's absence says)."""

    @classmethod
    def setUpClass(cls) -> None:
        proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=base_env(), capture_output=True,
                              text=True, timeout=120)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
        if proc.returncode != 0 or len(lines) != 1:
            raise AssertionError(f"the probe failed (exit code {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        cls.probe = json.loads(lines[0][len("PROBE "):])

    def test_no_gpu_is_seen(self):
        self.assertEqual(self.probe["gpus"], 0)
        self.assertEqual((self.probe["devtype"], self.probe["TEST_CUDA"]), ("cpu", False))

    def test_every_world_runs_on_cpu_gloo(self):
        for key, (label, shortfall, skip) in self.probe["placements"].items():
            with self.subTest(key):
                self.assertEqual((label, shortfall, skip), ("cpu/gloo", True, ""))

    def test_nccl_decorators_skip_whether_or_not_nccl_is_compiled_in(self):
        self.assertEqual(self.probe["requires_nccl"], nccl_skip_reason())
        if self.probe["nccl_compiled_in"]:
            self.assertEqual(self.probe["requires_nccl"], NCCL_WITHOUT_GPU)
        self.assertIn("No accelerator communication backend available", self.probe["requires_accelerator_dist_backend"])

    def test_the_single_process_dynamo_class_is_a_cpu_gloo_world_of_one(self):
        self.assertEqual(self.probe["single_proc"], ["cpu:0", None, "gloo"])

    def test_what_gpu_code_meets_here_means_needs_cuda(self):
        for label, error in self.probe["errors"].items():
            with self.subTest(label):
                self.assertIsNotNone(error, f"{label} worked without a GPU")
                self.assertTrue(needs_cuda(*error), f"{label}: {error[0]}: {error[1][:300]} is not read as needs-CUDA")


if __name__ == "__main__":
    unittest.main()
