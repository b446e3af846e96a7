"""Resumable training: a rank killed while a DCP checkpoint is being saved, the world restarted, training resumed.

Fine-tuning an FSDP2 model with a DCP save (model and Adam state) every ``EVERY`` steps, swept: rank 1 is killed
entering each of its collectives in turn, one fresh world per point (``@faults.sweep``), and ``@restarts(1)`` ends
the world and starts it again in fresh ranks with the same ``temp_dir``. CI sweeps DCP's collectives over two saves
(each save's ``gather_object``: its plan and its commit) and runs ``dcp.async_save`` with a failed write; the
nightly tier sweeps every collective rank 1 makes over three saves (FSDP's in each step too), with ``dcp.save``
and with ``dcp.async_save``, and each ``async_save``'s last collective, in the save's thread. Checked at every point:

* the restart resumes from the newest *complete* checkpoint (its ``.metadata`` written, which DCP's coordinator
  does last): a save the kill tore (rank 0's shard on disk, no metadata) is never picked;
* the resumed run ends with the weights of an uninterrupted run (the same steps in the same world), bit for bit
  on CPU;
* the same with ``dcp.async_save`` (its collectives in its own thread, on a group of its own), and with its write
  of a save's data failing with ENOSPC on rank 1 (``faults.io_error``, drawn by hypothesis).
"""
from __future__ import annotations

import os
import unittest

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from harness import MultiProcessTestCase, faults, restarts, run_tests, with_comms, with_temp_dir

STEPS, EVERY, DIM = 6, 2, 8
SAVES = STEPS // EVERY
#: the CI sweeps train SHORT steps (two saves): the same checks at a third fewer points
SHORT = 4


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, DIM), nn.LeakyReLU(0.1), nn.Linear(DIM, DIM))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    return model


def _batch(step: int, rank: int) -> torch.Tensor:
    return torch.randn(4, DIM, generator=torch.Generator().manual_seed(1000 * step + rank))


def _complete(root: str) -> list[int]:
    """The steps whose checkpoint is complete (DCP writes .metadata last, after every rank's data)."""
    done = []
    for name in os.listdir(root):
        if name.startswith("step-") and os.path.exists(os.path.join(root, name, ".metadata")):
            done.append(int(name[5:]))
    return sorted(done)


def _train(test: MultiProcessTestCase, root: str | None, resume: bool, asynchronous: bool = False,
           steps: int = STEPS) -> tuple[nn.Module, int]:
    """Train ``steps`` steps, saving every EVERY into ``root`` (None: no saves), from the newest complete save;
    ``asynchronous``: with ``dcp.async_save`` on a group of its own (its collectives run in its thread), each save
    waited for before the next and at the end."""
    model = _model()
    group = dist.new_group(backend="gloo") if asynchronous and root is not None else None
    pending = None
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    start = 0
    if resume and root is not None:
        complete = _complete(root)
        if complete:
            start = complete[-1]
            msd, osd = get_state_dict(model, optim)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=os.path.join(root, f"step-{start}"))
            set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for step in range(start, steps):
        loss = model(_batch(step, test.rank)).pow(2).sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
        if root is not None and (step + 1) % EVERY == 0:
            msd, osd = get_state_dict(model, optim)
            where = os.path.join(root, f"step-{step + 1}")
            if group is None:
                dcp.save({"model": msd, "optim": osd}, checkpoint_id=where)
                continue
            if pending is not None:
                pending.result()
            pending = dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=where, process_group=group)
    if pending is not None:
        pending.result()
    return model, start


def _full(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}


#: the full sweeps (every collective of rank 1: its training steps' FSDP collectives and DCP's) run in the nightly
#: tier; CI sweeps the same body over one of DCP's collectives with the same checks
NIGHTLY = unittest.skipUnless(os.environ.get("DISTHARNESS_NIGHTLY") == "1",
                              "nightly tier (DISTHARNESS_NIGHTLY=1 runs it): every collective of rank 1; CI sweeps the "
                              "same body over DCP's save collectives (test_*_save_points_resume_bitwise)")


class TestResumeAfterKill(MultiProcessTestCase):
    def resumes_bitwise(self, asynchronous: bool = False, steps: int = STEPS) -> None:
        """Train with a save every EVERY steps, resuming from the newest complete save; in the attempt after a kill
        (restart_count 1) that save is the newest one complete before it and never a torn one, and the weights at
        the end are an uninterrupted run's, bit for bit (CPU)."""
        root = os.path.join(self.temp_dir, "ckpt")
        os.makedirs(root, exist_ok=True)
        complete_before = _complete(root)
        torn = sorted(set(int(n[5:]) for n in os.listdir(root) if n.startswith("step-")) - set(complete_before))
        if self.restart_count == 0:
            self.assertEqual(complete_before, [])  # a fresh temp_dir: nothing to resume from
        model, start = _train(self, root, resume=True, asynchronous=asynchronous, steps=steps)
        self.assertEqual(start, complete_before[-1] if complete_before else 0)
        self.assertNotIn(start, torn)  # a torn save is never the one resumed from
        print(f"RESUMED rank={self.rank} restart_count={self.restart_count} start={start} complete={complete_before} "
              f"torn={torn}")
        resumed = _full(model)
        reference, _ = _train(self, None, resume=False, steps=steps)
        for name, value in _full(reference).items():
            self.assertTrue(torch.equal(resumed[name], value), f"{name} differs from the uninterrupted run")

    @faults.sweep(faults.kill, rank=1, op="gather_object")  # each save's plan and its commit: 2 points a save
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_save_points_resume_bitwise(self):
        self.resumes_bitwise(steps=SHORT)

    @NIGHTLY
    @faults.sweep(faults.kill, rank=1)  # every collective rank 1 makes: FSDP's in each step, DCP's in each save
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_every_point_resumes_bitwise(self):
        self.resumes_bitwise()

    @unittest.skipUnless(os.environ.get("DISTHARNESS_NIGHTLY") == "1",
                         "nightly tier (DISTHARNESS_NIGHTLY=1 runs it): the async save's path by "
                         "test_async_save_write_failure_resumes_bitwise, a kill swept and resumed by "
                         "test_save_points_resume_bitwise")
    @faults.sweep(faults.kill, rank=1, op="broadcast_object_list")  # each save's last collective, in its thread
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_async_save_points_resume_bitwise(self):
        """``dcp.async_save``: its collectives in the save's thread, on a group of its own."""
        self.resumes_bitwise(asynchronous=True, steps=SHORT)

    @NIGHTLY
    @faults.sweep(faults.kill, rank=1)
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_async_every_point_resumes_bitwise(self):
        self.resumes_bitwise(asynchronous=True)

    @settings(max_examples=1, deadline=None)  # one drawn save: the kills' checks are the sweeps'
    @given(fault=st.builds(lambda save: faults.io_error(1, f"*/step-{save * EVERY}/*.distcp"), st.integers(1, SAVES)))
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_async_save_write_failure_resumes_bitwise(self, fault):
        """``dcp.async_save`` whose write of a save's data fails (ENOSPC, ``faults.io_error``) on rank 1: the same
        resume, bit for bit."""
        self.resumes_bitwise(asynchronous=True)


if __name__ == "__main__":
    run_tests()
