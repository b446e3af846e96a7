"""FSDP (``FullyShardedDataParallel``) fine-tuning: models where some parameters are frozen.

Ported from upstream's ``test/distributed/fsdp/test_fsdp_fine_tune.py`` onto the harness: every rank
builds the same model (the hypothesis ``seed``) and feeds its own batches (``seed + rank + 1``).

* ``test_backward_reshard_hooks``: the post-backward reshard runs for every FSDP unit, frozen ones
  included (upstream's body is missing from the seed; this follows its docstring and upstream's intent).
* ``test_hooks_multi_traversal``: a frozen and a trainable unit used ten times in one forward.
* ``test_parity_with_ddp``: mixed frozen / trainable units match DDP.
* ``test_parity_with_non_frozen_fsdp``: a frozen unit with an unused input (reshard without unshard)
  matches the same model unfrozen but not optimized there.

Stronger than upstream: parity tests compare the losses every step *and* the full parameters at the
end (``FSDP.summon_full_params`` against DDP's or the reference model's), check that every trainable
parameter moved, that every element of it had a gradient (Adam's second moment is non-zero in every
element), that no frozen parameter moved or was stepped, and hypothesis varies the seeds. These checks
hold for every seed: the models have no unit that can pass a zero gradient (upstream's ReLUs are
LeakyReLUs, see ``models.NEG_SLOPE``), so no seed leaves a trainable parameter without a gradient and the
parity trivially true (with ReLU, 7 % of seeds trained nothing at all, ``example(seed=466234709)``).
"Every element moved" would not hold for every seed: Adam steps an element back and forth, and its steps
can sum to nothing in float32 (``test_fine_tuning``'s seed 115413177).
On CPU, FSDP runs with ``device_id=cpu``; ``CPUOffload(offload_params=True)`` needs an accelerator, so
those combinations are skipped there with that reason.
"""
from __future__ import annotations

import copy
import warnings
from unittest import mock

import torch
import torch.nn as nn
from hypothesis import example, given
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision
from torch.distributed.fsdp import _runtime_utils
from torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.fully_sharded_data_parallel import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import FSDPTest, record_collectives, run_tests, skip_subtest
try:
    from test_distributed.models import NEG_SLOPE
except ModuleNotFoundError:  # run as a script (python test_distributed/test_x.py): its folder is sys.path[0]
    from models import NEG_SLOPE

SEEDS = st.integers(0, 2**31 - 1)
ALL_STRATEGIES = [ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP, ShardingStrategy.NO_SHARD]
_WRAPPED = "_fsdp_wrapped_module."


class LinearUnusedInput(nn.Linear):
    """A Linear that takes a second input and ignores it."""

    def forward(self, frozen_input: torch.Tensor, learnable_input: torch.Tensor) -> torch.Tensor:
        return super().forward(frozen_input)


class ModelUnusedInput(nn.Module):
    """Three ``LinearUnusedInput``s, the middle one optionally frozen."""

    def __init__(self, freeze: bool, device: torch.device) -> None:
        super().__init__()
        self.layer0 = LinearUnusedInput(4, 4, device=device)
        self.layer1_frozen = LinearUnusedInput(4, 4, device=device)
        if freeze:
            self.layer1_frozen.requires_grad_(False)
        self.layer2 = LinearUnusedInput(4, 4, device=device)

    def forward(self, frozen_input: torch.Tensor, learnable_input: torch.Tensor) -> torch.Tensor:
        x = self.layer0(frozen_input, learnable_input)
        y = self.layer1_frozen(frozen_input, learnable_input)
        z = self.layer2(frozen_input, learnable_input)
        return torch.concat([x, y, z, learnable_input])


class MultiTraversalModule(nn.Module):
    """A trainable and a frozen Linear each used ``traversals`` times per forward, the trainable one once
    more each time under ``no_grad``. Upstream uses 10 traversals; 3 exercise the same hooks (a unit
    unsharded and resharded again within one forward and one backward) at a third of the collectives."""

    def __init__(self, device: torch.device, traversals: int = 3) -> None:
        super().__init__()
        self.layer_0 = nn.Linear(5, 5, device=device)
        self.layer_no_grad = nn.Linear(5, 5, device=device)
        self.layer_with_grad = nn.Linear(5, 5, device=device)
        self.layer_no_grad.requires_grad_(False)
        self.traversals = traversals

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer_0(x)
        for _ in range(self.traversals):
            x = self.layer_no_grad(self.layer_with_grad(x))
            with torch.no_grad():  # the same unit again, with gradients off
                x += self.layer_with_grad(x)
        return x


class TestFSDPFineTune(FSDPTest):
    """Tests fine-tuning cases where some parameters are frozen."""

    NUM_LINEARS = 6

    @property
    def world_size(self) -> int:
        return 2

    # ---- models and helpers ----------------------------------------------------------------------

    def _init_seq_module(self, seed: int) -> nn.Sequential:
        # Upstream's Linear-ReLU stack with LeakyReLU: with ReLU, a seed whose batches leave the units
        # negative trains nothing (every gradient zero), and the parity checks compare zeros.
        torch.manual_seed(seed)
        modules: list[nn.Module] = []
        for _ in range(self.NUM_LINEARS):
            modules += [nn.Linear(5, 5, device=self.device), nn.LeakyReLU(NEG_SLOPE)]
        seq = nn.Sequential(*modules)
        self._set_seq_module_requires_grad(seq, False)
        return seq

    def _set_seq_module_requires_grad(self, seq: nn.Module, requires_grad: bool) -> None:
        # Every other Linear (0, 2, 4) is frozen, so frozen and trainable units alternate. The Linears are
        # leaves, so this works on the plain module and on the FSDP-wrapped one alike.
        for i in range(0, self.NUM_LINEARS, 2):
            for param in seq[i * 2].parameters(recurse=True):
                param.requires_grad = requires_grad

    def _fsdp(self, module: nn.Module, policy: set[type[nn.Module]], **kwargs: object) -> FSDP:
        with warnings.catch_warnings():  # NO_SHARD is deprecated; it is still what upstream tests
            warnings.filterwarnings("ignore", "The `NO_SHARD` sharding strategy is deprecated", FutureWarning)
            return FSDP(module, auto_wrap_policy=ModuleWrapPolicy(policy), device_id=self.device, **kwargs)

    def _ddp(self, module: nn.Module) -> DDP:
        return DDP(module, device_ids=[self.device.index] if self.device_type == "cuda" else None)

    def _full_params(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every original parameter, unsharded, by its name in the unwrapped model."""
        if not isinstance(model, FSDP):
            return {n: p.detach().clone() for n, p in model.named_parameters()}
        with FSDP.summon_full_params(model):
            return {n.replace(_WRAPPED, ""): p.detach().clone() for n, p in model.named_parameters()}

    def _assert_full_params_equal(self, model: nn.Module, reference: nn.Module) -> None:
        actual, expected = self._full_params(model), self._full_params(reference)
        self.assertEqual(sorted(actual), sorted(expected))
        for name, value in expected.items():
            self.assertEqual(actual[name], value, msg=f"parameter {name} differs after training")

    def _assert_trained(self, initial: dict[str, torch.Tensor], final: dict[str, torch.Tensor],
                        trainable: set[str], model: nn.Module, optim: torch.optim.Optimizer) -> None:
        """Every trainable parameter moved, and every element of it had a gradient: ``optim``'s (Adam's)
        second moment is non-zero in every element. Every frozen parameter is unchanged and was never stepped.

        Holds for every seed: no model here has a unit that passes a zero gradient, so each element of a
        trainable parameter gets a non-zero gradient (up to a measure-zero cancellation, at every step
        at once). Not checked per element: that each element ends where it began, which Adam's steps back
        and forth can do in float32."""
        self.assertEqual(sorted(final), sorted(initial))
        self.assertTrue(trainable and trainable <= set(initial), f"trainable {sorted(trainable)} of {sorted(initial)}")
        state = get_optimizer_state_dict(model, optim, options=StateDictOptions(full_state_dict=True))["state"]
        for name, before in initial.items():
            if name in trainable:
                self.assertFalse(torch.equal(final[name], before), msg=f"{name} did not train")
                self.assertIn(name, state, msg=f"the optimizer never stepped {name}")
                starved = int((state[name]["exp_avg_sq"] == 0).sum())
                self.assertEqual(starved, 0,
                                 msg=f"{starved} of {before.numel()} elements of {name} never had a gradient")
            else:
                self.assertEqual(final[name], before, atol=0, rtol=0, msg=f"frozen {name} changed")
                self.assertNotIn(name, state, msg=f"the optimizer stepped frozen {name}")

    def _handles(self, model: FSDP) -> list:
        """Each FSDP unit's ``FlatParamHandle``, in the order the units were wrapped (forward order)."""
        return [unit._handle for unit in FSDP.fsdp_modules(model) if unit._handle is not None]

    def _on_shard(self, handle) -> bool:
        """The flat parameter points at its local shard (what FSDP's reshard does first)."""
        flat_param = handle.flat_param
        return handle.is_sharded(flat_param) and flat_param.data_ptr() == flat_param._local_shard.data_ptr()

    def _is_resharded(self, handle) -> bool:
        """On its local shard, and the padded unsharded flat parameter freed (storage of size 0)."""
        return self._on_shard(handle) and handle.needs_unshard()

    def _batch(self, seed: int) -> None:
        torch.manual_seed(seed + self.rank + 1)  # different data on each rank, so gradients are reduced

    # ---- test_backward_reshard_hooks ---------------------------------------------------------------

    @given(seed=SEEDS)
    def test_backward_reshard_hooks(self, seed: int) -> None:
        """
        Tests that the post-backward reshard happens even for flat parameters
        that do not require gradients.
        """
        self.run_subtests(
            {
                "sharding_strategy": ALL_STRATEGIES,
                "use_orig_params": [False, True],
                "inp_requires_grad": [False, True],
                "unfreeze_params": [False, True],
            },
            self._test_backward_reshard_hooks,
            seed=seed,
        )

    def _test_backward_reshard_hooks(self, seed: int, sharding_strategy: ShardingStrategy, use_orig_params: bool,
                                     inp_requires_grad: bool, unfreeze_params: bool) -> None:
        model = self._fsdp(self._init_seq_module(seed), {nn.Linear}, sharding_strategy=sharding_strategy,
                           use_orig_params=use_orig_params)
        handles = self._handles(model)
        self.assertEqual(len(handles), self.NUM_LINEARS)
        sharded = sharding_strategy != ShardingStrategy.NO_SHARD
        full_numels = [h.flat_param._unpadded_unsharded_size.numel() for h in handles]
        if sharded:
            # The check below can see an unsharded flat parameter: it says so for every unit here.
            with FSDP.summon_full_params(model):
                self.assertEqual([self._is_resharded(h) for h in handles], [False] * self.NUM_LINEARS)
            self.assertEqual([self._is_resharded(h) for h in handles], [True] * self.NUM_LINEARS)

        # Which handles the post-backward reshard (the hook, or the reshard-only hook of frozen units)
        # ran for, and whether each was resharded right then, in the middle of backward: FSDP's
        # end-of-backward catch-all reshard does not go through it, so it cannot hide a missing one.
        post_backward_resharded: list[object] = []
        resharded_in_hook: list[bool] = []
        original = _runtime_utils._post_backward_reshard

        def recording(state: object, handle: object, *args: object) -> None:
            post_backward_resharded.append(handle)
            original(state, handle, *args)
            # NO_SHARD: nothing to reshard, the flat parameter stays whole
            resharded_in_hook.append(self._is_resharded(handle) if sharded
                                     else not handle.is_sharded(handle.flat_param))

        num_steps, nograd_step = 3, 1
        self._batch(seed)
        with mock.patch.object(_runtime_utils, "_post_backward_reshard", recording):
            for step in range(num_steps):
                unfrozen = unfreeze_params and step == num_steps - 1
                if unfrozen:  # unfreeze on the last step, as some fine-tuning does
                    self._set_seq_module_requires_grad(model, True)
                inp = torch.randn((8, 5), device=self.device, requires_grad=inp_requires_grad)
                if step == nograd_step:
                    with torch.no_grad():
                        model(inp)
                    self.assertEqual(post_backward_resharded, [], "no_grad forward ran a post-backward reshard")
                    continue
                out = model(inp)
                if sharded:
                    # FULL_SHARD reshards each unit after its forward; SHARD_GRAD_OP keeps the unsharded
                    # flat parameters allocated until backward, which the check sees too.
                    after_forward = sharding_strategy == ShardingStrategy.FULL_SHARD
                    self.assertEqual([self._is_resharded(h) for h in handles], [after_forward] * self.NUM_LINEARS)
                out.sum().backward()

                # Every unit gets the post-backward reshard, once, except the first, frozen, Linear
                # fed an input that needs no gradient: nothing in autograd can call back for it, so
                # FSDP's catch-all reshard at the end of backward covers it.
                expected = handles
                if not inp_requires_grad and not unfrozen:
                    expected = handles[1:]
                ran = sorted(handles.index(h) for h in post_backward_resharded)
                self.assertEqual(ran, [handles.index(h) for h in expected],
                                 f"post-backward reshard ran for units {ran} at step {step}")
                self.assertEqual(resharded_in_hook, [True] * len(expected),
                                 f"a unit was not resharded by its post-backward reshard at step {step}")
                post_backward_resharded.clear()
                resharded_in_hook.clear()

                if sharded:
                    self.assertEqual([self._on_shard(h) for h in handles], [True] * self.NUM_LINEARS,
                                     f"not every flat parameter is back on its shard after backward at step {step}")
                    freed = [self._is_resharded(h) for h in handles]
                    if sharding_strategy == ShardingStrategy.SHARD_GRAD_OP and expected is not handles:
                        # Known FSDP1 limitation (pytorch/pytorch#83956, "this already-resharded check is
                        # brittle"): the catch-all reshard sees the unit skipped above already on its shard
                        # (SHARD_GRAD_OP's post-forward put it there) and returns without freeing its
                        # unsharded flat parameter. Only the units that got the post-backward reshard free it.
                        freed[0] = True
                    self.assertEqual(freed, [True] * self.NUM_LINEARS,
                                     f"an unsharded flat parameter is still allocated after backward at step {step}")
                else:  # NO_SHARD has nothing to reshard: each rank keeps the whole flat parameter
                    self.assertEqual([h.is_sharded(h.flat_param) for h in handles], [False] * self.NUM_LINEARS)
                    self.assertEqual([h.flat_param.numel() for h in handles], full_numels)
                if unfrozen:
                    self.assertTrue(all(p.requires_grad for p in model.parameters()),
                                    "expected every parameter to require grad after unfreezing")

    # ---- test_hooks_multi_traversal ----------------------------------------------------------------

    @given(seed=SEEDS)
    def test_hooks_multi_traversal(self, seed: int) -> None:
        """
        Tests that the hooks do reshard / unshard correctly in the case of same
        parameters being used multiple times during forward pass.
        """
        self.run_subtests(
            {
                "sharding_strategy": ALL_STRATEGIES,
                "use_orig_params": [False, True],
                "inp_requires_grad": [False, True],
                "forward_prefetch": [False, True],
            },
            self._test_hooks_multi_traversal,
            seed=seed,
        )

    def _test_hooks_multi_traversal(self, seed: int, sharding_strategy: ShardingStrategy, use_orig_params: bool,
                                    inp_requires_grad: bool, forward_prefetch: bool) -> None:
        torch.manual_seed(seed)
        module = MultiTraversalModule(self.device)
        fsdp_model = self._fsdp(copy.deepcopy(module), {nn.Linear}, sharding_strategy=sharding_strategy,
                                use_orig_params=use_orig_params, forward_prefetch=forward_prefetch)
        ddp_model = self._ddp(copy.deepcopy(module))
        _, ddp_optim = self._train_for_parity(
            seed, fsdp_model, ddp_model,
            lambda: (torch.randn((8, 5), device=self.device, requires_grad=inp_requires_grad),), steps=4)
        self._assert_full_params_equal(fsdp_model, ddp_model.module)
        self._assert_trained(self._full_params(module), self._full_params(ddp_model.module),
                             {n for n, p in module.named_parameters() if p.requires_grad}, ddp_model, ddp_optim)

    def _train_for_parity(self, seed: int, model: nn.Module, reference: nn.Module, make_input,
                          reference_params: list[nn.Parameter] | None = None,
                          steps: int = 6) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        """Adam on both, the same batches; the losses must match at every step. Returns both optimizers."""
        optim = torch.optim.Adam(model.parameters(), lr=1e-2)
        ref_optim = torch.optim.Adam(reference_params if reference_params is not None else reference.parameters(),
                                     lr=1e-2)
        self._batch(seed)
        for step in range(steps):
            inputs = make_input()
            losses = []
            for net, opt in ((model, optim), (reference, ref_optim)):
                loss = net(*inputs).sum()
                losses.append(loss.detach())
                loss.backward()
                opt.step()
                opt.zero_grad()
            self.assertEqual(losses[0], losses[1], msg=f"losses differ at step {step}")
        return optim, ref_optim

    # ---- test_parity_with_ddp ----------------------------------------------------------------------

    @given(seed=SEEDS)
    @example(seed=466234709)  # with upstream's ReLUs every unit was dead on these batches: nothing trained
    def test_parity_with_ddp(self, seed: int) -> None:
        """
        Tests parity with DDP when mixing flat parameters that require and do
        not require gradients.
        """
        self.run_subtests(
            {"sharding_strategy": ALL_STRATEGIES, "use_orig_params": [False, True]},
            self._test_parity_with_ddp,
            seed=seed,
        )

    def _test_parity_with_ddp(self, seed: int, sharding_strategy: ShardingStrategy, use_orig_params: bool) -> None:
        seq = self._init_seq_module(seed)
        initial = self._full_params(seq)
        fsdp_seq = self._fsdp(copy.deepcopy(seq), {nn.Linear}, sharding_strategy=sharding_strategy,
                              use_orig_params=use_orig_params)
        ddp_seq = self._ddp(copy.deepcopy(seq))
        _, ddp_optim = self._train_for_parity(seed, fsdp_seq, ddp_seq,
                                              lambda: (torch.randn((8, 5), device=self.device),))
        self._assert_full_params_equal(fsdp_seq, ddp_seq.module)
        self._assert_trained(initial, self._full_params(ddp_seq.module),
                             {n for n, p in seq.named_parameters() if p.requires_grad}, ddp_seq, ddp_optim)

    # ---- test_parity_with_non_frozen_fsdp ----------------------------------------------------------

    def test_frozen_parameters_communication(self) -> None:
        """One training step of the parity model (six Linears, 0, 2 and 4 frozen, each its own FSDP unit,
        FULL_SHARD), its communication pinned: every unit is all-gathered in forward and again in backward, but
        only the three trainable units are reduce-scattered; a frozen parameter's gradient is never
        communicated. Not drawn: the trace depends on the world size and the model's sizes only, fixed here. Pinned per
        device: FSDP1 gathers a CPU flat parameter with a list ``all_gather`` and a CUDA one with
        ``all_gather_into_tensor`` (torch/distributed/fsdp/_flat_param.py); the cuda pin was derived from that source
        and not yet run on a GPU."""
        seq = self._init_seq_module(0)
        fsdp_seq = self._fsdp(seq, {nn.Linear}, sharding_strategy=ShardingStrategy.FULL_SHARD, use_orig_params=False)
        optim = torch.optim.SGD([p for p in fsdp_seq.parameters() if p.requires_grad], lr=1e-2)
        torch.manual_seed(1)
        x = torch.randn(3, 5, device=self.device)
        with record_collectives() as record:
            fsdp_seq(x).sum().backward()
            optim.step()
        self.assertEqual(record.counts()["reduce_scatter_tensor"], self.NUM_LINEARS // 2)
        self.assertCollectivesInline(record, cpu="""\
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
all_gather(float32[15]) -> 2 x float32[15] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
""", cuda="""\
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
all_gather_into_tensor(float32[15]) -> float32[30] on world
reduce_scatter_tensor(float32[30], sum) -> float32[15] on world
""")

    @given(seed=SEEDS)
    def test_parity_with_non_frozen_fsdp(self, seed: int) -> None:
        """
        For frozen modules with unused input, reshard could happen without unshard
        Verify numerical parity between `_post_backward_reshard_only_hook` and
        `_post_backward_hook` path
        """
        self.run_subtests(
            {
                "sharding_strategy": [ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP],
                "use_orig_params": [True, False],
                "offload_params": [True, False],
                "mixed_precision": ["fp32", "fp16"],
                "backward_prefetch": [BackwardPrefetch.BACKWARD_PRE, BackwardPrefetch.BACKWARD_POST],
            },
            self._test_parity_with_non_frozen_fsdp,
            seed=seed,
        )

    def _test_parity_with_non_frozen_fsdp(self, seed: int, sharding_strategy: ShardingStrategy,
                                          use_orig_params: bool, offload_params: bool, mixed_precision: str,
                                          backward_prefetch: BackwardPrefetch) -> None:
        if offload_params and self.device_type == "cpu":
            skip_subtest("needs an accelerator: CPU offload of parameters (CPUOffload(offload_params=True))")
        torch.manual_seed(seed)
        model = ModelUnusedInput(freeze=True, device=self.device)
        torch.manual_seed(seed)
        ref_model = ModelUnusedInput(freeze=False, device=self.device)
        precision = MixedPrecision() if mixed_precision == "fp32" else MixedPrecision(
            param_dtype=torch.float16, buffer_dtype=torch.float16, reduce_dtype=torch.float16)
        fsdp_kwargs = {
            "sharding_strategy": sharding_strategy,
            "use_orig_params": use_orig_params,
            "cpu_offload": CPUOffload(offload_params=offload_params),
            "mixed_precision": precision,
            "backward_prefetch": backward_prefetch,
        }
        model = self._fsdp(model, {LinearUnusedInput}, **fsdp_kwargs)
        ref_model = self._fsdp(ref_model, {LinearUnusedInput}, **fsdp_kwargs)
        initial = self._full_params(model)
        ref_params = [p for n, p in ref_model.named_parameters() if "layer1_frozen" not in n]
        # one flat parameter, or weight and bias, left out of the reference's optimizer
        self.assertEqual(len(ref_params), len(list(ref_model.parameters())) - (2 if use_orig_params else 1))

        def make_input() -> tuple[torch.Tensor, torch.Tensor]:
            frozen_input = torch.randn((4, 4), device=self.device, requires_grad=False)
            torch.randn((4, 4), device=self.device, requires_grad=True)  # upstream draws it but feeds frozen_input
            return frozen_input, frozen_input

        optim, _ = self._train_for_parity(seed, model, ref_model, make_input, reference_params=ref_params)
        self._assert_full_params_equal(model, ref_model)
        # layer0 and layer2 are linear in their input: the bias gradient is the batch size, the weight
        # gradient's columns the batch's column sums, non-zero for every seed (at some step, in fp16 too)
        self._assert_trained(initial, self._full_params(model),
                             {n for n in initial if not n.startswith("layer1_frozen")}, model, optim)


if __name__ == "__main__":
    run_tests()
