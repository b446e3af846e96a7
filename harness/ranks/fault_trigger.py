"""A test's faults fired in the rank: counting its collectives (and its writes) and acting at the nth.

:func:`arm` is called before the test's setUp with the faults of this rank and attempt (``Task.faults``); the
collectives are seen through harness.ranks.collective_calls, the writes through ``open`` (for ``io_error``).
What fired goes to the test's fault log (``Task.fault_log``, one JSON line each, written before a kill so that
the parent can tell an injected death from a crash) and, with the rank's counts, into its ``RankResult.faults``.
"""
from __future__ import annotations

import builtins
import fnmatch
import io
import json
import os
import pathlib
import signal
import threading
import time
from typing import Any

from harness.ranks import collective_calls
from harness.shared.faults import Fault, attempt_env, ordinal

__all__ = ["Trigger", "arm", "InjectedFault"]

#: pathlib's accessor on Python 3.10 (``Path.open`` calls its ``open``, io.open as bound when pathlib was imported);
#: None from 3.11, whose ``Path.open`` calls io.open itself
_PATH_ACCESSOR = getattr(pathlib, "_NormalAccessor", None)


class InjectedFault(RuntimeError):
    """What ``raise_`` raises when it was given an exception class that cannot be made from a message."""


class Trigger:
    """The faults of one rank in one attempt of one test, armed; :meth:`disarm` returns what happened."""

    def __init__(self, faults: list[Fault], rank: int, attempt: int, log: str | None, test_module: str,
                 count: bool = False) -> None:
        self.rank = rank
        self.attempt = attempt
        self.log = log
        # (index in the test's plan, fault): only this rank's, in this attempt
        self.mine = [(i, f) for i, f in enumerate(faults) if f.rank == rank and f.attempt == attempt]
        self.counts: dict[str, int] = {}
        self.total = 0
        self.fired: list[dict[str, Any]] = []
        self.written: dict[int, int] = {}  # io_error's index -> bytes written to matching files
        self.opened: dict[int, int] = {}  # io_error's index -> matching files opened for writing
        self.lock = threading.Lock()
        self._open = None
        self._env_before = os.environ.get(attempt_env)
        os.environ[attempt_env] = str(attempt)
        if count or any(f.kind != "io_error" for _, f in self.mine):  # count: a sweep counts every rank's calls
            collective_calls.install(self.on_call, also=(test_module,))
        if any(f.kind == "io_error" for _, f in self.mine):
            self._patch_open()

    # ---- collectives -----------------------------------------------------------------------------

    def on_call(self, op: str) -> None:
        with self.lock:
            self.total += 1
            self.counts[op] = self.counts.get(op, 0) + 1
            due = None
            for i, f in self.mine:
                if f.kind == "io_error" or any(d["index"] == i for d in self.fired):
                    continue
                name = None if f.op is None else collective_calls.user_name(f.op)
                count = self.total if name is None else self.counts.get(name, 0)
                if (name is None or name == op) and count == f.nth:
                    due = (i, f)
                    self._record(i, f, f"at its {ordinal(f.nth)} {f.what}" + (f" ({op})" if f.op is None else ""),
                                 op)
                    break
        if due is not None:
            self._act(*due)

    def _act(self, index: int, fault: Fault) -> None:
        if fault.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # the signal is on its way
        elif fault.kind == "delay":
            time.sleep(float(fault.seconds))
        elif fault.kind == "hang":
            while True:
                time.sleep(3600)
        elif fault.kind == "raise_":
            raise _instance(fault)

    # ---- writes ----------------------------------------------------------------------------------

    def _patch_open(self) -> None:
        trigger, real_open = self, builtins.open

        def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - open's own name
            handle = real_open(file, mode, *args, **kwargs)
            if not any(c in mode for c in "wax+") or isinstance(file, int):
                return handle
            path = os.path.abspath(os.fsdecode(file))
            hits = [(i, f) for i, f in trigger.mine if f.kind == "io_error" and fnmatch.fnmatch(path, f.path_glob)]
            if not hits:
                return handle
            for i, _ in hits:
                trigger.opened[i] = trigger.opened.get(i, 0) + 1
            return _FailingFile(handle, path, trigger, hits)

        self._open = real_open
        builtins.open = open
        io.open = open
        if _PATH_ACCESSOR is not None:  # Python 3.10's Path.open (DCP's file writes) calls the io.open it bound at import
            _PATH_ACCESSOR.open = staticmethod(open)

    def write_through(self, path: str, hits: list[tuple[int, Fault]], size: int) -> None:
        """``size`` bytes are about to go to ``path``: raise the fault's OSError where it is due."""
        with self.lock:
            for i, f in hits:
                if any(d["index"] == i for d in self.fired):
                    continue
                done = self.written.get(i, 0)
                if done + size > f.after_bytes:
                    self._record(i, f, f"writing {path} after {done} bytes")
                    raise OSError(f.errno, f"{os.strerror(f.errno)} (injected by {f})", path)
                self.written[i] = done + size

    # ---- what happened ---------------------------------------------------------------------------

    def _record(self, index: int, fault: Fault, where: str, op: str | None = None) -> None:
        # op, with counts[op]: the call it fired at, by the user's name and its place among that rank's calls of it
        entry = {"index": index, "rank": self.rank, "attempt": self.attempt, "where": where, "op": op,
                 "counts": dict(self.counts), "total": self.total}
        self.fired.append(entry)
        if self.log:
            try:
                fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, (json.dumps(entry) + "\n").encode())
                finally:
                    os.close(fd)
            except OSError:
                pass

    def disarm(self) -> dict[str, Any]:
        """Put torch's functions and ``open`` back; this rank's counts and what fired (``RankResult.faults``)."""
        collective_calls.uninstall()
        if self._env_before is None:  # as it was, whether or not the test's process state is put back
            os.environ.pop(attempt_env, None)
        else:
            os.environ[attempt_env] = self._env_before
        if self._open is not None:
            builtins.open = self._open
            io.open = self._open
            if _PATH_ACCESSOR is not None:
                _PATH_ACCESSOR.open = self._open
            self._open = None
        seen = {}
        for i, f in self.mine:  # the calls each fault counted (by the user's name of its op, aliases resolved)
            name = None if f.op is None else collective_calls.user_name(f.op)
            seen[i] = self.total if name is None else self.counts.get(name, 0)
        return {"counts": dict(self.counts), "total": self.total, "fired": list(self.fired), "seen": seen,
                "written": dict(self.written), "opened": dict(self.opened)}


class _FailingFile:
    """A file opened for writing under an ``io_error``'s glob: its writes are counted, and fail when due."""

    def __init__(self, handle: Any, path: str, trigger: Trigger, hits: list[tuple[int, Fault]]) -> None:
        self._handle, self._path, self._trigger, self._hits = handle, path, trigger, hits

    def write(self, data: Any) -> int:
        self._trigger.write_through(self._path, self._hits, len(memoryview(data).cast("B")) if not isinstance(
            data, str) else len(data.encode()))
        return self._handle.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> "_FailingFile":
        self._handle.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._handle.__exit__(*exc)

    def __iter__(self) -> Any:
        return iter(self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _instance(fault: Fault) -> BaseException:
    exc = fault.exc
    if isinstance(exc, BaseException):
        return exc
    try:
        return exc(f"injected by {fault}")
    except Exception:  # noqa: BLE001 - a class that takes other arguments
        return InjectedFault(f"injected by {fault} ({exc!r} could not be made from a message)")


def arm(faults: list[Fault], rank: int, attempt: int, log: str | None, test_module: str,
        count: bool = False) -> Trigger:
    """Arm this rank's faults for one attempt of one test; ``TORCHELASTIC_RESTART_COUNT`` says the attempt, as
    torchrun sets it, until :meth:`Trigger.disarm`. ``count``: count this rank's collectives even where none of
    the faults is its own (a sweep's runs)."""
    return Trigger(faults, rank, attempt, log, test_module, count)
