"""Faults on purpose, as data: what to do to which rank at which call, in which attempt, and how to say it.

A :class:`Fault` travels in the ``protocol.Task`` from the parent (which checked it: harness.parent.restarts)
to every rank (where harness.ranks.fault_trigger fires it) and comes back named in the verdict's words
(harness.judging.attempts). The public constructors (``kill``, ``delay``, ``raise_``, ``hang``, ``io_error``) are
here so that every side shares one vocabulary; users reach them as ``harness.faults``.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import errno as errno_names
from typing import Any

from harness.shared.errors import UsageError

__all__ = ["Fault", "kill", "delay", "raise_", "hang", "io_error", "KINDS", "DISRUPTING", "ordinal",
           "attempt_env", "Sweep", "every_rank", "SWEEPABLE", "sweep_of", "parse_sweep", "replay"]

#: the kinds of fault; the ones that end or break a rank's test (a delay only slows it)
KINDS = ("kill", "delay", "raise_", "hang", "io_error")
DISRUPTING = ("kill", "raise_", "hang", "io_error")

#: the variable torchrun sets in each worker to the number of times its agent restarted the workers
attempt_env = "TORCHELASTIC_RESTART_COUNT"


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` done to ``rank`` as it enters its ``nth`` call of ``op`` (None: any collective), in
    attempt ``attempt`` (0: the first run of the test), once. An ``io_error`` targets writes under ``path_glob``
    instead of a collective.

    Example::

        kill(1, op="all_reduce", nth=3)      # Fault(kind='kill', rank=1, op='all_reduce', nth=3)
    """

    kind: str
    rank: Any
    op: Any = None
    nth: Any = 1
    attempt: Any = 0
    seconds: Any = 0.0  # delay
    exc: Any = None  # raise_: an exception instance or class
    path_glob: Any = ""  # io_error
    after_bytes: Any = 0  # io_error: the bytes that still go through first
    errno: Any = errno_names.ENOSPC  # io_error

    def __str__(self) -> str:
        args = [f"rank={self.rank!r}"]
        if self.kind == "delay":
            args.append(f"seconds={self.seconds!r}")
        if self.kind == "raise_":
            args.append(f"exc={self.exc!r}")
        if self.kind == "io_error":
            args += [f"path_glob={self.path_glob!r}", f"after_bytes={self.after_bytes!r}",
                     f"errno={errno_names.errorcode.get(self.errno, self.errno) if isinstance(self.errno, int) else self.errno!r}"]
        else:
            args += [f"op={self.op!r}", f"nth={self.nth!r}"]
        if self.attempt != 0:
            args.append(f"attempt={self.attempt!r}")
        return f"{self.kind}({', '.join(args)})"

    @property
    def what(self) -> str:
        """The calls this fault counts, as a report says them ("all_reduce", "collectives")."""
        return "collectives" if self.op is None else str(self.op)


def kill(rank: int, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """SIGKILL ``rank`` as it enters its ``nth`` call of ``op`` (None: any collective).

    Example::

        @faults.inject(faults.kill(1, op="all_reduce", nth=3))
    """
    return Fault("kill", rank, op, nth, attempt)


def delay(rank: int, seconds: float, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """``rank`` sleeps ``seconds`` as it enters its ``nth`` call of ``op``, then makes the call.

    Example::

        @faults.inject(faults.delay(0, 2.0, op="barrier"))
    """
    return Fault("delay", rank, op, nth, attempt, seconds=seconds)


def raise_(rank: int, exc: BaseException | type[BaseException], op: str | None = None, nth: int = 1, *,
           attempt: int = 0) -> Fault:
    """``rank``'s ``nth`` call of ``op`` raises ``exc`` instead of running (an instance, or a class).

    Example::

        @faults.inject(faults.raise_(1, RuntimeError("link down"), op="all_gather_into_tensor"))
    """
    return Fault("raise_", rank, op, nth, attempt, exc=exc)


def hang(rank: int, op: str | None = None, nth: int = 1, *, attempt: int = 0) -> Fault:
    """``rank``'s ``nth`` call of ``op`` never returns (for watchdog and timeout code).

    Example::

        @faults.inject(faults.hang(1, op="barrier"))
    """
    return Fault("hang", rank, op, nth, attempt)


def io_error(rank: int, path_glob: str, after_bytes: int = 0, errno: int = errno_names.ENOSPC, *,
             attempt: int = 0) -> Fault:
    """A write by ``rank`` to a file whose path matches ``path_glob`` (``fnmatch``, on the absolute path) fails
    with ``OSError(errno)`` once ``after_bytes`` bytes went to such files: a full disk under a checkpoint writer.

    Example::

        @faults.inject(faults.io_error(1, "*.distcp", after_bytes=1024))
    """
    return Fault("io_error", rank, None, 1, attempt, path_glob=path_glob, after_bytes=after_bytes, errno=errno)


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th'."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


# ---- sweeps: one fault at every collective a rank makes --------------------------------------------------------

#: the kinds a sweep may put at every point; hang and io_error are refused (:data:`NOT_SWEPT` says why)
SWEEPABLE = ("kill", "raise_", "delay")
NOT_SWEPT = {
    "hang": "a hang sweep is refused: at every point the rank's peers would wait out the test's time limit (a "
            "timeout per point); sweep kill, raise_ or delay, and test a hang once with "
            "@faults.inject(faults.hang(rank, op=..., nth=...)) and a short class timeout",
    "io_error": "io_error fails writes, not collectives: it has no collective points to sweep; inject it once with "
                "@faults.inject(faults.io_error(rank, path_glob, after_bytes=...))",
}


class _EveryRank:
    """``faults.every_rank``: a sweep over each rank of the test's world in turn."""

    def __repr__(self) -> str:
        return "faults.every_rank"

    def __reduce__(self) -> str:
        return "every_rank"


every_rank = _EveryRank()


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A fault put, run by run, at each collective ``rank`` makes (of ``op``; None: every collective): ``nth`` =
    1..N, N counted by a run without it; ``nth`` given: that one point alone (a replay). ``rank``: an int, a tuple of
    them, or :data:`every_rank`. ``seconds`` (delay) and ``exc`` (raise_) are the fault's own arguments.

    Example::

        Sweep("kill", 1)                  # kill(rank=1) at each of rank 1's collectives
        Sweep("kill", 1).point(1, "gather_object", 2)    # Fault: kill(rank=1, op='gather_object', nth=2)
    """

    kind: str
    rank: Any
    op: Any = None
    nth: Any = None
    seconds: Any = 1.0
    exc: Any = RuntimeError

    def __str__(self) -> str:
        rank = self.rank if self.rank is every_rank or not isinstance(self.rank, tuple) else list(self.rank)
        args = [f"rank={rank!r}"]
        if self.kind == "delay":
            args.append(f"seconds={self.seconds!r}")
        if self.kind == "raise_":
            args.append(f"exc={_exc_text(self.exc)}")
        if self.op is not None:
            args.append(f"op={self.op!r}")
        if self.nth is not None:
            args.append(f"nth={self.nth!r}")
        return f"{self.kind}({', '.join(args)})"

    def ranks(self, world_size: int) -> list[int]:
        """The ranks swept in a world of ``world_size``."""
        if self.rank is every_rank:
            return list(range(world_size))
        return list(self.rank) if isinstance(self.rank, (tuple, list)) else [self.rank]

    def point(self, rank: int, op: Any = None, nth: int = 1) -> Fault:
        """The fault at one point: ``rank``'s ``nth`` call of ``op`` (None: its ``nth`` collective)."""
        return Fault(self.kind, rank, op, nth, 0, seconds=self.seconds if self.kind == "delay" else 0.0,
                     exc=self.exc if self.kind == "raise_" else None)


_CONSTRUCTORS = {kill: "kill", delay: "delay", raise_: "raise_", hang: "hang", io_error: "io_error"}


def sweep_of(fault: Any, rank: Any = None, op: Any = None, nth: Any = None, **args: Any) -> Sweep:
    """The :class:`Sweep` that ``@faults.sweep(fault, rank=..., op=..., ...)`` asks for. ``fault``: a constructor
    (``faults.kill``), its name (``"kill"``), or a ``Fault`` (that one point: its own rank, op and nth).
    What only the test's world can tell (a rank outside it, an unknown op, a refused kind) is checked in the parent
    (harness.parent.sweep.check), naming the test."""
    if isinstance(fault, Fault):
        if rank is not None or op is not None or nth is not None or args:
            raise UsageError(f"@faults.sweep({fault}): a fault given whole is one point (its rank, op and nth); "
                             "give the constructor instead to sweep: @faults.sweep(faults.kill, rank=1)")
        return Sweep(fault.kind, fault.rank, fault.op, fault.nth, seconds=fault.seconds if fault.kind == "delay"
                     else 1.0, exc=fault.exc if fault.kind == "raise_" else RuntimeError)
    kind = _CONSTRUCTORS.get(fault) if callable(fault) else fault if fault in KINDS else None
    if kind is None:
        shown = getattr(fault, "__qualname__", None) or repr(fault)
        raise UsageError(f"@faults.sweep({shown}): unknown fault; give faults.kill, faults.raise_ or faults.delay "
                         "(@faults.sweep(faults.kill, rank=1))")
    if rank is None:
        raise UsageError(f"@faults.sweep({kind}): give the rank to sweep: rank=1, rank=[0, 1] or "
                         "rank=faults.every_rank")
    unknown = sorted(set(args) - {"seconds", "exc"})
    if unknown:
        raise UsageError(f"@faults.sweep({kind}): unknown argument(s) {', '.join(unknown)}; a sweep takes rank, op, "
                         "nth, and seconds (delay) or exc (raise_)")
    if isinstance(rank, list):
        rank = tuple(rank)
    return Sweep(kind, rank, op, nth, **args)


def _exc_text(exc: Any) -> str:
    return exc.__name__ if isinstance(exc, type) else repr(exc)


def replay(fault: Fault) -> str:
    """The fault as code to paste into ``faults.inject(...)`` (an exception class by its name).

    Example::

        replay(raise_(1, ConnectionError, op="barrier", nth=2))
        # "raise_(rank=1, exc=ConnectionError, op='barrier', nth=2)"
    """
    if fault.kind == "raise_":
        return f"raise_(rank={fault.rank!r}, exc={_exc_text(fault.exc)}, op={fault.op!r}, nth={fault.nth!r})"
    return str(fault)


def parse_sweep(text: str) -> Sweep:
    """The sweep a command line gives (``--sweep "kill(rank=1)"``, ``HARNESS_SWEEP``): the fault written as in a
    test, its arguments literals (``rank`` also ``every_rank`` or a list; ``exc`` a built-in exception, a class or
    ``ConnectionError('link down')``). A wrong one is a UsageError saying how to write it.

    Example::

        parse_sweep("kill(rank=1, op='all_reduce')")     # Sweep(kind='kill', rank=1, op='all_reduce')
    """
    how = ("write it as in a test: kill(rank=1), kill(rank=every_rank, op='all_reduce'), "
           "raise_(rank=0, exc=ConnectionError), delay(rank=1, seconds=0.5)")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise UsageError(f"sweep {text!r}: not a fault; {how}") from None
    name = _dotted(node.func) if isinstance(node, ast.Call) else None
    name = name.rpartition(".")[2] if name else None
    if name == "raise":
        name = "raise_"
    if name not in KINDS:
        raise UsageError(f"sweep {text!r}: unknown fault {name or text!r}; {how}")
    positional = {"kill": ["rank", "op", "nth"], "hang": ["rank", "op", "nth"],
                  "delay": ["rank", "seconds", "op", "nth"], "raise_": ["rank", "exc", "op", "nth"],
                  "io_error": ["rank"]}[name]
    values: dict[str, Any] = {}
    if len(node.args) > len(positional):
        raise UsageError(f"sweep {text!r}: too many arguments; {how}")
    pairs = list(zip(positional, node.args)) + [(k.arg, k.value) for k in node.keywords]
    for key, value in pairs:
        if key not in ("rank", "op", "nth", "seconds", "exc") or key in values:
            raise UsageError(f"sweep {text!r}: argument {key!r} unknown or given twice; {how}")
        values[key] = _literal(key, value, text, how)
    if name in NOT_SWEPT:
        return Sweep(name, values.get("rank", 0))  # refused where the test is known (harness.parent.sweep.check)
    if "rank" not in values:
        raise UsageError(f"sweep {text!r}: give the rank to sweep (rank=1, rank=[0, 1] or rank=every_rank)")
    return sweep_of(name, **values)


def _dotted(node: Any) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _literal(key: str, node: Any, text: str, how: str) -> Any:
    name = _dotted(node)
    if key == "rank" and name in ("every_rank", "faults.every_rank"):
        return every_rank
    if key == "exc":
        call = node.func if isinstance(node, ast.Call) else None
        exc = getattr(builtins, (_dotted(call) if call is not None else name) or "", None)
        if isinstance(exc, type) and issubclass(exc, BaseException):
            if call is None:
                return exc
            try:
                return exc(*[ast.literal_eval(a) for a in node.args])
            except (ValueError, TypeError):
                pass
        raise UsageError(f"sweep {text!r}: exc must be a built-in exception, a class (ConnectionError) or made with "
                         "literals (ConnectionError('link down'))")
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise UsageError(f"sweep {text!r}: {key}= must be a literal; {how}") from None
    return tuple(value) if key == "rank" and isinstance(value, list) else value
