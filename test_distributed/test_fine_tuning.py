"""Fine-tuning from a DCP checkpoint: a port of upstream's ``distributed/checkpoint/e2e/test_fine_tuning.py``.

Upstream pretrains a model under FSDP, saves model and Adam state with DCP, then fine-tunes a model whose
``pretrain`` submodule is frozen: it loads that submodule from the pretraining checkpoint
(``get_model_state_dict(submodules=...)`` with ``keep_submodule_prefixes=False``), resumes the trainable
part, trains, and saves without the frozen parameters (``ignore_frozen_params=True``), twice, the second
time as a restart. Upstream only checks that nothing raises, and it resumes the trainable part from the
*pretraining* directory inside a ``try/except KeyError`` that never fires.

Checked here beyond upstream:

* the trainable part is resumed from the *fine-tuning* checkpoint, and the first round asserts that the
  fine-tuning directory is still empty (there is nothing to resume), the second that it holds a checkpoint;
* each round builds a fresh model and optimizer (a real restart), initialised differently from what is
  loaded, and after every load the frozen weights equal the pretrained ones and the trainable weights and
  Adam state (step, moments, param groups) equal what the previous round saved, bit for bit (compared as
  full, gathered state dicts); training leaves the frozen weights untouched;
* the fine-tuning checkpoint's DCP metadata holds no frozen parameter (Adam is given only the trainable
  parameters, so not even the saved param group names a frozen one), and the key layout of both
  checkpoints is pinned with ``assertExpectedInline``;
* every round's training moves every trainable parameter, steps its Adam state ``STEPS`` times, and every
  element of it has had a gradient (Adam's second moment is non-zero in every element); before the
  restart resumes, every element of the fresh Adam state (step, moments) differs from what was saved, so
  the bit-for-bit comparisons after loading cannot pass by a value that was already there. Not "every
  element moved": Adam steps an element back and forth, and in float32 its steps can sum to nothing
  (``example(seed=115413177)``: round 1 took ``layer1.weight[29, 20]`` from -0.0829929 to -0.0832744,
  -0.0832327 and back to -0.0829929 exactly);
* hypothesis draws the seed that initialises the models and draws the batches. The checks hold for every
  seed: the models have no unit that passes a zero gradient (LeakyReLU where upstream has ReLU, see
  ``models.NEG_SLOPE``); with ReLU about 73 % of the trainable elements got no gradient on every seed, so
  their saved Adam moments were the zeros a fresh optimizer holds too.
"""
from __future__ import annotations

import os
import re
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from hypothesis import example, given
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from harness import DTensorTestBase, run_tests, with_comms, with_temp_dir
try:
    from test_distributed.models import DCP_DIM, FineTuningModel, PreTrainedModel
except ModuleNotFoundError:  # run as a script (python test_distributed/test_x.py): its folder is sys.path[0]
    from models import DCP_DIM, FineTuningModel, PreTrainedModel

STEPS = 3  # optimizer steps per training phase, as upstream
BATCH = 8


def _detached(value: Any) -> Any:
    """A CPU copy of a (nested) state dict, safe from later in-place optimizer updates."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


def _checkpoint_keys(path: str) -> list[str]:
    return sorted(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)


def _layout(keys: list[str]) -> str:
    """The keys, with each param group's hyperparameters (Adam's, which vary by torch release) as one line."""
    shown = {re.sub(r"^(optim\.param_groups\.\d+)\.(?!params$).*$", r"\1.<hyperparameters>", k) for k in keys}
    return "\n".join(sorted(shown))


class TestFineTuning(DTensorTestBase):
    @property
    def backend(self) -> str:
        return "cpu:gloo,cuda:nccl"

    # ---- helpers ----------------------------------------------------------------------------------

    def _wrap(self, module: torch.nn.Module, **kwargs: Any) -> FSDP:
        mesh = init_device_mesh(self.device_type, (self.world_size,))
        # FSDP1 needs device_id to run on CPU; on CUDA it names the rank's GPU, as moving the model to CUDA did upstream.
        return FSDP(module.to(self.device), device_mesh=mesh, device_id=self.device, **kwargs)

    def _train(self, model: FSDP, optim: torch.optim.Optimizer, seed: int, phase: int) -> None:
        for step in range(STEPS):
            # every rank, phase and step draws its own batch, all of them fixed by the example's seed
            gen = torch.Generator().manual_seed(seed * 1000 + phase * 100 + step * 10 + self.rank)
            batch = torch.rand(BATCH, DCP_DIM, generator=gen).to(self.device)
            model(batch).sum().backward()
            optim.step()
            optim.zero_grad()

    def _full_model(self, model: FSDP, **options: Any) -> dict[str, torch.Tensor]:
        """Every rank gets the whole, unsharded model state dict (a CPU copy)."""
        return _detached(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, **options)))

    def _full_state(self, model: FSDP, optim: torch.optim.Optimizer, **options: Any) -> tuple[dict, dict]:
        msd, osd = get_state_dict(model, optimizers=optim, options=StateDictOptions(full_state_dict=True, **options))
        return _detached(msd), _detached(osd)

    def _assert_same(self, actual: dict, expected: dict, what: str) -> None:
        self.assertEqual(sorted(actual), sorted(expected), msg=f"{what}: keys")
        for key in expected:
            self.assertEqual(actual[key], expected[key], atol=0, rtol=0, msg=f"{what}: {key}")

    def _assert_same_optim(self, actual: dict, expected: dict, what: str) -> None:
        self.assertEqual(sorted(actual["state"]), sorted(expected["state"]), msg=f"{what}: optimizer state keys")
        for fqn, state in expected["state"].items():
            self._assert_same(actual["state"][fqn], state, f"{what}: optimizer state of {fqn}")
        self.assertEqual(actual["param_groups"], expected["param_groups"], msg=f"{what}: param groups")

    def _assert_optim_differs(self, actual: dict, expected: dict, what: str) -> None:
        """Before a load: every element of every Adam state tensor differs (a fresh optimizer's step and
        zero moments against trained ones, non-zero wherever a gradient was, which is everywhere)."""
        self.assertEqual(sorted(actual["state"]), sorted(expected["state"]), msg=f"{what}: optimizer state keys")
        for fqn, state in expected["state"].items():
            self.assertEqual(sorted(actual["state"][fqn]), sorted(state), msg=f"{what}: {fqn}")
            for name, value in state.items():
                same = int((actual["state"][fqn][name] == value).sum())
                self.assertEqual(same, 0, msg=f"{what}: {same} elements of {fqn}.{name} already equal the checkpoint")

    def _assert_trained(self, before: dict, after: tuple[dict, dict], steps: int, what: str) -> None:
        """Every (trainable) tensor in ``before`` changed in ``after`` (full model and optimizer state), its Adam
        state was stepped ``steps`` times in all, and every element of it has had a gradient: a non-zero
        second moment (``exp_avg_sq``)."""
        model, optim = after
        self.assertEqual(sorted(model), sorted(before), msg=f"{what}: keys")
        self.assertEqual(sorted(optim["state"]), sorted(before), msg=f"{what}: the optimizer's parameters")
        for key, value in before.items():
            self.assertFalse(torch.equal(model[key], value), msg=f"{what}: {key} did not move")
            state = optim["state"][key]
            self.assertEqual(int(state["step"]), steps, msg=f"{what}: Adam steps of {key}")
            starved = int((state["exp_avg_sq"] == 0).sum())
            self.assertEqual(starved, 0,
                             msg=f"{what}: {starved} of {value.numel()} elements of {key} never had a gradient")

    def _assert_differs(self, actual: dict, expected: dict, what: str) -> None:
        """Before a load: the fresh values differ, so equality afterwards proves the load did it."""
        for key, value in expected.items():
            self.assertFalse(torch.equal(actual[key], value), msg=f"{what}: {key} already equals the checkpoint")

    # ---- the scenario -----------------------------------------------------------------------------

    def pretrain(self, pretrain_dir: str, seed: int) -> dict[str, torch.Tensor]:
        """Train a PreTrainedModel, save model + Adam state; return the saved weights (full, CPU)."""
        torch.manual_seed(seed)
        model = self._wrap(PreTrainedModel())
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
        self._train(model, optim, seed, phase=0)

        model_sd, optim_sd = get_state_dict(model, optimizers=optim)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=pretrain_dir)

        saved = self._full_model(model)
        self.assertExpectedInline(_layout(_checkpoint_keys(pretrain_dir)), """\
model.layer1.bias
model.layer1.weight
model.layer2.bias
model.layer2.weight
model.layer3.bias
model.layer3.weight
model.module_list.0.bias
model.module_list.0.weight
model.sequential.0.bias
model.sequential.0.weight
optim.param_groups.0.<hyperparameters>
optim.param_groups.0.params
optim.state.layer1.bias.exp_avg
optim.state.layer1.bias.exp_avg_sq
optim.state.layer1.bias.step
optim.state.layer1.weight.exp_avg
optim.state.layer1.weight.exp_avg_sq
optim.state.layer1.weight.step
optim.state.layer2.bias.exp_avg
optim.state.layer2.bias.exp_avg_sq
optim.state.layer2.bias.step
optim.state.layer2.weight.exp_avg
optim.state.layer2.weight.exp_avg_sq
optim.state.layer2.weight.step
optim.state.layer3.bias.exp_avg
optim.state.layer3.bias.exp_avg_sq
optim.state.layer3.bias.step
optim.state.layer3.weight.exp_avg
optim.state.layer3.weight.exp_avg_sq
optim.state.layer3.weight.step
optim.state.module_list.0.bias.exp_avg
optim.state.module_list.0.bias.exp_avg_sq
optim.state.module_list.0.bias.step
optim.state.module_list.0.weight.exp_avg
optim.state.module_list.0.weight.exp_avg_sq
optim.state.module_list.0.weight.step
optim.state.sequential.0.bias.exp_avg
optim.state.sequential.0.bias.exp_avg_sq
optim.state.sequential.0.bias.step
optim.state.sequential.0.weight.exp_avg
optim.state.sequential.0.weight.exp_avg_sq
optim.state.sequential.0.weight.step""")
        return saved

    def finetune(self, pretrain_dir: str, finetune_dir: str, pretrained: dict[str, torch.Tensor], seed: int) -> None:
        frozen_fqns = {f"pretrain.{k}": v for k, v in pretrained.items()}
        previous: tuple[dict, dict] | None = None  # what the last round saved: trainable weights, Adam state

        for round_ in range(2):  # the second round is a restart: fresh model, fresh optimizer
            torch.manual_seed(seed + 1 + round_)
            model = self._wrap(FineTuningModel(), use_orig_params=True)
            # Upstream gives Adam the frozen parameters as well, and the saved param group then lists their
            # names; the fine-tuning checkpoint should hold nothing of the frozen part, so only the
            # trainable parameters are optimised.
            optim = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
            self._assert_differs(self._full_model(model), frozen_fqns, f"round {round_}, fresh frozen weights")

            # The frozen submodule comes from the pretraining checkpoint, under its own (prefix-less) names.
            pretrain_sd = get_model_state_dict(
                model, submodules={model.pretrain}, options=StateDictOptions(keep_submodule_prefixes=False)
            )
            self.assertEqual(sorted(pretrain_sd), sorted(pretrained))
            dcp.load({"model": pretrain_sd}, checkpoint_id=pretrain_dir)
            set_model_state_dict(model, {model.pretrain: pretrain_sd}, options=StateDictOptions(strict=False))
            frozen_now = {k: v for k, v in self._full_model(model).items() if k.startswith("pretrain.")}
            self._assert_same(frozen_now, frozen_fqns, f"round {round_}, frozen weights after loading pretrain")

            # The trainable part resumes from the fine-tuning checkpoint, which only the restart has.
            if round_ == 0:
                self.assertEqual(os.listdir(finetune_dir), [], msg="round 0 must find no fine-tuning checkpoint")
            else:
                self.assertIsNotNone(previous)
                self.assertIn(".metadata", os.listdir(finetune_dir))
                fresh = self._full_state(model, optim, ignore_frozen_params=True)
                self._assert_differs(fresh[0], previous[0], "restart, fresh trainable weights")
                self._assert_optim_differs(fresh[1], previous[1], "restart, fresh Adam state")
                model_sd, optim_sd = get_state_dict(
                    model, optimizers=optim, options=StateDictOptions(ignore_frozen_params=True)
                )
                dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=finetune_dir)
                set_state_dict(model, optimizers=optim, model_state_dict=model_sd, optim_state_dict=optim_sd,
                               options=StateDictOptions(strict=False))
                loaded_model, loaded_optim = self._full_state(model, optim, ignore_frozen_params=True)
                self._assert_same(loaded_model, previous[0], "restart, trainable weights after resuming")
                self._assert_same_optim(loaded_optim, previous[1], "restart, Adam state after resuming")
                frozen_now = {k: v for k, v in self._full_model(model).items() if k.startswith("pretrain.")}
                self._assert_same(frozen_now, frozen_fqns, "restart, frozen weights after resuming")

            before = self._full_model(model, ignore_frozen_params=True)
            self._train(model, optim, seed, phase=1 + round_)
            after = self._full_model(model)
            frozen_now = {k: v for k, v in after.items() if k.startswith("pretrain.")}
            self._assert_same(frozen_now, frozen_fqns, f"round {round_}, frozen weights after training")

            model_sd, optim_sd = get_state_dict(
                model, optimizers=optim, options=StateDictOptions(ignore_frozen_params=True)
            )
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=finetune_dir)
            previous = self._full_state(model, optim, ignore_frozen_params=True)
            self._assert_trained(before, previous, STEPS * (round_ + 1), f"round {round_}, trainable weights")
            self.assertFalse(any(k.startswith("pretrain.") for k in previous[0]))
            for group in previous[1]["param_groups"]:
                self.assertEqual([f for f in group["params"] if f.startswith("pretrain.")], [])

            keys = _checkpoint_keys(finetune_dir)
            self.assertEqual([k for k in keys if "pretrain" in k], [], msg="the fine-tuning checkpoint holds frozen parameters")
            self.assertExpectedInline(_layout(keys), """\
model.layer1.bias
model.layer1.weight
model.layer2.bias
model.layer2.weight
model.layer3.bias
model.layer3.weight
optim.param_groups.0.<hyperparameters>
optim.param_groups.0.params
optim.state.layer1.bias.exp_avg
optim.state.layer1.bias.exp_avg_sq
optim.state.layer1.bias.step
optim.state.layer1.weight.exp_avg
optim.state.layer1.weight.exp_avg_sq
optim.state.layer1.weight.step
optim.state.layer2.bias.exp_avg
optim.state.layer2.bias.exp_avg_sq
optim.state.layer2.bias.step
optim.state.layer2.weight.exp_avg
optim.state.layer2.weight.exp_avg_sq
optim.state.layer2.weight.step
optim.state.layer3.bias.exp_avg
optim.state.layer3.bias.exp_avg_sq
optim.state.layer3.bias.step
optim.state.layer3.weight.exp_avg
optim.state.layer3.weight.exp_avg_sq
optim.state.layer3.weight.step""")

    @with_comms
    @with_temp_dir
    @given(seed=st.integers(0, 2**31 - 1))
    @example(seed=115413177)  # an element of layer1.weight ends round 1 where it began (see the docstring)
    def test_fine_tuning(self, seed: int) -> None:
        pretrain_dir = os.path.join(self.temp_dir, "pretrain")
        finetune_dir = os.path.join(self.temp_dir, "finetune")
        if self.rank == 0:  # each hypothesis example gets its own, empty temp dir
            os.mkdir(pretrain_dir)
            os.mkdir(finetune_dir)
        dist.barrier()
        self.assertTrue(os.path.isdir(pretrain_dir) and os.path.isdir(finetune_dir))

        pretrained = self.pretrain(pretrain_dir, seed)
        self.finetune(pretrain_dir, finetune_dir, pretrained, seed)


if __name__ == "__main__":
    run_tests()
