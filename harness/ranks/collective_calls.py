"""Which collective a rank enters, by the user's name: torch.distributed's Python functions wrapped while a test runs.

:data:`OPS` is the mapping from the functions wrapped to the name a user knows the collective by (an
alias maps to the name it stands for: FSDP2 calls ``all_gather_single`` where a user says
``all_gather_into_tensor``); it is ``harness.shared.collective_names.CALLS``, the one table of names the recorder
reads too. :func:`install` wraps them, calls ``on_call(op)`` as the rank enters each one and
:func:`uninstall` puts torch's own functions back.

Why the Python functions and not a ``TorchDispatchMode`` over the c10d ops (what ``CommDebugMode`` uses): the
call is seen as the rank enters it, by the name the user wrote, before torch checks an argument or queues any
work; ``all_gather_object``, ``broadcast_object_list`` and ``barrier``, what DCP calls, are one call each, not the
tensor ops they are made of (an inner call is not counted again); a dispatch mode sees every aten op of the test
(a Python call for each), is per thread, and is switched off under fake tensors and compiled regions. What it
misses: a reference to a function taken before :func:`install` outside ``torch.distributed`` and the test's
module (both are patched), and collectives issued from C++ alone.
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

from harness.shared import collective_names

__all__ = ["OPS", "FUNCOL_OPS", "user_name", "known_ops", "install", "uninstall"]

#: torch.distributed's functions and its functional collectives -> the collective's name: one table with the
#: recorder's (harness.shared.collective_names), so that a fault, a sweep and a pinned trace name a call alike
OPS: dict[str, str] = collective_names.CALLS
FUNCOL_OPS: dict[str, str] = collective_names.FUNCTIONAL_CALLS
user_name = collective_names.call_name
known_ops = collective_names.call_names


_depth = threading.local()  # an inner collective (all_gather under all_gather_object) is not a call of its own
_installed: list[tuple[Any, str, Any]] = []  # (holder, attribute, torch's own object), to put back


def _wrap(fn: Callable[..., Any], op: str, on_call: Callable[[str], None]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_depth, "n", 0)
        if depth == 0:
            on_call(op)  # may sleep, raise, hang, or end the process
        _depth.n = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n = depth

    collective._harness_original = fn  # type: ignore[attr-defined]
    return collective


def install(on_call: Callable[[str], None], also: tuple[str, ...] = ()) -> None:
    """Call ``on_call(op)`` as this process enters each collective (the user's name), until :func:`uninstall`.

    Wrapped where they are looked up: ``torch.distributed``, its ``distributed_c10d`` module (whose own functions
    call each other there), its functional collectives, and every loaded module of ``torch.distributed`` or named
    in ``also`` (the test's module) that holds one of them under its own name (``from ... import broadcast``).

    Example::

        install(lambda op: print("entering", op))
        dist.all_reduce(t)          # prints: entering all_reduce
        uninstall()
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    uninstall()
    wrapped: dict[int, Any] = {}
    for name, op in OPS.items():
        fn = getattr(c10d, name, None)
        if callable(fn):
            wrapped[id(fn)] = (fn, _wrap(fn, op, on_call))
    try:
        import torch.distributed._functional_collectives as funcol
    except ImportError:  # pragma: no cover - every torch this harness supports has it
        funcol = None
    if funcol is not None:
        for name, op in FUNCOL_OPS.items():
            fn = getattr(funcol, name, None)
            if callable(fn) and id(fn) not in wrapped:
                wrapped[id(fn)] = (fn, _wrap(fn, op, on_call))
    modules = [m for n, m in list(sys.modules.items())
               if m is not None and (n == "torch.distributed" or n.startswith("torch.distributed.") or n in also)]
    for module in {id(m): m for m in [dist, c10d, *([funcol] if funcol else []), *modules]}.values():
        space = getattr(module, "__dict__", {})
        for attr, value in list(space.items()):
            hit = wrapped.get(id(value))
            if hit is not None and hit[0] is value:
                _installed.append((module, attr, value))
                setattr(module, attr, hit[1])


def uninstall() -> None:
    """Put torch's own functions back where :func:`install` wrapped them."""
    while _installed:
        module, attr, original = _installed.pop()
        setattr(module, attr, original)
    _depth.n = 0
