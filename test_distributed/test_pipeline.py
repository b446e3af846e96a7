"""Pipeline stages saved with DCP, loaded into FSDP: a port of upstream's
``distributed/checkpoint/e2e/test_pipeline.py``.

Upstream builds a ``PipelineModel`` on the meta device, lets each rank materialise one stage (one layer),
saves ``get_state_dict`` of the whole model with DCP, and loads the checkpoint into an FSDP-wrapped whole
model, checking only that nothing raises. As written it fails on torch 2.13 on any device: the stages a
rank did not materialise come back from ``get_state_dict`` as meta tensors, and DCP's de-duplication
gives some of them to ranks that hold no data. Here each rank saves what its stage owns: the stage's
parameters and Adam state under the whole model's FQNs, with ``flatten_optimizer_state_dict=True`` so the
optimizer's param groups are keyed by FQN too (nested, every rank would save its own stage's single group
under the same keys, ``optim.param_groups.0.*``).

Checked here beyond upstream:

* each stage's parameters are initialised from the hypothesis seed and the stage index, and each stage
  takes two Adam steps on seeded batches before saving, so every stage has real Adam state (``step`` 2,
  moments non-zero in every element, for every seed: the batches are non-negative and the activation is
  LeakyReLU, see ``models.NEG_SLOPE``, so every element of every gradient is positive; with upstream's
  ReLU about 18 % of the moments were zeros, which loading could not be told from not loading). A stage
  that never stepped would have empty Adam state; ``get_state_dict`` fills an empty state with a
  zero-learning-rate step (``step`` 1, zero moments), which is also what the freshly built FSDP
  optimizer holds before loading, so such a stage could not show whether loading worked: we do not save
  one;
* what ``get_state_dict`` leaves out of a rank's stage is exactly the meta tensors of the other stages;
* after loading, each FSDP layer's weights and Adam state (moments, step, hyperparameters), gathered as a
  full state dict, equal what its stage saved bit for bit, and they differed before loading (the Adam
  state in every element);
* the checkpoint's key layout is pinned with ``assertExpectedInline``.
"""
from __future__ import annotations

import os
import re
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from harness import FSDPTest, run_tests, with_temp_dir
try:
    from test_distributed.models import DCP_DIM, PipelineModel
except ModuleNotFoundError:  # run as a script (python test_distributed/test_x.py): its folder is sys.path[0]
    from models import DCP_DIM, PipelineModel

STEPS = 2  # Adam steps per stage before saving; 2, not 1, so a loaded step differs from a fresh one
BATCH = 8
#: flat optimizer state dicts: "state.<fqn>.<name>" and "param_groups.<fqn>.<hyperparameter>"
FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _layout(keys: list[str]) -> str:
    """Sorted checkpoint keys, each parameter's hyperparameters (which vary by torch release) as one line."""
    shown = {re.sub(r"^(optim\.param_groups\.layer\d\.(weight|bias))\..*$", r"\1.<hyperparameters>", k) for k in keys}
    return "\n".join(sorted(shown))


class TestPipeline(FSDPTest):
    @property
    def world_size(self) -> int:
        return 4

    def _assert_same(self, actual: dict, expected: dict, what: str) -> None:
        self.assertEqual(sorted(actual), sorted(expected), msg=f"{what}: keys")
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                self.assertEqual(actual[key], value, atol=0, rtol=0, msg=f"{what}: {key}")
            else:
                self.assertEqual(actual[key], value, msg=f"{what}: {key}")

    def save_with_pipeline(self, pipeline_dir: str, seed: int) -> tuple[dict, dict]:
        """This rank is stage ``rank``: materialise, initialise and train its layer, save what it owns."""
        with torch.device("meta"):
            model = PipelineModel()
        stage = model.stages()[self.rank]
        prefix = f"layer{self.rank + 1}."
        stage.to_empty(device=self.device)
        gen = torch.Generator().manual_seed(seed * 16 + self.rank)
        with torch.no_grad():
            for param in stage.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.2)

        optim = torch.optim.Adam(stage.parameters(), lr=1e-2)
        for _ in range(STEPS):  # no real pipeline: the stage trains on its own seeded batches
            model.act(stage(torch.rand(BATCH, DCP_DIM, generator=gen).to(self.device))).sum().backward()
            optim.step()
            optim.zero_grad()

        model_sd, optim_sd = get_state_dict(model, optimizers=optim, options=FLAT)
        # The other stages come back as meta tensors: they are not this rank's to save.
        others = {k for k in model_sd if not k.startswith(prefix)}
        self.assertEqual(sorted(k for k, v in model_sd.items() if v.is_meta), sorted(others))
        model_sd = {k: v for k, v in model_sd.items() if k.startswith(prefix)}
        self.assertEqual(sorted(model_sd), [prefix + "bias", prefix + "weight"])
        self.assertTrue(optim_sd and all(k.split(".", 1)[1].startswith(prefix) for k in optim_sd), sorted(optim_sd))
        for name in ("weight", "bias"):
            self.assertEqual(optim_sd[f"state.{prefix}{name}.step"].item(), STEPS)
            for moment in ("exp_avg", "exp_avg_sq"):  # every gradient element was positive (see the docstring)
                value = optim_sd[f"state.{prefix}{name}.{moment}"]
                self.assertEqual(int((value <= 0).sum()), 0, msg=f"{prefix}{name}.{moment} has elements <= 0")

        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=pipeline_dir)
        return _detached(model_sd), _detached(optim_sd)

    def load_with_fsdp(self, pipeline_dir: str, expected_model: dict, expected_optim: dict) -> None:
        model = FSDP(PipelineModel().to(self.device), device_id=self.device)  # device_id: FSDP1 on CPU too
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)

        model_sd, optim_sd = get_state_dict(model, optimizers=optim, options=FLAT)
        fresh_model, fresh_optim = self._full(model, optim)
        for key, value in expected_model.items():
            self.assertFalse(torch.equal(fresh_model[key], value), msg=f"{key} equals the checkpoint before loading")
        for key, value in expected_optim.items():
            if key.startswith("state."):  # step, and the moments in every element
                same = int((fresh_optim[key] == value).sum())
                self.assertEqual(same, 0, msg=f"{same} elements of {key} equal the checkpoint before loading")

        dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=pipeline_dir)
        set_state_dict(model, optimizers=optim, model_state_dict=model_sd, optim_state_dict=optim_sd, options=FLAT)

        loaded_model, loaded_optim = self._full(model, optim)
        self._assert_same(loaded_model, expected_model, "FSDP model after loading the stages")
        self._assert_same(loaded_optim, expected_optim, "FSDP Adam state after loading the stages")

    def _full(self, model: FSDP, optim: torch.optim.Optimizer) -> tuple[dict, dict]:
        """The whole model and its flat Adam state, unsharded, on every rank (CPU copies)."""
        options = StateDictOptions(full_state_dict=True, flatten_optimizer_state_dict=True)
        model_sd, optim_sd = get_state_dict(model, optimizers=optim, options=options)
        return _detached(model_sd), _detached(optim_sd)

    @with_temp_dir
    @given(seed=st.integers(0, 2**31 - 1))
    def test_pipeline(self, seed: int) -> None:
        pipeline_dir = os.path.join(self.temp_dir, "pipeline")
        if self.rank == 0:  # each hypothesis example gets its own, empty temp dir
            os.mkdir(pipeline_dir)
        dist.barrier()
        self.assertTrue(os.path.isdir(pipeline_dir))

        stage_model, stage_optim = self.save_with_pipeline(pipeline_dir, seed)
        keys = list(dcp.FileSystemReader(pipeline_dir).read_metadata().state_dict_metadata)
        self.assertExpectedInline(_layout(keys), """\
model.layer1.bias
model.layer1.weight
model.layer2.bias
model.layer2.weight
model.layer3.bias
model.layer3.weight
model.layer4.bias
model.layer4.weight
optim.param_groups.layer1.bias.<hyperparameters>
optim.param_groups.layer1.weight.<hyperparameters>
optim.param_groups.layer2.bias.<hyperparameters>
optim.param_groups.layer2.weight.<hyperparameters>
optim.param_groups.layer3.bias.<hyperparameters>
optim.param_groups.layer3.weight.<hyperparameters>
optim.param_groups.layer4.bias.<hyperparameters>
optim.param_groups.layer4.weight.<hyperparameters>
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
optim.state.layer4.bias.exp_avg
optim.state.layer4.bias.exp_avg_sq
optim.state.layer4.bias.step
optim.state.layer4.weight.exp_avg
optim.state.layer4.weight.exp_avg_sq
optim.state.layer4.weight.step""")

        # What every stage saved, so that each rank can check the whole loaded model.
        stages: list[Any] = [None] * self.world_size
        dist.all_gather_object(stages, (stage_model, stage_optim))
        expected_model = {k: v for m, _ in stages for k, v in m.items()}
        expected_optim = {k: v for _, o in stages for k, v in o.items()}
        self.assertEqual(len(expected_model), 2 * self.world_size)

        self.load_with_fsdp(pipeline_dir, expected_model, expected_optim)


if __name__ == "__main__":
    run_tests()
