"""A test with faults on purpose, in the parent: its faults checked, each attempt in fresh ranks, restarts decided.

``testrun.TestRun.run_once`` hands a test here when it (or its hypothesis example) has faults (``@faults.inject``,
or a drawn ``Fault`` among the example's values). :func:`check` refuses a fault that can never fire before any rank
starts. :func:`run_attempts` runs attempt 0 in a fresh world, judges it (harness.judging.attempts), and, where a
fault killed or failed a rank and ``@restarts(n)`` leaves a restart, ends that world and runs the test again in
new ranks forked from the template, with the same ``temp_dir``, ``restart_count`` one higher and a new rendezvous.
The ranks of an attempt are closed with it: no later test (and no triage) ever runs in them.

Under torchrun the launched ranks cannot be replaced: the attempt is torchrun's (``TORCHELASTIC_RESTART_COUNT``),
and its ``--max-restarts`` starts the job again after a rank is killed.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import tempfile
import threading
from typing import Any, Callable

from harness.judging import attempts as judging
from harness.judging import verdict
from harness.judging.verdict import Verdict
from harness.ranks.collective_calls import known_ops
from harness.shared.errors import UsageError
from harness.shared.faults import Fault, attempt_env
from harness.shared.outcome import FAILED

__all__ = ["plan_of", "check", "run_attempts", "fresh_attempts", "judge", "Judged", "launched_attempt"]


def plan_of(marks: dict[str, Any], kwargs: dict[str, Any] | None) -> list[Fault]:
    """The test's faults: its ``@faults.inject`` ones, then any ``Fault`` a hypothesis example drew."""
    plan = list(marks["faults"])
    for value in (kwargs or {}).values():
        if isinstance(value, Fault):
            plan.append(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Fault) for v in value):
            plan.extend(value)
    return plan


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check(plan: list[Fault], restarts: int, test_id: str, world_size: int) -> None:
    """Refuse, naming the test, the fault and the fix, a fault that can never fire as written."""
    for fault in plan:
        why = _problem(fault, restarts, world_size)
        if why:
            raise UsageError(f"{test_id}: {fault}: {why}")


def _problem(f: Fault, restarts: int, world_size: int) -> str:
    if not _int(f.rank) or not 0 <= f.rank < world_size:
        return (f"rank {f.rank!r} is outside the test's world of {world_size} rank{'s' if world_size != 1 else ''}; "
                f"name a rank from 0 to {world_size - 1}")
    if f.op is not None:
        ops = known_ops()
        if not isinstance(f.op, str) or f.op not in ops:
            close = difflib.get_close_matches(str(f.op), ops, n=3)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            return (f"unknown op {f.op!r}; {hint}op is the name of the torch.distributed call ({', '.join(ops)}), "
                    "or None for any collective")
    if not _int(f.nth) or f.nth < 1:
        return f"nth={f.nth!r}: nth counts the calls from 1 (nth=1 is the rank's first {f.what}); give an int >= 1"
    if not _int(f.attempt) or f.attempt < 0:
        return f"attempt={f.attempt!r}: attempts count from 0 (the test's first run); give an int >= 0"
    if f.attempt > restarts:
        return (f"attempt {f.attempt} never runs: the test allows {restarts} restart{'s' if restarts != 1 else ''}; "
                f"give it @restarts({f.attempt}) or more")
    if f.kind == "delay" and (isinstance(f.seconds, bool) or not isinstance(f.seconds, (int, float)) or f.seconds < 0):
        return f"seconds={f.seconds!r}: a delay is a number of seconds >= 0"
    if f.kind == "raise_" and not (isinstance(f.exc, BaseException)
                                   or (isinstance(f.exc, type) and issubclass(f.exc, BaseException))):
        return f"exc={f.exc!r} is not an exception; give an instance (RuntimeError('link down')) or a class"
    if f.kind == "io_error":
        if not isinstance(f.path_glob, str) or not f.path_glob:
            return f"path_glob={f.path_glob!r}: give a glob of the paths whose writes fail, such as '*.distcp'"
        if not _int(f.after_bytes) or f.after_bytes < 0:
            return f"after_bytes={f.after_bytes!r}: give the bytes that go through first, an int >= 0"
        if not _int(f.errno) or f.errno <= 0:
            return f"errno={f.errno!r}: give an errno number, such as errno.ENOSPC"
    return ""


problem = _problem  # why one fault can never fire as written ("" when it can): a sweep checks its points with it


def launched_attempt() -> int:
    """The attempt of a torchrun job: its agent's restart count (0 when the variable is missing or not a number)."""
    try:
        return max(0, int(os.environ.get(attempt_env, "0") or 0))
    except ValueError:
        return 0


def launched_restarts_left(number: int) -> int | None:
    """How many more times torchrun's agent would start the job again (``TORCHELASTIC_MAX_RESTARTS`` less the
    attempt ``number``); None where the variable is not there to say (a launcher other than torchrun)."""
    try:
        return int(os.environ["TORCHELASTIC_MAX_RESTARTS"]) - number
    except (KeyError, ValueError):
        return None


def _read_log(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def run_attempts(testrun: Any, kwargs: dict[str, Any] | None, plan: list[Fault], restarts: int) -> Verdict:
    """Run the test's attempts (``testrun``: harness.parent.testrun.TestRun) and return the test's one verdict."""
    worlds = testrun.run.worlds
    conf = testrun.conf
    wants_temp = bool(testrun.marks["temp_dir"])
    done: list[judging.Attempt] = []
    raw = []
    testrun.pids = []
    if not worlds.replaceable:  # torchrun: one attempt here; its agent restarts the job
        number = launched_attempt()
        ends_job = [f for f in plan if f.kind == "kill" and f.attempt == number]
        left = launched_restarts_left(number)
        if ends_job and left is not None and left < 1:
            # a kill ends this job for good: every later test of the run would be lost with it
            return verdict.skipped(testrun.test_id, (
                f"{ends_job[0]} would end this torchrun job, which has no restart left (--max-restarts "
                f"{number + left}, attempt {number}); run torchrun with --max-restarts {number + 1} or more to "
                f"run it, as its @restarts({restarts}) does under the runner"), verdict.PLACEMENT)
        world, _ = worlds.world(testrun.world_size, testrun.placement, conf)
        testrun.pids = list(world.pids)
        example = world.same_example(kwargs, testrun.test_id) if kwargs is not None else None
        # the same temp_dir in every attempt of the job: named by the job and the test, kept while the job may
        # restart (a killed worker's peers are stopped mid-test), removed once an attempt ran to its verdict
        temp_dir = _launched_temp_dir(testrun) if wants_temp else None
        with world.test_files(False) as (_, file_name):
            for before in range(number):  # an earlier attempt's log, left where torchrun stopped that attempt
                _remove(f"{file_name}.faults{before}")
            log = f"{file_name}.faults{number}"
            task = testrun.task(world, example, temp_dir, file_name, faults=plan, attempt=number, fault_log=log)
            results = world.run(task, conf.peer_grace)
            entries = _read_log(log)
            _remove(log)
        if temp_dir is not None and getattr(world, "rank", 0) == 0:
            shutil.rmtree(temp_dir, ignore_errors=True)
        world.pg_suspect = any(r.is_bad for r in results)
        raw.append(results)
        done.append(judging.judge_attempt(plan, number, results, entries))
        return _verdict(testrun, kwargs, plan, done, raw, restarts, launched=True)
    testrun.reused = False  # every attempt in ranks of its own
    start = lambda: worlds.fresh(testrun.world_size, testrun.placement, conf)  # noqa: E731
    done, raw, testrun.pids = fresh_attempts(testrun, kwargs, plan, restarts, start)
    return _verdict(testrun, kwargs, plan, done, raw, restarts)


def fresh_attempts(testrun: Any, kwargs: dict[str, Any] | None, plan: list[Fault], restarts: int,
                   start: Callable[[], Any], count_calls: bool = False, ahead: bool = True,
                   close: Callable[[Any], None] | None = None
                   ) -> tuple[list[judging.Attempt], list[list[Any]], list[int]]:
    """The test's attempts, each in a fresh world that ``start()`` gives and that is closed after it: attempt 0, then
    one more after each attempt a fault disrupted while ``restarts`` are left. Reads ``testrun``, never changes
    it (a sweep runs several of these at once). ``count_calls``: every rank counts its collectives; ``ahead``: on
    CPU the next attempt's world is started while this one runs; ``close(world)``: how a world is closed after its
    attempt (``world.close()``). Returns (attempts judged, each attempt's results, the ranks' pids)."""
    wants_temp = bool(testrun.marks["temp_dir"])
    done: list[judging.Attempt] = []
    raw: list[list[Any]] = []
    pids: list[int] = []
    temp_dir = tempfile.mkdtemp(prefix="harness-test-") if wants_temp else None
    # the fault logs outlive each attempt's world (a pool whose rank died removes its folder at once)
    logs = tempfile.mkdtemp(prefix="harness-faults-")
    upcoming: _Upcoming | None = None
    try:
        for number in range(restarts + 1):
            world = upcoming.take() if upcoming is not None else start()
            # on CPU the next attempt's ranks start while this one runs, so that a restart waits for none (on GPUs
            # two worlds' CUDA contexts at once could take the memory the running one needs)
            upcoming = (_Upcoming(start) if ahead and number < restarts and testrun.placement.device_type == "cpu"
                        else None)
            try:
                pids += list(world.pids)
                example = world.same_example(kwargs, testrun.test_id) if kwargs is not None else None
                with world.test_files(False) as (_, file_name):
                    log = os.path.join(logs, f"attempt{number}.jsonl")
                    task = testrun.task(world, example, temp_dir, file_name, faults=plan, attempt=number,
                                        fault_log=log, count_calls=count_calls)
                    results = world.run(task, testrun.conf.peer_grace)
                    entries = _read_log(log)
            finally:
                (close or _close)(world)  # an attempt's ranks are never reused
            raw.append(results)
            attempt = judging.judge_attempt(plan, number, results, entries)
            done.append(attempt)
            if attempt.unexplained or not attempt.disrupted:
                break
            if number < restarts:
                attempt.then = judging.RESTARTED
    finally:
        if upcoming is not None:
            upcoming.discard()
        shutil.rmtree(logs, ignore_errors=True)
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    return done, raw, pids


def _launched_temp_dir(testrun: Any) -> str:
    """A torchrun job's temp_dir for this test (and example), the same path in each of its attempts."""
    import hashlib

    job = os.environ.get("TORCHELASTIC_RUN_ID", "") or os.environ.get("MASTER_PORT", "")
    key = hashlib.sha1(f"{job}:{testrun.test_id}:{testrun.examples}".encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"harness-restarts-{key}")
    os.makedirs(path, exist_ok=True)
    return path


def _close(world: Any) -> None:
    world.close()


class _Upcoming:
    """The next attempt's world, started from the template in a thread while the current attempt runs."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self.world: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.world = start()
            except BaseException as exc:  # noqa: B902 - handed to the caller in take()
                self.error = exc

        self.thread = threading.Thread(target=run, name="harness-next-attempt", daemon=True)
        self.thread.start()

    def take(self) -> Any:
        self.thread.join()
        if self.error is not None:
            raise self.error
        world, self.world = self.world, None
        return world

    def discard(self) -> None:
        """Not needed (no restart): stop its ranks once they started."""
        self.thread.join()
        if self.world is not None:
            self.world.close()
            self.world = None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


@dataclasses.dataclass
class Judged:
    """A fault test's attempts judged: its verdict, and what the reports say beside it."""

    verdict: Verdict
    missing: list[str]  # the faults that never fired, each with why
    names: str  # the faults, each with where it fired (a passing test's line)
    described: list[str]  # every attempt in words
    ranks_seconds: float
    picture: Any  # the last attempt's ranks x collectives, where it went wrong


def _verdict(testrun: Any, kwargs: dict[str, Any] | None, plan: list[Fault], done: list[judging.Attempt],
             raw: list[list[Any]], restarts: int, launched: bool = False) -> Verdict:
    """The test's verdict (:func:`judge`), its report's facts kept on ``testrun``."""
    out = judge(testrun, kwargs, plan, done, raw, restarts, launched)
    testrun.ranks_seconds = out.ranks_seconds
    if out.picture is not None:
        testrun.picture = out.picture
    testrun.fault_names = out.names
    testrun.fault_attempts = out.described
    return out.verdict


def judge(testrun: Any, kwargs: dict[str, Any] | None, plan: list[Fault], done: list[judging.Attempt],
          raw: list[list[Any]], restarts: int, launched: bool = False) -> Judged:
    """The verdict of the last attempt, with the faults that never fired and every attempt in its words."""
    last = done[-1]
    seconds = max((r.duration for r in raw[-1]), default=0.0)
    picture = testrun.picture_from(raw[-1]) if any(r.is_bad for r in raw[-1]) else None
    judged = verdict.judge(last.results, testrun.facts(), kwargs, testrun.conf.show_output)
    if launched:  # torchrun's attempt: only its own faults are checked here (the others' attempts ran, or may run)
        missing = judging.never_fired(plan, done, restarts, only=last.number)
    else:
        missing = judging.never_fired(plan, done, restarts)
    if not last.then:
        if last.unexplained:
            last.then = "failed: a failure no injected fault explains (not run again)"
        elif missing:
            last.then = "failed: " + "; ".join(missing)
        elif judged.fails:
            last.then = f"{judged.status}"
        elif last.disrupted and last.number == restarts:
            last.then = f"passed (no restart left: the survivors' outcome is the verdict)"
        else:
            last.then = "passed"
    described = judging.describe(plan, done, restarts)
    names = judging.fault_names(plan, done, launched) + (
        f"; restarted {len(done) - 1} time{'s' if len(done) != 2 else ''}" if len(done) > 1 else "")
    if missing:
        head = [f"{testrun.test_id}: {line}" for line in missing]
        extra = ["", *judged.lines] if judged.fails else []
        judged = Verdict(testrun.test_id, FAILED, head + extra + ["", "Attempts:", *described],
                         root_rank=judged.root_rank, subtests=judged.subtests, individually=judged.individually,
                         shown=judged.shown)
    elif judged.fails:
        judged.lines = [*judged.lines, "", "Attempts:", *described]
    return Judged(judged, missing, names, described, seconds, picture)
