"""Where rank processes come from: forked from a warm template that imported torch once, or spawned.

A spawned rank imports torch itself (about 2 s of CPU each on a 2-core machine, 6 s for the CUDA build);
a rank forked from a process that already imported it is ready in tens of milliseconds. The template is
``multiprocessing``'s forkserver with torch, ``torch.distributed``, FSDP, DCP, DTensor and the harness's
rank code preloaded: a separate process that imports them and nothing else (no GPU touched, no process
group, no parallel op, no thread), started early in the run so that its imports overlap the parent's,
and asked for a fork per rank. The forkserver passes each rank's pipe and exit status back as it does for
any ``multiprocessing`` process, so the pool starts, watches and stops a forked rank as a spawned one
(its status read once for every thread that asks: harness.parent.exit_status).

A forked rank must be the rank a spawn makes. What differs between the two is put right in the rank,
first thing (:class:`RankStart`): a spawned child inherits the parent's environment and stdout/stderr as
they are when it starts, a forked one the template's as they were when *it* started; so the parent's
environment and file descriptors 1 and 2 travel with the start request. Its GPU is chosen and
initialised after the fork, in the rank (harness.ranks.process), never in the template. Its parent is the
template, so it watches the run's process by pid (harness.ranks.process). The template ignores SIGTERM and SIGINT
(the run decides, and stops the ranks); it ends when the run's process ends and its last rank is gone,
and a run that closes its ranks stops it and waits for it (:func:`stop`), so that nothing outlives a run.

Where forking is not possible (no ``fork`` on the platform, a template that failed to start, variables
that torch reads at import time changed since the template started) the ranks are spawned, and the
run says so once (:func:`note`). ``HARNESS_TEMPLATE=0`` spawns them always.
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.reduction
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from harness.parent import exit_status

__all__ = ["PRELOAD", "BY_REQUEST", "RankStart", "context", "warm", "tell", "stop", "broken", "note", "unavailable",
           "adopt", "owned_dir", "remove_owned"]

#: what the template imports once, for every rank it forks (a module it cannot import is left to the rank).
#: DTensor is here for every test, not only DTensor tests: torch.testing.assert_close (assertEqual) imports
#: it on its first call, half a second in each fresh rank; numpy.random, which every rank seeds, for the same
#: reason. The harness's own modules come last: the template's import of this module waits for the run's list
#: of what its tests use (:func:`tell`).
PRELOAD = ["torch", "torch.distributed", "torch.distributed.tensor", "numpy", "numpy.random", "harness",
           "harness.parent.template", "harness.ranks.process", "harness.ranks.comms", "harness.ranks.isolation",
           "harness.ranks.cuda_state", "harness.classes.case", "harness.runner.forked"]

#: packages the template imports too when the run's test modules imported them (FSDP and DCP alone cost
#: the template about as much again as DTensor; a test that uses neither should not wait for them)
BY_REQUEST = ("torch.distributed.fsdp", "torch.distributed.checkpoint", "torch.distributed._composable",
              "torch.distributed.tensor.parallel", "torch.distributed.pipelining", "torch.distributed.algorithms",
              "torch.distributed.optim", "torch.distributed.nn")

#: set only in the template's environment: the file in which the run lists what else to import (:func:`tell`)
_LIST_VAR = "HARNESS_TEMPLATE_PRELOAD_LIST"

#: set only in the template's own environment, while it starts: its import of this module then makes it
#: ignore SIGTERM and SIGINT (a rank's environment is the run's, where it is never set)
_IN_TEMPLATE = "HARNESS_TEMPLATE_PROCESS"

#: variables that torch or the libraries under it read once, when they are imported: a rank forked from a
#: template that imported them under other values would not be the rank a spawn makes
#: (CUDA_*, NCCL_*, GLOO_* are read when a rank first uses the GPU or makes a group: after the fork)
_IMPORT_TIME_PREFIXES = ("TORCH_", "PYTORCH_", "KMP_", "GOMP_", "OMP_", "MKL_", "LD_", "PYTHON")
#: read at import but set again in every rank (torch.set_num_threads), so they may differ
_SET_IN_RANK = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_lock = threading.Lock()
_TEMPLATE_PID = -1  # the template's own pid, in the template (set below), so that its fast exit is its own
#: pid: the template's; tracker: multiprocessing's resource tracker when the template's start started it
#: list: the file the template waits for (:func:`tell`), None once written
_state: dict[str, Any] = {"key": None, "broken": "", "noted": False, "pid": None, "tracker": None, "list": None,
                          "run_dir": None}
#: in the run's temporary folder (the template's ``_RUN["dir"]``): the folders its pools made, one a line
_OWNED = "harness-owned-folders"


def _import_time_env(env: Any = None) -> tuple[tuple[str, str], ...]:
    env = os.environ if env is None else env
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(_IMPORT_TIME_PREFIXES) and k not in _SET_IN_RANK and k not in (_IN_TEMPLATE, _LIST_VAR)))


def unavailable() -> str:
    """Why ranks cannot be forked from a template on this platform at all ("" when they can)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return f"this platform ({sys.platform}) has no fork server"
    return ""


def _launched() -> bool:
    from harness.shared.launcher import launched

    return launched()


def _server() -> Any:
    return multiprocessing.forkserver._forkserver  # the process's one fork server (the stdlib keeps it so)


def warm(use_template: bool | None = None) -> None:
    """Start the template now, in the background, so that its imports overlap the parent's own.

    Cheap and idempotent: a run calls it when it starts (the runner before it imports the test modules,
    ``run_tests()``, the pytest plugin), and so does a harness test class when it is defined (plain
    ``python -m unittest``); a pool that needs ranks calls :func:`context`, which starts it if nothing
    did. Nothing is started in a rank, under torchrun (its ranks are launched), or with HARNESS_TEMPLATE=0
    (``use_template`` False; None: read it from the environment).
    """
    if multiprocessing.current_process().name != "MainProcess" or os.environ.get(_IN_TEMPLATE) or _launched():
        return  # a rank, the template itself, or a torchrun rank
    if use_template is None:
        try:
            from harness.shared.config import settings

            use_template = settings().template
        except Exception:  # noqa: BLE001 - a bad HARNESS_* value is reported where the tests read it
            return
    if not use_template:
        return
    try:
        with _lock:
            if _state["broken"] or unavailable():
                return
            _ensure_running()
    except Exception as exc:  # noqa: BLE001 - any failure here only means: spawn instead
        _state["broken"] = f"the template could not start ({type(exc).__name__}: {exc})"


def adopt() -> None:
    """In a runner process forked from the template (harness.runner.forked): its ranks are forked from the
    same template, never from one of its own, and it never stops that template (its client does)."""
    from multiprocessing import resource_tracker

    server = _server()
    # multiprocessing's own check would start a new fork server here (it knows no pid of the template's)
    server.ensure_running = resource_tracker.ensure_running
    _state["adopted"] = True
    _state["key"] = _import_time_env()
    _state["list"] = None


def _ensure_running() -> None:
    if _state.get("adopted"):
        return
    server = _server()
    key = _import_time_env()
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None and _state["pid"] == pid:
        try:
            alive = os.waitpid(pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            alive = False
        if alive:
            return
    server.set_forkserver_preload(list(PRELOAD))
    tracker_before = _tracker_pid()
    from multiprocessing import util

    # in multiprocessing's temporary folder of this process: removed with it at exit
    # named after the run's pid too: the template watches that process, not its own parent as it finds it
    # (a run that ends while the template still imports torch, ``--list``, would already be gone then)
    _state["list"] = os.path.join(util.get_temp_dir(),
                                  f"harness-template-preload-{os.getpid()}-{time.monotonic_ns()}")
    _state["run_dir"] = util.get_temp_dir()
    os.environ[_IN_TEMPLATE] = "1"
    os.environ[_LIST_VAR] = _state["list"]
    try:
        server.ensure_running()  # starts multiprocessing's resource tracker too, when none runs
    finally:
        os.environ.pop(_IN_TEMPLATE, None)
        os.environ.pop(_LIST_VAR, None)
    _state["key"] = key
    _state["pid"] = getattr(server, "_forkserver_pid", None)
    if tracker_before is None and _state["tracker"] is None:
        _state["tracker"] = _tracker_pid()


def _tracker() -> Any:
    from multiprocessing import resource_tracker

    return getattr(resource_tracker, "_resource_tracker", None)  # the process's one tracker


def _tracker_pid() -> int | None:
    return getattr(_tracker(), "_pid", None)


def context(use_template: bool = True) -> tuple[multiprocessing.context.BaseContext, str]:
    """The context to start ranks with: the template's, or spawn and why ("" when forked, or when
    ``use_template`` is False: HARNESS_TEMPLATE=0 asked for spawn, and needs no note)."""
    spawn = exit_status.context("spawn")
    if not use_template:
        return spawn, ""
    why = unavailable() or _state["broken"]
    if not why:
        try:
            with _lock:
                _ensure_running()
        except Exception as exc:  # noqa: BLE001
            _state["broken"] = why = f"the template could not start ({type(exc).__name__}: {exc})"
    now = _import_time_env()
    if not why and _state["key"] != now:
        changed = sorted({k for k, _ in set(_state["key"]) ^ set(now)})
        why = (f"{', '.join(changed)} changed since the template imported torch, and torch reads "
               f"{'them' if len(changed) > 1 else 'it'} at import")
    if why:
        return spawn, why
    tell()  # the template forks nothing before it has the list
    return exit_status.context("forkserver"), ""


def tell(wanted: list[str] | None = None) -> None:
    """Tell the template what else to import: ``wanted``, else the packages of :data:`BY_REQUEST` that this
    process has imported by now (the test modules' imports, once they are collected). Once per template; the runner
    calls it right after collecting, so that the template imports them while the run goes on, and the
    first world's start (:func:`context`) and :func:`stop` call it if nothing did.
    """
    if not _lock.acquire(timeout=5.0):  # bounded: stop() calls it from a second SIGTERM's handler too
        return
    try:
        path, _state["list"] = _state["list"], None
    finally:
        _lock.release()
    if path is None:
        return
    if wanted is None:
        wanted = [name for name in BY_REQUEST if name in sys.modules]
    try:
        with open(path + ".tmp", "w") as f:
            f.write("\n".join(wanted) + "\n")
        os.replace(path + ".tmp", path)  # whole, or not there
    except OSError:
        pass  # the template goes on when the run's process ends


def owned_dir(prefix: str) -> str:
    """A new folder for the run (a pool's: ``tempfile.mkdtemp``'s place and mode), named to the template before it
    exists: should the run be killed (SIGKILL) before its ranks have started, none of them can remove it, and the
    template, the run's last process, does.

    The ranks of a pool whose run was killed remove its folder themselves (harness.ranks.process); a rank the
    template was still forking when the run died never runs a line of the harness (it finds its start pipe
    closed and exits), and the template outlives every rank it forked. Where ranks are spawned, nobody outlives
    the run to remove it.
    """
    run_dir = _RUN.get("dir") if _state.get("adopted") else _state["run_dir"]
    for _ in range(100):
        path = os.path.join(tempfile.gettempdir(), prefix + secrets.token_hex(4))
        if run_dir and os.path.isdir(run_dir):
            try:
                with open(os.path.join(run_dir, _OWNED), "a") as f:
                    f.write(path + "\n")  # before the folder exists: no moment at which a kill leaves it unnamed
            except OSError:
                pass  # the ranks remove it, as they always have
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    return tempfile.mkdtemp(prefix=prefix)


def remove_owned() -> None:
    """In the run's process, once the runner process it started has ended, however it ended (a crash, the watchdog,
    SIGKILL): remove the folders named by :func:`owned_dir` that it left (the ones it removed itself are gone)."""
    _remove_owned_of(_state["run_dir"])


def _remove_owned_of(run_dir: str | None) -> None:
    """Remove the folders listed in ``run_dir`` by :func:`owned_dir` (those still there)."""
    try:
        with open(os.path.join(run_dir or "", _OWNED)) as f:
            owned = f.read().splitlines()
    except OSError:
        return
    for path in owned:
        shutil.rmtree(path, ignore_errors=True)


def _await_list() -> None:
    """In the template, as it starts: wait for the run's list (:func:`tell`) and import what it names.

    It imports no more until the run's process has collected its tests (or ends); its fork loop starts
    after, so no rank is forked from a template that is half way through an import.
    """
    path = os.environ.pop(_LIST_VAR, None)
    if not path:
        return
    run = int(os.path.basename(path).split("-")[3])
    _RUN.update(pid=run, dir=os.path.dirname(path))
    while not os.path.exists(path):
        if not _alive(run):
            return  # the run is gone: the template ends with it
        time.sleep(0.002)
    with open(path) as f:
        names = f.read().split()
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - left to the rank, which reports it as the test's error
            pass
    # (the rest of PRELOAD after this module, imported here rather than after it returns, so that all is in)
    for name in PRELOAD[PRELOAD.index(__name__) + 1:]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - as above
            pass
    # Everything the template imported is moved out of the collector's reach, as Python's documentation advises
    # before fork() without exec(): a rank's collections then never walk (and copy on write) the template's
    # objects (7 to 9% less CPU for a whole run: docs/speed.md).
    gc.freeze()


def _alive(pid: int) -> bool:
    """Whether the run's process still runs (the template's parent, but the template may find it gone)."""
    if os.getppid() != pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def broken(why: str) -> None:
    """The template failed to fork a rank: spawn from now on, in this process."""
    _state["broken"] = f"the template failed ({why})"


def note(why: str) -> None:
    """Say once per process that ranks are spawned rather than forked, and why."""
    if _state["noted"] or not why:
        return
    _state["noted"] = True
    try:
        sys.stderr.write(f"harness: rank processes are spawned, not forked from a template: {why} "
                         "(each rank imports torch itself: slower, same results)\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass


def stop(unused: bool = False, wait: float = 10.0) -> None:
    """Stop the template once no rank of this process needs it, and wait until it has exited.

    Called when a run has closed every pool (harness.parent.pool), and by the SIGTERM path before the process
    exits: when it returns, the template is gone (reaped, not merely asked), so a run leaves no process
    behind. The template exits when the last holder of its "alive" pipe closes it: this process (here)
    and its ranks (closed, and waited for, by the pools). A rank the run could not stop would hold it
    open; after ``wait`` seconds the template is killed rather than let the run's exit hang on it.

    ``unused``: no rank was ever forked from it (a run whose tests all run in this process): it is killed
    at once rather than left to finish importing torch, which would hold the run's stdout and stderr open
    (a caller reading them through a pipe would wait for it) and a core.
    """
    tell()  # a template still waiting for the list would not see its pipe close
    # Bounded: a second SIGTERM stops the template from its handler, perhaps while this thread holds the lock
    if not _lock.acquire(timeout=5.0):
        return
    try:
        server = _server()
        pid = getattr(server, "_forkserver_pid", None)
        if pid is None or pid != _state["pid"]:
            return  # none started, or not ours (a program's own fork server is left alone)
        _state["pid"] = None
        try:
            # Not the stdlib's own ForkServer._stop: it waits without a bound (a rank left holding the
            # pipe would hang the run's exit), and Python 3.11 and 3.12 differ in what it resets. The
            # three attributes below are the ones both versions read in ensure_running.
            with server._lock:
                os.close(server._forkserver_alive_fd)
                address = server._forkserver_address
                server._forkserver_alive_fd = server._forkserver_address = server._forkserver_pid = None
            if isinstance(address, str) and not address.startswith("\0"):
                try:
                    os.unlink(address)
                except OSError:
                    pass
        except Exception:  # noqa: BLE001 - another stdlib: the template ends with the process instead
            return
        if unused:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # it ignores SIGTERM (the run decides); no rank of it to lose
    finally:
        _lock.release()
    _reap(pid, wait)
    _stop_tracker(wait)


def _stop_tracker(wait: float) -> None:
    """Stop multiprocessing's resource tracker, when the template's start started it and it still runs.

    Nothing else stops it: it ends when the last holder of its pipe (this process, at its exit) closes it,
    after the run's process has exited, and so outlives the run (as an orphan, or a zombie where nothing
    reaps orphans). It is stopped only now that the ranks (which held the pipe too) and the template are
    gone, and started again by multiprocessing if the program needs it later. Its own ``_stop`` waits
    without a bound; ``_fd`` and ``_pid`` are what Python 3.8 to 3.13 keep.
    """
    pid = _state["tracker"]
    _state["tracker"] = None
    tracker = _tracker()
    if pid is None or tracker is None or _tracker_pid() != pid:
        return
    try:
        with tracker._lock:
            fd, tracker._fd, tracker._pid = tracker._fd, None, None
            if fd is not None:
                os.close(fd)
    except Exception:  # noqa: BLE001 - another stdlib: it ends with the process instead
        return
    _reap(pid, wait)


def _reap(pid: int, wait: float) -> None:
    """Wait for the template to exit (it does at once: its exit skips the interpreter's teardown), killing
    it after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    delay = 0.001
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    except (ChildProcessError, ProcessLookupError):
        pass  # already reaped (by a handler of the program's own), or not our child


#: in the template: the run's process and its temporary folder (multiprocessing's, where the list is)
_RUN: dict[str, Any] = {}


def _exit_now() -> None:
    """The template's exit, once its last rank is gone: at once, without tearing down the modules it
    preloaded (torch's teardown takes about half a second, during which the run would wait for it).

    A run that was killed (SIGKILL) could not remove its temporary folder, nor the folders of pools whose ranks
    had not started yet (:func:`owned_dir`): the template, its last process, does (only when the run is gone: a live
    run removes its own)."""
    if os.getpid() == _TEMPLATE_PID:
        if _RUN and not _alive(_RUN["pid"]):
            _remove_owned_of(_RUN["dir"])
            shutil.rmtree(_RUN["dir"], ignore_errors=True)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)


class _Fd:
    """A file descriptor of the parent, sent to the forked rank as a ``multiprocessing.Pipe`` end is."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _rebuild_fd, (multiprocessing.reduction.DupFd(self.fd),)


def _rebuild_fd(dup: Any) -> int:
    return dup.detach()


class RankStart:
    """What a forked rank takes from the parent, as a spawned one would have: environment, stdout, stderr.

    Made in the parent for each rank it starts (:meth:`capture`), applied in the rank before anything
    else (:meth:`apply`). For a spawned rank it is ``None``: the operating system does the same.
    """

    def __init__(self, env: dict[str, str], stdio: tuple[Any, Any]) -> None:
        self.env = env
        self.stdio = stdio

    @classmethod
    def capture(cls, **env: str) -> "RankStart":
        """The parent's environment now (with ``env`` over it) and its fds 1 and 2."""
        return cls({**os.environ, **env}, (_Fd(1), _Fd(2)))

    @classmethod
    def of_fds(cls, env: dict[str, str], fds: tuple[int | None, ...]) -> "RankStart":
        """``env``, and the fds 0, 1, 2 given (a runner process's: harness.runner.forked); None: /dev/null."""
        return cls(env, tuple(_Fd(fd) if fd is not None else None for fd in fds))

    def apply(self) -> None:
        targets = (1, 2) if len(self.stdio) == 2 else (0, 1, 2)
        for target, fd in zip(targets, self.stdio):
            if fd is None:
                fd = os.open(os.devnull, os.O_RDWR)
            if isinstance(fd, int) and fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.environ.clear()
        os.environ.update(self.env)
        dist = sys.modules.get("torch.distributed")
        if dist is not None and hasattr(dist, "set_debug_level_from_env"):
            # TORCH_DISTRIBUTED_DEBUG is read when torch.distributed is imported: read it again here
            dist.set_debug_level_from_env()


if os.environ.get(_IN_TEMPLATE) == "1" and multiprocessing.current_process().name == "MainProcess":
    # This import is the template's own preload: the run, not a signal to the terminal's process group,
    # decides when the template ends (it ends with the run's process and its last rank).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The last exit hook registered is the first run: when the template ends (its alive pipe closed),
    # it ends now; the ranks it forked never run exit hooks (they end with os._exit).
    _TEMPLATE_PID = os.getpid()
    atexit.register(_exit_now)
    _await_list()
