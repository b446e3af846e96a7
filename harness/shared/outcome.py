"""Per-rank results as data: what one rank has to say about one test, and which rank of a world caused the trouble."""
from __future__ import annotations

import dataclasses
import pickle
import re
import signal
import traceback
import unittest
from typing import Any

__all__ = ["RankResult", "SubtestOutcome", "capture_exception", "type_names", "order_by_cause", "shown_value", "Shown",
           "sendable", "describe_exit", "blocked_in", "tidy_stack"]

from harness.shared import pytest_outcomes
from harness.shared.status import Status

PASSED, FAILED, ERROR, SKIPPED = Status.PASSED, Status.FAILED, Status.ERROR, Status.SKIPPED
XFAIL = Status.XFAIL  # the rank called pytest.xfail(): it ended the test as an expected failure
CRASHED, TIMEOUT, KILLED = Status.CRASHED, Status.TIMEOUT, Status.KILLED
BAD = (FAILED, ERROR, CRASHED, TIMEOUT, KILLED)  # what a rank's result can be; harness.shared.status.BAD adds the runner's

# Messages a rank sees when a *peer* failed first: reported in one line, after the root cause.
_PEER_EFFECT = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET|"
    r"NCCL communicator was aborted|communicator .*abort|ProcessGroup.* is shut ?down|"
    r"Socket Timeout|Timed out waiting|Application timeout caused pair closure|"
    r"failed to recv|failed to send|Connection refused|peer .* closed",
    re.IGNORECASE,
)


@dataclasses.dataclass
class SubtestOutcome:
    """One combination of ``run_subtests`` on one rank."""

    params: dict[str, Any]  # plain values, or their repr (shown_value)
    status: str
    exc_type: str = ""
    message: str = ""
    traceback: str = ""

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in self.params.items())

    @classmethod
    def from_exception(cls, params: dict[str, Any], exc: BaseException) -> "SubtestOutcome":
        """What a combination that raised ``exc`` reports: skipped, failed (an assertion) or error."""
        if pytest_outcomes.is_skip(exc):
            return cls(params, SKIPPED, message=_plain(pytest_outcomes.skip_reason(exc)))
        xfail = pytest_outcomes.xfail_reason(exc)
        if xfail is not None:  # pytest.xfail() in one combination: that combination is not run to its end
            return cls(params, SKIPPED, message=_plain(f"xfail: {xfail}"))
        kind, message, tb = capture_exception(exc)
        failed = isinstance(exc, AssertionError) or pytest_outcomes.outcome(exc) is not None  # pytest.fail()
        return cls(params, FAILED if failed else ERROR, kind, message, tb)


@dataclasses.dataclass
class RankResult:
    """Everything one rank has to say about one test: what ``CallInfo.from_call`` is to pytest."""

    rank: int
    status: str
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    subtests: list[SubtestOutcome] = dataclasses.field(default_factory=list)
    output: str = ""
    duration: float = 0.0
    stack: str = ""  # faulthandler dump taken by the parent over the side channel (hangs, peers it killed)
    exitcode: int | None = None
    arrived: float = 0.0  # parent's clock when the result (or the death) was seen
    desync: bool = False  # stopped because a run_subtests combination went wrong on some rank
    at_meeting: bool = False  # ... while this rank waited for the others after a combination
    altered: list[str] = dataclasses.field(default_factory=list)  # what the test left that could not be put back
    default_group: bool | None = None  # the harness's default group still there after the test (None: it had none)
    cuda_broken: str = ""  # the test left this rank's CUDA context unusable (a sticky error): why
    #: the rank's collectives in the test (harness.ranks.recorder: a dump), taken when the test went wrong
    collectives: dict[str, Any] | None = None
    #: the raised exception's class and its bases, ``module.qualname`` each (an xfail mark's ``raises=`` is matched
    #: against them in the parent)
    exc_types: tuple[str, ...] = ()
    #: the test's faults in this rank (harness.ranks.fault_trigger): its collectives counted, what fired; None: none
    faults: dict[str, Any] | None = None

    @property
    def is_bad(self) -> bool:
        return self.status in BAD or any(s.status in BAD for s in self.subtests)

    @property
    def peer_effect(self) -> bool:
        """True when this rank only saw another rank's failure (a closed connection, an aborted comm)."""
        if self.status == KILLED:
            return True
        text = f"{self.exc_type}: {self.message}"
        return self.status == ERROR and bool(_PEER_EFFECT.search(text))

    def one_line(self) -> str:
        if self.status == PASSED:
            return "passed"
        if self.status == SKIPPED:
            return f"skipped: {self.message}"
        if self.status == XFAIL:
            return f"xfailed: {self.message}"
        if self.status == CRASHED:
            return describe_exit(self.exitcode)
        if self.status in (TIMEOUT, KILLED):
            where = blocked_in(self.stack)
            return f"{self.message}" + (f"; it was in {where}" if where else "")
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.exc_type}: {first}"[:300]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exit code {code}"


def blocked_in(stack: str) -> str:
    """The innermost torch.distributed call in a faulthandler dump of the main thread, if any."""
    # Stacks reach here tidied (tidy_stack): the harness's own thread and frames are gone, so the first
    # torch.distributed frame (faulthandler lists the most recent call first) is where the rank waits.
    if not stack:
        return ""
    main = stack
    for line in main.splitlines():
        m = re.search(r'File "([^"]*torch/distributed/[^"]*)", line (\d+) in (\w+)', line)
        if m:
            return f"{m.group(3)} ({m.group(1).split('torch/distributed/')[-1]}:{m.group(2)})"
    for line in main.splitlines():
        m = re.search(r'File "([^"]+)", line (\d+) in (\w+)', line)
        if m and "/harness/" not in m.group(1) and "threading.py" not in m.group(1):
            return f"{m.group(3)} ({m.group(1)}:{m.group(2)})"
    return ""


def _plain(text: Any) -> str:
    """A plain ``str`` (a str subclass may not pickle; anything else becomes its repr)."""
    if isinstance(text, str):
        return str.__str__(text)
    try:
        return repr(text)
    except Exception:
        return f"<unprintable {type(text).__name__}>"


def sendable(result: RankResult) -> RankResult:
    """``result`` if it pickles; else a copy made of plain strings, so no exception can kill a rank on its
    way back to the parent (an exception whose message is an unpicklable str subclass once did)."""
    try:
        pickle.dumps(result)
        return result
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    try:
        subs = [SubtestOutcome({_plain(k): _plain(v) for k, v in sub.params.items()}, _plain(sub.status),
                               _plain(sub.exc_type), _plain(sub.message), _plain(sub.traceback))
                for sub in result.subtests]
        copy = dataclasses.replace(result, status=_plain(result.status), exc_type=_plain(result.exc_type),
                                   message=_plain(result.message), traceback=_plain(result.traceback),
                                   output=_plain(result.output), stack=_plain(result.stack), subtests=subs,
                                   altered=[_plain(x) for x in result.altered])
        pickle.dumps(copy)
        return copy
    except Exception:
        return RankResult(rank=int(result.rank), status=ERROR, exc_type="harness.HarnessError",
                          message=f"this rank's result could not be sent to the parent ({why})")


class Shown(str):
    """The repr of a ``run_subtests`` parameter that is not plain data, standing in for it in a result: it reads as
    the value did (``repr`` gives the text itself, no quotes)."""

    def __repr__(self) -> str:
        return str.__str__(self)


_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _is_plain(value: Any, depth: int = 0) -> bool:
    if type(value) in _PLAIN:
        return True
    if depth >= 4:
        return False
    if type(value) in (tuple, list, set, frozenset):
        return all(_is_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(_is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in value.items())
    return False


def shown_value(value: Any) -> Any:
    """``value`` as a result carries it to the parent, which only shows it: plain data (None, bools, numbers, str,
    bytes, and tuples, lists, sets and dicts of them) as it is, anything else as its repr (a :class:`Shown`).

    The parent needs no value itself: a tensor parameter would be copied whole to it (a model's weights), a CUDA
    tensor would open the device there, and a value holding process groups (a ``DeviceMesh``) means nothing in
    another process. (Sent with multiprocessing's own pickler, as results once were, a tensor also started its
    resource-sharer thread in the rank, which the harness then saw as a thread the test left running;
    ``protocol.send`` now pickles every message plainly.)"""
    if _is_plain(value):
        return value
    try:
        return Shown(repr(value))
    except Exception:
        return Shown(f"<unprintable {type(value).__name__}>")


_HIDDEN_FILES = re.compile(r"[/\\]harness[/\\](ranks[/\\](process|task|capture)|testing[/\\](subtests|assertions)|"
                           r"classes[/\\]case|parent[/\\]testrun|judging[/\\](verdict|report)|torchrun[/\\]job|"
                           r"capture|main)\.py$|[/\\]("
                           r"unittest[/\\](case|suite|runner|main)\.py|multiprocessing[/\\]\w+\.py)$")


def _trim(te: traceback.TracebackException, seen: set[int]) -> None:
    """Drop the harness's and unittest's own frames, so a rank's traceback starts at the test."""
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [f for f in te.stack if not _HIDDEN_FILES.search(f.filename)]
    if kept:
        te.stack = traceback.StackSummary.from_list(kept)
    for nxt in (te.__cause__, te.__context__):
        if nxt is not None:
            _trim(nxt, seen)


def capture_exception(exc: BaseException) -> tuple[str, str, str]:
    """(type name, message, formatted traceback) of any exception, BaseException included."""
    kind = type(exc)
    module = kind.__module__
    name = kind.__qualname__ if module in ("builtins", "__main__", "__mp_main__") else f"{module}.{kind.__qualname__}"
    try:
        message = _plain(str(exc))
    except Exception:  # a broken __str__ must not lose the result
        message = f"<unprintable {kind.__name__}>"
    try:
        te = traceback.TracebackException.from_exception(exc)
        _trim(te, set())
        text = "".join(te.format())
    except Exception:
        text = "".join(traceback.format_exception(exc))
    return name, message, text.replace("__mp_main__.", "")


def type_names(exc: BaseException) -> tuple[str, ...]:
    """``module.qualname`` of ``exc``'s class and of each of its bases (``builtins.RuntimeError``, ...), as data."""
    return tuple(f"{k.__module__}.{k.__qualname__}" for k in type(exc).__mro__)


def tidy_stack(dump: str) -> str:
    """A faulthandler dump without the harness's own thread and frames, and without the module list."""
    if not dump:
        return dump
    blocks = re.split(r"\n\s*\n", dump.strip())
    kept = []
    for block in blocks:
        if "_watch_parent" in block or "_answer_dump_requests" in block or block.startswith("Extension modules"):
            continue
        lines = [ln for ln in block.splitlines()
                 if not _HIDDEN_FILES.search(ln.split('"')[1] if ln.count('"') >= 2 else "")
                 and 'File "<string>"' not in ln]
        kept.append("\n".join(lines))
    return "\n\n".join(kept)


def order_by_cause(results: list[RankResult]) -> list[RankResult]:
    """Bad ranks ordered so the one that caused the trouble comes first."""
    bad = [r for r in results if r.is_bad]

    def key(r: RankResult) -> tuple:
        own = r.status in (FAILED, ERROR, CRASHED) and not r.peer_effect
        # a rank that failed by itself first; then hangs outside a collective (the rank that never got
        # there), then hangs inside one; then peers' echoes
        if own:
            severity = 0
        elif r.status == TIMEOUT:
            severity = 2 if "distributed_c10d" in r.stack or "distributed/" in blocked_in(r.stack) else 1
        else:
            severity = 3
        return (severity, r.arrived, r.rank)

    return sorted(bad, key=key)
