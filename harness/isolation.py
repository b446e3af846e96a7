"""Record a rank's process state before a test, restore it after, and name what could not be restored.

A rank process runs test after test, so whatever one test changes in the process the next one would
inherit, and the next, innocent test would take the blame. Like CPython's regrtest (``save_env``),
:func:`record` takes a snapshot before each test and :func:`restore` puts back, silently, what tests
commonly change and what can be put back:

* environment variables, working directory, ``sys.path`` / ``meta_path`` / ``path_hooks`` / ``argv``,
  ``sys.stdout`` / ``stderr`` / ``stdin``, hooks and tracing functions, the recursion limit, gc and umask;
* warnings filters, logging levels and handlers (of the loggers that existed before the test);
* signal dispositions and interval timers (the rank's own stack dumps are re-armed by ``rank.py``);
* torch's global flags: deterministic algorithms (and warn-only), intra-op threads, anomaly mode,
  default dtype and device, grad mode, autocast, the ``torch.backends`` flags, matmul precision,
  print options, global ``nn.Module`` hooks, torch function and dispatch modes left on their stacks;
* ``torch.compile`` state: dynamo's caches and counters when the test compiled anything, and the
  ``torch._dynamo`` / ``torch._inductor`` / ``torch._functorch`` configs;
* CUDA peak-memory statistics (when CUDA is initialised).

The RNGs need no snapshot: every test starts from the same seeds (``rank._reset_state``).

What cannot be put back is returned as a list of plain sentences: a function or class of torch or
torch.distributed replaced and left so (other modules may hold the replacement), threads left
running, child processes left running (they are killed). The parent then replaces the ranks before
the next test and names the test in the run's summary (``harness.verdict.world_changes``).

Everything here runs in a rank.
"""
from __future__ import annotations

import contextvars
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import types
import warnings
from typing import Any, Callable

__all__ = ["Snapshot", "record", "restore"]

# Modules and classes whose functions tests replace ("dist.all_reduce = spy"). Only those already
# imported when a test starts are watched; additions (lazy submodules, caches) are never reported.
_WATCHED = ("torch", "torch.Tensor", "torch.nn.Module", "torch.nn.functional", "torch.autograd", "torch.cuda",
            "torch.distributed", "torch.distributed.distributed_c10d", "torch.distributed.device_mesh",
            "torch.distributed.fsdp", "torch.distributed.tensor", "torch.utils.checkpoint")

# torch.compile's configs: restored entry by entry (their values live in ContextVars of the main thread).
_CONFIGS = ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config")

# (getter, setter) names in torch._C of the flags torch.backends and torch.* set process-wide; those a
# torch build lacks are left out. Order matters: the fp32 precisions come before the legacy TF32 flags
# they imply, so that putting back one does not undo the other.
_C_FLAGS = ("float32_matmul_precision", "cudnn_enabled", "cudnn_benchmark",
            "cudnn_deterministic", "cudnn_allow_tf32", "cublas_allow_tf32",
            "cublas_allow_fp16_reduced_precision_reduction", "cublas_allow_bf16_reduced_precision_reduction",
            "cublas_allow_fp16_accumulation", "cpu_allow_fp16_reduced_precision_reduction", "mkldnn_enabled",
            "mkldnn_deterministic", "nnpack_enabled", "deterministic_fill_uninitialized_memory", "warnAlways",
            "linalg_preferred_backend", "blas_preferred_backend", "math_sdp_allow_fp16_bf16_reduction",
            "dtensor_allow_implicit_replication", "autograd_fallback_mode")
_SDP = ("flash", "mem_efficient", "math", "cudnn", "overrideable", "fa3")
_FP32_PRECISION = (("generic", "all"), ("cuda", "matmul"), ("cuda", "all"), ("mkldnn", "matmul"),
                   ("mkldnn", "conv"), ("mkldnn", "rnn"), ("mkldnn", "all"), ("cudnn", "conv"), ("cudnn", "rnn"),
                   ("cudnn", "all"))
_MODULE_HOOKS = ("_global_buffer_registration_hooks", "_global_module_registration_hooks",
                 "_global_parameter_registration_hooks", "_global_backward_pre_hooks", "_global_backward_hooks",
                 "_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_always_called",
                 "_global_forward_hooks_with_kwargs")
_SYS_ATTRS = ("stdout", "stderr", "stdin", "excepthook", "unraisablehook", "displayhook", "breakpointhook")
_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
# Child processes a library keeps as a cache, neither reported nor killed: torch.compile's compile workers
# (they end with their parent).
_LIBRARY_CHILDREN = (os.path.join("_inductor", "compile_worker"),)
_THREAD_GRACE = 0.5  # seconds threads a test started get to finish before they count as left running
_MISSING = object()

_torch_flags: list[tuple[str, Callable[[], Any], Callable[[Any], Any]]] | None = None


@dataclasses.dataclass
class Snapshot:
    """What a rank's process looked like before a test (taken by :func:`record`)."""

    environ: dict[str, str]
    cwd: str
    sys_path: tuple[list[str], list[str]]  # the list object and a copy of its items
    sys_lists: dict[str, tuple[Any, list[Any]]]
    sys_attrs: dict[str, Any]
    trace: tuple[Any, Any]
    recursion_limit: int
    gc: tuple[bool, tuple[int, ...]]
    umask: int
    socket_timeout: float | None
    warnings: tuple[list[Any], Any, Any]
    loggers: dict[str, tuple[Any, int, list[Any], bool, bool]]
    logging_disable: int
    signals: dict[int, Any]
    timer: float
    threads: set[int]
    children: set[int]
    modules: dict[str, tuple[Any, dict[str, Any]]]
    torch: dict[str, Any]
    configs: dict[str, dict[str, Any]]


def record() -> Snapshot:
    """Take a snapshot of the process state a test may change; cheap (well under a millisecond).

    Example::

        snap = record()
        run_the_test()
        left = restore(snap)  # ["thread 'poller' left running"]
    """
    umask = os.umask(0o022)
    os.umask(umask)
    return Snapshot(
        environ=os.environ.copy(),
        cwd=_getcwd(),
        sys_path=(sys.path, list(sys.path)),
        sys_lists={name: (getattr(sys, name), list(getattr(sys, name))) for name in ("meta_path", "path_hooks", "argv")},
        sys_attrs={name: getattr(sys, name, None) for name in _SYS_ATTRS},
        trace=(sys.gettrace(), sys.getprofile()),
        recursion_limit=sys.getrecursionlimit(),
        gc=(gc.isenabled(), gc.get_threshold()),
        umask=umask,
        socket_timeout=socket.getdefaulttimeout(),
        warnings=(list(warnings.filters), warnings.showwarning, warnings.formatwarning),
        loggers=_loggers(),
        logging_disable=logging.root.manager.disable,
        signals={s: signal.getsignal(s) for s in _SIGNALS},
        timer=signal.getitimer(signal.ITIMER_REAL)[0],
        threads={t.ident for t in threading.enumerate() if t.ident is not None},
        children=set(_children(os.getpid())),
        modules=_modules(),
        torch=_torch_state(),
        configs={name: _config_values(sys.modules[name]) for name in _CONFIGS if name in sys.modules},
    )


def restore(snap: Snapshot) -> list[str]:
    """Put back what the test changed; return what could not be put back, one sentence each.

    Call it after tearDown and cleanups, with the test's output still captured (restoring ``sys.stdout``
    must come before the capture ends). Every step runs even when another fails.
    """
    left: list[str] = []
    for step in (_restore_torch, _restore_compile, _restore_python, _restore_logging, _restore_signals):
        try:
            step(snap)
        except Exception as exc:  # a broken restore must not lose the test's result; it is reported instead
            left.append(f"{step.__name__.lstrip('_').replace('_', ' ')} failed: {type(exc).__name__}: {exc}")
    for check in (_check_modules, _check_children, _check_threads):
        try:
            left += check(snap)
        except Exception as exc:
            left.append(f"{check.__name__.lstrip('_').replace('_', ' ')} failed: {type(exc).__name__}: {exc}")
    return left


# ---- Python ------------------------------------------------------------------------------------


def _getcwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed under us
        return ""


def _restore_python(snap: Snapshot) -> None:
    if os.environ != snap.environ:
        for key in [k for k in os.environ if k not in snap.environ]:
            del os.environ[key]
        for key, value in snap.environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
    if snap.cwd and _getcwd() != snap.cwd:
        os.chdir(snap.cwd)
    path_obj, path_items = snap.sys_path
    if sys.path is not path_obj or sys.path != path_items:
        path_obj[:] = path_items
        sys.path = path_obj
    for name, (obj, items) in snap.sys_lists.items():
        if getattr(sys, name) is not obj or obj != items:
            obj[:] = items
            setattr(sys, name, obj)
    for name, value in snap.sys_attrs.items():
        if getattr(sys, name, None) is not value:
            setattr(sys, name, value)
    if (sys.gettrace(), sys.getprofile()) != snap.trace:
        sys.settrace(snap.trace[0])
        sys.setprofile(snap.trace[1])
    if sys.getrecursionlimit() != snap.recursion_limit:
        sys.setrecursionlimit(snap.recursion_limit)
    enabled, threshold = snap.gc
    if gc.isenabled() != enabled:
        (gc.enable if enabled else gc.disable)()
    if gc.get_threshold() != threshold:
        gc.set_threshold(*threshold)
    os.umask(snap.umask)  # umask can only be read by setting it: set it back unconditionally
    if socket.getdefaulttimeout() != snap.socket_timeout:
        socket.setdefaulttimeout(snap.socket_timeout)
    filters, show, fmt = snap.warnings
    if warnings.filters != filters:
        warnings.filters[:] = filters
        _warnings_mutated()
    if warnings.showwarning is not show:
        warnings.showwarning = show
    if warnings.formatwarning is not fmt:
        warnings.formatwarning = fmt


def _warnings_mutated() -> None:
    """Tell the warnings machinery its filters changed (it caches which warnings were already shown)."""
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
        return
    with warnings._lock:  # type: ignore[attr-defined]  # Python 3.14
        warnings._filters_mutated_lock_held()  # type: ignore[attr-defined]


def _loggers() -> dict[str, tuple[Any, int, list[Any], bool, bool]]:
    found = {"": (logging.root, logging.root.level, list(logging.root.handlers), True, logging.root.disabled)}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            found[name] = (logger, logger.level, list(logger.handlers), logger.propagate, logger.disabled)
    return found


def _restore_logging(snap: Snapshot) -> None:
    if logging.root.manager.disable != snap.logging_disable:
        logging.disable(snap.logging_disable)
    if len(logging.Logger.manager.loggerDict) + 1 != len(snap.loggers):
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if name not in snap.loggers and isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
                # Made during the test (getLogger(__name__).setLevel(DEBUG)): a fresh process would make
                # it again with no level of its own. Its handlers are left: libraries add theirs on import.
                logger.setLevel(logging.NOTSET)
    for logger, level, handlers, propagate, disabled in snap.loggers.values():
        if logger.level != level:
            logger.setLevel(level)
        if logger.handlers != handlers:
            logger.handlers[:] = handlers
        if logger.propagate != propagate:
            logger.propagate = propagate
        if logger.disabled != disabled:
            logger.disabled = disabled


def _restore_signals(snap: Snapshot) -> None:
    for sig, handler in snap.signals.items():
        if handler is None:
            continue  # installed outside Python; nothing Python can put back
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    if snap.timer == 0.0 and signal.getitimer(signal.ITIMER_REAL)[0] != 0.0:
        signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm the test left would fire in a later test


# ---- torch -------------------------------------------------------------------------------------


def _flag_table() -> list[tuple[str, Callable[[], Any], Callable[[Any], Any]]]:
    """(name, getter, setter) for every process-wide torch flag this torch build has; built once."""
    global _torch_flags
    if _torch_flags is not None:
        return _torch_flags
    import torch

    C = torch._C
    table: list[tuple[str, Callable[[], Any], Callable[[Any], Any]]] = []

    def add(name: str, get: Callable[[], Any], put: Callable[[Any], Any]) -> None:
        try:
            get()
        except Exception:
            return  # not on this build or this machine
        table.append((name, get, put))

    getter = getattr(C, "_get_fp32_precision_getter", None)
    setter = getattr(C, "_set_fp32_precision_setter", None)
    if getter is not None and setter is not None:
        for backend, op in _FP32_PRECISION:
            add(f"fp32_precision {backend}.{op}", lambda b=backend, o=op: getter(b, o),
                lambda v, b=backend, o=op: setter(b, o, v))
    add("deterministic algorithms",
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]))
    for name in _C_FLAGS:
        get, put = getattr(C, f"_get_{name}", None), getattr(C, f"_set_{name}", None)
        if get is None or put is None:
            continue
        if isinstance(_safe(get), tuple):
            add(name, get, lambda v, put=put: put(*v))
        else:
            add(name, get, put)
    for name in _SDP:
        get, put = getattr(C, f"_get_{name}_sdp_enabled", None), getattr(C, f"_set_sdp_use_{name}", None)
        if get is not None and put is not None:
            add(f"sdp {name}", get, put)
    add("threads", torch.get_num_threads, torch.set_num_threads)
    add("anomaly", lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        lambda v: torch.set_anomaly_enabled(*v))
    add("default dtype", torch.get_default_dtype, torch.set_default_dtype)
    add("grad mode", torch.is_grad_enabled, torch.set_grad_enabled)
    if hasattr(C, "_is_multithreading_enabled") and hasattr(C, "_set_multithreading_enabled"):
        add("autograd multithreading", C._is_multithreading_enabled, C._set_multithreading_enabled)
    if hasattr(C, "_is_view_replay_enabled") and hasattr(C, "_set_view_replay_enabled"):
        add("view replay", C._is_view_replay_enabled, C._set_view_replay_enabled)
    for device in ("cpu", "cuda"):
        add(f"autocast {device}", lambda d=device: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)),
            lambda v, d=device: (torch.set_autocast_enabled(d, v[0]), torch.set_autocast_dtype(d, v[1])))
    add("autocast cache", torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled)
    _torch_flags = table
    return table


def _safe(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except Exception:
        return None


def _torch_state() -> dict[str, Any]:
    if "torch" not in sys.modules:
        return {}
    import torch
    import torch.nn.modules.module as nn_module

    state: dict[str, Any] = {name: get() for name, get, _ in _flag_table()}
    state["default device"] = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    state["function modes"] = torch._C._len_torch_function_stack()
    state["dispatch modes"] = torch._C._len_torch_dispatch_stack()
    state["print options"] = dict(vars(torch._tensor_str.PRINT_OPTS))
    state["module hooks"] = {name: list(getattr(nn_module, name)) for name in _MODULE_HOOKS if hasattr(nn_module, name)}
    state["full backward hook"] = getattr(nn_module, "_global_is_full_backward_hook", None)
    if "torch._dynamo" in sys.modules:
        state["dynamo frames"] = sys.modules["torch._dynamo"].convert_frame.FRAME_COUNTER
    return state


def _restore_torch(snap: Snapshot) -> None:
    if not snap.torch:
        return
    import torch
    import torch.nn.modules.module as nn_module

    saved = snap.torch
    if getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None) is not saved["default device"]:
        torch.set_default_device(None)  # the harness records after setting None (rank._reset_state)
    while torch._C._len_torch_function_stack() > saved["function modes"]:
        torch._C._pop_torch_function_stack()  # a `with SomeMode():` entered and never left
    if torch._C._len_torch_dispatch_stack() > saved["dispatch modes"]:
        from torch.utils._python_dispatch import _pop_mode

        while torch._C._len_torch_dispatch_stack() > saved["dispatch modes"]:
            _pop_mode()
    for name, get, put in _flag_table():
        # Read again just before writing: putting back one flag may already have put back another.
        if name in saved and get() != saved[name]:
            put(saved[name])
    opts = torch._tensor_str.PRINT_OPTS
    if vars(opts) != saved["print options"]:
        vars(opts).update(saved["print options"])
    for name, keys in saved["module hooks"].items():
        hooks = getattr(nn_module, name)
        for key in [k for k in hooks if k not in keys]:
            del hooks[key]
    if getattr(nn_module, "_global_is_full_backward_hook", None) != saved["full backward hook"]:
        nn_module._global_is_full_backward_hook = saved["full backward hook"]
    if torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()  # peak-memory assertions measure this test alone


def _config_values(config: Any) -> dict[str, Any]:
    try:
        return {name: _override(entry) for name, entry in config._config.items() if entry.alias is None}
    except AttributeError:  # a torch whose config modules are built differently: not restored
        return {}


def _override(entry: Any) -> Any:
    """The value a test set on a config entry (a ContextVar in recent torch, a plain attribute before)."""
    value = entry.user_override
    return value.get() if isinstance(value, contextvars.ContextVar) else value


def _restore_compile(snap: Snapshot) -> None:
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None and not any(name in sys.modules for name in _CONFIGS):
        return
    from torch.utils._config_module import _UNSET_SENTINEL as unset

    if dynamo is not None and dynamo.convert_frame.FRAME_COUNTER != snap.torch.get("dynamo frames", 0):
        # The test compiled something: a fresh process has no compiled code, no guards, and no
        # compiles counted toward recompile limits.
        dynamo.reset()
        dynamo.utils.counters.clear()
    for name in _CONFIGS:
        config = sys.modules.get(name)
        if config is None:
            continue
        saved = snap.configs.get(name)
        for key, entry in config._config.items():
            if entry.alias is not None:
                continue
            now = _override(entry)
            if saved is not None:
                was = saved.get(key, _MISSING)
                if was is _MISSING or now is was:
                    continue
            elif now is unset or now == entry.default:
                continue  # first imported during the test: back to the defaults it was imported with
            else:
                was = unset
            if was is unset:
                delattr(config, key)  # back to the default, and the config's caches marked stale ...
                entry.hide = False  # ... but delattr also hides the name (for mock.patch); show it again
            else:
                setattr(config, key, was)


# ---- what cannot be put back ---------------------------------------------------------------------


def _modules() -> dict[str, tuple[Any, dict[str, Any]]]:
    found = {}
    for name in _WATCHED:
        obj = _lookup(name)
        if obj is not None:
            found[name] = (obj, dict(vars(obj)))
    return found


def _lookup(name: str) -> Any:
    module = sys.modules.get(name)
    if module is not None:
        return module
    parent, _, attr = name.rpartition(".")
    owner = sys.modules.get(parent)
    return getattr(owner, attr, None) if owner is not None else None


def _check_modules(snap: Snapshot) -> list[str]:
    left = []
    for name, (obj, before) in snap.modules.items():
        now = vars(obj)
        for attr, old in before.items():
            new = now.get(attr, _MISSING)
            if new is old or not (callable(old) or isinstance(old, types.ModuleType)) or _torch_made(new):
                continue
            left.append(f"{name}.{attr} {'deleted' if new is _MISSING else 'replaced'}")
    return left


def _torch_made(value: Any) -> bool:
    """True for a replacement torch made itself: importing torch._dynamo wraps torch.manual_seed, say."""
    code = getattr(value, "__code__", None)
    if code is not None:
        return code.co_filename.startswith(_torch_dir())
    if value is _MISSING or isinstance(value, types.ModuleType):
        return False
    if isinstance(value, (type, types.BuiltinFunctionType)):
        module = getattr(value, "__module__", None) or ""
    else:
        module = type(value).__module__
    return module == "torch" or module.startswith("torch.")


def _torch_dir() -> str:
    return os.path.dirname(sys.modules["torch"].__file__) + os.sep


def _check_threads(snap: Snapshot) -> list[str]:
    started = [t for t in threading.enumerate() if t.ident not in snap.threads and t.is_alive()]
    deadline = time.monotonic() + _THREAD_GRACE
    for t in started:
        t.join(max(0.0, deadline - time.monotonic()))
    return [f"thread {t.name!r} left running" for t in started if t.is_alive() and not _idle_pool_worker(t)]


def _idle_pool_worker(thread: threading.Thread) -> bool:
    """An idle worker of a ThreadPoolExecutor something still holds (torch.compile keeps one as a cache).

    It runs nothing until work is submitted to it, and it ends once its executor is gone; a worker
    still running a task is not idle and is reported.
    """
    frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
    code = frame.f_code if frame is not None else None
    return code is not None and code.co_name == "_worker" and code.co_filename.endswith(
        os.path.join("concurrent", "futures", "thread.py"))


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (any of its threads); zombies included."""
    pids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            continue  # the thread ended, or a kernel without /proc/<pid>/task/<tid>/children
    return pids


def _process_info(pid: int) -> tuple[str, str]:
    """(state letter, command line) of a process; ("", "") when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, IndexError):
        return "", ""
    return state, cmd


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


def _check_children(snap: Snapshot) -> list[str]:
    left = []
    own_cmd = _process_info(os.getpid())[1]
    for pid in _children(os.getpid()):
        if pid in snap.children:
            continue
        state, cmd = _process_info(pid)
        if state in ("", "Z", "X"):
            _reap(pid)  # it ended; only its exit status was left to collect
            continue
        if any(marker in cmd for marker in _LIBRARY_CHILDREN):
            continue
        tree = [pid] + _descendants(pid)
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        _reap(pid)
        shown = "a fork of this rank" if cmd == own_cmd else f"`{cmd[:80]}{'...' if len(cmd) > 80 else ''}`"
        # how many it had started varies from moment to moment (and from rank to rank): not part of the text
        left.append(f"child process {shown} left running; killed, with any processes it started")
    return left


def _reap(pid: int) -> None:
    deadline = time.monotonic() + 2.0
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # reaped already (the test's Popen object, or SIGCHLD ignored)
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.01)
