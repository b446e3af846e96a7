"""The small models upstream's distributed tests build, public and stable: same constructor arguments,
submodule names and parameter shapes as ``torch.testing._internal``'s, so parallelize plans and state-dict
keys written against upstream's work unchanged.

Example::

    from harness.models import MLPModule, ModelArgs, Transformer

    model = Transformer(ModelArgs(n_layers=2, dim=16))
    plan = {"layers.0.attention.wq": ColwiseParallel()}
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["MLP", "MLPStack", "DoubleLinear", "FSDPInitMode", "DEVICEInitMode", "NestedWrappedModule",
           "TransformerWithSharedParams", "MLPModule", "MLPStacked", "ModelArgs", "Attention", "FeedForward",
           "TransformerBlock", "Transformer", "NonUniformReqGradNWM", "SkipModule", "NestedLinear", "SkipModel", "Experts", "ExpertLayer", "FSDPTestModel", "DummyDDP",
           "AlwaysWrapNestedWrappedModule", "RMSNormPython", "SaveForwardInputsModule", "SaveForwardInputsModel"]


# ---- FSDP's (upstream's common_fsdp) -------------------------------------------------------------


class MLP(nn.Module):
    """``in_proj`` (dim -> dim_multiplier*dim), ReLU, ``out_proj`` (back to dim), ReLU, plus an optional buffer.

    Example::

        MLP(8, torch.device("cpu"), with_buffer=True)(torch.randn(2, 8)).shape   # (2, 8)
    """

    def __init__(self, dim: int, device: Any = None, *, bias: bool = True, with_buffer: bool = False,
                 dim_multiplier: int = 4) -> None:
        super().__init__()
        self.in_proj = nn.Linear(dim, dim * dim_multiplier, bias=bias, device=device)
        self.out_proj = nn.Linear(dim * dim_multiplier, dim, bias=bias, device=device)
        self.buffer: torch.Tensor | None
        if with_buffer:
            self.register_buffer("buffer", torch.randn((dim,), device=device))
        else:
            self.buffer = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.out_proj(F.relu(self.in_proj(x))))
        return y if self.buffer is None else y + self.buffer

    def reset_parameters(self) -> None:
        """Only the buffer: the linears reset themselves (FSDP2's meta-device init calls this per module)."""
        if self.buffer is not None:
            nn.init.normal_(self.buffer)


class MLPStack(nn.Sequential):
    """Three :class:`MLP` (multipliers 3, 4, 3: uneven shards), and a LayerNorm with ``with_seq_parallel``;
    ``parallelize`` applies tensor parallelism on ``tp_mesh`` and FSDP2 on ``dp_mesh``."""

    def __init__(self, mlp_dim: int, *, with_seq_parallel: bool = False) -> None:
        layers: list[nn.Module] = [MLP(mlp_dim, dim_multiplier=3), MLP(mlp_dim), MLP(mlp_dim, dim_multiplier=3)]
        if with_seq_parallel:
            layers.append(nn.LayerNorm(mlp_dim, bias=False))
        super().__init__(*layers)
        self.with_seq_parallel = with_seq_parallel

    def parallelize(self, tp_mesh: Any, dp_mesh: Any, use_activation_checkpointing: bool,
                    **fsdp_kwargs: Any) -> MLPStack:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                       parallelize_module)

        # the activations stay DTensors between the MLPs: their hidden sizes do not divide evenly
        plan: dict[str, Any] = {}
        for i in range(3):
            plan[f"{i}.in_proj"] = ColwiseParallel(use_local_output=False)
            plan[f"{i}.out_proj"] = RowwiseParallel(use_local_output=False)
        plan["2.out_proj"] = RowwiseParallel(output_layouts=Shard(1)) if self.with_seq_parallel else RowwiseParallel()
        if self.with_seq_parallel:
            plan["3"] = SequenceParallel(sequence_dim=1)
        parallelize_module(self, device_mesh=tp_mesh, parallelize_plan=plan)
        for module in self:
            if isinstance(module, nn.LayerNorm):
                continue
            if use_activation_checkpointing:
                from torch.distributed._composable import checkpoint

                checkpoint(module)
            fully_shard(module, mesh=dp_mesh, **fsdp_kwargs)
        fully_shard(self, mesh=dp_mesh, **fsdp_kwargs)
        return self


class DoubleLinear(nn.Module):
    """Two linears ``lin1``, ``lin2`` on the same input: two outputs, or (``use_second_linear=False``) one
    output and an unused module."""

    def __init__(self, dim: int, use_second_linear: bool = True) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, dim)
        self.lin2 = nn.Linear(dim, dim)
        self.relu = nn.ReLU()
        self.use_second_linear = use_second_linear

    def forward(self, x: torch.Tensor) -> Any:
        first = self.relu(self.lin1(x))
        return (first, self.relu(self.lin2(x))) if self.use_second_linear else first


class FSDPInitMode(enum.Enum):
    """How the FSDP1 test models wrap themselves: ``NO_FSDP`` (plain modules) or ``RECURSIVE`` (FSDP inside)."""

    NO_FSDP = enum.auto()
    RECURSIVE = enum.auto()


class DEVICEInitMode(enum.Enum):
    """When the FSDP1 test models move to the ranks' device: before FSDP wraps them, after, or never (CPU)."""

    DEVICE_BEFORE = enum.auto()
    DEVICE_AFTER = enum.auto()
    DEVICE_NEVER = enum.auto()


def _rank_device() -> str:
    """The device type the ranks use (``cpu`` where they run on CPU), where upstream's models use the accelerator's."""
    from harness.testing.requirements import get_devtype

    return get_devtype().type


def _fsdp1() -> Any:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel


class NestedWrappedModule(nn.Module):
    """FSDP1's nested test model: ``module`` is a Sequential of Linear(8, 4), a Sequential of Linear(4, 16)
    and Linear(16, 16), Linear(16, 4), Linear(4, 8); with ``wrap_fsdp`` the inner Sequential, its first
    Linear and the Linear(16, 4) are FSDP1 instances on ``group`` (``fsdp_kwargs`` passed on).
    ``deterministic`` seeds 0 before building; ``DEVICE_BEFORE`` builds the linears on the ranks' device.

    Example::

        model = NestedWrappedModule.init(self.process_group, FSDPInitMode.RECURSIVE, DEVICEInitMode.DEVICE_AFTER)
        loss = model.get_loss(inp := model.get_input(self.device_type), model(*inp))
    """

    def __init__(self, group: Any, wrap_fsdp: bool, device_init_mode: DEVICEInitMode, deterministic: bool,
                 **fsdp_kwargs: Any) -> None:
        super().__init__()
        self.rank = group.rank()
        self.world_size = group.size()
        device = _rank_device() if device_init_mode == DEVICEInitMode.DEVICE_BEFORE else None

        def linear(n_in: int, n_out: int) -> nn.Module:
            layer = nn.Linear(n_in, n_out)
            return layer.to(device) if device is not None else layer

        def wrap(layer: nn.Module) -> nn.Module:
            return _fsdp1()(layer, group, **fsdp_kwargs) if wrap_fsdp else layer

        if deterministic:
            torch.manual_seed(0)
        self.module = self._layers(linear, wrap)

    @staticmethod
    def _layers(linear: Any, wrap: Any) -> nn.Module:
        """The layers, built in upstream's order, so a seeded model draws the same weights."""
        first = linear(8, 4)
        inner = wrap(nn.Sequential(wrap(linear(4, 16)), linear(16, 16)))
        third = wrap(linear(16, 4))
        return nn.Sequential(first, inner, third, linear(4, 8))

    def get_input(self, device: Any) -> tuple[torch.Tensor, ...]:
        """One (4, 8) batch, seeded by the rank (each rank its own, the same every call)."""
        torch.manual_seed(1 + self.rank)
        return (torch.rand(4, 8, device=device),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    def get_loss(self, input: Any, output: torch.Tensor) -> torch.Tensor:
        return output.sum()

    def run_backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode, device_init_mode: DEVICEInitMode,
             fsdp_kwargs: dict[str, Any] | None = None, deterministic: bool = False) -> nn.Module:
        """``NO_FSDP``: the plain model; ``RECURSIVE``: its inner modules wrapped, not the whole (wrap it
        yourself); ``DEVICE_AFTER`` moves it to the ranks' device once built."""
        fsdp_kwargs = dict(fsdp_kwargs or {})
        if fsdp_init_mode == FSDPInitMode.NO_FSDP:
            return NestedWrappedModule(group, wrap_fsdp=False, device_init_mode=device_init_mode,
                                       deterministic=deterministic)
        if fsdp_init_mode == FSDPInitMode.RECURSIVE:
            model = NestedWrappedModule(group, wrap_fsdp=True, device_init_mode=device_init_mode,
                                        deterministic=deterministic, **fsdp_kwargs)
            return model.to(_rank_device()) if device_init_mode == DEVICEInitMode.DEVICE_AFTER else model
        raise ValueError(f"NestedWrappedModule.init: unsupported FSDPInitMode {fsdp_init_mode!r}")


class FSDPTestModel(nn.Module):
    """What FSDP1's test models offer the test: an input on a device, a loss from it and the output, the backward
    pass, and ``init`` building the model for a group, an ``FSDPInitMode`` and a ``DEVICEInitMode``."""

    def get_input(self, device: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.get_input")

    def get_loss(self, input: Any, output: Any) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__}.get_loss")

    def run_backward(self, loss: torch.Tensor) -> None:
        raise NotImplementedError(f"{type(self).__name__}.run_backward")

    @staticmethod
    def init(*args: Any, **kwargs: Any) -> nn.Module:
        raise NotImplementedError("FSDPTestModel.init: a test model defines how it is built")


class DummyDDP(nn.Module):
    """A module holding ``module`` and calling it: DDP's shape (``.module``) without DDP, for parity tests."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class AlwaysWrapNestedWrappedModule(NestedWrappedModule):
    """:class:`NestedWrappedModule` built unwrapped, then (``RECURSIVE``) FSDP1 over the whole with the
    always-wrap policy, so every submodule is its own FSDP1 instance; ``DEVICE_AFTER`` moves it to the ranks'
    device once wrapped."""

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode, device_init_mode: DEVICEInitMode,  # type: ignore[override]
             fsdp_kwargs: dict[str, Any] | None = None, deterministic: bool = False) -> nn.Module:
        model = NestedWrappedModule.init(group, FSDPInitMode.NO_FSDP, device_init_mode, fsdp_kwargs,
                                         deterministic=deterministic)
        if fsdp_init_mode == FSDPInitMode.NO_FSDP:
            return model
        if fsdp_init_mode != FSDPInitMode.RECURSIVE:
            raise ValueError(f"AlwaysWrapNestedWrappedModule.init: unsupported FSDPInitMode {fsdp_init_mode!r}")
        from torch.distributed.fsdp.wrap import always_wrap_policy

        wrapped = _fsdp1()(model, auto_wrap_policy=always_wrap_policy, **dict(fsdp_kwargs or {}))
        return wrapped.to(_rank_device()) if device_init_mode == DEVICEInitMode.DEVICE_AFTER else wrapped


class NonUniformReqGradNWM(NestedWrappedModule):
    """:class:`NestedWrappedModule` with its last two linears wrapped together (``module.2``, a Sequential of
    Linear(16, 4) and Linear(4, 8)) and every parameter frozen but those of ``module.2``'s second linear: all of
    the trainable parameters live on one rank's shard, so the other ranks hold none (FSDP1's sharded grad
    scaler's case, ``use_orig_params=True``).

    Example::

        model = NonUniformReqGradNWM.init(self.process_group, FSDPInitMode.RECURSIVE, DEVICEInitMode.DEVICE_AFTER,
                                          {"use_orig_params": True})
    """

    #: the parameters left trainable, with or without FSDP1's ``_fsdp_wrapped_module`` in their names
    TRAINABLE = r"module\.2.*\.1.*"

    @staticmethod
    def _layers(linear: Any, wrap: Any) -> nn.Module:
        first = linear(8, 4)  # built in upstream's order, so a seeded model draws the same weights
        middle = wrap(nn.Sequential(wrap(linear(4, 16)), linear(16, 16)))
        last = wrap(nn.Sequential(linear(16, 4), linear(4, 8)))
        return nn.Sequential(first, middle, last)

    @staticmethod
    def _set_nonuniform_req_grad(model: nn.Module, req_grad_mask: Any) -> None:
        """Freeze every parameter whose name does not match ``req_grad_mask``."""
        import re

        for name, param in model.named_parameters():
            if not re.match(req_grad_mask, name):
                param.requires_grad_(False)

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode, device_init_mode: DEVICEInitMode,  # type: ignore[override]
             fsdp_kwargs: dict[str, Any] | None = None, deterministic: bool = False) -> nn.Module:
        """As :meth:`NestedWrappedModule.init`, then every parameter but ``module.2``'s second linear's frozen."""
        if fsdp_init_mode == FSDPInitMode.NO_FSDP:
            model: nn.Module = NonUniformReqGradNWM(group, wrap_fsdp=False, device_init_mode=device_init_mode,
                                                    deterministic=deterministic)
        elif fsdp_init_mode == FSDPInitMode.RECURSIVE:
            model = NonUniformReqGradNWM(group, wrap_fsdp=True, device_init_mode=device_init_mode,
                                         deterministic=deterministic, **dict(fsdp_kwargs or {}))
            if device_init_mode == DEVICEInitMode.DEVICE_AFTER:
                model = model.to(_rank_device())
        else:
            raise ValueError(f"NonUniformReqGradNWM.init: unsupported FSDPInitMode {fsdp_init_mode!r}")
        NonUniformReqGradNWM._set_nonuniform_req_grad(model, NonUniformReqGradNWM.TRAINABLE)
        return model


def _fsdp1_wrap(module: nn.Module, **kwargs: Any) -> nn.Module:
    """FSDP1's ``wrap``: an FSDP1 instance inside an ``enable_wrap`` block, the module itself outside one."""
    from torch.distributed.fsdp.wrap import wrap

    return wrap(module, **kwargs)


class SkipModule(nn.Module):
    """One ``Linear(10, 10)`` without bias, as ``lin``: the layer FSDP1's auto-wrap tests leave unwrapped."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(10, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class NestedLinear(nn.Module):
    """``nested_linear``: a ``Linear(10, 10)`` without bias on the ranks' device, FSDP1-wrapped (``wrap``, so only
    inside ``enable_wrap``) with ``fsdp_wrap``."""

    def __init__(self, fsdp_wrap: bool) -> None:
        super().__init__()
        layer = nn.Linear(10, 10, bias=False).to(_rank_device())
        self.nested_linear = _fsdp1_wrap(layer) if fsdp_wrap else layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nested_linear(x)


class SkipModel(nn.Module):
    """``linear``, ``linear_skip`` (a :class:`SkipModule`) and ``nested_linear`` (a :class:`NestedLinear`, itself
    wrapped, and its linear too with ``double_nest``), in that order, on the ranks' device: FSDP1's state-dict
    tests of a module an ``enable_wrap`` block skips.

    Example::

        with enable_wrap(wrapper_cls=FSDP):
            model = SkipModel(double_nest=True)
    """

    def __init__(self, double_nest: bool) -> None:
        super().__init__()
        device = _rank_device()
        self.linear = nn.Linear(10, 10, bias=False).to(device)
        self.linear_skip = SkipModule().to(device)
        self.nested_linear = _fsdp1_wrap(NestedLinear(fsdp_wrap=double_nest), device_id=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nested_linear(self.linear_skip(self.linear(x)))


class TransformerWithSharedParams(nn.Module):
    """FSDP1's transformer test model: ``embed_tokens`` (23 x 16) whose weight ``output_proj`` (16 -> 23)
    shares, an ``nn.Transformer`` (d_model 16, 2 encoder and 2 decoder layers, feed-forward 8, dropout 0.1),
    the buffers ``vocab_bias`` (ones) and ``long_buffer`` (int64 zeros), and ``bn`` (BatchNorm1d over the
    batch of 2 with ``add_bn``, else Identity). ``deterministic`` seeds 0 and puts it in eval mode.

    Example::

        model = TransformerWithSharedParams.init(group, FSDPInitMode.RECURSIVE, DEVICEInitMode.DEVICE_AFTER)
    """

    def __init__(self, group: Any, device_init_mode: DEVICEInitMode, add_bn: bool, deterministic: bool) -> None:
        super().__init__()
        self.rank = group.rank()
        self.world_size = group.size()
        if deterministic:
            torch.manual_seed(0)
        vocab, width = 23, 16
        self.embed_tokens = nn.Embedding(vocab, width)
        self.transformer = nn.Transformer(d_model=width, num_encoder_layers=2, num_decoder_layers=2,
                                          dim_feedforward=8, dropout=0.1)
        self.output_proj = nn.Linear(width, vocab)
        self.output_proj.weight = self.embed_tokens.weight  # the shared parameter
        self.register_buffer("vocab_bias", torch.ones(width))
        self.register_buffer("long_buffer", torch.zeros(width, dtype=torch.long))
        self.bs = 2
        self.bn: nn.Module = nn.BatchNorm1d(self.bs) if add_bn else nn.Identity()
        if device_init_mode == DEVICEInitMode.DEVICE_BEFORE:
            self.to(_rank_device())
        if deterministic:
            self.eval()

    def get_input(self, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, tgt)`` token ids, time-major: (6, 2) and (4, 2)."""
        torch.manual_seed(1 + self.rank)
        return (torch.arange(12, device=device).view(6, self.bs), torch.arange(self.bs * 4, device=device).view(4, self.bs))

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        src = self.embed_tokens(src_ids)
        src = src + self.vocab_bias + self.long_buffer.type_as(src)
        tgt = self.bn(self.embed_tokens(tgt_ids))
        return self.output_proj(self.transformer(src, tgt))

    def get_loss(self, input: Any, output: torch.Tensor) -> torch.Tensor:
        _, tgt = input
        return F.cross_entropy(output.view(-1, output.size(-1)), tgt.view(-1), reduction="sum")

    def run_backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def get_ignored_modules(self) -> list[nn.Module]:
        return [self.transformer]

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode, device_init_mode: DEVICEInitMode,
             fsdp_kwargs: dict[str, Any] | None = None, deterministic: bool = False, add_bn: bool = True) -> nn.Module:
        """``NO_FSDP``: the plain model; ``RECURSIVE``: FSDP1 around it, each encoder and decoder layer its own
        unit unless ``fsdp_kwargs`` gives an ``auto_wrap_policy``. ``group`` may be a pair (intra-node,
        inter-node) for hybrid sharding, the first building the model."""
        fsdp_kwargs = dict(fsdp_kwargs or {})
        model_group = group[0] if isinstance(group, tuple) else group
        if fsdp_init_mode == FSDPInitMode.NO_FSDP:
            return TransformerWithSharedParams(model_group, device_init_mode, add_bn, deterministic)
        if fsdp_init_mode != FSDPInitMode.RECURSIVE:
            raise ValueError(f"TransformerWithSharedParams.init: unsupported FSDPInitMode {fsdp_init_mode!r}")
        from torch.distributed.fsdp import ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        if "auto_wrap_policy" in fsdp_kwargs:  # given, even as None (no auto wrapping), it is used as given
            policy = fsdp_kwargs.pop("auto_wrap_policy")
        else:
            policy = ModuleWrapPolicy({nn.TransformerEncoderLayer, nn.TransformerDecoderLayer})
        hybrid = fsdp_kwargs.get("sharding_strategy") in {ShardingStrategy.HYBRID_SHARD,
                                                           ShardingStrategy._HYBRID_SHARD_ZERO2}
        # a hybrid strategy given one group makes its own pair of groups (FSDP's default); a pair is passed on
        fsdp_group = None if hybrid and not isinstance(group, tuple) else group
        model = TransformerWithSharedParams(model_group, device_init_mode, add_bn, deterministic)
        wrapped = _fsdp1()(model, fsdp_group, auto_wrap_policy=policy, **fsdp_kwargs)
        return wrapped.to(_rank_device()) if device_init_mode == DEVICEInitMode.DEVICE_AFTER else wrapped


# ---- DTensor's (upstream's common_dtensor) -------------------------------------------------------


class MLPModule(nn.Module):
    """``net1`` (10 -> 16), ReLU, ``net2`` (16 -> 10); built from seed 5, so every rank builds the same one."""

    def __init__(self, device: Any, bias: bool = True) -> None:
        super().__init__()
        torch.manual_seed(5)  # upstream's tests rely on every rank drawing the same weights
        self.net1 = nn.Linear(10, 16, bias=bias, device=device)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 10, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))

    def reset_parameters(self) -> None:
        self.net1.reset_parameters()
        self.net2.reset_parameters()


class MLPStacked(nn.Module):
    """``n_layers`` :class:`MLPModule` in ``layers``, applied in turn."""

    def __init__(self, device: Any, n_layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList([MLPModule(device) for _ in range(n_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


@dataclasses.dataclass
class ModelArgs:
    """The toy :class:`Transformer`'s sizes and switches (upstream's defaults)."""

    n_layers: int = 2
    vocab_size: int = 8
    max_seq_len: int = 16
    dim: int = 16
    n_heads: int = 4
    dropout_p: float = 0.1
    use_attn_mask: bool = True
    weight_tying: bool = True
    checkpoint_activations: bool = False
    num_experts: int = 0


class Attention(nn.Module):
    """Multi-head self-attention: ``wq``, ``wk``, ``wv``, ``wo`` (dim x dim, no bias), causal when
    ``use_attn_mask``, dropout on the output."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        if args.dim % args.n_heads:
            raise ValueError(f"ModelArgs(dim={args.dim}, n_heads={args.n_heads}): dim must be a multiple of n_heads")
        self.head_dim = args.dim // args.n_heads
        self.n_heads = args.n_heads  # per rank after tensor parallelism with local outputs
        self.dropout_p = args.dropout_p
        self.use_attn_mask = args.use_attn_mask
        self.resid_dropout = nn.Dropout(args.dropout_p)
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.size()

        def heads(t: torch.Tensor) -> torch.Tensor:  # (batch, heads, seq, head_dim)
            return t.view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x)), None,
                                             self.dropout_p if self.training else 0, self.use_attn_mask)
        return self.resid_dropout(self.wo(out.transpose(1, 2).reshape(batch, seq, -1)))


class FeedForward(nn.Module):
    """``w1`` (dim -> hidden_dim), GELU, ``w2`` (back to dim), dropout."""

    def __init__(self, dim: int, hidden_dim: int, dropout_p: float) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim)
        self.gelu = nn.GELU()
        self.w2 = nn.Linear(hidden_dim, dim)
        self.resid_dropout = nn.Dropout(dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.resid_dropout(self.w2(self.gelu(self.w1(x))))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``attention_norm``, ``attention``, ``ffn_norm``, ``feed_forward`` (hidden 4*dim), each
    with a residual. Mixture-of-experts layers (``num_experts > 0``) are not provided."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        if args.num_experts > 0:
            raise NotImplementedError(f"ModelArgs(num_experts={args.num_experts}): harness.models has no expert "
                                      "layers; use num_experts=0")
        self.attention_norm = nn.LayerNorm(args.dim)
        self.attention = Attention(args)
        self.ffn_norm = nn.LayerNorm(args.dim)
        self.has_experts = False
        self.feed_forward = FeedForward(args.dim, hidden_dim=4 * args.dim, dropout_p=args.dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """A toy decoder: ``tok_embeddings``, ``pos_embeddings``, ``dropout``, ``layers`` (TransformerBlocks),
    ``norm``, ``output`` (tied to the token embeddings with ``weight_tying``); float32 logits.
    ``Transformer.parallelize(model, tp_mesh, use_seq_parallel)`` applies upstream's tensor-parallel plan.

    Example::

        model = Transformer(ModelArgs(dropout_p=0.0))
        logits = model(torch.randint(0, 8, (2, 16)))     # (2, 16, 8)
    """

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        if args.vocab_size is None or args.max_seq_len is None:
            raise ValueError(f"{args}: vocab_size and max_seq_len must be set")
        self.model_args = args
        self.max_seq_len = args.max_seq_len
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        self.dropout = nn.Dropout(args.dropout_p)
        self.layers = nn.ModuleList([TransformerBlock(args) for _ in range(args.n_layers)])
        self.norm = nn.LayerNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.weight_tying:
            self.output.weight = self.tok_embeddings.weight
        self.checkpoint_activations = args.checkpoint_activations

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.size(1)
        if seq > self.max_seq_len:
            raise ValueError(f"a sequence of {seq} tokens is longer than max_seq_len={self.max_seq_len}")
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(0, seq, device=tokens.device))
        h = self.dropout(h)
        for layer in self.layers:
            if self.checkpoint_activations:
                h = checkpoint(layer, h, use_reentrant=False)
            else:
                h = layer(h)
        return self.output(self.norm(h)).float()

    @staticmethod
    def parallelize(module: Transformer, tp_mesh: Any, use_seq_parallel: bool,
                    local_output_for_attn: bool = False, ep_mesh: Any = None) -> nn.Module:
        """Upstream's tensor-parallel plan for this model on ``tp_mesh`` (sequence parallel norms with
        ``use_seq_parallel``); ``ep_mesh`` (expert parallelism) is not provided."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                       SequenceParallel, parallelize_module)

        if not isinstance(module, Transformer):
            raise TypeError(f"Transformer.parallelize needs a harness.models.Transformer, got {type(module).__name__}")
        if ep_mesh is not None or tp_mesh is None:
            raise NotImplementedError("Transformer.parallelize: only tensor parallelism (tp_mesh) is provided")
        seq = use_seq_parallel
        parallelize_module(module, tp_mesh, {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1) if seq else Replicate()),
            "pos_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0) if seq else Replicate()),
            **({"norm": SequenceParallel()} if seq else {}),
        })
        for layer in module.layers:
            plan: dict[str, Any] = {}
            if seq:
                plan["attention"] = PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())
                plan["attention_norm"] = SequenceParallel()
                plan["ffn_norm"] = SequenceParallel()
            for name in ("wq", "wk", "wv"):
                plan[f"attention.{name}"] = ColwiseParallel(use_local_output=local_output_for_attn)
            plan["attention.wo"] = RowwiseParallel(output_layouts=Shard(1)) if seq else RowwiseParallel()
            plan["feed_forward.w1"] = ColwiseParallel(input_layouts=Shard(1)) if seq else ColwiseParallel()
            plan["feed_forward.w2"] = RowwiseParallel(output_layouts=Shard(1)) if seq else RowwiseParallel()
            parallelize_module(layer, tp_mesh, plan)
        parallelize_module(module.output, tp_mesh,
                           ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()) if seq
                           else ColwiseParallel(output_layouts=Replicate()))
        if local_output_for_attn:
            for layer in module.layers:
                layer.attention.n_heads = module.model_args.n_heads // tp_mesh.size()
        if module.model_args.weight_tying:
            module.output.weight = module.tok_embeddings.weight  # parameters and gradients shared again
        return module


class RMSNormPython(nn.Module):
    """DTensor's RMSNorm in plain operations: ``x / sqrt(mean(x**2, -1) + eps) * weight``, ``weight`` ones.

    Example::

        norm = RMSNormPython(8)
        norm(torch.randn(2, 8)).shape     # (2, 8)
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# ---- mixed precision (upstream's common_distributed) ----------------------------------------------


class SaveForwardInputsModule(nn.Module):
    """A ``Linear(100, 100)`` that records the input it was called with in ``forward_inputs[self]``; with
    ``cast_forward_inputs`` it casts the input to its weight's dtype first (the input is recorded uncast)."""

    def __init__(self, forward_inputs: dict[nn.Module, torch.Tensor], cast_forward_inputs: bool) -> None:
        super().__init__()
        self.l = nn.Linear(100, 100)
        self.forward_inputs = forward_inputs
        self.cast_forward_inputs = cast_forward_inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_inputs[self] = x
        return self.l(x.to(self.l.weight.dtype) if self.cast_forward_inputs else x)


class SaveForwardInputsModel(nn.Module):
    """Two :class:`SaveForwardInputsModule` in a row (``c1``, ``c2``), the model's own input recorded too: mixed-
    precision tests read ``forward_inputs`` to see which dtype reached each module.

    Example::

        inputs = {}
        model = SaveForwardInputsModel(inputs, cast_forward_inputs=False)
        model(torch.randn(2, 100))
        inputs[model.c1].dtype     # torch.float32
    """

    def __init__(self, forward_inputs: dict[nn.Module, torch.Tensor], cast_forward_inputs: bool) -> None:
        super().__init__()
        self.c1 = SaveForwardInputsModule(forward_inputs, cast_forward_inputs)
        self.c2 = SaveForwardInputsModule(forward_inputs, cast_forward_inputs)
        self.forward_inputs = forward_inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forward_inputs[self] = x
        return self.c2(self.c1(x))


# ---- mixture of experts (upstream's common_dtensor) -----------------------------------------------


class Experts(nn.Module):
    """``num_experts`` two-layer GELU experts stacked in two parameters, ``w1`` (experts x hidden x dim) and ``w2``
    (experts x dim x hidden), drawn from N(0, 0.02); every expert sees every token and their outputs are summed.
    Sharded parameters (DTensors) compute on their local experts.

    Example::

        Experts(dim=8, hidden_dim=16, num_experts=4)(torch.randn(5, 8)).shape    # (5, 8)
    """

    def __init__(self, dim: int, hidden_dim: int, num_experts: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden_dim, dim))
        self.w2 = nn.Parameter(torch.empty(num_experts, dim, hidden_dim))
        self.reset_parameters()
        self.gelu = nn.GELU()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.w1, std=0.02)
        nn.init.normal_(self.w2, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        w1, w2 = ((self.w1.to_local(), self.w2.to_local()) if isinstance(self.w1, DTensor)
                  else (self.w1, self.w2))
        tokens = x.unsqueeze(0).expand(w1.shape[0], -1, -1)
        hidden = self.gelu(torch.bmm(tokens, w1.transpose(-2, -1)))
        return torch.bmm(hidden, w2.transpose(-2, -1)).sum(dim=0)


class ExpertLayer(nn.Module):
    """:class:`Experts` over a (batch, sequence, dim) input, averaged over the experts."""

    def __init__(self, num_experts: int, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.experts = Experts(dim=dim, hidden_dim=hidden_dim, num_experts=num_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return (self.experts(x.reshape(-1, dim)) / self.num_experts).view(batch, length, dim)
