"""``--jobs N``: the selected tests run in N worker processes of the runner at once, each class in one of them.

On a machine with many cores (a 16-core GPU machine, say) one runner leaves most of them idle: a test's
ranks start, import torch (seconds with a CUDA build) and run one test at a time. With ``--jobs N`` the
parent splits the tests by class (a class and its ``setUpClass`` never run twice), balanced by the times
file (harness.runner.sharding.split_by_class: the split ``--shard`` makes), and starts N workers, each
``python -m harness`` over the same folders or targets, told which tests are its share. Each worker has
its own rank pools. The parent forwards each worker's per-test lines as they come (``j2 [ 3/40] PASS
...``), then reads back every worker's entries and class set-up times (the same data a single runner
keeps) and reports once: the summary, the JUnit XML, the times file, the exit code.
A worker that dies without reporting is an error naming its tests and the end of its output.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Mapping, Sequence, TextIO

from harness.parent.pool import Terminated, install_sigterm_handler
from harness.runner.results import Entry, Problem
from harness.runner.sharding import split_by_class, unit_of
from harness.shared.status import Status

__all__ = ["worker_argv", "run_jobs", "write_worker_report", "JobsOutcome", "take_ctrl_c"]

# A worker's per-test line (harness.runner.console.Console.test_done): forwarded as it comes.
_TEST_LINE = re.compile(r"^\[\s*[\d-]+/\d+\] ")


def worker_argv(options: Any, profile: str, ids_file: str, report_file: str) -> list[str]:
    """The command line of one worker: the same folders or targets, settings and reporting, and its share."""
    argv = [sys.executable, "-m", "harness", *(options.targets or options.folders), "--job-of", ids_file, report_file,
            "--hypothesis-profile", profile, "--slowest", "0"]
    for pattern in options.file_patterns:  # the files the parent's discovery collected
        argv += ["--python-files", pattern]
    if options.device:
        argv += ["--device", options.device]
    if options.timeout is not None:
        argv += ["--timeout", repr(options.timeout)]
    if options.fail_env_changed:
        argv.append("--fail-env-changed")
    if not options.triage:
        argv.append("--no-triage")
    if options.failfast:
        argv.append("--failfast")
    if not options.buffer:
        argv.append("--no-buffer")
    if options.verbose:
        argv.append("-v")
    return argv


def write_worker_report(path: str, entries: list[Entry], notes: list[str], started: int,
                        class_seconds: Mapping[str, float] | None = None, stopped: str = "") -> None:
    """What a worker hands back to the parent: its entries (plain data), its end-of-run notes, the
    seconds its classes spent outside their tests (RunnerResult.class_seconds) and what stopped it early when a
    test did (``pytest.exit()``: its words, the run's end and exit code)."""
    with open(path + ".tmp", "wb") as f:
        pickle.dump({"entries": entries, "notes": notes, "started": started,
                     "class_seconds": dict(class_seconds or {}), "stopped": stopped}, f)
    os.replace(path + ".tmp", path)


class JobsOutcome:
    """What the workers reported, merged: entries in worker order, notes without repeats."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.class_seconds: dict[str, float] = {}  # class id -> seconds outside its tests (set-up, tear-down)
        self.notes: list[str] = []
        self.started = 0
        self.interrupted = ""


def take_ctrl_c() -> None:
    """Ctrl-C is this process's KeyboardInterrupt, even when it was started with SIGINT ignored (as a shell
    starts a background job without job control): the ``-j`` parent and its workers stop on it as the thin
    parent does (harness.runner.forked), instead of waiting for a signal they would never take."""
    import threading

    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _threads_per_rank(jobs: int) -> str:
    """HARNESS_THREADS for the workers' ranks when the user set none: the cores shared by the jobs (two ranks each)."""
    return str(max(1, (os.cpu_count() or 1) // (2 * jobs)))


def run_jobs(options: Any, profile: str, tests: Sequence[unittest.TestCase], jobs: int,
             times: Mapping[str, float], out: TextIO) -> JobsOutcome:
    """Run ``tests`` in ``jobs`` workers; forward their per-test lines to ``out``; merge their reports."""
    from harness.runner.results import interrupt_reason

    ids = [t.id() for t in tests]
    parts = split_by_class(ids, jobs, times, [unit_of(t) for t in tests])
    outcome = JobsOutcome()
    tmp = tempfile.mkdtemp(prefix="harness-jobs-")
    env = dict(os.environ)
    env.setdefault("HARNESS_THREADS", _threads_per_rank(len(parts)))
    env["PYTHONUNBUFFERED"] = "1"
    procs: list[tuple[int, subprocess.Popen, str, list[str], list[str]]] = []
    lock = threading.Lock()
    started = time.monotonic()
    ended: dict[int, float] = {}  # job -> when its output ended (it exited): how well the split balanced them

    def pump(k: int, proc: subprocess.Popen, tail: list[str]) -> None:
        for line in proc.stdout:
            tail.append(line)
            del tail[:-200]
            if _TEST_LINE.match(line):
                with lock:
                    out.write(f"j{k} {line}")
                    out.flush()
        ended[k] = time.monotonic()

    readers = []
    install_sigterm_handler()  # SIGTERM here unwinds like Ctrl-C, so the workers are stopped too
    take_ctrl_c()
    try:
        for k, part in enumerate(parts, 1):
            ids_file, report_file = os.path.join(tmp, f"job{k}.ids"), os.path.join(tmp, f"job{k}.report")
            with open(ids_file, "w") as f:
                f.write("".join(i + "\n" for i in part))
            proc = subprocess.Popen(worker_argv(options, profile, ids_file, report_file), cwd=str(options.root),
                                    env=env, stdin=subprocess.DEVNULL,  # no worker owns the terminal: a
                                    # breakpoint there fails its test at once (harness.parent.relay)
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace")
            tail: list[str] = []
            procs.append((k, proc, report_file, part, tail))
            reader = threading.Thread(target=pump, args=(k, proc, tail), daemon=True)
            reader.start()
            readers.append(reader)
        for _, proc, _, _, _ in procs:
            proc.wait()
    except KeyboardInterrupt as exc:
        # Ctrl-C reached the workers too (one terminal process group): they stop their tests and report.
        # SIGTERM (harness.parent.pool.Terminated) may have reached only this process: pass it on.
        outcome.interrupted = interrupt_reason(exc)
        if isinstance(exc, Terminated):
            _signal_all(procs, signal.SIGTERM)
        if not _wait_all(procs, 15.0):
            _signal_all(procs, signal.SIGTERM)
            if not _wait_all(procs, 15.0):
                _signal_all(procs, signal.SIGKILL)
                _wait_all(procs, 5.0)
    for reader in readers:
        reader.join(5)
    if len(ended) == len(procs) > 1 and not outcome.interrupted:
        outcome.notes.append("jobs: " + ", ".join(f"j{k} ran {len(part)} tests in {ended[k] - started:.0f} s"
                                                  for k, _, _, part, _ in procs)
                             + f" (split by {options.times_file}; --update-times records what they cost)")
    for k, proc, report_file, part, tail in procs:
        try:
            with open(report_file, "rb") as f:
                report = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            if outcome.interrupted:
                continue
            outcome.entries.append(_lost_worker(k, proc.returncode, part, tail))
            continue
        outcome.entries += report["entries"]
        outcome.started += report["started"]
        for key, seconds in report.get("class_seconds", {}).items():
            outcome.class_seconds[key] = outcome.class_seconds.get(key, 0.0) + seconds
        outcome.notes += [n for n in report["notes"] if n not in outcome.notes]
        if report.get("stopped") and not outcome.interrupted:  # pytest.exit() in its tests: the others ran theirs
            outcome.interrupted = report["stopped"]
    shutil.rmtree(tmp, ignore_errors=True)
    return outcome


def _signal_all(procs: list, signum: int) -> None:
    for _, proc, _, _, _ in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signum)
            except OSError:
                pass


def _wait_all(procs: list, seconds: float) -> bool:
    """Wait up to ``seconds`` for every worker to end; True when they all did."""
    deadline = time.monotonic() + seconds
    for _, proc, _, _, _ in procs:
        try:
            proc.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    return True


def _lost_worker(k: int, code: int | None, part: list[str], tail: list[str]) -> Entry:
    shown = ", ".join(part[:3]) + (f" and {len(part) - 3} more" if len(part) > 3 else "")
    text = (f"job {k} ended (exit code {code}) without reporting its {len(part)} tests ({shown}); the end of its "
            "output:\n\n" + "".join(tail[-60:]))
    name = f"job {k} ({len(part)} tests)"
    entry = Entry(name, "jobs", "jobs", name, status=Status.ERROR, real=False)
    entry.problems.append(Problem(Status.ERROR, name, text))
    return entry
