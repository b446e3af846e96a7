"""Assertions ported tests rely on: a tensor-aware ``assertEqual`` and rank-safe ``assertExpectedInline``."""
from __future__ import annotations

import os
import traceback
from typing import Any

import expecttest

__all__ = ["DistributedAssertions"]

#: (file, line) -> the value accepted there in this process, under EXPECTTEST_ACCEPT
_ACCEPTED: dict[tuple[str, int], str] = {}


def _has_tensor(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def _as_tensor_like(value: Any, like: Any) -> Any:
    import torch

    if isinstance(value, (bool, int, float, complex)) and isinstance(like, torch.Tensor):
        return torch.tensor(value, dtype=like.dtype, device=like.device).expand_as(like) if like.dim() else \
            torch.tensor(value, dtype=like.dtype, device=like.device)
    return value


class DistributedAssertions(expecttest.TestCase):
    """``assertEqual`` that compares tensors as upstream's TestCase does (``torch.testing.assert_close``
    tolerances, a number against a tensor), and ``assertExpectedInline`` that is safe when every rank
    calls it: under ``EXPECTTEST_ACCEPT=1`` only rank 0 rewrites the source file.
    """

    def assertEqual(self, first: Any, second: Any, msg: Any = None, *, atol: float | None = None,
                    rtol: float | None = None, exact_dtype: bool = True, exact_device: bool = False) -> None:
        if not (_has_tensor(first) or _has_tensor(second)):
            super().assertEqual(first, second, msg)
            return
        import torch

        first, second = _as_tensor_like(first, second), _as_tensor_like(second, first)
        if (atol is None) != (rtol is None):
            atol, rtol = atol or 0.0, rtol or 0.0
        torch.testing.assert_close(first, second, atol=atol, rtol=rtol, check_dtype=exact_dtype,
                                   check_device=exact_device, equal_nan=True,
                                   msg=(lambda m: f"{m}\n{msg}") if msg else None)

    def assertExpectedInline(self, actual: str, expect: str, skip: int = 0) -> None:
        if os.environ.get("EXPECTTEST_ACCEPT"):
            if getattr(self, "rank", 0) > 0:
                return  # rank 0 alone edits the file; the ranks compute the same value
            # expecttest files an accepted literal under its shifted line number but looks it up under the
            # caller's (unshifted) one, so a second call from the same line -- a loop, the next hypothesis
            # example, the next test in a reused rank -- would rewrite it again and fail.
            caller = traceback.extract_stack(limit=2 + skip)[0]
            where = (caller.filename, caller.lineno)
            if where in _ACCEPTED:
                self.assertMultiLineEqual(actual, _ACCEPTED[where], "one assertExpectedInline, different values")
                return
            _ACCEPTED[where] = actual
        super().assertExpectedInline(actual, expect, skip=skip + 1)
