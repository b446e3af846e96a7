"""The runner's command line: the flags, what they default to for a project, and ``main()``."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import textwrap
from pathlib import Path
from typing import Sequence

from harness.shared.config import DEVICE_CHOICES, VARIABLES, toml_file, variables
from harness.shared.errors import UsageError
from harness.parent.hypothesis_support import PROFILES
from harness.runner.selection import FILE_PATTERNS
from harness.runner.forked import run_forked
from harness.runner.session import Options, end_unused_template, run_here
from harness.shared.status import ExitCode

__all__ = ["FolderSet", "Defaults", "project_file_patterns", "build_parser", "parse", "main", "console_main"]


@dataclasses.dataclass(frozen=True)
class FolderSet:
    """A flag that runs other folders than the default ones (``run_tests.py --all``). When several such
    flags are given, the one listed last in :attr:`Defaults.folder_sets` wins."""

    flag: str
    folders: tuple[str, ...]
    help: str


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What a project's runner runs when given no target: its folders, its times file, its name.

    Example (a project's own ``run_tests.py``)::

        main(argv, Defaults(prog="run_tests.py", folders=("tests",), times_file=".ci/test-times.json",
                            root=Path(__file__).parent))
    """

    prog: str = "python -m harness"
    description: str = ("Run a project's tests (the test_*.py and *_test.py files under the current directory, or the "
                        "targets given) with one line per test, a summary, sharding over CI machines and JUnit XML.")
    folders: tuple[str, ...] = (".",)  # relative to root
    folder_sets: tuple[FolderSet, ...] = ()
    times_file: str = "test-times.json"  # relative to root unless absolute
    root: Path | None = None  # the project's top directory, importable; None: the current directory
    #: the files a folder's discovery collects; None: the project's ``python_files`` setting
    #: (:func:`project_file_patterns`), else ``test_*.py`` and ``*_test.py``
    file_patterns: tuple[str, ...] | None = None


def project_file_patterns(root: Path) -> tuple[str, ...] | None:
    """The test-file patterns a project sets, as pytest's ``python_files``: ``[tool.distharness] python_files``
    in ``pyproject.toml`` (a list, or one string of space-separated patterns), else ``[tool:distharness]
    python_files`` in ``setup.cfg`` (space- or line-separated), else pytest's own ``python_files`` in the project's
    pytest configuration; None when none sets one.

    Example (pyproject.toml)::

        [tool.distharness]
        python_files = ["test_*.py", "*_test.py", "check_*.py"]
    """
    import configparser

    def split(value: object, where: str) -> tuple[str, ...]:
        items = value.split() if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
            raise UsageError(f"{where}: python_files = {value!r}: give shell patterns of test file names, "
                             "e.g. [\"test_*.py\", \"*_test.py\"]")
        return tuple(items)

    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            table = toml_file(pyproject).get("tool", {}).get("distharness", {})
        except ValueError as exc:
            raise UsageError(f"{pyproject}: cannot read it: {exc}") from None
        if "python_files" in table:
            return split(table["python_files"], f"{pyproject} [tool.distharness]")
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        parser = configparser.ConfigParser()
        try:
            parser.read(setup_cfg, encoding="utf-8")
        except configparser.Error as exc:
            raise UsageError(f"{setup_cfg}: cannot read it: {exc}") from None
        if parser.has_option("tool:distharness", "python_files"):
            return split(parser.get("tool:distharness", "python_files"), f"{setup_cfg} [tool:distharness]")
    from harness.parent.pytest_fixtures import ini_values

    found = ini_values(root).get("python_files")  # else pytest's own, as pytest collects the project's files
    return split(found, "the project's pytest configuration: python_files") if found else None


_WIDTH = 100


def _epilog() -> str:
    fill = textwrap.TextWrapper(width=_WIDTH, initial_indent="      ", subsequent_indent="      ").fill
    lines = [textwrap.fill("Exit status: " + ", ".join(f"{int(c)} {w}" for c, w in (
        (ExitCode.OK, "all tests that ran passed"), (ExitCode.FAILED, "a test failed"),
        (ExitCode.USAGE, "usage error"), (ExitCode.NO_TESTS, "no test ran"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C)"), (ExitCode.TERMINATED, "terminated (SIGTERM)"))) + ".", _WIDTH),
        "The last line printed is always 'N passed, N failed, N skipped'.", "",
        "Environment variables (the flags above win over them for this run):"]
    for name, default, meaning in variables():
        lines.append(f"  {name}" + (f" (default {default})" if default else ""))
        lines.append(fill(meaning))
    return "\n".join(lines)


def build_parser(defaults: Defaults = Defaults()) -> argparse.ArgumentParser:
    """The argument parser, with help on every flag and the environment variables in its epilog."""
    # Raw: the epilog's list of variables keeps its lines (the description and epilog are wrapped here).
    p = argparse.ArgumentParser(prog=defaults.prog, description=textwrap.fill(defaults.description, _WIDTH),
                                epilog=_epilog(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    default_where = ", ".join(f"{f}/" if f != "." else "the current directory" for f in defaults.folders)
    what = p.add_argument_group("what to run")
    what.add_argument("targets", nargs="*", metavar="MODULE|PATH",
                      help=f"run these instead of {default_where}: a module (pkg.test_mod), a "
                           "module.Class[.method], a file (path/test_x.py) or a folder (its test files: see "
                           "--python-files)")
    for fs in defaults.folder_sets:
        what.add_argument(fs.flag, dest=_dest(fs), action="store_true", help=fs.help)
    what.add_argument("--python-files", dest="file_patterns", action="append", default=[], metavar="PATTERN",
                      help="collect the test files of a folder whose names match PATTERN (a shell pattern; "
                           "repeatable), instead of the project's python_files setting ([tool.distharness] in "
                           "pyproject.toml, [tool:distharness] in setup.cfg), else test_*.py and *_test.py")
    what.add_argument("-k", dest="patterns", action="append", default=[], metavar="PATTERN",
                      help="run tests whose id (module.Class.method) contains PATTERN or matches it as a shell "
                           "pattern (fnmatch, e.g. '*Pipeline*.test_*parity'); repeatable, a test matching any runs")
    what.add_argument("-i", "--include", action="append", default=[], metavar="MODULE",
                      help="run only this module: a module name (test_pipeline, pkg.test_pipeline), "
                           "a path (pkg/test_pipeline.py) or a shell pattern (test_fsdp*); repeatable")
    what.add_argument("-x", "--exclude", action="append", default=[], metavar="MODULE",
                      help="skip this module (same forms as --include); repeatable; wins over --include")
    what.add_argument("--shard", nargs=2, type=int, metavar=("I", "N"),
                      help="run shard I of N (1 <= I <= N): whole classes, balanced by the test and class set-up "
                           "times in the times file")
    what.add_argument("--times-file", metavar="PATH",
                      help="JSON file of recorded test and class set-up times used by --shard and --jobs and "
                           "written by --update-times "
                           f"(default: {defaults.times_file}"
                           f"{' in the current directory' if defaults.root is None else ''})")
    what.add_argument("--update-times", action="store_true",
                      help="after the run, merge this run's test durations and class set-up/tear-down times into "
                           "the times file")
    what.add_argument("--list", dest="list_only", action="store_true",
                      help="print the ids of the tests that would run (after -k/-i/-x/--shard) and exit")

    how = p.add_argument_group("how to run")
    how.add_argument("--device", choices=DEVICE_CHOICES,
                     help="overrides HARNESS_DEVICE: auto: one GPU per rank on NCCL when there are enough, else the "
                          "ranks share the GPUs over gloo (cuda-shared), else CPU/gloo; cpu: always CPU; cuda: NCCL "
                          "or shared GPUs, skip without a GPU; nccl: one GPU per rank or skip; cuda-shared: always "
                          "shared GPUs (default: HARNESS_DEVICE from the environment, or auto)")
    how.add_argument("--timeout", type=float, metavar="S",
                     help="overrides HARNESS_TIMEOUT: seconds one test may run before its ranks' stacks are dumped "
                          "and they are killed (default: the class's timeout, else 300)")
    how.add_argument("--hypothesis-profile", choices=tuple(PROFILES),
                     help="overrides HYPOTHESIS_PROFILE (ci: 2 derandomized examples; dev: 5; nightly: 50; default: "
                          "the environment's, else ci under CI=true, else dev)")
    how.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                     help="run the tests in N runner processes at once, each class in one of them, balanced by the "
                          "times file (a machine with many cores; each job starts its own ranks, and their threads "
                          "default to cores / (2 N)); default 1")
    how.add_argument("--job-of", nargs=2, metavar=("IDS", "REPORT"), help=argparse.SUPPRESS)  # a --jobs worker
    how.add_argument("--failfast", action="store_true", help="stop after the first failing or erroring test")
    how.add_argument("--shuffle", nargs="?", type=int, const=-1, default=None, metavar="SEED",
                     help="run the tests in a random order: the classes shuffled, and the tests within each class "
                          "(the seed is printed; give it to get the same order again)")
    how.add_argument("--fail-env-changed", action="store_true",
                     help="as HARNESS_ENV_CHANGED=fail: a test that leaves its rank processes altered beyond what "
                          "the harness restores (a replaced torch function, a thread or child process left running) "
                          "fails; without it such a test is named in the summary and the ranks are replaced")
    how.add_argument("--no-triage", dest="triage", action="store_false",
                     help="as HARNESS_TRIAGE=0: a failure in reused ranks is not run again in fresh ranks (by default "
                          "it is: alone, then after the tests those ranks ran before it, to tell the test's own failure "
                          "from one an earlier test caused, which is named, or a flaky one)")
    how.add_argument("--pdb", action="store_true",
                     help="when a test fails in a rank, open a post-mortem (Pdb) prompt in the first rank to fail, "
                     "at the frame that raised (from a terminal; HARNESS_PDB=1)")
    how.add_argument("--watch", action="store_true",
                     help="stay up: after the run, each time a file under the targets or one the tests import is "
                          "saved, run the tests that import it again (last round's failures first), one summary a "
                          "round; Ctrl-C ends it (docs/watch.md)")
    how.add_argument("--serve", action="store_true",
                     help="start a warm server for this project in the background and return: later runs of the same "
                          "project, interpreter and environment hand it their tests (a run of one small test then "
                          "takes a fraction of a second); it ends after --idle seconds without a run; never under CI "
                          "(docs/watch.md)")
    how.add_argument("--idle", type=float, default=None, metavar="S",
                     help="with --serve: seconds without a run after which the server ends (default: 900)")
    how.add_argument("--no-server", action="store_true",
                     help="run without the server --serve started, in fresh processes of this run's own")
    how.add_argument("--sweep", metavar="FAULT",
                     help="as HARNESS_SWEEP: sweep a fault over every test on rank processes, unmodified, such as "
                          "'kill(rank=1)' or 'raise_(rank=every_rank, exc=ConnectionError, op=\"barrier\")': each test "
                          "runs once per collective the rank makes, the fault injected at it, each point in a fresh "
                          "world; -j N runs N points at once (docs/faults.md)")
    how.add_argument("--no-buffer", "-s", dest="buffer", action="store_false",
                     help="show what tests and ranks print as it comes, instead of only with failures")

    out = p.add_argument_group("reporting")
    out.add_argument("-v", "--verbose", action="store_true",
                     help="also print each subtest's outcome, why each test ran where it did, and the output of "
                          "passing tests")
    out.add_argument("--junit-xml", metavar="PATH",
                     help="write JUnit XML: one testcase per test and one per failing subtest")
    out.add_argument("--html", metavar="PATH",
                     help="write one self-contained HTML report: every test, and each failure's errors, output and "
                          "ranks x collectives drawn")
    out.add_argument("--slowest", type=int, default=10, metavar="N",
                     help="how many of the slowest tests to list at the end (0: none; default: 10)")
    return p


def _dest(fs: FolderSet) -> str:
    return "folders_" + fs.flag.lstrip("-").replace("-", "_")


def parse(args: argparse.Namespace, defaults: Defaults = Defaults()) -> Options:
    """Check what argparse cannot and resolve the defaults; a bad value is a :class:`UsageError` naming it.

    Example::

        options = parse(build_parser().parse_args(["-k", "parity", "--shard", "1", "2"]))
    """
    least = VARIABLES["HARNESS_TIMEOUT"].minimum  # the bound HARNESS_TIMEOUT has: one setting, one bound
    if args.timeout is not None and not args.timeout >= least:
        raise UsageError(f"--timeout {args.timeout:g}: must be a number of seconds >= {least:g}")
    if args.shard is not None:
        index, count = args.shard
        if count < 1 or not 1 <= index <= count:
            raise UsageError(f"--shard {index} {count}: need N >= 1 and 1 <= I <= N (shards count from 1)")
    if args.slowest < 0:
        raise UsageError(f"--slowest {args.slowest}: must be >= 0")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: must be >= 1")
    if args.idle is not None and (not args.serve or not args.idle > 0):
        raise UsageError(f"--idle {args.idle:g}: give it with --serve, a number of seconds > 0")
    if args.serve and (args.watch or args.no_server or args.list_only):
        raise UsageError("--serve starts a server and runs no test: give it alone (with --idle)")
    root = (defaults.root or Path.cwd()).resolve()
    folders = defaults.folders
    for fs in defaults.folder_sets:
        if getattr(args, _dest(fs)):
            folders = fs.folders
    times_file = args.times_file or str(root / defaults.times_file)
    file_patterns = (tuple(args.file_patterns) or defaults.file_patterns or project_file_patterns(root)
                     or FILE_PATTERNS)
    seed = args.shuffle
    if seed is not None and seed < 0:
        seed = int.from_bytes(os.urandom(4), "little") % 100000
    return Options(root=root, targets=tuple(args.targets), folders=tuple(folders), patterns=tuple(args.patterns),
                   file_patterns=file_patterns, include=tuple(args.include), exclude=tuple(args.exclude),
                   shard=tuple(args.shard) if args.shard else None, times_file=times_file,
                   update_times=args.update_times, list_only=args.list_only, device=args.device,
                   timeout=args.timeout, hypothesis_profile=args.hypothesis_profile, failfast=args.failfast,
                   shuffle_seed=seed, fail_env_changed=args.fail_env_changed, triage=args.triage, pdb=args.pdb,
                   buffer=args.buffer, verbose=args.verbose, junit_xml=args.junit_xml, html=args.html,
                   slowest=args.slowest, jobs=args.jobs,
                   job_of=tuple(args.job_of) if args.job_of else None, watch=args.watch,
                   server="serve" if args.serve else "no" if args.no_server else "auto")


def main(argv: Sequence[str] | None = None, defaults: Defaults = Defaults()) -> ExitCode:
    """Run the tests the command line names and return the exit code (never exits itself, but for
    argparse's own errors and ``--help``).

    Example::

        sys.exit(main(["tests", "-k", "parity", "--junit-xml", "junit.xml"]))
    """
    parser = build_parser(defaults)
    args = parser.parse_args(argv)
    try:
        options = parse(args, defaults)
        if args.sweep is not None:
            _sweep_every_test(args.sweep, args.jobs)
        if options.watch:
            from harness.runner.watch import watch

            return ExitCode(watch(options))
        if options.server == "serve":
            from harness.runner import server

            return ExitCode(server.start(options.root, args.idle or server.DEFAULT_IDLE))
        if options.server == "auto" and not os.environ.get("CI") and args.sweep is None:
            from harness.runner import server

            code = server.try_run(options)  # a server --serve started for this project, if one runs
            if code is not None:
                return code
        code = run_forked(options)  # the thin parent: the tests run in a process forked from the template
        if code is not None:
            return code
        return run_here(options)  # collected and run in this process
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        print("0 passed, 0 failed, 0 skipped")
        end_unused_template()
        return ExitCode.USAGE


def _sweep_every_test(text: str, jobs: int) -> None:
    """``--sweep FAULT``: checked now, then the run's (and its -j workers') ``HARNESS_SWEEP``; -j N runs N points
    of a sweep at once (``HARNESS_SWEEP_JOBS``, unless set)."""
    from harness.shared.faults import NOT_SWEPT, parse_sweep

    kind = parse_sweep(text).kind
    if kind in NOT_SWEPT:
        raise UsageError(f"--sweep {text}: {NOT_SWEPT[kind]}")
    os.environ["HARNESS_SWEEP"] = text
    if jobs > 1:
        os.environ.setdefault("HARNESS_SWEEP_JOBS", str(jobs))


def console_main() -> None:
    """The ``distharness`` console script and ``python -m harness``."""
    sys.exit(main())
