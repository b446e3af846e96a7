"""``with_comms``, ``with_temp_dir`` and ``skip_if_lt_x_gpu``: markers read by the harness, checked when applied."""
from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

from harness.errors import UsageError

__all__ = ["with_comms", "with_temp_dir", "skip_if_lt_x_gpu", "markers"]

F = TypeVar("F", bound=Callable[..., Any])

# The decorators only mark the function. The harness acts on the marks around the test body in each
# rank (and, for the temp dir, in the parent), so they compose with each other and with hypothesis's
# @given in any order, and a temp dir is removed even when a rank is killed.
_COMMS, _TEMP, _GPUS = "_harness_with_comms", "_harness_with_temp_dir", "_harness_gpus_needed"


def _check_callable(decorator: str, fn: Any) -> None:
    if not callable(fn):
        raise UsageError(f"@{decorator} decorates a test method; got {fn!r}. Write @{decorator} directly above 'def test_...'.")


def with_comms(fn: F | bool | None = None, *, backend: str | None = None, eager_init: bool = False) -> F:
    """Run the test with the default process group up (made, or reused from the previous test).

    Example::

        @with_comms
        def test_all_reduce(self):
            t = torch.ones(2, device=self.device)
            dist.all_reduce(t)
            self.assertEqual(t, torch.full((2,), float(self.world_size), device=self.device))
    """
    # ``eager_init`` is upstream's; the harness always creates the group before the test (bound to the
    # rank's GPU on CUDA), so it is accepted and has nothing left to do.
    if fn is None or isinstance(fn, bool):
        return lambda f: with_comms(f, backend=backend)  # type: ignore[return-value]
    _check_callable("with_comms", fn)
    setattr(fn, _COMMS, backend or True)
    return fn


def with_temp_dir(fn: F) -> F:
    """Give the test ``self.temp_dir``: one directory, the same path on every rank, removed afterwards.

    Example::

        @with_temp_dir
        def test_save(self):
            dcp.save(state_dict, checkpoint_id=self.temp_dir)
    """
    _check_callable("with_temp_dir", fn)
    setattr(fn, _TEMP, True)
    return fn


def skip_if_lt_x_gpu(x: int) -> Callable[[F], F]:
    """Declare that the test needs ``x`` GPUs to run on GPUs.

    With fewer, the harness runs it on CPU/gloo (``HARNESS_DEVICE=auto``) and the report says why; with
    ``HARNESS_DEVICE=cuda`` it is skipped with that reason.

    Example::

        @skip_if_lt_x_gpu(2)
        def test_parity(self): ...
    """
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        hint = " (it is a decorator factory: write @skip_if_lt_x_gpu(2), not @skip_if_lt_x_gpu)" if callable(x) else ""
        raise UsageError(f"skip_if_lt_x_gpu({x!r}): the number of GPUs must be an int >= 1{hint}")

    def mark(fn: F) -> F:
        _check_callable(f"skip_if_lt_x_gpu({x})", fn)
        setattr(fn, _GPUS, max(x, getattr(fn, _GPUS, 0)))
        return fn

    return mark


def _chain(fn: Any) -> list[Any]:
    """fn, and everything it wraps: functools.wraps chains and hypothesis's inner test."""
    seen, todo, out = set(), [fn], []
    while todo:
        f = todo.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f)
        todo.append(getattr(f, "__wrapped__", None))
        hyp = getattr(f, "hypothesis", None)
        if hyp is not None:
            todo.append(getattr(hyp, "_harness_original_inner", None) or getattr(hyp, "inner_test", None))
        if inspect.ismethod(f):
            todo.append(f.__func__)
    return out


def markers(fn: Any) -> dict[str, Any]:
    """The marks on a test function and on whatever it wraps."""
    comms: Any = False
    temp = False
    gpus = 0
    for f in _chain(fn):
        comms = comms or getattr(f, _COMMS, False)
        temp = temp or getattr(f, _TEMP, False)
        gpus = max(gpus, getattr(f, _GPUS, 0))
    return {"comms": comms, "temp_dir": temp, "gpus": gpus}
