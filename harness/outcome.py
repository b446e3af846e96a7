"""Per-rank results as data, and merging a world's worth of them into one verdict, root cause first."""
from __future__ import annotations

import dataclasses
import pickle
import re
import signal
import traceback
from typing import Any

__all__ = ["RankResult", "SubtestOutcome", "Verdict", "capture_exception", "merge", "picklable"]

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
CRASHED, TIMEOUT, KILLED = "crashed", "timeout", "killed"
BAD = (FAILED, ERROR, CRASHED, TIMEOUT, KILLED)

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

    params: dict[str, Any]  # picklable values, or their repr where a value does not pickle
    status: str
    exc_type: str = ""
    message: str = ""
    traceback: str = ""

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in self.params.items())


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
    altered: list[str] = dataclasses.field(default_factory=list)  # what the test left that could not be put back
    default_group: bool | None = None  # the harness's default group still there after the test (None: it had none)

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


def picklable(value: Any) -> Any:
    try:
        pickle.dumps(value)
        return value
    except Exception:
        return repr(value)


_HIDDEN_FILES = re.compile(r"[/\\](harness[/\\](rank|subtests|case|torchrun|assertions|main)\.py|"
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
        message = str(exc)
    except Exception:  # a broken __str__ must not lose the result
        message = f"<unprintable {kind.__name__}>"
    try:
        te = traceback.TracebackException.from_exception(exc)
        _trim(te, set())
        text = "".join(te.format())
    except Exception:
        text = "".join(traceback.format_exception(exc))
    return name, message, text.replace("__mp_main__.", "")


def tidy_stack(dump: str) -> str:
    """A faulthandler dump without the harness's own thread and frames, and without the module list."""
    if not dump:
        return dump
    blocks = re.split(r"\n\s*\n", dump.strip())
    kept = []
    for block in blocks:
        if "_watch_parent" in block or block.startswith("Extension modules"):
            continue
        lines = [ln for ln in block.splitlines()
                 if not _HIDDEN_FILES.search(ln.split('"')[1] if ln.count('"') >= 2 else "")
                 and 'File "<string>"' not in ln]
        kept.append("\n".join(lines))
    return "\n\n".join(kept)


@dataclasses.dataclass
class Verdict:
    """One unittest outcome for the whole world, with the text that explains it."""

    status: str  # PASSED, FAILED, ERROR, SKIPPED
    text: str
    root_rank: int | None = None


def _rank_tag(test_id: str, rank: int, world_size: int) -> str:
    return f"{test_id} [rank {rank}/{world_size}]"


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


def _detail(r: RankResult) -> str:
    parts = []
    if r.status == CRASHED:
        parts.append(f"The process died: {describe_exit(r.exitcode)}.")
        if r.stack.strip():
            parts.append("Its last Python stack (faulthandler):\n" + r.stack.rstrip())
    elif r.status in (TIMEOUT, KILLED):
        if r.stack.strip():
            parts.append("Its Python stack at that moment (faulthandler):\n" + r.stack.rstrip())
    else:
        parts.append(r.traceback.rstrip() or f"{r.exc_type}: {r.message}")
    if r.output.strip():
        parts.append(prefixed(r.rank, r.output, limit=60))
    return "\n".join(parts)


def prefixed(rank: int, text: str, limit: int | None = None) -> str:
    lines = text.rstrip("\n").splitlines()
    cut = 0
    if limit is not None and len(lines) > limit:
        cut = len(lines) - limit
        lines = lines[-limit:]
    head = [f"[rank {rank}] ... {cut} earlier lines not shown"] if cut else []
    return "\n".join(head + [f"[rank {rank}] {line}" for line in lines])


def merge(test_id: str, results: list[RankResult], world_size: int, placement: str) -> Verdict:
    """Fold the per-rank results (not subtests) into one verdict. ``placement`` is e.g. ``cpu/gloo``."""
    by_status = {s: [r for r in results if r.status == s] for s in (PASSED, SKIPPED)}
    bad = [r for r in results if r.status in BAD]
    if not bad:
        skipped = by_status[SKIPPED]
        if skipped and len(skipped) == len(results):
            reasons = sorted({r.message for r in skipped})
            return Verdict(SKIPPED, reasons[0] if len(reasons) == 1 else "; ".join(
                f"rank {r.rank}: {r.message}" for r in skipped))
        if skipped:
            ranks = ", ".join(str(r.rank) for r in skipped)
            passed = ", ".join(str(r.rank) for r in by_status[PASSED])
            return Verdict(SKIPPED, f"skipped on rank {ranks} ({skipped[0].message}) but ran and passed on rank "
                                    f"{passed}: only part of the world ran this test")
        return Verdict(PASSED, "")
    ordered = order_by_cause(results)
    root = ordered[0]
    kind = {FAILED: "failed", ERROR: "raised", CRASHED: "died", TIMEOUT: "timed out", KILLED: "was killed"}[root.status]
    head = f"{_rank_tag(test_id, root.rank, world_size)} {kind} on {placement}: {root.one_line()}"
    lines = [head, "", _detail(root)]
    others = [r for r in sorted(results, key=lambda r: r.rank) if r is not root]
    if others:
        lines += ["", "Other ranks:"]
        lines += [f"  rank {r.rank}: {r.one_line()}" + (" (after the root cause above)" if r.peer_effect else "")
                  for r in others]
        for r in ordered[1:]:
            if r.status in (TIMEOUT,) and r.stack.strip():
                lines += ["", f"rank {r.rank} stack:", r.stack.rstrip()]
    status = FAILED if root.status == FAILED else ERROR
    return Verdict(status, "\n".join(lines), root.rank)
