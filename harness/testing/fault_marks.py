"""``@faults.inject(...)`` and ``@restarts(n)``: marks on a test method, read by the parent (harness.parent.restarts).

Like ``with_comms`` and ``with_temp_dir`` they only mark the function, so they stack in any order with each other,
``parametrize`` and hypothesis's ``@given``; what the faults name (a rank in the world, a known collective) is
checked in the parent before any rank starts, where the test's id and world size are known.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from harness.shared.errors import UsageError
from harness.shared.faults import Fault, sweep_of

__all__ = ["inject", "restarts", "sweep", "FAULTS_ATTR", "RESTARTS_ATTR", "SWEEP_ATTR"]

F = TypeVar("F", bound=Callable[..., Any])

FAULTS_ATTR, RESTARTS_ATTR, SWEEP_ATTR = "_harness_faults", "_harness_restarts", "_harness_sweep"


def inject(*faults: Fault) -> Callable[[F], F]:
    """Fire ``faults`` (``faults.kill(...)``, ``delay``, ``raise_``, ``hang``, ``io_error``) while the test runs.

    Each fault fires once, in its attempt (``attempt=0``: the test's first run), as its rank enters its ``nth``
    call of ``op``. A fault that never fires fails the test; a rank it killed or failed is not a failure, nor are
    the errors its peers met because of it.

    Example::

        @faults.inject(faults.kill(1, op="all_reduce", nth=3))
        @restarts(1)
        @with_comms
        @with_temp_dir
        def test_resume(self): ...
    """
    if len(faults) == 1 and callable(faults[0]) and not isinstance(faults[0], Fault):
        raise UsageError(f"@faults.inject takes faults, got the function {getattr(faults[0], '__qualname__', faults[0])!r}"
                         "; write @faults.inject(faults.kill(1, op='all_reduce', nth=3)) above the test")
    for fault in faults:
        if not isinstance(fault, Fault):
            raise UsageError(f"@faults.inject({fault!r}): not a fault; make one with faults.kill(rank, op=..., "
                             "nth=...), faults.delay, faults.raise_, faults.hang or faults.io_error")

    def mark(fn: F) -> F:
        if not callable(fn):
            raise UsageError(f"@faults.inject decorates a test method; got {fn!r}")
        setattr(fn, FAULTS_ATTR, list(getattr(fn, FAULTS_ATTR, [])) + list(faults))
        return fn

    return mark


def restarts(n: int) -> Callable[[F], F]:
    """After an injected fault kills or fails a rank, end the whole world and run the test again in fresh ranks,
    up to ``n`` times, as torchrun's ``--max-restarts``: ``self.restart_count`` and ``TORCHELASTIC_RESTART_COUNT``
    say the attempt, ``self.temp_dir`` is the same, the rendezvous is new. A failure no fault explains is never
    run again.

    Example::

        @restarts(2)
        @faults.inject(faults.kill(0, op="barrier", nth=2))
        def test_resume(self): ...
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        hint = " (write @restarts(1), not @restarts)" if callable(n) else ""
        raise UsageError(f"@restarts({n!r}): the number of restarts must be an int >= 0{hint}")

    def mark(fn: F) -> F:
        if not callable(fn):
            raise UsageError(f"@restarts({n}) decorates a test method; got {fn!r}")
        setattr(fn, RESTARTS_ATTR, n)
        return fn

    return mark


def sweep(fault: Any, rank: Any = None, op: str | None = None, nth: int | None = None, **args: Any
          ) -> Callable[[F], F]:
    """Run the test once per collective ``rank`` makes (of ``op``; None: every collective), ``fault`` injected at
    it: ``nth`` = 1..N, N counted by a run of the test without the fault. Each point runs in a fresh world with the
    test's ``@restarts``; the test passes when it survives every point, and its report names each failing point
    as the fault that replays it alone (``kill(rank=1, op='gather_object', nth=2)``).

    ``fault``: ``faults.kill``, ``faults.raise_`` (``exc=``, default ``RuntimeError``) or ``faults.delay``
    (``seconds=``, default 1.0); a ``Fault`` is one point alone. ``rank``: an int, a list, or
    ``faults.every_rank``. ``nth``: only that point (a replay).

    Example::

        @faults.sweep(faults.kill, rank=1)
        @restarts(1)
        @with_comms
        @with_temp_dir
        def test_resume(self): ...
    """
    spec = sweep_of(fault, rank, op, nth, **args)

    def mark(fn: F) -> F:
        if not callable(fn):
            raise UsageError(f"@faults.sweep decorates a test method; got {fn!r}")
        if getattr(fn, SWEEP_ATTR, None) is not None:
            raise UsageError(f"@faults.sweep twice on {getattr(fn, '__qualname__', fn)}: a test sweeps one fault; "
                             "give rank=[...] or faults.every_rank to sweep several ranks")
        setattr(fn, SWEEP_ATTR, spec)
        return fn

    return mark
