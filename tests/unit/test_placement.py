"""Where a test runs (device and backend, and why), the world it asks for, and the backend string a rank uses."""
from __future__ import annotations

import unittest
from unittest import mock

import torch
from hypothesis import given, strategies as st

from harness.shared.config import DEVICE_CHOICES
from harness.shared.placement import KINDS, Placement, choose_placement, default_backend, normalize_backend
from harness.errors import UsageError
from harness.judging.fallback import pretend_device_count
from harness.parent.testrun import world_size_for


def _nccl(available: bool) -> mock._patch:
    """This torch build with or without NCCL (a CPU build has none), for the choice alone."""
    return mock.patch("torch.distributed.is_nccl_available", return_value=available)


class TestChoosePlacement(unittest.TestCase):
    def test_auto_with_enough_gpus_runs_one_rank_per_gpu_on_nccl(self):
        with _nccl(True):
            pl = choose_placement(2, 0, "auto", gpus=4)
        self.assertEqual((pl.device_type, pl.label, pl.reason, pl.skip, pl.shared), ("cuda", "cuda/nccl",
                                                                                     "4 GPUs for 2 ranks", "", False))
        self.assertEqual((pl.backend, pl.kind, pl.shortfall), ("nccl", "cuda", False))

    def test_auto_with_fewer_gpus_than_ranks_shares_them_over_gloo_and_says_why(self):
        pl = choose_placement(4, 0, "auto", gpus=1, nccl=True)
        self.assertEqual((pl.device_type, pl.label, pl.backend, pl.shared, pl.gpus, pl.skip, pl.shortfall),
                         ("cuda", "cuda-shared/gloo", "gloo", True, 1, "", True))
        self.assertEqual(pl.reason, "needs 4 GPUs, found 1 (NCCL needs one GPU per rank): 4 ranks share 1 GPU over "
                                    "gloo (rank r on cuda:r % 1)")
        self.assertEqual(pl.ranks_per_gpu, 4)
        two = choose_placement(4, 0, "auto", gpus=2, nccl=True)
        self.assertEqual((two.label, two.gpus, two.ranks_per_gpu), ("cuda-shared/gloo", 2, 2))

    def test_auto_without_a_gpu_falls_back_to_cpu_and_says_why(self):
        with _nccl(True):
            pl = choose_placement(4, 0, "auto", gpus=0)
        self.assertEqual((pl.label, pl.reason, pl.skip, pl.shortfall),
                         ("cpu/gloo", "needs 4 GPUs, found 0: ran on CPU/gloo", "", True))

    def test_skip_if_lt_x_gpu_counts_when_it_asks_for_more_than_the_world(self):
        pl = choose_placement(2, 8, "auto", gpus=4, nccl=True)
        self.assertEqual((pl.label, pl.gpus), ("cuda-shared/gloo", 2))
        self.assertTrue(pl.reason.startswith("needs 8 GPUs, found 4"), pl.reason)
        self.assertEqual(choose_placement(2, 8, "auto", gpus=0, nccl=True).reason, "needs 8 GPUs, found 0: ran on CPU/gloo")

    def test_gpus_without_nccl_are_shared_over_gloo(self):
        pl = choose_placement(2, 0, "auto", gpus=8, nccl=False)
        self.assertEqual((pl.label, pl.shortfall), ("cuda-shared/gloo", False))
        self.assertTrue(pl.reason.startswith("this torch build has no NCCL: 2 ranks share 2 GPUs"), pl.reason)
        self.assertEqual(choose_placement(2, 0, "auto", gpus=0, nccl=False).reason,
                         "needs 2 GPUs, found 0: ran on CPU/gloo")

    def test_cpu_is_cpu_whatever_the_machine(self):
        pl = choose_placement(2, 0, "cpu", gpus=8, nccl=True)
        self.assertEqual((pl.device_type, pl.reason, pl.skip, pl.shortfall), ("cpu", "HARNESS_DEVICE=cpu", "", False))

    def test_cuda_takes_nccl_or_shared_gpus_and_skips_only_without_a_gpu(self):
        self.assertEqual(choose_placement(2, 0, "cuda", gpus=2, nccl=True).label, "cuda/nccl")
        self.assertEqual(choose_placement(4, 0, "cuda", gpus=1, nccl=True).label, "cuda-shared/gloo")
        pl = choose_placement(4, 0, "cuda", gpus=0, nccl=True)
        self.assertEqual(pl.skip, "needs a GPU, found none (HARNESS_DEVICE=cuda)")

    def test_nccl_is_one_gpu_per_rank_or_a_skip_with_the_reason(self):
        self.assertEqual(choose_placement(2, 0, "nccl", gpus=2, nccl=True).label, "cuda/nccl")
        self.assertEqual(choose_placement(4, 0, "nccl", gpus=1, nccl=True).skip,
                         "needs 4 GPUs, found 1 (HARNESS_DEVICE=nccl: one GPU per rank)")
        self.assertEqual(choose_placement(2, 0, "nccl", gpus=2, nccl=False).skip,
                         "this torch build has no NCCL (HARNESS_DEVICE=nccl: one GPU per rank)")

    def test_cuda_shared_shares_even_where_there_are_enough(self):
        pl = choose_placement(2, 0, "cuda-shared", gpus=8, nccl=True)
        self.assertEqual((pl.label, pl.gpus, pl.shortfall, pl.skip), ("cuda-shared/gloo", 2, False, ""))
        self.assertEqual(choose_placement(2, 0, "cuda-shared", gpus=0, nccl=True).skip,
                         "needs a GPU, found none (HARNESS_DEVICE=cuda-shared)")

    def test_an_unknown_mode_is_refused_with_the_choices(self):
        with self.assertRaisesRegex(UsageError, r"HARNESS_DEVICE='tpu': use auto, cpu, cuda, nccl or cuda-shared"):
            choose_placement(2, 0, "tpu", gpus=0, nccl=False)

    def test_this_machine_counts_are_used_when_none_are_given(self):
        pl = choose_placement(1, 0, "auto")
        self.assertEqual(pl.device_type == "cuda", torch.cuda.is_available() and torch.cuda.device_count() >= 1)

    def test_the_label_names_the_backend(self):
        self.assertEqual(Placement("cuda", 2, "").label, "cuda/nccl")
        self.assertEqual(Placement("cuda", 2, "", shared=True, gpus=1).label, "cuda-shared/gloo")
        self.assertEqual(Placement("cpu", 2, "").label, "cpu/gloo")

    @given(ws=st.integers(1, 16), asked=st.integers(0, 16), gpus=st.integers(0, 16), nccl=st.booleans(),
           mode=st.sampled_from(DEVICE_CHOICES))
    def test_every_placement_is_one_the_machine_can_carry(self, ws, asked, gpus, nccl, mode):
        pl = choose_placement(ws, asked, mode, gpus=gpus, nccl=nccl)
        if pl.skip:
            self.assertIn(mode, ("nccl", "cuda", "cuda-shared"))  # auto and cpu always run somewhere
            return
        if pl.label == "cuda/nccl":  # NCCL refuses two ranks on one GPU
            self.assertTrue(nccl and gpus >= max(ws, asked))
        if pl.shared:
            self.assertTrue(1 <= pl.gpus <= min(gpus, ws))
            self.assertEqual(pl.backend, "gloo")
        if pl.device_type == "cpu":
            self.assertTrue(mode == "cpu" or gpus == 0)
        self.assertEqual(pl.shortfall, mode in ("auto", "cuda") and gpus < max(ws, asked))
        if mode == "auto" and gpus >= 1:
            self.assertEqual(pl.device_type, "cuda")  # a machine with a GPU runs CUDA code, never CPU


class TestNormalizeBackend(unittest.TestCase):
    def test_no_backend_is_the_placements_default(self):
        self.assertEqual(normalize_backend(None, "cuda"), "nccl")
        self.assertEqual(normalize_backend("", "cpu"), "gloo")
        self.assertEqual(normalize_backend(None, "cuda", shared=True), "gloo")

    def test_a_bare_nccl_on_cpu_or_shared_gpus_becomes_gloo(self):
        self.assertEqual(normalize_backend("NCCL ", "cpu"), "gloo")
        self.assertEqual(normalize_backend("nccl", "cuda"), "nccl")
        self.assertEqual(normalize_backend("nccl", "cuda", shared=True), "gloo")
        self.assertEqual(normalize_backend("gloo", "cuda"), "gloo")

    def test_per_device_entries_for_another_device_are_dropped(self):
        self.assertEqual(normalize_backend("cpu:gloo,cuda:nccl", "cpu"), "cpu:gloo")
        self.assertEqual(normalize_backend("cpu:gloo,cuda:nccl", "cuda"), "cpu:gloo,cuda:nccl")
        self.assertEqual(normalize_backend("cuda:nccl", "cpu"), "gloo")

    def test_shared_gpus_carry_cuda_over_gloo(self):
        self.assertEqual(normalize_backend("cpu:gloo,cuda:nccl", "cuda", shared=True), "cpu:gloo,cuda:gloo")
        self.assertEqual(normalize_backend("cpu:gloo", "cuda", shared=True), "cpu:gloo,cuda:gloo")

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


class TestTheBackendIsDecidedOnce(unittest.TestCase):
    """"CUDA means NCCL unless the GPUs are shared": decided in placement.default_backend, asked everywhere else."""

    def test_cuda_is_nccl_unless_the_ranks_share_gpus(self):
        self.assertEqual(default_backend("cuda"), "nccl")
        self.assertEqual(default_backend("cuda", shared=True), "gloo")
        self.assertEqual(default_backend("cpu"), "gloo")
        self.assertEqual(default_backend("cpu", shared=True), "gloo")

    @given(st.sampled_from(["cpu", "cuda"]), st.booleans())
    def test_the_placement_and_the_backend_string_agree_with_the_rule(self, device_type, shared):
        pl = Placement(device_type, 2, "why", shared=shared)
        self.assertEqual(pl.backend, default_backend(device_type, shared))
        self.assertEqual(pl.backend_for(None), pl.backend)
        self.assertEqual(normalize_backend(None, device_type, shared), pl.backend)
        self.assertEqual(pl.label, f"{pl.kind}/{pl.backend}")
        self.assertIn(pl.kind, KINDS)
        # what the rule gave is given back as it is: normalising a normalised backend changes nothing
        self.assertEqual(pl.backend_for(pl.backend), pl.backend)
        per_device = pl.backend_for("cpu:gloo,cuda:nccl")
        self.assertEqual(pl.backend_for(per_device), per_device)

    def test_backend_for_normalises_what_a_test_asks_for_on_its_placement(self):
        shared = Placement("cuda", 4, "why", shared=True, gpus=1)
        self.assertEqual(shared.backend_for("nccl"), "gloo")
        self.assertEqual(shared.backend_for("cpu:gloo,cuda:nccl"), "cpu:gloo,cuda:gloo")
        self.assertEqual(Placement("cpu", 2, "why").backend_for("cpu:gloo,cuda:nccl"), "cpu:gloo")
        self.assertEqual(Placement("cuda", 2, "why", gpus=2).backend_for("cpu:gloo"), "cpu:gloo,cuda:nccl")


def _classes():
    """Test classes as a rank binds them (made here, so that discovery does not collect them)."""
    from harness import MultiProcessTestCase, with_comms

    class Plain(MultiProcessTestCase):
        def test_x(self):
            pass

        @with_comms(backend="nccl")
        def test_nccl(self):
            pass

    class Own(MultiProcessTestCase):
        @property
        def backend(self):
            return "cpu:gloo,cuda:nccl"

        def test_x(self):
            pass

    return Plain, Own


class TestTheRankAsksThePlacement(unittest.TestCase):
    """A rank takes its placement from its context (not from the Task) and asks it for the backend."""

    def test_a_bound_test_says_the_placements_device_and_backend(self):
        from harness.shared.protocol import Task

        Plain, _ = _classes()
        shared = Placement("cuda", 2, "why", shared=True, gpus=1)
        test = Plain("test_x")
        with self.assertRaisesRegex(UsageError, "backend is only known inside a rank"):
            test.backend
        test._harness_bind(1, Task(module="m", module_file=None, qualname="Plain", method="test_x", seed=0), shared)
        self.assertEqual((test.rank, test.device_type, test.backend), (1, "cuda", "gloo"))

    def test_the_backend_asked_is_the_decorators_or_the_classs_own_else_none(self):
        from harness.testing.decorators import markers
        from harness.ranks.task import _backend_asked

        Plain, Own = _classes()
        self.assertIsNone(_backend_asked(Plain("test_x"), markers(Plain.test_x)))  # the placement's: not normalised again
        self.assertEqual(_backend_asked(Plain("test_nccl"), markers(Plain.test_nccl)), "nccl")
        self.assertEqual(_backend_asked(Own("test_x"), markers(Own.test_x)), "cpu:gloo,cuda:nccl")


class TestWorldSizeFor(unittest.TestCase):
    def test_a_fixed_world_is_taken_as_is(self):
        self.assertEqual(world_size_for(_Sized(2), "t", gpus=0), (2, ""))

    def test_a_world_from_the_device_count_is_the_one_on_a_machine_with_enough_gpus(self):
        test = _Sized(lambda: min(4, torch.cuda.device_count()))
        with pretend_device_count(0):  # the same on a machine with GPUs: the count is the test's, not the machine's
            ws, note = world_size_for(test, "t", gpus=0)
            self.assertEqual(world_size_for(test, "t", gpus_needed=2, gpus=0)[0], 2)  # skip_if_lt_x_gpu(2)
        self.assertEqual(ws, 4)
        self.assertEqual(note, "world size 4 as on a machine with 4 GPUs (world_size follows the device count, 0 on "
                               "this machine)")

    def test_zero_that_is_not_from_the_device_count_is_an_error_naming_the_test(self):
        with self.assertRaisesRegex(UsageError, r"^mod\.T\.t: world_size must be an int >= 1, got 0"):
            world_size_for(_Sized(0), "mod.T.t", gpus=0)

    def test_a_world_size_that_raises_is_a_usage_error(self):
        with self.assertRaisesRegex(UsageError, r"t: evaluating world_size raised ZeroDivisionError"):
            world_size_for(_Sized(lambda: 1 // 0), "t", gpus=0)


if __name__ == "__main__":
    unittest.main()
