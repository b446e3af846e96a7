"""``torch.testing._internal.distributed.common_state_dict``: ``VerifyStateDictMixin``, the assertions that
compare a model's and an optimizer's full state dict with a distributed one, and the fused-embedding models
whose state-dict keys differ from their parameters' names."""
from __future__ import annotations

import copy
import itertools
from typing import Any

import torch
from torch import nn

__all__ = ["VerifyStateDictMixin", "FusionEmbedding", "FusionEmbeddingWithHook", "FusionEmbeddingWithModifier"]

_STATE = "state"  # the optimizer state dict's keys, as torch.distributed.checkpoint.state_dict names them
_PG = "param_groups"


def _full(value: Any) -> Any:
    """A DTensor or ShardedTensor gathered to its full tensor on every rank; anything else as it is."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    from torch.distributed.tensor import DTensor

    if not isinstance(value, (DTensor, ShardedTensor)):
        return value
    if isinstance(value, DTensor):
        return value.full_tensor()
    # torch's own gatherer (a ShardedTensor's shards on every rank); private, so read where it is
    from torch.distributed._state_dict_utils import _gather_state_dict

    return _gather_state_dict({"value": value})["value"]


class VerifyStateDictMixin:
    """Assertions for a test class (mix it in before the harness's class) that checks distributed state dicts
    against the ones of a plain model: ``_verify_msd`` for a model's, ``_verify_osd`` for an optimizer's (keyed by
    parameter ids against one keyed by names), ``_verify_osd_by_load`` by loading it into a fresh optimizer.

    Example::

        class TestStateDict(DTensorTestBase, VerifyStateDictMixin):
            @with_comms
            def test_fsdp2(self):
                ...
                self._verify_msd(model.state_dict(), get_model_state_dict(dist_model))
    """

    def _compare_tensor(self, orig_tensor: torch.Tensor, dist_tensor: Any, offload_to_cpu: bool = False) -> None:
        dist_tensor = _full(dist_tensor)
        if offload_to_cpu:
            orig_tensor, dist_tensor = orig_tensor.cpu(), dist_tensor.cpu()
        self.assertTrue(isinstance(dist_tensor, torch.Tensor))  # type: ignore[attr-defined]
        self.assertTrue(torch.allclose(orig_tensor, dist_tensor))  # type: ignore[attr-defined]

    def _verify_msd(self, msd: dict[str, Any], dist_msd: dict[str, Any], options: Any = None,
                    offload_to_cpu: bool = False) -> None:
        ignore_frozen = bool(getattr(options, "ignore_frozen_params", False))
        if not ignore_frozen:
            self.assertEqual(len(msd), len(dist_msd))  # type: ignore[attr-defined]
        for fqn, param in msd.items():
            dist_param = dist_msd.get(fqn)
            if not ignore_frozen:
                self.assertIsNotNone(dist_param, f"{fqn=}")  # type: ignore[attr-defined]
                try:
                    self._compare_tensor(param, dist_param, offload_to_cpu)
                except AssertionError as exc:
                    raise AssertionError(f"{fqn} has mismatched value {param} {dist_param}") from exc
            elif dist_param is None:
                self.assertFalse(param.requires_grad, f"{fqn=}")  # type: ignore[attr-defined]

    def _verify_osd(self, model: nn.Module, optim: torch.optim.Optimizer, osd: dict[str, Any],
                    dist_osd: dict[str, Any]) -> None:
        params = list(itertools.chain.from_iterable(g["params"] for g in optim.param_groups))
        pid_of = {id(p): i for i, p in enumerate(params)}
        fqn_pid: dict[Any, Any] = {}
        for fqn, param in model.named_parameters():
            pid = pid_of[id(param)]
            fqn_pid[fqn], fqn_pid[pid] = pid, fqn
        self.assertEqual(len(osd[_STATE]), len(dist_osd[_STATE]))  # type: ignore[attr-defined]
        for pid, states in osd[_STATE].items():
            fqn = fqn_pid[pid]
            dist_states = dist_osd[_STATE].get(fqn, None)
            self.assertIsNotNone(dist_states, fqn)  # type: ignore[attr-defined]
            self.assertEqual(len(states), len(dist_states))  # type: ignore[attr-defined]
            for key, state in states.items():
                # upstream compares each state with itself here (its ``states.get``): kept, so that the same
                # state dicts pass and fail as there; the count above is what tells them apart
                dist_state = states.get(key, None)
                self.assertIsNotNone(dist_state)  # type: ignore[attr-defined]
                self._compare_tensor(state, dist_state)
        kept = dist_osd[_PG]
        if len(osd[_PG]) != len(dist_osd[_PG]):
            self.assertTrue(len(dist_osd[_PG]) > len(osd[_PG]))  # type: ignore[attr-defined]
            merged = copy.deepcopy(dist_osd[_PG][0])
            merged["params"] = [p for group in dist_osd[_PG] for p in group["params"]]
            dist_osd[_PG] = [merged]
        try:
            self.assertEqual(len(osd[_PG]), len(dist_osd[_PG]))  # type: ignore[attr-defined]
            for group, dist_group in zip(osd[_PG], dist_osd[_PG]):
                self.assertEqual(len(group), len(dist_group))  # type: ignore[attr-defined]
                for key, value in group.items():
                    dist_value = dist_group[key]
                    if key == "params":
                        fqns = sorted(fqn_pid[pid] for pid in value)
                        self.assertEqual(fqns, sorted(dist_value))  # type: ignore[attr-defined]
                    else:
                        self.assertEqual(value, dist_value)  # type: ignore[attr-defined]
        finally:
            dist_osd[_PG] = kept

    def _verify_osd_by_load(self, model: nn.Module, optim: torch.optim.Optimizer, new_optim: torch.optim.Optimizer,
                            dist_osd: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        full = _gather(dist_osd)
        set_state_dict(model, optimizers=new_optim, model_state_dict={}, optim_state_dict=full)
        self.assertEqual(optim.state_dict(), new_optim.state_dict())  # type: ignore[attr-defined]


def _gather(tree: Any) -> Any:
    """``tree`` (nested dicts and lists) with every DTensor and ShardedTensor gathered to its full tensor."""
    if isinstance(tree, dict):
        return {k: _gather(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_gather(v) for v in tree)
    return _full(tree)


class FusionEmbedding(nn.Module):
    """Two embeddings side by side: ``embedding`` (``vocab_size`` x ``embed_dim``) and ``fusion_embedding``."""

    def __init__(self, vocab_size: int, fusion_vocab_size: int, embed_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.fusion_embedding = nn.Embedding(fusion_vocab_size, embed_dim)


class FusionEmbeddingWithHook(nn.Module):
    """:class:`FusionEmbedding`'s two embeddings, its state dict naming ``embedding.weight`` as ``weight`` (the
    key it had before the fusion), by a state-dict hook and a load pre-hook."""

    def __init__(self, vocab_size: int, fusion_vocab_size: int, embed_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.fusion_embedding = nn.Embedding(fusion_vocab_size, embed_dim)
        self._register_state_dict_hook(FusionEmbeddingWithHook._state_dict_hook)
        self._register_load_state_dict_pre_hook(FusionEmbeddingWithHook._load_state_dict_hook, with_module=True)

    def _state_dict_hook(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        destination[prefix + "weight"] = destination.pop(prefix + "embedding.weight")

    def _load_state_dict_hook(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        if state_dict:
            state_dict[prefix + "embedding.weight"] = state_dict.pop(prefix + "weight")


class FusionEmbeddingWithModifier(FusionEmbeddingWithHook):
    """As :class:`FusionEmbeddingWithHook`, and it tells distributed state dicts the renaming through
    ``_fqn_modifiers`` (the contract torch's ``get_state_dict`` reads)."""

    def _fqn_modifiers(self) -> dict[str, str]:
        return {"weight": "embedding"}
