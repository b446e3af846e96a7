"""State-dict save/load with ``fully_shard``: parity with a local model, real sharding, DCP round trips.

Ported from upstream's ``test/distributed/_composable/fully_shard/test_fully_shard_model_checkpoint.py``.
That file tests the FSDP1 composable ``torch.distributed._composable.fully_shard``, which no longer
exists; here every scenario runs on FSDP2, ``torch.distributed.fsdp.fully_shard``, whose parameters are
DTensors, so ``module.state_dict()`` is the *sharded* state dict and
``torch.distributed.checkpoint.state_dict`` gives the full one. How each upstream test maps:

* ``test_state_dict_save_load_root_fully_shard``: upstream's ``policy=ModuleWrapPolicy({UnitModule})``
  on the root becomes ``fully_shard`` on each ``UnitModule`` and then on the root.
* ``test_state_dict_save_load_submodule_fully_shard``: ``fully_shard(u1)``, ``fully_shard(u2)``, nothing on
  the root, so ``l`` and ``p`` stay plain tensors next to DTensors in one state dict.
* ``test_state_dict_save_load_flow``: ``ignored_modules`` becomes FSDP2's ``ignored_params`` (the
  transformer's parameters; its layers are then not wrapped, as upstream's policy never reached them);
  ``SHARDED_STATE_DICT`` is ``state_dict()`` (DTensors); ``FULL_STATE_DICT`` with rank-0 only + CPU offload
  is ``get_model_state_dict(full_state_dict=True, cpu_offload=True)``, loaded back with
  ``set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True)``.
* ``test_full_state_dict_save_load_mixed_sharding``: FSDP1's ``NO_SHARD`` on the root (every rank holds
  whole parameters and gradients are all-reduced) is FSDP2's HSDP with a shard group of one: the root
  gets a ``(world_size, 1)`` ("replicate", "shard") mesh, its parameters are ``(Replicate(), Shard(0))``
  DTensors whose local tensor is the whole parameter, while ``u1`` stays fully sharded on the 1-D mesh.
  ``reshard_after_forward=False`` would be SHARD_GRAD_OP (parameters still sharded at rest), and a 1-rank
  mesh would not all-reduce gradients, so neither is NO_SHARD.

Stronger than upstream: the sharded state dict is checked to be sharded (each DTensor's placements, mesh
and local shard equal to the matching rows of the full tensor), the full state dict is reloaded into a
differently wrapped model and gives the same full state dict, and ``test_dcp_save_load_reshard`` saves
through ``torch.distributed.checkpoint``, pins the checkpoint's metadata layout, and loads it into four
different wrappings. Hypothesis varies the seed of every model. The outputs compared after loading
depend on every parameter, for every seed: the models have no unit that passes a zero gradient
(LeakyReLU and GELU where upstream has ReLU, see ``models.NEG_SLOPE``); with ReLU, 0.2 % of the seeds gave
``CompositeParamModel`` an all-zero output (as ``example(seed=293)``), which a zeroed model that loaded
nothing gives too.
"""
from __future__ import annotations

import copy
import itertools
import os
import warnings
from typing import Any, Callable

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from hypothesis import example, given
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard

from harness import FSDPTest, record_collectives, run_tests, with_temp_dir
from harness.strategies import meshes, world_sizes
try:
    from test_distributed.models import CompositeParamModel, TransformerWithSharedParams, UnitModule, zero_model
except ModuleNotFoundError:  # run as a script (python test_distributed/test_x.py): its folder is sys.path[0]
    from models import CompositeParamModel, TransformerWithSharedParams, UnitModule, zero_model

SEEDS = st.integers(0, 2**31 - 1)


class TestModelCheckpointing(FSDPTest):
    """Tests ``fully_shard`` (FSDP2) model checkpointing."""

    @property
    def world_size(self) -> int:
        return 2

    # ---- wrappings -------------------------------------------------------------------------------

    def _mesh(self) -> Any:
        return init_device_mesh(self.device_type, (self.world_size,))

    def _hsdp_mesh(self) -> Any:
        return init_device_mesh(self.device_type, (self.world_size, 1), mesh_dim_names=("replicate", "shard"))

    def _shard_root(self, model: nn.Module, mesh: Any = None) -> nn.Module:
        mesh = mesh if mesh is not None else self._mesh()
        for module in model.modules():
            if isinstance(module, UnitModule):
                fully_shard(module, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    def _shard_submodules(self, model: nn.Module) -> nn.Module:
        mesh = self._mesh()
        fully_shard(model.u1, mesh=mesh)
        fully_shard(model.u2, mesh=mesh)
        return model

    def _shard_mixed(self, model: nn.Module) -> nn.Module:
        fully_shard(model.u1, mesh=self._mesh())
        fully_shard(model, mesh=self._hsdp_mesh())  # NO_SHARD: replicated over all ranks
        return model

    def _shard_transformer(self, model: TransformerWithSharedParams, ignore_modules: bool) -> nn.Module:
        mesh = self._mesh()
        ignored: set[nn.Parameter] = set()
        if ignore_modules:
            for module in model.get_ignored_modules():
                ignored.update(module.parameters())
        else:
            for layer in itertools.chain(model.transformer.encoder.layers, model.transformer.decoder.layers):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh, ignored_params=ignored or None)
        return model

    # ---- checks ----------------------------------------------------------------------------------

    def _expected_local(self, full: torch.Tensor, dtensor: DTensor) -> torch.Tensor:
        """The rows of ``full`` this rank must hold: FSDP2 gives rank r rows [r*c, (r+1)*c) with
        c = ceil(rows / shards), the last shards shorter or empty; a Replicate dim keeps everything."""
        mesh = dtensor.device_mesh
        coordinate = mesh.get_coordinate()
        expected = full
        for mesh_dim, placement in enumerate(dtensor.placements):
            if isinstance(placement, Replicate):
                continue
            self.assertIsInstance(placement, Shard)
            shards = mesh.size(mesh_dim)
            rows = expected.size(placement.dim)
            step = -(-rows // shards)
            start = min(coordinate[mesh_dim] * step, rows)
            expected = expected.narrow(placement.dim, start, min(step, rows - start))
        return expected

    def _check_sharded(self, sharded_sd: dict[str, Any], local_sd: dict[str, torch.Tensor],
                       layout: dict[str, tuple[int, ...] | None]) -> None:
        """Each entry is laid out as ``layout`` says (mesh shape; None: a plain tensor) and each
        DTensor's local tensor is exactly this rank's slice of the local model's tensor."""
        self.assertEqual(sorted(sharded_sd), sorted(layout))
        for key, value in sharded_sd.items():
            mesh_shape = layout[key]
            full = local_sd[key]
            if mesh_shape is None:
                self.assertNotIsInstance(value, DTensor, key)
                self.assertEqual(value, full, msg=key)
                continue
            self.assertIsInstance(value, DTensor, key)
            self.assertEqual(tuple(value.device_mesh.shape), mesh_shape, key)
            want = (Shard(0),) if len(mesh_shape) == 1 else (Replicate(), Shard(0))
            self.assertEqual(tuple(value.placements), want, key)
            self.assertEqual(value.shape, full.shape, key)
            local = value.to_local()
            expected = self._expected_local(full, value)
            self.assertEqual(local.shape, expected.shape, key)
            self.assertEqual(local, expected, msg=key)
            if mesh_shape == (self.world_size,) and self.world_size > 1 and full.size(0) > 1:
                self.assertLess(local.size(0), full.size(0), f"{key} is not sharded")

    def _full(self, sd: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Gather every DTensor (a collective: every rank calls it with the same keys)."""
        return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in sd.items()}

    def _check_state_dict_parity(self, local_sd: dict[str, torch.Tensor], sd: dict[str, Any]) -> None:
        """``sd``, gathered, has the keys, shapes and values of ``local_sd``."""
        full = self._full(sd)
        self.assertEqual(sorted(full), sorted(local_sd))
        for key, value in full.items():
            self.assertEqual(value.shape, local_sd[key].shape, f"shape mismatch for {key}")
            self.assertEqual(value.dtype, local_sd[key].dtype, f"dtype mismatch for {key}")
            self.assertEqual(value.cpu(), local_sd[key].cpu(), msg=f"value mismatch for {key}")

    def _check_model_parity(self, m1: nn.Module, m2: nn.Module) -> None:
        """Same names, same placements, same local shards, same parameters and buffers."""
        named1, named2 = list(m1.named_parameters()), list(m2.named_parameters())
        self.assertEqual([n for n, _ in named1], [n for n, _ in named2])
        for (name, p1), (_, p2) in zip(named1, named2):
            self.assertEqual(type(p1), type(p2), name)
            if isinstance(p1, DTensor):
                self.assertEqual(p1.placements, p2.placements, name)
                self.assertEqual(p1.to_local(), p2.to_local(), msg=name)
        self._check_state_dict_parity(self._full(m2.state_dict()), m1.state_dict())

    def _assert_same_output(self, model: nn.Module, local_model: nn.Module, inp: torch.Tensor) -> None:
        """The loaded model computes what the local one does, on an output with no zero element (which a
        zeroed, never-loaded model would give: its output is all zeros)."""
        expected = local_model(inp)
        self.assertEqual(int((expected == 0).sum()), 0, msg="the local model's output has zeros")
        self.assertEqual(model(inp), expected)

    def _assert_zeroed(self, model: nn.Module) -> None:
        for name, param in model.named_parameters():
            full = param.full_tensor() if isinstance(param, DTensor) else param
            self.assertEqual(torch.count_nonzero(full).item(), 0, name)

    def _save_load(self, seed: int, wrap: Callable[[nn.Module], nn.Module],
                   layout: Callable[[dict[str, torch.Tensor]], dict[str, tuple[int, ...] | None]],
                   rewrap: Callable[[nn.Module], nn.Module]) -> None:
        torch.manual_seed(seed)
        local_model = CompositeParamModel(device=self.device)
        save_model = wrap(copy.deepcopy(local_model))
        local_sd = local_model.state_dict()
        sd = save_model.state_dict()
        self._check_sharded(sd, local_sd, layout(local_sd))
        self._check_state_dict_parity(local_sd, sd)

        load_model = wrap(copy.deepcopy(local_model))
        zero_model(load_model, zero_buffers=True)  # the buffer too: the load must bring it back
        self._assert_zeroed(load_model)
        load_model.load_state_dict({k: v.clone() for k, v in sd.items()})
        self._check_model_parity(load_model, save_model)

        # The full state dict reloads into a differently wrapped model and comes back the same.
        full_sd = get_model_state_dict(save_model, options=StateDictOptions(full_state_dict=True))
        self._check_state_dict_parity(local_sd, full_sd)
        torch.manual_seed(seed + 1)
        other = rewrap(CompositeParamModel(device=self.device))
        zero_model(other, zero_buffers=True)
        set_model_state_dict(other, full_sd, options=StateDictOptions(full_state_dict=True))
        self._check_state_dict_parity(local_sd, get_model_state_dict(other, options=StateDictOptions(
            full_state_dict=True)))
        inp = torch.randn(3, local_model.l.in_features, device=self.device)
        self._assert_same_output(other, local_model, inp)

    # ---- tests -----------------------------------------------------------------------------------

    @given(seed=SEEDS)
    @example(seed=293)  # with upstream's ReLUs the compared outputs were all zeros
    def test_state_dict_save_load_root_fully_shard(self, seed: int) -> None:
        """The sharded state dict of a model with ``fully_shard`` on the root (and on each UnitModule)
        is the local model's, sharded; it reloads into a zeroed twin, and its full state dict into a
        model sharded on submodules only."""
        ws = (self.world_size,)
        self._save_load(seed, self._shard_root,
                        lambda sd: {k: (None if k == "buffer" else ws) for k in sd},
                        self._shard_submodules)

    @given(seed=SEEDS)
    def test_state_dict_save_load_submodule_fully_shard(self, seed: int) -> None:
        """As above with ``fully_shard`` on ``u1`` and ``u2`` only: their parameters are DTensors, the
        root's (``l``, ``p``) and the buffer plain tensors; the full state dict reloads into a
        root-sharded model."""
        ws = (self.world_size,)
        self._save_load(seed, self._shard_submodules,
                        lambda sd: {k: (ws if k.startswith(("u1.", "u2.")) else None) for k in sd},
                        self._shard_root)

    def test_training_step_communication(self) -> None:
        """One training step of the model the checkpoints above save, ``fully_shard`` on each ``UnitModule`` and on
        the root, its communication pinned: in forward an all-gather per FSDP group (the root's ``l`` and ``p``,
        then ``u1``, ``u2``); in backward ``u2`` gathered again (resharded after forward), ``u1`` prefetched, one
        reduce-scatter per group in reverse order, the root's last; nothing in the optimizer step. Not drawn:
        the trace depends on the world size and the model's sizes only, which are fixed here."""
        torch.manual_seed(0)
        model = self._shard_root(CompositeParamModel(self.device))
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)
        x = torch.randn(4, model.l.in_features, device=self.device)
        with record_collectives() as record:
            model(x).sum().backward()
            optim.step()
            optim.zero_grad()
        self.assertEqual(record.counts()["reduce_scatter_tensor"], 3)
        self.assertCollectivesInline(record, """\
all_gather_into_tensor(float32[95]) -> float32[190] on world
all_gather_into_tensor(float32[150]) -> float32[300] on world
all_gather_into_tensor(float32[150]) -> float32[300] on world
all_gather_into_tensor(float32[150]) -> float32[300] on world
all_gather_into_tensor(float32[150]) -> float32[300] on world
reduce_scatter_tensor(float32[300], avg) -> float32[150] on world
reduce_scatter_tensor(float32[300], avg) -> float32[150] on world
reduce_scatter_tensor(float32[190], avg) -> float32[95] on world
""")

    @given(seed=SEEDS)
    def test_full_state_dict_save_load_mixed_sharding(self, seed: int) -> None:
        """``u1`` fully sharded, the root NO_SHARD (HSDP with one-rank shard groups, see the module
        docstring): ``u1``'s entries are 1-D sharded, the rest replicated whole on every rank."""
        ws, hsdp = (self.world_size,), (self.world_size, 1)
        self._save_load(seed, self._shard_mixed,
                        lambda sd: {k: (None if k == "buffer" else ws if k.startswith("u1.") else hsdp)
                                    for k in sd},
                        self._shard_root)

    @given(seed=SEEDS)
    def test_state_dict_save_load_flow(self, seed: int) -> None:
        """E2E save + load of ``TransformerWithSharedParams`` (tied weights, integer buffers), with and
        without ignored modules, through the sharded state dict or the rank-0 full state dict with CPU
        offload."""
        self.run_subtests({"ignore_modules": [False, True], "sharded_state_dict": [False, True]},
                          self._test_save_load_flow, seed=seed)

    def _test_save_load_flow(self, seed: int, ignore_modules: bool, sharded_state_dict: bool) -> None:
        torch.manual_seed(seed)
        local_model = TransformerWithSharedParams(self.device)
        with torch.no_grad():  # no all-zero tensor, so that a missed load cannot pass by chance
            for tensor in itertools.chain(local_model.parameters(), local_model.buffers()):
                if torch.count_nonzero(tensor) == 0:
                    tensor.add_(torch.ones_like(tensor))
        local_sd = local_model.state_dict()
        self.assertIs(local_model.output_proj.weight, local_model.embed_tokens.weight)
        save_model = self._shard_transformer(copy.deepcopy(local_model), ignore_modules)
        ignored = {f"transformer.{k}" for k in local_model.transformer.state_dict()} if ignore_modules else set()

        if sharded_state_dict:
            state_dict = save_model.state_dict()
            params = dict(local_model.named_parameters(remove_duplicate=False))  # both tied names
            layout = {k: ((self.world_size,) if k in params and k not in ignored else None) for k in local_sd}
            self._check_sharded(state_dict, local_sd, layout)
            self._check_state_dict_parity(local_sd, state_dict)
        else:
            state_dict = get_model_state_dict(save_model, options=StateDictOptions(full_state_dict=True,
                                                                                   cpu_offload=True))
            if self.rank == 0:
                self.assertEqual(sorted(state_dict), sorted(local_sd))
                for key, value in state_dict.items():
                    self.assertNotIsInstance(value, DTensor, key)
                    self.assertEqual(value.device, torch.device("cpu"), key)
                    self.assertEqual(value, local_sd[key].cpu(), msg=key, exact_dtype=True)
            else:
                self.assertEqual(state_dict, {})

        torch.manual_seed(seed + 1)  # a different model, then zeroed, buffers too
        load_model = TransformerWithSharedParams(self.device)
        zero_model(load_model, zero_buffers=True)
        load_model = self._shard_transformer(load_model, ignore_modules)
        self._assert_zeroed(load_model)
        if sharded_state_dict:
            load_model.load_state_dict(state_dict)
        else:
            set_model_state_dict(load_model, state_dict, options=StateDictOptions(full_state_dict=True,
                                                                                  broadcast_from_rank0=True))
        self._check_model_parity(load_model, save_model)
        self._check_state_dict_parity(local_sd, load_model.state_dict())
        self.assertIs(load_model.output_proj.weight, load_model.embed_tokens.weight)
        load_model.eval()
        local_model.eval()
        src, tgt = local_model.get_input(self.device)
        with warnings.catch_warnings():  # the (batch, seq, vocab) output is a view; nothing modifies it
            warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view tensor", UserWarning)
            self.assertEqual(load_model(src, tgt), local_model(src, tgt))

    @with_temp_dir
    @given(seed=SEEDS)
    @example(seed=293)  # with upstream's ReLUs the compared outputs were all zeros
    def test_dcp_save_load_reshard(self, seed: int) -> None:
        """A sharded state dict saved with ``torch.distributed.checkpoint`` has the pinned metadata
        layout (every tensor's global size and each rank's chunk) and loads into a zeroed model wrapped
        in any of four ways, giving back the same full state dict and the same outputs."""
        torch.manual_seed(seed)
        local_model = CompositeParamModel(device=self.device)
        local_sd = local_model.state_dict()
        save_model = self._shard_root(copy.deepcopy(local_model))
        path = os.path.join(self.temp_dir, "checkpoint")
        dcp.save(save_model.state_dict(), checkpoint_id=path)

        metadata = dcp.FileSystemReader(path).read_metadata()
        lines = []
        for key in sorted(metadata.state_dict_metadata):
            entry = metadata.state_dict_metadata[key]
            chunks = " ".join(f"{list(c.offsets)}+{list(c.sizes)}"
                              for c in sorted(entry.chunks, key=lambda c: tuple(c.offsets)))
            lines.append(f"{key} {list(entry.size)} {chunks}")
        self.assertExpectedInline("\n".join(lines), """\
buffer [9, 9] [0, 0]+[9, 9]
l.bias [9] [0]+[5] [5]+[4]
l.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
p [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u1.l1.bias [9] [0]+[5] [5]+[4]
u1.l1.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u1.l2.bias [9] [0]+[5] [5]+[4]
u1.l2.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u1.seq.1.bias [9] [0]+[5] [5]+[4]
u1.seq.1.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u2.l1.bias [9] [0]+[5] [5]+[4]
u2.l1.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u2.l2.bias [9] [0]+[5] [5]+[4]
u2.l2.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]
u2.seq.1.bias [9] [0]+[5] [5]+[4]
u2.seq.1.weight [9, 9] [0, 0]+[5, 9] [5, 0]+[4, 9]""")

        self.run_subtests({"load_wrapping": ["root", "submodules", "mixed", "unsharded"]},
                          self._test_dcp_load, seed=seed, path=path, local_model=local_model, local_sd=local_sd)

    @with_temp_dir
    @given(mesh=meshes(world_sizes(1, 4), max_dims=2), seed=SEEDS)
    def test_dcp_round_trip_on_drawn_mesh(self, mesh: Any, seed: int) -> None:
        """``fully_shard`` on the drawn mesh, in a world of the drawn size (1 to 4 ranks; 1-D: FSDP, 2-D:
        HSDP, replicate x shard): the sharded state dict holds this rank's rows (9 rows over 2 or 4 shards
        leave the last shard shorter or empty), the DCP checkpoint has one chunk per shard, and it
        loads into a zeroed model wrapped alike, giving back the local model's state dict and outputs."""
        torch.manual_seed(seed)
        local_model = CompositeParamModel(device=self.device)
        local_sd = local_model.state_dict()
        save_model = self._shard_root(copy.deepcopy(local_model), mesh)
        sd = save_model.state_dict()
        self._check_sharded(sd, local_sd, {k: None if k == "buffer" else tuple(mesh.shape) for k in local_sd})
        path = os.path.join(self.temp_dir, "checkpoint")
        dcp.save(sd, checkpoint_id=path)

        shards = mesh.size(mesh.ndim - 1)  # HSDP's replicas hold the same chunks: one is saved
        for key, entry in dcp.FileSystemReader(path).read_metadata().state_dict_metadata.items():
            size = list(entry.size)
            pieces = shards if key != "buffer" else 1  # the buffer stays a plain tensor: one chunk
            step = -(-size[0] // pieces)
            starts = [min(i * step, size[0]) for i in range(pieces)]  # an empty last shard: a chunk of 0 rows
            want = sorted(([start] + [0] * (len(size) - 1), [min(step, size[0] - start)] + size[1:])
                          for start in starts)
            got = sorted((list(c.offsets), list(c.sizes)) for c in entry.chunks)
            self.assertEqual(got, want, f"{key}: the checkpoint's chunks over {shards} shard(s)")

        torch.manual_seed(seed + 1)
        model = CompositeParamModel(device=self.device)
        zero_model(model, zero_buffers=True)
        model = self._shard_root(model, mesh)
        self._assert_zeroed(model)
        loaded = model.state_dict()
        dcp.load(loaded, checkpoint_id=path)
        model.load_state_dict(loaded)
        self._check_state_dict_parity(local_sd, model.state_dict())
        self._assert_same_output(model, local_model, torch.randn(3, local_model.l.in_features, device=self.device))

    def _test_dcp_load(self, seed: int, path: str, local_model: nn.Module, local_sd: dict[str, torch.Tensor],
                       load_wrapping: str) -> None:
        torch.manual_seed(seed + 1)
        model = CompositeParamModel(device=self.device)
        zero_model(model, zero_buffers=True)
        wrap = {"root": self._shard_root, "submodules": self._shard_submodules, "mixed": self._shard_mixed,
                "unsharded": lambda m: m}[load_wrapping]
        model = wrap(model)
        self._assert_zeroed(model)
        sd = model.state_dict()
        dcp.load(sd, checkpoint_id=path)
        model.load_state_dict(sd)
        self._check_state_dict_parity(local_sd, model.state_dict())
        inp = torch.randn(3, local_model.l.in_features, device=self.device)
        self._assert_same_output(model, local_model, inp)


if __name__ == "__main__":
    run_tests()
