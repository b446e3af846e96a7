"""The thin parent: a run's tests collected and run in one runner process forked from the template.

The process the user starts (``python -m harness``, a project's ``run_tests.py``, the ``distharness``
script) never imports torch: it starts the template (harness.parent.template), which imports torch once,
and asks it for one more process, the *runner process*, which collects the tests, starts their ranks
(forked from the same template), runs them and prints each test's line, exactly as a runner that imported
torch itself would. What the tests gave comes back as data (harness.runner.session.Ran: the entries a
``-j`` worker hands back too), and the parent writes the summary, JUnit XML, HTML and the times file and
returns the exit code.

The runner process is handed the parent's environment and its fds 0, 1 and 2 (the terminal: the lines go
there as they come, and a rank's ``(Pdb rank N)`` prompt is relayed from there). Ctrl-C is the parent's
to decide: the runner process ignores the terminal's SIGINT, and the parent passes it on once (SIGUSR2,
which the runner process turns into the KeyboardInterrupt a runner gets); SIGTERM is passed on as it is.
The runner process watches the parent by pid and stops its ranks when the parent is gone, however it
ended (SIGKILL too); the template ends when its last user is gone.

The same runner process serves ``--watch`` (harness.runner.watch) and the warm server
(harness.runner.server), which fork one per round or request from their own template.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness.runner.progress import keep_progress, lost_runner, stuck_runner
from harness.runner.session import Options, Ran
from harness.shared.processes import gone

__all__ = ["why_not_forked", "run_forked", "start_runner", "Runner", "runner_main", "sweep_temp_dirs",
           "own_temp_dir", "guess_wanted"]

#: the signal by which the parent (or the server) tells its runner process that the user pressed Ctrl-C
INTERRUPT = signal.SIGUSR2

#: the signal by which the thin parent has a runner process that does not end write every thread's stack
STACKS = signal.SIGUSR1

#: seconds a runner process gets to end after Ctrl-C or SIGTERM was passed on before it is stopped
STOP_GRACE_S = 10.0

#: a run's own temporary folder (multiprocessing's, where the template's socket is): named after the pid
#: of the process that made it, so that a later run removes it when that process was killed (SIGKILL)
_TEMP_PREFIX = "harness-run-"


def why_not_forked(options: Options) -> str:
    """Why this run cannot be a thin parent and runs its tests in its own process ("" when it can)."""
    from harness.parent import template
    from harness.shared import launcher

    if options.jobs > 1 or options.job_of is not None:
        return "--jobs runs its tests in worker processes of its own"
    if launcher.launched():
        return "a rank of a torchrun job runs its tests itself"
    try:
        from harness.shared.config import settings

        use = settings().template
    except Exception:  # noqa: BLE001 - the in-process path reports a bad HARNESS_* value as a usage error
        return "a HARNESS_* variable is not valid"
    if not use:
        return "HARNESS_TEMPLATE=0"
    return template.unavailable()


def sweep_temp_dirs() -> None:
    """Remove the temporary folders of runs whose process is gone (killed with SIGKILL: nothing of theirs
    could clean up). Only this user's, only folders named by :func:`own_temp_dir`."""
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = re.match(re.escape(_TEMP_PREFIX) + r"(\d+)-", name)
        if not m:
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
            continue  # its run is alive
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def own_temp_dir() -> str:
    """Give multiprocessing a temporary folder named after this process (instead of an anonymous ``pymp-*``),
    removed at exit and, if this process is killed before, by the next run (:func:`sweep_temp_dirs`)."""
    from multiprocessing import process, util

    config = process.current_process()._config
    if config.get("tempdir"):
        return config["tempdir"]
    path = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-")
    config["tempdir"] = path
    util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)
    return path


#: what in a test file's text says that its tests use a package the template may import for them
_WANTED_BY_TEXT = (
    (re.compile(r"torch\.distributed\.fsdp|\bfully_shard\b|\bFSDP"), "torch.distributed.fsdp"),
    (re.compile(r"torch\.distributed\.checkpoint|\bdcp\b"), "torch.distributed.checkpoint"),
    (re.compile(r"torch\.distributed\._composable"), "torch.distributed._composable"),
    (re.compile(r"torch\.distributed\.tensor\.parallel|parallelize_module"), "torch.distributed.tensor.parallel"),
    (re.compile(r"torch\.distributed\.pipelining"), "torch.distributed.pipelining"),
    (re.compile(r"torch\.distributed\.algorithms"), "torch.distributed.algorithms"),
    (re.compile(r"torch\.distributed\.optim"), "torch.distributed.optim"),
    (re.compile(r"torch\.distributed\.nn"), "torch.distributed.nn"),
)


def guess_wanted(options: Options, limit: int = 400) -> list[str]:
    """The packages of ``template.BY_REQUEST`` the run's test files name, read as text (the parent imports
    none of them): the template imports them before it forks. A wrong guess costs time, never a result."""
    import fnmatch

    files: list[Path] = []
    for where in options.targets or options.folders:
        path = (options.root / where) if not os.path.isabs(where) else Path(where)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
                files += [Path(dirpath, f) for f in filenames
                          if any(fnmatch.fnmatch(f, p) for p in options.file_patterns)]
                if len(files) > limit:
                    break
    wanted: list[str] = []
    for f in files[:limit]:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        wanted += [name for pattern, name in _WANTED_BY_TEXT if name not in wanted and pattern.search(text)]
    return wanted


def _stdin_fd() -> int | None:
    try:
        os.fstat(0)
        return 0
    except OSError:
        return None


@dataclasses.dataclass
class Runner:
    """A runner process started from the template: its process, and the parent's end of its pipe."""

    proc: Any
    conn: Any

    def interrupt(self) -> None:
        """The user pressed Ctrl-C: the runner process stops as a runner does (its tests marked interrupted)."""
        self.signal(INTERRUPT)

    def stop(self) -> None:
        """Stop a runner process that does not end: every thread's Python stack to stderr (:data:`STACKS`, which
        needs no GIL), then SIGKILL (its ranks and the template see it gone and end too)."""
        self.signal(STACKS)
        self.proc.join(2.0)
        self.signal(signal.SIGKILL)
        self.proc.join(5.0)

    def signal(self, signum: int) -> None:
        try:
            if self.proc.pid and self.proc.exitcode is None:
                os.kill(self.proc.pid, signum)
        except OSError:
            pass


def start_runner(job: Any, client_pid: int, fds: tuple[int | None, int, int] | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, progress: str | None = None) -> Runner:
    """Fork a runner process from this process's template, to do ``job`` (:class:`Options`, or a watch
    round's ``Round``) with the environment ``env`` and the fds ``fds`` (0, 1, 2; this process's by default),
    watching ``client_pid`` (it stops its ranks and ends when that process is gone). ``progress``: a file in
    which it keeps the test it runs, read if it dies (harness.runner.progress)."""
    from harness.parent import exit_status, template

    fds = fds or (_stdin_fd(), 1, 2)
    ctx = exit_status.context("forkserver")
    parent_end, child_end = ctx.Pipe(duplex=True)
    start = template.RankStart.of_fds(dict(os.environ if env is None else env), fds)
    proc = ctx.Process(target=runner_main, name="harness-runner",
                       args=(child_end, job, start, client_pid, cwd, progress))
    proc.start()
    child_end.close()
    return Runner(proc, parent_end)


def run_forked(options: Options) -> Any:
    """Run ``options`` as a thin parent: returns the exit code, or None when it cannot (the caller then runs
    the tests in this process); raises UsageError as :func:`harness.runner.session.prepare` does."""
    from harness.parent import template
    from harness.parent.pool import Terminated
    from harness.runner.console import Console
    from harness.runner.session import report

    from harness.runner.session import may_start_ranks

    if why_not_forked(options) or not may_start_ranks(options):
        return None  # (no test file names the harness: no test wants ranks, nor the template's torch)
    sweep_temp_dirs()
    own_temp_dir()
    template.warm(True)
    template.tell(guess_wanted(options))
    ctx, why = template.context(True)
    if why:
        template.stop(unused=True)
        return None
    progress = os.path.join(own_temp_dir(), "runner-progress")
    runner = start_runner(options, os.getpid(), progress=progress)
    message, interrupted, stopped = _await_result(runner)
    runner.proc.join(30)
    template.remove_owned()
    template.stop()
    from harness.shared.status import ExitCode

    if message is None:
        if stopped:
            print(stuck_runner("SIGTERM" if interrupted == "terminated" else "Ctrl-C", STOP_GRACE_S, progress),
                  file=sys.stderr)
        if interrupted:
            return ExitCode.TERMINATED if interrupted == "terminated" else ExitCode.INTERRUPTED
        words, counts = lost_runner(_describe(runner.proc.exitcode), progress, runner.proc.exitcode)
        print(words, file=sys.stderr)
        print(counts)
        return ExitCode.FAILED
    kind, payload = message
    if kind == "usage":
        from harness.shared.errors import UsageError

        raise UsageError(payload)
    if kind == "exit":
        return ExitCode(payload)
    ran: Ran = payload
    return report(options, Console(sys.stdout, ran.selected, options.verbose), ran)


def _describe(code: int | None) -> str:
    from harness.shared.outcome import describe_exit

    return describe_exit(code) if code is not None else "did not end"


def _await_result(runner: Runner) -> tuple[Any, str, bool]:
    """Wait for the runner process's result, passing Ctrl-C and SIGTERM on; (its message or None, "",
    "interrupted" or "terminated", whether it had to be stopped). A runner process that has not ended
    :data:`STOP_GRACE_S` after the signal was passed on, or at a second Ctrl-C, is stopped: its stacks
    (:data:`STACKS`), then SIGKILL. Its Python handlers cannot run while a thread holds the GIL; this process's can."""
    import multiprocessing.connection

    state: dict[str, Any] = {"interrupted": "", "since": None, "now": False}

    def on_int(signum: int, frame: Any) -> None:
        if not state["interrupted"]:
            state["interrupted"], state["since"] = "interrupted", time.monotonic()
            runner.interrupt()
        else:
            state["now"] = True  # a second Ctrl-C: stop it now

    def on_term(signum: int, frame: Any) -> None:
        if state["interrupted"] != "terminated":
            state["interrupted"], state["since"] = "terminated", time.monotonic()
            runner.signal(signal.SIGTERM)

    old = (signal.signal(signal.SIGINT, on_int), signal.signal(signal.SIGTERM, on_term))
    try:
        while True:
            try:  # (a signal handler that returns does not end a wait: it is retried, hence the short one)
                ready = multiprocessing.connection.wait([runner.conn, runner.proc.sentinel], timeout=0.5)
            except InterruptedError:
                continue
            if runner.conn in ready:
                try:
                    return runner.conn.recv(), state["interrupted"], False
                except (EOFError, OSError):
                    return None, state["interrupted"], False
            if runner.proc.sentinel in ready:
                return None, state["interrupted"], False
            if state["now"] or (state["since"] is not None and time.monotonic() - state["since"] > STOP_GRACE_S):
                runner.stop()
                return None, state["interrupted"], True
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])


# ---- in the runner process ----


def _on_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _ignore_ctrl_c(signum: int, frame: Any) -> None:
    """The terminal's SIGINT in a runner process: its client passes the user's Ctrl-C on as INTERRUPT."""


def _watch_client(client_pid: int) -> None:
    """End this runner process (as SIGTERM ends a runner: its ranks stopped) when its client is gone."""
    while True:
        time.sleep(0.2)
        if gone(client_pid):
            os.kill(os.getpid(), signal.SIGTERM)
            return


def become_runner(start: Any, client_pid: int, cwd: str | None = None) -> None:
    """What a process forked from the template does first to be a runner: the client's environment, fds and
    directory; Ctrl-C from the client only; SIGTERM as a runner takes it; ranks from the same template."""
    from harness.parent import template
    from harness.parent.pool import install_sigterm_handler

    if start is not None:
        start.apply()
    if cwd:
        os.chdir(cwd)
    # The terminal's Ctrl-C: the client decides, and says so (INTERRUPT). Not SIG_IGN: an ignored signal stays
    # ignored across exec, so every process a test here starts (a `python -m harness` of its own, a tool) would
    # be deaf to Ctrl-C; a Python handler is reset to the default in them.
    signal.signal(signal.SIGINT, _ignore_ctrl_c)
    signal.siginterrupt(signal.SIGINT, False)
    signal.signal(INTERRUPT, _on_interrupt)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the template ignores it; a runner unwinds on it
    install_sigterm_handler()  # (a second SIGTERM at once, from the group and from the client, is the same one)
    template.adopt()
    threading.Thread(target=_watch_client, args=(client_pid,), daemon=True, name="harness-watch-client").start()


def runner_main(conn: Any, job: Any, start: Any, client_pid: int, cwd: str | None = None,
                progress: str | None = None) -> None:
    """The runner process: collect, run, send back what the tests gave (or a usage error, or an exit code).
    A crash (SIGSEGV, SIGABRT, ...) prints its Python stacks (faulthandler) to the client's stderr."""
    import faulthandler

    become_runner(start, client_pid, cwd)
    keep_progress(progress)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(STACKS, file=sys.stderr, all_threads=True)  # asked by the thin parent (Runner.stop)
    try:
        if hasattr(job, "run_in"):  # a watch round (harness.runner.watch.Round) or a server's job
            message = job.run_in(conn)
        else:
            message = _run_options(job)
    finally:
        _end_relay()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(message)
    except (OSError, ValueError):
        pass


def _run_options(options: Options) -> tuple[str, Any]:
    from harness.runner.pytest_items import hosted

    # pytest-style files: collected and run in one pytest session (harness.runner.pytest_items)
    return hosted(options.targets, options.folders, options.root, options.file_patterns,
                  lambda: _collect_and_run(options), capture=options.buffer)


def _collect_and_run(options: Options) -> tuple[str, Any]:
    from harness.runner.session import console_for, execute, header_lines, prepare, run_tests_here
    from harness.shared.errors import UsageError

    try:
        plan = prepare(options)
    except UsageError as exc:
        return ("usage", str(exc))
    if options.list_only:
        return ("exit", int(execute(plan)))
    console = console_for(plan, sys.stdout)
    console.write(header_lines(plan))
    return ("ran", run_tests_here(plan, console))


def _end_relay() -> None:
    """The debugger relay's socket folder goes with the runner process (which ends without exit hooks)."""
    relay = sys.modules.get("harness.parent.relay")
    if relay is not None and getattr(relay, "_RELAY", None) is not None:
        relay._RELAY.close()
