"""Resumable training: a rank killed while a DCP checkpoint is being saved, the world restarted, training resumed.

Fine-tuning an FSDP2 model with a DCP save (model and Adam state) every ``EVERY`` steps. Hypothesis draws which
save and which of ``dcp.save``'s collectives rank 1 is killed entering (its plan's ``gather_object`` /
``scatter_object_list``, or the write's ``gather_object`` / ``broadcast_object_list``: ``harness.faults``);
``@restarts(1)`` ends the world and starts it again in fresh ranks with the same ``temp_dir``. Checked:

* the restart resumes from the newest *complete* checkpoint (its ``.metadata`` written, which DCP's coordinator
  does last): a save the kill tore (rank 0's shard on disk, no metadata) is never picked, and the torn save's
  folder is seen on disk when the kill landed in the write;
* the resumed run ends with the weights of an uninterrupted run (the same steps in the same world), bit for bit
  on CPU;
* the first attempt never reaches the end (the kill fired), the second starts from the newest complete save;
* the same with ``dcp.async_save`` (its collectives in its own thread, on a group of its own): rank 1 killed
  entering a save's last collective, or its write of a save's data failing with ENOSPC (``faults.io_error``).
"""
from __future__ import annotations

import os

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
#: dcp.save's collectives, in the order one save makes them, and how many of each one save makes
SAVE_OPS = {"gather_object": 2, "scatter_object_list": 1, "broadcast_object_list": 1}


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


def _train(test: MultiProcessTestCase, root: str | None, resume: bool, asynchronous: bool = False
           ) -> tuple[nn.Module, int]:
    """Train STEPS steps, saving every EVERY into ``root`` (None: no saves), from the newest complete save;
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
    for step in range(start, STEPS):
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


class TestResumeAfterKill(MultiProcessTestCase):
    @settings(max_examples=2, deadline=None)  # each example: two worlds, two trainings; keep CI small
    @given(fault=st.builds(lambda save, op, nth: faults.kill(1, op=op, nth=(save - 1) * SAVE_OPS[op] + nth),
                           st.integers(1, SAVES), st.sampled_from(sorted(SAVE_OPS)), st.integers(1, 2))
           .filter(lambda f: f.nth <= SAVES * SAVE_OPS[f.op]))
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_kill_during_save_resumes_bitwise(self, fault):
        root = os.path.join(self.temp_dir, "ckpt")
        os.makedirs(root, exist_ok=True)
        complete_before = _complete(root)
        torn = sorted(set(int(n[5:]) for n in os.listdir(root) if n.startswith("step-")) - set(complete_before))
        model, start = _train(self, root, resume=True)
        # attempt 0 never gets here: rank 1 is killed inside a save (the fault fired, or the test fails saying so)
        self.assertEqual(self.restart_count, 1)
        self.assertEqual(start, complete_before[-1] if complete_before else 0)
        self.assertNotIn(start, torn)  # a torn save is never the one resumed from
        print(f"RESUMED rank={self.rank} fault={fault} start={start} complete={complete_before} torn={torn}")
        resumed = _full(model)
        reference, _ = _train(self, None, resume=False)
        for name, value in _full(reference).items():
            self.assertTrue(torch.equal(resumed[name], value), f"{name} differs from the uninterrupted run")


    @settings(max_examples=2, deadline=None)
    @given(fault=st.one_of(
        st.builds(lambda save, op: faults.kill(1, op=op, nth=save * SAVE_OPS[op]), st.integers(1, SAVES),
                  st.sampled_from(sorted(SAVE_OPS))),
        st.builds(lambda save: faults.io_error(1, f"*/step-{save * EVERY}/*.distcp"), st.integers(1, SAVES))))
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_async_save_failure_resumes_bitwise(self, fault):
        """``dcp.async_save``: rank 1 killed entering the last of a save's collectives (in the save's thread, after
        its data was written), or its write of a save's data failing (ENOSPC): the same resume, bit for bit."""
        root = os.path.join(self.temp_dir, "ckpt")
        os.makedirs(root, exist_ok=True)
        complete_before = _complete(root)
        model, start = _train(self, root, resume=True, asynchronous=True)
        self.assertEqual(self.restart_count, 1)
        self.assertEqual(start, complete_before[-1] if complete_before else 0)
        print(f"RESUMED rank={self.rank} fault={fault} start={start} complete={complete_before}")
        resumed = _full(model)
        reference, _ = _train(self, None, resume=False)
        for name, value in _full(reference).items():
            self.assertTrue(torch.equal(resumed[name], value), f"{name} differs from the uninterrupted run")


if __name__ == "__main__":
    run_tests()
