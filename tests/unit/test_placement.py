"""Where a test runs (device and backend, and why), the world it asks for, and the backend string a rank uses."""
from __future__ import annotations

import unittest
from unittest import mock

import torch

from harness.comms import Placement, choose_placement, normalize_backend
from harness.errors import UsageError
from harness.execution import world_size_for


def _nccl(available: bool) -> mock._patch:
    """This torch build with or without NCCL (a CPU build has none), for the choice alone."""
    return mock.patch("torch.distributed.is_nccl_available", return_value=available)


class TestChoosePlacement(unittest.TestCase):
    def test_auto_with_enough_gpus_runs_on_cuda(self):
        with _nccl(True):
            pl = choose_placement(2, 0, "auto", gpus=4)
        self.assertEqual((pl.device_type, pl.label, pl.reason, pl.skip), ("cuda", "cuda/nccl", "4 GPUs for 2 ranks", ""))

    def test_auto_without_enough_gpus_falls_back_to_cpu_and_says_why(self):
        with _nccl(True):
            pl = choose_placement(4, 0, "auto", gpus=2)
        self.assertEqual((pl.label, pl.reason, pl.skip), ("cpu/gloo", "needs 4 GPUs, found 2: ran on CPU/gloo", ""))

    def test_skip_if_lt_x_gpu_counts_when_it_asks_for_more_than_the_world(self):
        with _nccl(True):
            pl = choose_placement(2, 8, "auto", gpus=4)
        self.assertEqual(pl.reason, "needs 8 GPUs, found 4: ran on CPU/gloo")

    def test_auto_without_nccl_runs_on_cpu(self):
        with _nccl(False):
            pl = choose_placement(2, 0, "auto", gpus=8)
        self.assertEqual((pl.device_type, pl.reason), ("cpu", "this torch build has no NCCL: ran on CPU/gloo"))

    def test_cpu_is_cpu_whatever_the_machine(self):
        with _nccl(True):
            pl = choose_placement(2, 0, "cpu", gpus=8)
        self.assertEqual((pl.device_type, pl.reason, pl.skip), ("cpu", "HARNESS_DEVICE=cpu", ""))

    def test_cuda_without_enough_gpus_is_a_skip_with_the_reason(self):
        with _nccl(True):
            pl = choose_placement(4, 0, "cuda", gpus=1)
        self.assertEqual(pl.skip, "needs 4 GPUs, found 1 (HARNESS_DEVICE=cuda)")
        with _nccl(False):
            self.assertEqual(choose_placement(2, 0, "cuda", gpus=2).skip,
                             "this torch build has no NCCL (HARNESS_DEVICE=cuda)")

    def test_the_label_names_the_backend(self):
        self.assertEqual(Placement("cuda", 2, "").label, "cuda/nccl")
        self.assertEqual(Placement("cpu", 2, "").label, "cpu/gloo")


class TestNormalizeBackend(unittest.TestCase):
    def test_no_backend_is_the_devices_default(self):
        self.assertEqual(normalize_backend(None, "cuda"), "nccl")
        self.assertEqual(normalize_backend("", "cpu"), "gloo")

    def test_a_bare_nccl_on_cpu_becomes_gloo(self):
        self.assertEqual(normalize_backend("NCCL ", "cpu"), "gloo")
        self.assertEqual(normalize_backend("nccl", "cuda"), "nccl")
        self.assertEqual(normalize_backend("gloo", "cuda"), "gloo")

    def test_per_device_entries_for_another_device_are_dropped(self):
        self.assertEqual(normalize_backend("cpu:gloo,cuda:nccl", "cpu"), "cpu:gloo")
        self.assertEqual(normalize_backend("cpu:gloo,cuda:nccl", "cuda"), "cpu:gloo,cuda:nccl")
        self.assertEqual(normalize_backend("cuda:nccl", "cpu"), "gloo")

    def test_cuda_gets_nccl_when_the_test_named_only_cpu(self):
        self.assertEqual(normalize_backend("cpu:gloo", "cuda"), "cpu:gloo,cuda:nccl")

    def test_a_malformed_entry_is_refused_with_the_form_expected(self):
        with self.assertRaisesRegex(UsageError, r"'cpu' is not 'device:backend' \(e\.g\. 'cpu:gloo,cuda:nccl'\)"):
            normalize_backend("cuda:nccl,cpu", "cuda")


class _Sized:
    """A stand-in for a test instance: only its ``world_size`` is read."""

    def __init__(self, world_size) -> None:  # a value, or a callable evaluated each time it is read
        self._ws = world_size

    @property
    def world_size(self):
        return self._ws() if callable(self._ws) else self._ws


class TestWorldSizeFor(unittest.TestCase):
    def test_a_fixed_world_is_taken_as_is(self):
        self.assertEqual(world_size_for(_Sized(2), "t", gpus=0), (2, ""))

    def test_a_world_from_the_device_count_is_the_one_on_a_machine_with_enough_gpus(self):
        test = _Sized(lambda: min(4, torch.cuda.device_count()))
        ws, note = world_size_for(test, "t", gpus=0)
        self.assertEqual(ws, 4)
        self.assertEqual(note, "world size 4 as on a machine with 4 GPUs (world_size follows the device count, 0 on "
                               "this machine)")
        self.assertEqual(world_size_for(test, "t", gpus_needed=2, gpus=0)[0], 2)  # skip_if_lt_x_gpu(2)

    def test_zero_that_is_not_from_the_device_count_is_an_error_naming_the_test(self):
        with self.assertRaisesRegex(UsageError, r"^mod\.T\.t: world_size must be an int >= 1, got 0"):
            world_size_for(_Sized(0), "mod.T.t", gpus=0)

    def test_a_world_size_that_raises_is_a_usage_error(self):
        with self.assertRaisesRegex(UsageError, r"t: evaluating world_size raised ZeroDivisionError"):
            world_size_for(_Sized(lambda: 1 // 0), "t", gpus=0)


if __name__ == "__main__":
    unittest.main()
