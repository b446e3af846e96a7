"""``--jobs N``: the selected tests run in N worker processes of the runner at once, each class in one of them.

On a machine with many cores (a 16-core GPU machine, say) one runner leaves most of them idle: a test's
ranks start, import torch (seconds with a CUDA build) and run one test at a time. With ``--jobs N`` the
parent splits the tests by class (a class and its ``setUpClass`` never run twice), balanced by the times
file (harness.runner.sharding.split: the split ``--shard`` makes), and starts N workers, each
``python -m harness`` over the same folders or targets, told the split. Each worker runs its own share's
classes in suite order, claiming each as it starts it; a worker whose share is done takes the last unclaimed
class of the share with the most time left (recorded times are only a guide: on a loaded machine a share
can take a minute longer than its record said, and its worker would end last, alone). Each worker has its
own rank pools. The parent forwards each worker's per-test lines as they come, numbered across the run
(``j2 [ 3/40] PASS ...``), then reads back every worker's entries and class set-up times (the same data a
single runner keeps) and reports once: the summary, the JUnit XML, the times file, the exit code.
A worker that dies without reporting is an error naming its tests and the end of its output.
"""
from __future__ import annotations

import fcntl
import json
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
from harness.runner.sharding import split, unit_of
from harness.shared.status import Status

__all__ = ["worker_argv", "run_jobs", "write_worker_report", "JobsOutcome", "take_ctrl_c", "Claims", "claims_of",
           "claiming_suite"]

# A worker's per-test line (harness.runner.console.Console.test_done): forwarded as it comes, numbered anew.
_TEST_LINE = re.compile(r"^\[\s*([\d-]+)/(\d+)\] ")


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
    units = [unit_of(t) for t in tests]
    how = split(ids, jobs, times, units)  # each class whole, in suite order
    parts = how.id_parts(ids)
    outcome = JobsOutcome()
    tmp = tempfile.mkdtemp(prefix="harness-jobs-")
    queue = _write_queue(tmp, parts, dict(zip(ids, units)), how.weights)
    env = dict(os.environ)
    env.setdefault("HARNESS_THREADS", _threads_per_rank(len(parts)))
    env["PYTHONUNBUFFERED"] = "1"
    procs: list[tuple[int, subprocess.Popen, str, list[str]]] = []
    lock = threading.Lock()
    started = time.monotonic()
    ended: dict[int, float] = {}  # job -> when its output ended (it exited): how well the split balanced them

    done = [0]  # the tests reported so far, by every worker: a line's number in the run
    digits = len(str(len(ids)))

    def pump(k: int, proc: subprocess.Popen, tail: list[str]) -> None:
        for line in proc.stdout:
            tail.append(line)
            del tail[:-200]
            m = _TEST_LINE.match(line)
            if m:
                with lock:
                    if m.group(1) != "-":
                        done[0] += 1
                    count = done[0] if m.group(1) != "-" else "-"
                    out.write(f"j{k} [{count:>{digits}}/{len(ids)}] {line[m.end():]}")
                    out.flush()
        ended[k] = time.monotonic()

    readers = []
    install_sigterm_handler()  # SIGTERM here unwinds like Ctrl-C, so the workers are stopped too
    take_ctrl_c()
    try:
        for k in range(1, len(parts) + 1):
            ids_file, report_file = os.path.join(tmp, f"job{k}.ids"), os.path.join(tmp, f"job{k}.report")
            with open(ids_file, "w") as f:
                json.dump({"queue": queue, "share": k - 1}, f)
            proc = subprocess.Popen(worker_argv(options, profile, ids_file, report_file), cwd=str(options.root),
                                    env=env, stdin=subprocess.DEVNULL,  # no worker owns the terminal: a
                                    # breakpoint there fails its test at once (harness.parent.relay)
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace")
            tail: list[str] = []
            procs.append((k, proc, report_file, tail))
            reader = threading.Thread(target=pump, args=(k, proc, tail), daemon=True)
            reader.start()
            readers.append(reader)
        for _, proc, _, _ in procs:
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
    reports = {}
    for k, proc, report_file, tail in procs:
        try:
            with open(report_file, "rb") as f:
                reports[k] = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            pass
    if len(ended) == len(procs) == len(reports) > 1 and not outcome.interrupted:
        outcome.notes.append("jobs: " + ", ".join(f"j{k} ran {len(reports[k]['entries'])} tests in "
                                                  f"{ended[k] - started:.0f} s" for k, _, _, _ in procs)
                             + f" (split by {options.times_file}, a share done taking what was left of the "
                             "others'; --update-times records what they cost)")
    claimed = Claims(queue, 0).taken()
    for k, proc, report_file, tail in procs:
        report = reports.get(k)
        if report is None:
            if outcome.interrupted:
                continue
            mine = [i for i, u in zip(ids, units) if claimed.get(u) == k - 1]  # the classes it had claimed
            outcome.entries.append(_lost_worker(k, proc.returncode, mine, tail))
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


def _write_queue(tmp: str, parts: list[list[str]], unit_of_id: Mapping[str, str], weights: Mapping[str, float]) -> str:
    """The split as the workers read it (:class:`Claims`): each share's units in suite order, each unit's tests
    and expected seconds. Returns its path."""
    shares: list[list[str]] = []
    tests: dict[str, list[str]] = {}
    for part in parts:
        shares.append(list(dict.fromkeys(unit_of_id[i] for i in part)))
        for i in part:
            tests.setdefault(unit_of_id[i], []).append(i)
    path = os.path.join(tmp, "queue.json")
    with open(path, "w") as f:
        json.dump({"shares": shares, "tests": tests, "weights": {u: weights.get(u, 0.0) for u in tests}}, f)
    open(os.path.join(tmp, "claims"), "w").close()
    return path


class Claims:
    """A worker's side of the split (``queue``, written by the ``-j`` parent): :meth:`next` claims the next unit
    (class) this worker runs, under a lock every worker takes (``fcntl.flock`` on the claims file beside it).

    Its own share's units come first, in suite order; then, its share done, the last unclaimed unit of the
    share with the most expected seconds left, so that no worker idles while another has classes waiting.

    Example::

        claims = Claims("/tmp/harness-jobs-x/queue.json", 0)
        claims.next()    # ["pkg.test_a.TestA.test_one", ...]: the tests of the class it claimed; None: none left
    """

    def __init__(self, queue: str, share: int) -> None:
        with open(queue) as f:
            data = json.load(f)
        self.shares: list[list[str]] = data["shares"]
        self.tests: dict[str, list[str]] = data["tests"]
        self.weights: dict[str, float] = data["weights"]
        self.share = share
        self.path = os.path.join(os.path.dirname(queue), "claims")

    def every_test(self) -> list[str]:
        """Every test of the split: the ones this worker may run, its own share's first."""
        order = self.shares[self.share] + [u for k, share in enumerate(self.shares) if k != self.share for u in share]
        return [i for u in order for i in self.tests[u]]

    def taken(self) -> dict[str, int]:
        """unit -> the share of the worker that claimed it, so far."""
        try:
            with open(self.path) as f:
                return self._read(f)
        except OSError:
            return {}

    def next(self) -> list[str] | None:
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released as the file closes
            f.seek(0)
            taken = self._read(f)
            unit = next((u for u in self.shares[self.share] if u not in taken), None)
            if unit is None:
                left = [[u for u in share if u not in taken] for share in self.shares]
                fullest = max(left, key=lambda units: sum(self.weights.get(u, 0.0) for u in units))
                if not fullest:
                    return None
                unit = fullest[-1]  # its owner goes on from the front
            f.write(f"{self.share} {unit}\n")
            f.flush()
        return self.tests[unit]

    @staticmethod
    def _read(f: Any) -> dict[str, int]:
        taken = {}
        for line in f.read().splitlines():
            share, _, unit = line.partition(" ")
            if unit:
                taken[unit] = int(share)
        return taken


def claims_of(ids_file: str) -> Claims:
    """The worker's :class:`Claims`, from the file ``--job-of`` names (the parent's ``{"queue", "share"}``)."""
    with open(ids_file) as f:
        data = json.load(f)
    return Claims(data["queue"], int(data["share"]))


def claiming_suite(tests: Sequence[unittest.TestCase], claims: Claims) -> unittest.TestSuite:
    """A suite that runs, of ``tests``, each unit this worker claims, one after another, as it claims them."""
    by_id = {t.id(): t for t in tests}

    class _Claiming(unittest.TestSuite):
        _cleanup = False  # the suite is a stream: there is no index to clear

        def __iter__(self) -> Any:
            while True:
                ids = claims.next()
                if ids is None:
                    return
                yield from (by_id[i] for i in ids if i in by_id)

        def countTestCases(self) -> int:  # noqa: N802 - unittest's name; counting must not claim
            return len(by_id)

    return _Claiming()


def _signal_all(procs: list, signum: int) -> None:
    for _, proc, _, _ in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(signum)
            except OSError:
                pass


def _wait_all(procs: list, seconds: float) -> bool:
    """Wait up to ``seconds`` for every worker to end; True when they all did."""
    deadline = time.monotonic() + seconds
    for _, proc, _, _ in procs:
        try:
            proc.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    return True


def _lost_worker(k: int, code: int | None, part: list[str], tail: list[str]) -> Entry:
    """The error for job ``k`` that ended without a report: ``part``, the tests of the classes it had claimed (the
    others' jobs ran the rest of its share)."""
    shown = ", ".join(part[:3]) + (f" and {len(part) - 3} more" if len(part) > 3 else "")
    what = f"its {len(part)} tests ({shown})" if part else "before it started a test (the other jobs ran its share)"
    text = f"job {k} ended (exit code {code}) without reporting {what}; the end of its output:\n\n" + "".join(tail[-60:])
    name = f"job {k} ({len(part)} tests)"
    entry = Entry(name, "jobs", "jobs", name, status=Status.ERROR, real=False)
    entry.problems.append(Problem(Status.ERROR, name, text))
    return entry
