"""``with_comms``, ``with_temp_dir`` and ``skip_if_lt_x_gpu``: markers read by the harness, checked when applied."""
from __future__ import annotations

import functools
import inspect
import os
import shutil
import tempfile
import unittest
from typing import Any, Callable, TypeVar

from harness.shared.errors import UsageError

__all__ = ["with_comms", "with_temp_dir", "skip_if_lt_x_gpu", "markers", "gpus_needed", "defined_at"]

F = TypeVar("F", bound=Callable[..., Any])

# The decorators only mark the function. The harness acts on the marks around the test body in each
# rank (and, for the temp dir, in the parent), so they compose with each other and with hypothesis's
# @given in any order, and a temp dir is removed even when a rank is killed.
_COMMS, _TEMP, _GPUS = "_harness_with_comms", "_harness_with_temp_dir", "_harness_gpus_needed"


def _check_callable(decorator: str, fn: Any) -> None:
    if not callable(fn):
        raise UsageError(f"@{decorator} decorates a test method; got {fn!r}. Write @{decorator} directly above 'def test_...'.")


def with_comms(fn: F | bool | None = None, *, backend: str | None = None, eager_init: bool = False,
               init_rpc: bool = False) -> F:
    """Run the test with the default process group up (made, or reused from the previous test).

    Takes upstream's arguments, from ``DTensorTestBase``'s ``with_comms(eager_init=..., backend=...)`` and
    ``ShardedTensorTestBase``'s ``with_comms(init_rpc=..., backend=...)``: ``init_rpc=True`` also starts
    ``torch.distributed.rpc`` around the test (``self.init_rpc()`` when the class has one).

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
        return lambda f: with_comms(f, backend=backend, init_rpc=init_rpc)  # type: ignore[return-value]
    _check_callable("with_comms", fn)
    if backend is not None and not isinstance(backend, str):
        raise UsageError(f"with_comms(backend={backend!r}): a backend is a string such as 'gloo' or "
                         "'cpu:gloo,cuda:nccl'")
    if init_rpc:
        fn = _with_rpc(fn)
    setattr(fn, _COMMS, backend or True)
    return fn


def _with_rpc(fn: F) -> F:
    """Start RPC (one worker per rank, rendezvous on the test's FileStore path) around the test."""

    @functools.wraps(fn)
    def rpc_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch.distributed import rpc

        if hasattr(self, "init_rpc"):
            self.init_rpc()
        else:
            options = rpc.TensorPipeRpcBackendOptions(init_method=f"file://{self.file_name}.rpc")
            rpc.init_rpc(name=f"worker{self.rank}", rank=self.rank, world_size=self.world_size,
                         rpc_backend_options=options)
        try:
            return fn(self, *args, **kwargs)
        finally:
            rpc.shutdown()

    return rpc_wrapper  # type: ignore[return-value]


def with_temp_dir(fn: F) -> F:
    """Give the test ``self.temp_dir``, removed afterwards whatever happened.

    As upstream: with a process group (``@with_comms``, ``FSDPTest``) every rank gets the same directory;
    without one each rank gets its own; a single-process test (``harness.TestCase``) gets one too.

    Example::

        @with_comms
        @with_temp_dir
        def test_save(self):
            dcp.save(state_dict, checkpoint_id=self.temp_dir)
    """
    _check_callable("with_temp_dir", fn)
    if not _is_hypothesis(fn):
        fn = _own_temp_dir_outside_harness(fn)
    setattr(fn, _TEMP, True)
    return fn


def _own_temp_dir_outside_harness(fn: F) -> F:
    """A test of a class the harness does not run on ranks (``harness.TestCase``, ``unittest.TestCase``)
    never sees the mark: give it its own directory here, as upstream's decorator does without a group."""

    @functools.wraps(fn)
    def temp_dir_test(*args: Any, **kwargs: Any) -> Any:
        if not args or not isinstance(args[0], unittest.TestCase) or _is_harness_class(type(args[0])):
            return fn(*args, **kwargs)  # on ranks the harness made the directory from the mark
        self = args[0]
        self.temp_dir = tempfile.mkdtemp(prefix="harness-test-")
        try:
            return fn(*args, **kwargs)
        finally:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    return temp_dir_test  # type: ignore[return-value]


def skip_if_lt_x_gpu(x: int, *, allow_cpu: bool = False) -> Callable[[F], F]:
    """Declare that the test needs ``x`` GPUs to run on GPUs.

    With fewer, the harness runs it on CPU/gloo (``HARNESS_DEVICE=auto``) with the world it asks for on a
    machine with ``x`` GPUs, and the report says why; with ``HARNESS_DEVICE=cuda`` it is skipped with that
    reason. ``allow_cpu`` is upstream's; the harness runs on CPU anyway. On a test class (a harness class),
    it applies to every test; on a class or a test the harness does not run it is an error, never a no-op.

    Example::

        @skip_if_lt_x_gpu(2)
        def test_parity(self): ...
    """
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        hint = " (it is a decorator factory: write @skip_if_lt_x_gpu(2), not @skip_if_lt_x_gpu)" if callable(x) else ""
        raise UsageError(f"skip_if_lt_x_gpu({x!r}): the number of GPUs must be an int >= 1{hint}")

    def mark(fn: F) -> F:
        _check_callable(f"skip_if_lt_x_gpu({x})", fn)
        if isinstance(fn, type):
            if not _is_harness_class(fn):
                raise UsageError(f"@skip_if_lt_x_gpu({x}) on class {fn.__qualname__}, which the harness does not run "
                                 f"on ranks (its bases: {', '.join(b.__qualname__ for b in fn.__mro__[1:-1])}); the "
                                 "mark would do nothing. Derive it from harness.MultiProcessTestCase (or FSDPTest, "
                                 "DTensorTestBase, ...), or remove the decorator")
            setattr(fn, _GPUS, max(x, fn.__dict__.get(_GPUS, 0)))
            return fn
        if not _is_hypothesis(fn):
            fn = _refuse_outside_harness(fn, x)
        setattr(fn, _GPUS, max(x, getattr(fn, _GPUS, 0)))
        return fn

    return mark


def _is_harness_class(cls: type) -> bool:
    return any(getattr(c, "_harness_test_class", False) for c in cls.__mro__)


def _is_hypothesis(fn: Any) -> bool:
    return getattr(getattr(fn, "hypothesis", None), "inner_test", None) is not None


def _refuse_outside_harness(fn: F, x: int) -> F:
    """A test method of a class the harness does not run would silently ignore the mark: make it an error."""

    @functools.wraps(fn)
    def gpu_test(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], unittest.TestCase) and not _is_harness_class(type(args[0])):
            raise UsageError(f"{args[0].id()}: @skip_if_lt_x_gpu({x}) on a test of {type(args[0]).__qualname__}, "
                             "a class the harness does not run on ranks, so the mark would do nothing; derive the "
                             "class from harness.MultiProcessTestCase (or FSDPTest, DTensorTestBase, ...), or "
                             "remove the decorator")
        return fn(*args, **kwargs)

    return gpu_test  # type: ignore[return-value]


def gpus_needed(cls: type, fn: Any) -> int:
    """GPUs a test asks for with ``skip_if_lt_x_gpu``, on its method or its class (0: none named)."""
    on_class = max((c.__dict__.get(_GPUS, 0) for c in cls.__mro__), default=0)
    return max(markers(fn)["gpus"], on_class)


def defined_at(fn: Any) -> str:
    """``file:line`` of the test function itself (under its decorators)."""
    inner = next((f for f in reversed(_chain(fn)) if getattr(f, "__wrapped__", None) is None
                  and hasattr(f, "__code__")), fn)
    code = getattr(inner, "__code__", None)
    if code is None:
        return "?"
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


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
    faults: list[Any] = []
    restarts: int | None = None
    sweep: Any = None
    for f in _chain(fn):
        comms = comms or getattr(f, _COMMS, False)
        temp = temp or getattr(f, _TEMP, False)
        gpus = max(gpus, getattr(f, _GPUS, 0))
        faults += [x for x in getattr(f, "_harness_faults", ()) if not any(x is y for y in faults)]
        if restarts is None:
            restarts = getattr(f, "_harness_restarts", None)
        if sweep is None:
            sweep = getattr(f, "_harness_sweep", None)
    return {"comms": comms, "temp_dir": temp, "gpus": gpus, "faults": faults, "restarts": restarts, "sweep": sweep}
