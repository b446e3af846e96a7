"""One run from start to end: settings, collection, selection, sharding, the tests, the report, the exit code."""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
import unittest
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

from harness.shared import pytest_outcomes
from harness.shared.config import Settings
from harness.runner.console import Console
from harness.runner.results import Entry, RunnerResult, exit_code, interrupt_reason, uses_ranks
from harness.runner.selection import check_includes, collect, module_of, select, shuffle
from harness.runner.sharding import load_times, save_times, shard
from harness.shared.status import BAD, ExitCode, Status

__all__ = ["Options", "Plan", "Ran", "prepare", "execute", "run_here", "may_start_ranks", "run_tests_here", "report", "console_for", "header_lines",
           "times_to_record"]


@dataclasses.dataclass(frozen=True)
class Options:
    """One run's choices, checked: what :func:`prepare` is given (harness.runner.cli makes it)."""

    root: Path
    targets: tuple[str, ...] = ()
    folders: tuple[str, ...] = (".",)
    patterns: tuple[str, ...] = ()
    file_patterns: tuple[str, ...] = ("test_*.py", "*_test.py")  # which files a folder's discovery collects
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    times_file: str = "test-times.json"
    update_times: bool = False
    list_only: bool = False
    device: str | None = None
    timeout: float | None = None
    hypothesis_profile: str | None = None
    failfast: bool = False
    shuffle_seed: int | None = None
    fail_env_changed: bool = False
    triage: bool = True  # False: --no-triage
    pdb: bool = False  # --pdb: a post-mortem prompt in the first rank to fail (harness.ranks.debugger)
    buffer: bool = True
    verbose: bool = False
    junit_xml: str | None = None
    html: str | None = None  # --html PATH (harness.runner.html)
    slowest: int = 10
    jobs: int = 1  # runner processes at once (harness.runner.jobs)
    job_of: tuple[str, str] | None = None  # in a --jobs worker: (file of its test ids, where its report goes)
    watch: bool = False  # --watch: run again on each save (harness.runner.watch)
    server: str = "auto"  # "serve": --serve starts one; "no": --no-server; "auto": use one that runs

    @property
    def where(self) -> str:
        """The targets, else the folders, as the header and the "nothing selected" line name them."""
        return ", ".join(self.targets or self.folders)


@dataclasses.dataclass
class Plan:
    """What will run, and how: the result of :func:`prepare`."""

    options: Options
    tests: list[unittest.TestCase]
    discovered: int
    notes: list[str]  # the shard and shuffle lines under the header
    settings: Settings  # with the command line's values over the environment's
    reporting: bool  # False on the ranks > 0 of a torchrun job: rank 0 reports for all
    claims: Any = None  # in a --jobs worker: what it runs, claimed a class at a time (harness.runner.jobs.Claims)


def _apply(options: Options) -> Settings:
    """The run's settings: the command line's over the environment's (the ranks it spawns are handed them)."""
    from harness.shared import config
    from harness.parent import hypothesis_support

    values: dict[str, Any] = {}
    if options.device:
        values["device"] = options.device
    if options.timeout is not None:
        values["timeout"] = options.timeout
    if options.fail_env_changed:
        values["env_changed"] = "fail"
    if not options.triage:
        values["triage"] = False
    if options.pdb:
        values["pdb"] = True
    if options.hypothesis_profile:
        hypothesis_support.check_profile(options.hypothesis_profile)  # the run takes it (harness.parent.run.Run)
    return config.settings(**values)


def prepare(options: Options) -> Plan:
    """Apply the settings, then collect, select, shard and shuffle. Raises UsageError for a bad target,
    an ``-i`` that matches nothing, or a bad ``HARNESS_*`` variable.

    Example::

        plan = prepare(Options(root=Path.cwd(), patterns=("parity",)))
    """
    from harness.shared import launcher

    conf = _apply(options)
    # this process runs the tests itself (not --list, not the parent of -j workers): it may fork ranks
    runs_here = not options.list_only and not (options.jobs > 1 and options.job_of is None)
    if runs_here and not _in_process_only(options.targets) and may_start_ranks(options):
        from harness.parent import template

        template.warm(conf.template)  # its torch import overlaps the test modules' (collected next)
    if str(options.root) not in sys.path:  # dotted targets and packages under root import from there
        sys.path.insert(0, str(options.root))
    discovered = collect(options.targets, options.folders, options.root, options.file_patterns)
    if runs_here:
        from harness.parent import template

        template.tell()  # what the test modules imported: the template imports it too, while the run goes on
    check_includes(discovered, options.include)
    tests = select(discovered, options.patterns, options.include, options.exclude)
    if not any(uses_ranks(t) for t in tests):
        end_unused_template()  # warmed on speculation; tests that run in this process (threads, local) need none of it
    notes = []
    if options.shard is not None:
        index, count = options.shard
        tests, how = shard(tests, index, count, load_times(options.times_file))
        notes.append(how.note(index, options.times_file))
    claims = None
    if options.job_of is not None:  # a --jobs worker: the parent's split; it claims each class as it runs it
        from harness.runner.jobs import claims_of

        claims = claims_of(options.job_of[0])
        by_id = {t.id(): t for t in tests}
        tests = [by_id[i] for i in claims.every_test() if i in by_id]
    if options.shuffle_seed is not None:
        tests = shuffle(tests, options.shuffle_seed)
        notes.append(f"shuffled with seed {options.shuffle_seed} (--shuffle {options.shuffle_seed} runs this order "
                     "again)")
    return Plan(options, tests, len(discovered), notes, conf, reporting=launcher.launched_rank() == 0, claims=claims)


#: the classes whose tests run in the runner's own process (threads, simulated ranks), and those run on ranks
_IN_PROCESS_NAMES = re.compile(r"\b(MultiThreadedTestCase|FSDPTestMultiThread|DTensorOpTestBase|LocalDTensorTestBase|"
                               r"create_local_tensor_test_class)\b")
_ON_RANKS_NAMES = re.compile(r"\b(MultiProcessTestCase|FSDPTest|DTensorTestBase|MultiProcContinuousTest|"
                             r"DTensorContinuousTestBase|FSDPTestContinuous|ShardedTensorTestBase|with_comms)\b")


def _in_process_only(targets: Sequence[str]) -> bool:
    """Every target is a ``.py`` file that names only classes run in this process: no template is warmed early.

    The template's torch import, overlapping the parent's, is what makes the first rank cheap; where no rank
    will be wanted it only takes a core from the parent on a small machine. A guess from the files' text:
    a wrong one costs time, never a result (a class that needs ranks starts the template when it is defined).
    """
    if not targets:
        return False
    for target in targets:
        if not target.endswith(".py"):
            return False
        try:
            text = Path(target).read_text(errors="replace")
        except OSError:
            return False
        if not _IN_PROCESS_NAMES.search(text) or _ON_RANKS_NAMES.search(text):
            return False
    return True


#: what in a test file (or a conftest.py) says its tests may want the harness's ranks
_HARNESS_NAMED = re.compile(r"\bharness\b|torch\.testing\._internal")


def may_start_ranks(options: Options, limit: int = 400) -> bool:
    """Whether any test file of the run (its targets, else its folders; their ``conftest.py`` files too) names the
    harness: else no test wants ranks, and no template is started (a project of plain pytest tests that may not
    even import torch). A guess from the files' text: a wrong one costs time, never a result. Dotted targets, and
    runs of more than ``limit`` files, are taken to want them."""
    import fnmatch

    files: list[Path] = []
    for where in options.targets or options.folders:
        name = where.partition("::")[0]
        path = Path(name) if options.targets else options.root / name
        if path.is_file():
            files += [path, *(p / "conftest.py" for p in path.resolve().parents)]
        elif path.is_dir():
            files += [p / "conftest.py" for p in path.resolve().parents]
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
                files += [Path(dirpath, f) for f in filenames
                          if f == "conftest.py" or any(fnmatch.fnmatch(f, p) for p in options.file_patterns)]
                if len(files) > limit:
                    return True
        else:
            return True  # a dotted module[.Class[.method]]
    for f in dict.fromkeys(files):
        try:
            if _HARNESS_NAMED.search(f.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def end_unused_template() -> None:
    """A run that forks no rank (``--list``, a usage error) ends the template its test classes warmed while
    they were collected, at once: it would otherwise finish importing torch after the run has returned,
    holding the run's stdout open (a caller reading it through a pipe would wait for it).

    Unused by this run, not by the process: while another run of the same process holds ranks forked from it (a
    test that calls the runner in a rank pool's process), it stays (killing it, and multiprocessing's resource
    tracker, would leave those ranks to a dead template, and made this run wait 10 s on the tracker)."""
    template = sys.modules.get("harness.parent.template")
    pool = sys.modules.get("harness.parent.pool")
    if template is not None and not (pool is not None and pool.ranks_alive()):
        template.stop(unused=True)


def run_here(options: Options) -> ExitCode:
    """:func:`prepare` and :func:`execute` in this process; pytest-style files collected and run in one pytest
    session around both (harness.runner.pytest_items). Raises UsageError as :func:`prepare` does."""
    from harness.runner.pytest_items import hosted

    def both() -> ExitCode:
        return execute(prepare(options))

    return hosted(options.targets, options.folders, options.root, options.file_patterns, both,
                  capture=options.buffer)


def execute(plan: Plan, out: TextIO | None = None) -> ExitCode:
    """List the tests (``--list``) or run them and report; returns the exit code."""
    if plan.options.list_only:
        end_unused_template()
        return _list(plan, out or sys.stdout)
    return _run(plan, out or sys.stdout)


def _modules(plan: Plan) -> int:
    return len({module_of(t) for t in plan.tests})


def _list(plan: Plan, out: TextIO) -> ExitCode:
    if plan.reporting:
        out.write("".join(t.id() + "\n" for t in plan.tests))
        for note in plan.notes:
            print(note, file=sys.stderr)
        print(f"{len(plan.tests)} tests selected from {_modules(plan)} modules", file=sys.stderr)
    return ExitCode.OK if plan.tests else ExitCode.NO_TESTS


def _torch_version() -> str:
    """torch's version, without importing torch for it (a run of plain pytest tests may never import it)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    import importlib.metadata

    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _header(plan: Plan) -> str:
    from harness.parent.hypothesis_support import profile_name

    conf = plan.settings
    return (f"distharness: {len(plan.tests)} tests from {_modules(plan)} modules ({plan.options.where}); "
            f"torch {_torch_version()}, device={conf.device}, reuse={int(conf.reuse)}, "
            f"hypothesis profile={profile_name(plan.options.hypothesis_profile)}")


def _parallel(plan: Plan) -> bool:
    from harness.shared import launcher

    return plan.options.jobs > 1 and plan.options.job_of is None and not launcher.launched() and len(plan.tests) > 1


@dataclasses.dataclass
class Ran:
    """What running a plan's tests gave, as data (the thin parent gets it from the runner process it forked,
    harness.runner.forked): the entries, the run's notes, how many tests started, the classes' own seconds,
    why the run stopped early ("" when it did not) and what the report needs of the plan."""

    entries: list[Entry]
    notes: list[str]
    started: int
    class_seconds: dict[str, float]
    interrupted: str
    selected: int  # the tests selected
    discovered: int
    wall: float = 0.0


def console_for(plan: Plan, out: TextIO) -> Console:
    """The console of a run: its id column as wide as the longest selected id (at most 90)."""
    return Console(out, len(plan.tests), plan.options.verbose,
                   width=min(90, max((len(t.id()) for t in plan.tests), default=0)))


def run_tests_here(plan: Plan, console: Console, run: Any = None) -> Ran:
    """Run the plan's tests in this process (or its ``-j`` workers) and return what they gave; no summary.
    ``run``: the harness.parent.run.Run to run them in (its worlds perhaps started already), else a new one."""
    options, tests = plan.options, plan.tests
    started = time.monotonic()
    interrupted = ""
    if _parallel(plan):
        from harness.parent.hypothesis_support import profile_name
        from harness.runner.jobs import run_jobs

        outcome = run_jobs(options, profile_name(options.hypothesis_profile), tests, options.jobs,
                           load_times(options.times_file), console.out)
        entries, notes, ran, interrupted = outcome.entries, outcome.notes, outcome.started, outcome.interrupted
        class_seconds = outcome.class_seconds
    else:
        from harness.parent.pool import install_sigterm_handler
        from harness.parent.run import Run

        install_sigterm_handler()  # a test in this process (thread ranks) is reported terminated, as one on ranks
        run = run or Run(plan.settings, options.hypothesis_profile)
        result = RunnerResult(console, buffer=options.buffer, failfast=options.failfast, keep_output=options.verbose,
                              run=run)
        result.startTestRun()
        try:
            from harness.parent.pytest_marks import honoured
            from harness.runner.jobs import claiming_suite
            from harness.runner.pytest_items import in_session

            with honoured(tests):  # pytest's marks and outcomes, where pytest is importable
                # the tests pytest runs (pytest-style files) run in one pytest session around the suite
                suite = unittest.TestSuite(tests) if plan.claims is None else claiming_suite(tests, plan.claims)
                in_session(tests, run, lambda: suite.run(result), capture=options.buffer)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.parent.pool.Terminated)
            interrupted = interrupt_reason(exc)
            result.stop_interrupted()
        finally:
            if options.job_of is not None:
                # a -j worker: the terminal's Ctrl-C reaches it too, after its tests as well as during one; once they
                # ran (or one was interrupted) its report goes back whole, and the parent decides (harness.runner.jobs)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            result.stopTestRun()
            notes = _after_the_tests(plan, run)
        entries, ran, class_seconds = result.entries, result.started, dict(result.class_seconds)
    return Ran(entries, notes, ran, class_seconds, interrupted, len(tests), plan.discovered,
               time.monotonic() - started)


def _run(plan: Plan, out: TextIO) -> ExitCode:
    options = plan.options
    if not plan.reporting:
        out = open(os.devnull, "w")
    console = console_for(plan, out)
    if options.job_of is None:
        console.write(header_lines(plan))
    else:
        from harness.runner.jobs import take_ctrl_c

        take_ctrl_c()  # the parent's Ctrl-C reaches its workers (one process group): each stops its test
    ran = run_tests_here(plan, console)
    if options.job_of is not None:  # a --jobs worker: the parent reports
        from harness.runner.jobs import write_worker_report

        stopped = ran.interrupted if pytest_outcomes.exit_status(ran.interrupted) is not None else ""
        write_worker_report(options.job_of[1], ran.entries, ran.notes, ran.started, ran.class_seconds, stopped)
        return exit_code(ran.entries, ran.interrupted)
    return report(options, console, ran, plan.reporting)


def header_lines(plan: Plan) -> str:
    """The run's first lines: what runs, where, with which torch; the shard and shuffle notes."""
    return "".join(line + "\n" for line in [_header(plan), *plan.notes])


def report(options: Options, console: Console, ran: Ran, reporting: bool = True) -> ExitCode:
    """The end of a run: the summary, JUnit XML, HTML, the times file, the count line; the exit code.
    Needs no torch: the thin parent calls it with what its runner process sent (harness.runner.forked)."""
    entries, interrupted, wall = ran.entries, ran.interrupted, ran.wall
    not_run = ran.selected - ran.started
    stopped = ""
    if interrupted:
        stopped = f"{interrupted}: {not_run} of {ran.selected} selected tests did not run"
    elif options.failfast and not_run and any(e.status in BAD for e in entries):
        stopped = (f"stopped after the first failure (--failfast): {not_run} of {ran.selected} selected tests did "
                   "not run")
    console.summary(entries, options.slowest, wall, stopped, not_run, ran.notes)

    if options.junit_xml and reporting:
        from harness.runner.junit import write_junit

        write_junit(options.junit_xml, entries, wall)
        console.write(f"JUnit XML: {options.junit_xml}\n")
    if options.html and reporting:
        from harness.runner.html import write_html

        prog = os.path.basename(sys.argv[0])
        prog = "python -m harness" if prog in ("", "__main__.py", "-m") else prog
        write_html(options.html, entries, wall, prog + (f" -j {options.jobs}" if options.jobs > 1 else ""), ran.notes)
        console.write(f"HTML report: {options.html}\n")
    if options.update_times and reporting:
        timed, classes = times_to_record(entries, ran.class_seconds)
        save_times(options.times_file, timed, classes)
        console.write(f"times of {len(timed)} tests and the set-up of {len(classes)} classes merged into "
                      f"{options.times_file}\n")
    console.count_line(entries, ran.selected, ran.discovered, options.where, bool(interrupted))
    return exit_code(entries, interrupted)


def times_to_record(entries: Sequence[Entry], class_seconds: Mapping[str, float]) -> tuple[dict[str, float],
                                                                                         dict[str, float]]:
    """What ``--update-times`` records: the seconds of each test that ran (not skipped, not an import or
    set-up failure), and the set-up/tear-down seconds of each class that had such a test.

    Example::

        tests, classes = times_to_record(result.entries, result.class_seconds)
    """
    ran = [e for e in entries if e.status != Status.SKIPPED and e.real]
    ran_classes = {e.classname for e in ran}  # a class whose tests were all skipped is not timed either
    return ({e.test_id: e.seconds for e in ran},
            {k: v for k, v in class_seconds.items() if k in ran_classes})


def _after_the_tests(plan: Plan, run: Any) -> list[str]:
    """Stop the rank processes now rather than at exit, so whatever they print while shutting down comes
    before the summary and the count line stays the last line; the run's notes, for the summary (each
    test's line already says where it ran, so the CPU-fallback note goes)."""
    run.close()
    altered = run.notes.altered_lines()
    needs_cuda = "\n".join(run.notes.needs_cuda_lines())  # skips for want of a GPU or NCCL, by reason
    triage = run.notes.triage_lines()  # failures in reused ranks checked in fresh ranks, and the cost
    upstream = run.notes.upstream_lines("upstream")  # classes that still derive from upstream's bases
    mixed = run.notes.upstream_lines("harness")  # upstream's bases mixed with the harness's: the harness ran them
    run.notes.forget()
    notes = []
    if upstream:
        notes.append(f"Ran on upstream's harness, not distharness ({len(upstream)} class(es)):\n"
                     + "".join(f"  {line}\n" for line in upstream))
    if mixed:
        notes.append(f"Upstream's bases mixed with the harness's, run by distharness ({len(mixed)} class(es)):\n"
                     + "".join(f"  {line}\n" for line in mixed))
    if altered:
        notes.append(f"Altered the process ({len(altered)} test(s); HARNESS_ENV_CHANGED={plan.settings.env_changed}):\n"
                     + "".join(f"  {line}\n" for line in altered))
    if needs_cuda:
        notes.append(needs_cuda)
    if triage:
        notes.append("\n".join(triage))
    return notes
