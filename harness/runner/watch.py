"""``--watch``: run the tests, then again each time a file they import is saved, until Ctrl-C.

The runner stays up as a thin parent (harness.runner.forked) with its template warm. Each round is a runner
process forked from the template: it imports the test modules and the user's code anew (nothing is
patched in place, so a round's verdicts are a cold run's), runs the tests and hands back, beside what they
gave, which files each test module imports (its own ``import`` statements followed through the project's
files) and which of them the template itself holds. The parent then watches those files and the target
folders (polling their modification times: no dependency, any platform) and, when one is saved, runs the
test modules that import it, last round's failures first, with one summary a round.

A file the template holds (the user's package preloaded there, the harness, torch itself) cannot be taken
anew by a forked process: the template is started again, and the round says why. While the parent waits,
the next round's runner process is already forked, with the last round's worlds of ranks started (forked
from the template, they hold none of the user's modules yet), so that a save costs the test's own time.
"""
from __future__ import annotations

import ast
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness.runner.progress import stuck_runner
from harness.runner.session import Options
from harness.shared import pytest_outcomes

__all__ = ["watch", "Round", "Go"]

#: seconds between two looks at the watched files' modification times
POLL = 0.02

#: a file's modification time comes from the kernel's coarse clock, which may lag ``time.time_ns()`` by a tick:
#: a file whose time is within this of a round's start (or after it) may have been saved while the round ran
_CLOCK_SLACK_NS = 50_000_000


@dataclasses.dataclass(frozen=True)
class Go:
    """What a waiting round's runner process is told when a save comes: which targets, whose tests first."""

    targets: tuple[str, ...]
    first: tuple[str, ...]  # last round's failing test ids
    number: int
    why: str


@dataclasses.dataclass(frozen=True)
class Round:
    """A round's job, in its runner process: start the worlds the last round used, wait for :class:`Go`, run."""

    options: Options
    worlds: tuple[Any, ...] = ()  # (world size, Placement) of the last round

    def run_in(self, conn: Any) -> tuple[str, Any]:
        from harness.parent.run import Run
        from harness.runner.session import _apply

        before = set(sys.modules)
        conf = _apply(self.options)
        run = Run(conf, self.options.hypothesis_profile)
        for world_size, placement in self.worlds:
            try:
                run.worlds.world(world_size, placement, conf)
            except Exception:  # noqa: BLE001 - the test starts it again, and reports what fails
                pass
        try:
            go = conn.recv()
        except (EOFError, OSError):
            go = None
        if go is None:
            run.close()
            return ("exit", 0)
        options = dataclasses.replace(self.options, targets=go.targets or self.options.targets)
        from harness.runner.pytest_items import hosted

        # pytest-style files: collected and run in one pytest run (harness.runner.pytest_items)
        return hosted(options.targets, options.folders, options.root, options.file_patterns,
                      lambda: self._collect_and_run(options, go, run, before), capture=options.buffer)

    def _collect_and_run(self, options: Options, go: Any, run: Any, before: set[str]) -> tuple[str, Any]:
        from harness.runner.session import console_for, header_lines, prepare, run_tests_here
        from harness.shared.errors import UsageError

        try:
            plan = prepare(options)
        except UsageError as exc:
            run.close()
            return ("usage", str(exc))
        first = set(go.first)
        plan.tests.sort(key=lambda t: t.id() not in first)  # stable: last round's failures first
        console = console_for(plan, sys.stdout)
        if go.number > 1:
            console.write(f"\nwatch: round {go.number}: {go.why}\n")
        console.write(header_lines(plan))
        ran = run_tests_here(plan, console, run=run)
        return ("ran", ran, _dependencies(plan, before, run))


def _skipped_roots() -> tuple[str, ...]:
    """Where installed code lives: the interpreter's own folders and every site folder, the user's too (``pip install
    --user``). A folder on the path through ``PYTHONPATH`` or a ``.pth`` file is the project's unless it is a site
    folder by its name (:func:`_installed`)."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    try:
        roots += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site module
        pass
    if site.ENABLE_USER_SITE or os.path.isdir(site.getusersitepackages()):
        roots.append(site.getusersitepackages())
    return tuple(sorted({os.path.realpath(r) + os.sep for r in roots}))


#: folder names that hold installed packages wherever they are (a venv reached through a path entry, a conda prefix)
_SITE_FOLDERS = ("site-packages", "dist-packages")


def _installed(path: str, skip: tuple[str, ...]) -> bool:
    """Whether ``path`` (a real path) is installed code, not the project's: under a root of :func:`_skipped_roots`
    or inside a folder named site-packages or dist-packages."""
    return path.startswith(skip) or any(part in _SITE_FOLDERS for part in Path(path).parts)


def _module_files() -> dict[str, str]:
    """Every imported module's source file that is the project's (not the standard library's, not installed).

    Installed packages are not watched: torch alone is over a thousand files, each parsed for its imports after
    every round (seconds), for a save that never comes."""
    skip = _skipped_roots()
    files = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py") or not os.path.isabs(path):
            continue  # torch.ops and torch.classes name a bare "_ops.py": no file of the project's
        path = os.path.realpath(path)
        if not _installed(path, skip):
            files[name] = path
    return files


def _imports(name: str, path: str) -> set[str]:
    """The modules a module's own ``import`` statements name (and their packages), anywhere in the file."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return set()
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - node.level + 1] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    with_packages = set()
    for item in found:
        parts = item.split(".")
        with_packages.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return with_packages


def _dependencies(plan: Any, before: set[str], run: Any) -> dict[str, Any]:
    """What the parent watches after this round: each test module's file and the project files it imports,
    the files the template holds, and the worlds this round used (started ahead for the next one)."""
    from harness.runner.selection import module_of

    files = _module_files()
    held = sorted({files[n] for n in before if n in files})
    graph: dict[str, set[str]] = {}

    def closure(root: str) -> set[str]:
        seen, todo = {root}, [root]
        while todo:
            name = todo.pop()
            if name not in graph:
                graph[name] = {m for m in _imports(name, files[name]) if m in files}
            for m in graph[name] - seen:
                seen.add(m)
                todo.append(m)
        return {files[n] for n in seen}

    # the conftest.py files pytest loaded (pytest-style files: harness.runner.pytest_items) govern the files below them
    conftests = [f for f in files.values() if os.path.basename(f) == "conftest.py"]
    modules = {}
    for name in sorted({module_of(t) for t in plan.tests}):
        if name in files:
            above = [c for c in conftests if files[name].startswith(os.path.dirname(c) + os.sep)]
            modules[files[name]] = sorted(closure(name) | set(above))
    worlds = []
    pools = getattr(run.worlds, "_pools", {})
    for pool in pools.values():
        worlds.append((pool.world_size, pool.placement))
    run.close()
    torch = sys.modules.get("torch")
    marker = getattr(getattr(torch, "version", None), "__file__", None)
    return {"modules": modules, "held": held + ([os.path.realpath(marker)] if marker else []),
            "worlds": tuple(worlds)}


# ---- the parent ----


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _test_files(options: Options) -> set[str]:
    """The test files under the target folders now (a new one is run when it appears)."""
    import fnmatch

    found = set()
    for where in options.targets or options.folders:
        where = where.partition("::")[0]  # pytest's path.py::Class::test
        path = Path(where) if os.path.isabs(where) else options.root / where
        if path.is_file() and where.endswith(".py"):
            found.add(os.path.realpath(path))
        elif path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
                found.update(os.path.realpath(os.path.join(dirpath, f)) for f in filenames
                             if any(fnmatch.fnmatch(f, p) for p in options.file_patterns))
    return found


def _short(path: str, root: Path) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def watch(options: Options) -> int:
    """Run ``options``' tests, then the tests of every file saved, until Ctrl-C; returns the exit code."""
    from harness.parent import template
    from harness.runner import forked
    from harness.runner.console import Console
    from harness.runner.jobs import take_ctrl_c
    from harness.runner.session import report
    from harness.shared.errors import UsageError
    from harness.shared.status import BAD, ExitCode

    why = forked.why_not_forked(options)
    if why:
        raise UsageError(f"--watch runs each round in a process forked from the template, and cannot here: {why}")
    if options.list_only:
        raise UsageError("--watch and --list: give one of them")
    take_ctrl_c()  # between rounds, Ctrl-C ends the watch: also when the watch was started with SIGINT ignored
    forked.sweep_temp_dirs()
    forked.own_temp_dir()
    wanted = forked.guess_wanted(options)
    template.warm(True)
    template.tell(wanted)
    by_path = all(t.endswith(".py") or os.path.isdir(options.root / t) for t in options.targets)
    failures: tuple[str, ...] = ()
    deps: dict[str, Any] = {"modules": {}, "held": [], "worlds": ()}
    code: int = ExitCode.OK
    go = Go((), (), 1, "")
    runner = forked.start_runner(Round(options), os.getpid())
    files: dict[str, float] = {}
    held: dict[str, float] = {}
    try:
        while True:
            # what the round is about to read: a save from now on, while it runs, starts the next round
            started_ns = time.time_ns()
            seen = {f: _mtime(f) for f in (files | held)}
            tests_now = _test_files(options)
            runner.conn.send(go)
            message, interrupted, stopped = forked._await_result(runner)
            runner.proc.join(30)
            if message is None:
                if stopped:
                    print(stuck_runner("SIGTERM" if interrupted == "terminated" else "Ctrl-C", forked.STOP_GRACE_S, None), file=sys.stderr)
                if interrupted:
                    return ExitCode.INTERRUPTED
                print(f"watch: the round's runner process ended ({forked._describe(runner.proc.exitcode)}) without "
                      "reporting; waiting for the next save", file=sys.stderr)
            elif message[0] == "usage":
                print(f"watch: {message[1]}", file=sys.stderr)
            elif message[0] == "ran":
                ran, deps = message[1], message[2]
                code = report(dataclasses.replace(options, slowest=0), Console(sys.stdout, ran.selected,
                                                                                 options.verbose), ran)
                failures = tuple(e.test_id for e in ran.entries if e.status in BAD)
                if ran.interrupted and pytest_outcomes.exit_status(ran.interrupted) is None:
                    return ExitCode.INTERRUPTED  # Ctrl-C; a pytest.exit() ends its round only
            # the next round's process, forked now, starts last round's worlds while the user edits
            runner = forked.start_runner(Round(options, deps["worlds"]), os.getpid())
            files = {f: _as_read(f, seen, started_ns) for fs in deps["modules"].values() for f in fs}
            held = {f: _as_read(f, seen, started_ns) for f in deps["held"]}
            sys.stdout.write(f"watch: waiting for a save ({len(files | held)} files; Ctrl-C ends)\n")
            sys.stdout.flush()
            changed, restart, new = _wait_for_save(files, held, tests_now, options)
            _forget_bytecode(changed | new)
            names = ", ".join(_short(f, options.root) for f in sorted(changed | new)[:3])
            if restart:
                runner.conn.send(None)
                runner.proc.join(30)
                template.stop()
                template.warm(True)
                template.tell(wanted)
                sys.stdout.write(f"watch: {', '.join(_short(f, options.root) for f in sorted(restart)[:3])} changed, "
                                 "which the template had imported: the template is started again\n")
                runner = forked.start_runner(Round(options, deps["worlds"]), os.getpid())
                targets: tuple[str, ...] = ()
            elif by_path:
                affected = {m for m, fs in deps["modules"].items() if changed & set(fs)} | new
                targets = tuple(sorted(affected)) or ()
                if not affected:  # imported, but by no test module's own imports that we could follow
                    targets = ()
            else:
                targets = ()
            go = Go(targets, failures, go.number + 1, f"{names} saved")
    except KeyboardInterrupt:
        return code
    finally:
        try:
            runner.conn.send(None)
        except (OSError, ValueError):
            pass
        runner.proc.join(10)
        if runner.proc.exitcode is None:
            runner.signal(15)
            runner.proc.join(10)
        template.stop()


def _as_read(path: str, seen: dict[str, float], started_ns: int) -> float:
    """The modification time to compare ``path``'s with from now on: the one it had when the round started (the
    round read that version), or, for a file the last round did not watch, its time now, unless that falls
    within the round (a save while the round ran, after it may have read the file: -2, so the next look sees a
    change and runs the file's tests again)."""
    if path in seen:
        return seen[path]
    now = _mtime(path)
    return -2 if now >= started_ns - _CLOCK_SLACK_NS else now


def _forget_bytecode(paths: set[str]) -> None:
    """Remove the saved files' cached bytecode: Python checks a ``.pyc`` against its source's modification time
    in whole seconds and its size, so a second save within the same second, of the same size (a digit changed),
    would otherwise run the first save's code in the next round."""
    import importlib.util

    for path in paths:
        for optimization in ("", 1, 2):
            try:
                os.remove(importlib.util.cache_from_source(path, optimization=optimization))
            except (OSError, NotImplementedError, ValueError):
                pass


def _wait_for_save(files: dict[str, float], held: dict[str, float], tests: set[str],
                   options: Options) -> tuple[set[str], set[str], set[str]]:
    """Wait until a watched file is saved or a new test file appears: (changed files, changed files the
    template holds, new test files)."""
    last_scan = time.monotonic()
    while True:
        time.sleep(POLL)
        changed = {f for f, m in files.items() if _mtime(f) != m}
        restart = {f for f, m in held.items() if _mtime(f) != m}
        new: set[str] = set()
        if time.monotonic() - last_scan > 1.0:
            last_scan = time.monotonic()
            new = _test_files(options) - tests
        if changed or restart or new:
            time.sleep(POLL)  # an editor that writes in steps: take them as one save
            changed |= {f for f, m in files.items() if _mtime(f) != m}
            return changed - set(held), restart, new
