"""``torch.testing._internal.two_tensor``: ``TwoTensor``, the tensor subclass FSDP2's and DTensor's extension
tests shard: it holds two tensors (``a`` and ``b``) and runs every op on both. Its meaning is upstream's on
purpose (a traceable wrapper subclass to test subclass support against); this is a stable copy of that
contract, checked against the installed one (``tests/unit/test_upstream_modules.py``)."""
from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing

__all__ = ["TwoTensor", "TwoTensorMode"]


class TwoTensor(torch.Tensor):
    """A wrapper tensor of ``a``'s size, stride, dtype and device over two tensors of the same layout; every
    op runs on ``a`` and on ``b`` and returns a ``TwoTensor`` of the two results (non-tensor results are
    ``a``'s). It flattens (``__tensor_flatten__``) to ``["a", "b"]``, so ``torch.compile`` and FSDP2 see
    through it.

    Example::

        t = TwoTensor(torch.ones(2), torch.zeros(2))
        (t + 1).b      # tensor([1., 1.])
    """

    a: torch.Tensor
    b: torch.Tensor

    @staticmethod
    def __new__(cls, a: torch.Tensor, b: torch.Tensor, outer_size: Any = None, outer_stride: Any = None, *,
                requires_grad: bool | None = None) -> "TwoTensor":
        if not (a.device == b.device and a.layout == b.layout and a.requires_grad == b.requires_grad
                and a.dtype == b.dtype):
            raise AssertionError("Expected a and b to have same device, layout, requires_grad, and dtype")
        out = torch.Tensor._make_wrapper_subclass(
            cls, a.size() if outer_size is None else outer_size,
            strides=a.stride() if outer_stride is None else outer_stride, storage_offset=a.storage_offset(),
            device=a.device, layout=a.layout, requires_grad=requires_grad or a.requires_grad, dtype=a.dtype)
        if a.shape != b.shape:
            raise AssertionError(f"Expected a.shape == b.shape, got {a.shape} != {b.shape}")
        if a.stride() != b.stride():
            raise AssertionError(f"Expected a.stride() == b.stride(), got {a.stride()} != {b.stride()}")
        if a.storage_offset() != b.storage_offset():
            raise AssertionError(f"Expected a.storage_offset() == b.storage_offset(), "
                                 f"got {a.storage_offset()} != {b.storage_offset()}")
        return out

    @torch._disable_dynamo
    def __init__(self, a: torch.Tensor, b: torch.Tensor, outer_size: Any = None, outer_stride: Any = None, *,
                 requires_grad: bool | None = None) -> None:
        self.a = a
        self.b = b

    def __repr__(self) -> str:  # type: ignore[override]
        return f"TwoTensor({self.a!r}, {self.b!r})"

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a", "b"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors: dict[str, torch.Tensor], meta: Any, outer_size: Any,
                             outer_stride: Any) -> "TwoTensor":
        if meta is not None:
            raise AssertionError("Expected meta to be None")
        a, b = inner_tensors["a"], inner_tensors["b"]
        if type(a) is torch.Tensor and (outer_size is None or outer_stride is None):
            raise AssertionError("Expected outer_size and outer_stride to not be None")
        return TwoTensor(a, b, outer_size, outer_stride)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out_a = func(*pytree.tree_map_only(TwoTensor, lambda x: x.a, args),
                     **pytree.tree_map_only(TwoTensor, lambda x: x.a, kwargs))
        out_b = func(*pytree.tree_map_only(TwoTensor, lambda x: x.b, args),
                     **pytree.tree_map_only(TwoTensor, lambda x: x.b, kwargs))
        flat_a, spec = pytree.tree_flatten(out_a)
        flat_b = pytree.tree_leaves(out_b)
        if len(flat_a) != len(flat_b):
            raise AssertionError(f"{func}: a and b gave {len(flat_a)} and {len(flat_b)} results")
        out = pytree.tree_unflatten([cls(x, y) if isinstance(x, torch.Tensor) else x
                                     for x, y in zip(flat_a, flat_b)], spec)
        from torch._higher_order_ops.cond import cond_op

        if func is cond_op:
            return out
        return return_and_correct_aliasing(func, args, kwargs, out)

    def get_elem_a(self) -> torch.Tensor:
        return self.a


class TwoTensorMode(TorchDispatchMode):
    """Within the mode, every tensor a factory function makes is a :class:`TwoTensor` of it and its clone."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if torch._subclasses.fake_tensor._is_tensor_constructor(func):
            out = TwoTensor(out, out.clone())
        return out
