"""Inside a rank: record its process state before a test, put it back after, and name what could not be put back.

A rank process runs test after test, so whatever one test changes in the process the next one would
inherit, and the next, innocent test would take the blame. Like CPython's regrtest (``save_env``), the
state is one table, :data:`RESOURCES`, of one row per kind of state (a :class:`Resource`): its name, how
to record it, how to put it back, and what to say when it cannot be put back. :func:`record` takes
every row's value before each test; :func:`restore` puts back, silently, what tests commonly change and
what can be put back:

* environment variables, working directory, ``sys.path`` / ``meta_path`` / ``path_hooks`` / ``argv``,
  ``sys.stdout`` / ``stderr`` / ``stdin``, hooks and tracing functions, the recursion limit, gc and umask;
* warnings filters, logging levels and handlers (of the loggers that existed before the test);
* signal dispositions and interval timers (the rank's own stack dumps are re-armed by ``rank.py``);
* torch's global flags: deterministic algorithms (and warn-only), intra-op threads, anomaly mode,
  default dtype and device, grad mode, autocast, the ``torch.backends`` flags, matmul precision,
  print options, global ``nn.Module`` hooks, torch function and dispatch modes left on their stacks;
* ``torch.compile`` state: dynamo's caches and counters when the test compiled anything, and the
  ``torch._dynamo`` / ``torch._inductor`` / ``torch._functorch`` configs;
* CUDA memory statistics (when CUDA is initialised; ``harness.ranks.cuda_state`` resets them).

The RNGs need no snapshot: every test starts from the same seeds (``rank_task._reset_state``).

What cannot be put back is returned as a list of plain sentences: a function or class of torch or
torch.distributed replaced and left so (other modules may hold the replacement), threads left
running, child processes left running (``harness.ranks.child_processes`` kills them). The parent then
replaces the ranks before the next test and names the test in the run's summary
(``harness.judging.verdict.world_changes``).

Adding a kind of state is adding one row to :data:`RESOURCES`. Every row's restore runs even when
another's fails (the failure is one of the sentences), then every row's check.

Everything here runs in a rank (or, for a local test, in the process that runs it).
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

from harness.ranks import child_processes, cuda_state

__all__ = ["Resource", "RESOURCES", "UNWATCHED", "Snapshot", "record", "restore"]


def _nothing_to_restore(saved: Any) -> None:
    """What cannot be put back is only checked."""


def _nothing_to_check(saved: Any) -> list[str]:
    """What ``restore`` put back is not reported."""
    return []


@dataclasses.dataclass(frozen=True)
class Resource:
    """One kind of process state a test may change: one row of :data:`RESOURCES`.

    ``record()`` returns its value before the test, or :data:`UNWATCHED` when there is nothing to watch
    (torch not imported, say; the row's restore and check are then skipped). ``restore(saved)`` puts it
    back, silently. ``check(saved)`` returns one sentence for each thing the test left that could not be
    put back; the parent replaces the ranks after such a test and names it.

    Example::

        Resource("umask", _get_umask, os.umask)
        Resource("threads", _thread_ids, check=_threads_left)    # cannot be put back: checked only
    """

    name: str
    record: Callable[[], Any]
    restore: Callable[[Any], None] = _nothing_to_restore
    check: Callable[[Any], list[str]] = _nothing_to_check


class _Unwatched:
    def __repr__(self) -> str:
        return "UNWATCHED"


#: what :attr:`Resource.record` returns when there is nothing to watch
UNWATCHED: Any = _Unwatched()


@dataclasses.dataclass
class Snapshot:
    """What a rank's process looked like before a test (taken by :func:`record`): each row's value, by name."""

    resources: tuple[Resource, ...]
    saved: dict[str, Any]


def record(resources: tuple[Resource, ...] | None = None) -> Snapshot:
    """Take a snapshot of the process state a test may change (every row of ``resources``, by default
    :data:`RESOURCES`); cheap (well under a millisecond).

    Example::

        snap = record()
        run_the_test()
        left = restore(snap)  # ["thread 'poller' left running"]
    """
    rows = RESOURCES if resources is None else resources
    return Snapshot(rows, {row.name: row.record() for row in rows})


def restore(snap: Snapshot) -> list[str]:
    """Put back what the test changed; return what could not be put back, one sentence each.

    Call it after tearDown and cleanups, with the test's output still captured (restoring ``sys.stdout``
    must come before the capture ends). Every row's restore runs, in the table's order, even when another
    fails; then every row's check, so that a check sees the process as the restores left it.
    """
    left: list[str] = []
    watched = [(row, snap.saved[row.name]) for row in snap.resources if snap.saved[row.name] is not UNWATCHED]
    for row, saved in watched:
        try:
            row.restore(saved)
        except Exception as exc:  # a broken restore must not lose the test's result; it is reported instead
            left.append(f"restore {row.name} failed: {type(exc).__name__}: {exc}")
    for row, saved in watched:
        try:
            left += row.check(saved)
        except Exception as exc:
            left.append(f"check {row.name} failed: {type(exc).__name__}: {exc}")
    return left


# ---- Python --------------------------------------------------------------------------------------

_SYS_ATTRS = ("stdout", "stderr", "stdin", "excepthook", "unraisablehook", "displayhook", "breakpointhook")


def _put_environ(saved: dict[str, str]) -> None:
    if os.environ != saved:
        for key in [k for k in os.environ if k not in saved]:
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def _getcwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed under us
        return ""


def _put_cwd(saved: str) -> None:
    if saved and _getcwd() != saved:
        os.chdir(saved)


def _sys_list(name: str) -> Resource:
    """``sys.<name>``, a list tests change in place or replace: the list object and a copy of its items,
    both put back (modules may hold the object)."""

    def get() -> tuple[list[Any], list[Any]]:
        obj = getattr(sys, name)
        return obj, list(obj)

    def put(saved: tuple[list[Any], list[Any]]) -> None:
        obj, items = saved
        if getattr(sys, name) is not obj or obj != items:
            obj[:] = items
            setattr(sys, name, obj)

    return Resource(f"sys.{name}", get, put)


def _sys_attr(name: str) -> Resource:
    """``sys.<name>``, a stream or hook tests replace."""

    def put(saved: Any) -> None:
        if getattr(sys, name, None) is not saved:
            setattr(sys, name, saved)

    return Resource(f"sys.{name}", lambda: getattr(sys, name, None), put)


def _put_trace(saved: tuple[Any, Any]) -> None:
    if (sys.gettrace(), sys.getprofile()) != saved:
        sys.settrace(saved[0])
        sys.setprofile(saved[1])


def _put_recursion_limit(saved: int) -> None:
    if sys.getrecursionlimit() != saved:
        sys.setrecursionlimit(saved)


def _put_gc(saved: tuple[bool, tuple[int, ...]]) -> None:
    enabled, threshold = saved
    if gc.isenabled() != enabled:
        (gc.enable if enabled else gc.disable)()
    if gc.get_threshold() != threshold:
        gc.set_threshold(*threshold)


def _get_umask() -> int:
    umask = os.umask(0o022)  # umask can only be read by setting it: its restore sets it back unconditionally
    os.umask(umask)
    return umask


def _put_socket_timeout(saved: float | None) -> None:
    if socket.getdefaulttimeout() != saved:
        socket.setdefaulttimeout(saved)


def _put_warnings(saved: tuple[list[Any], Any, Any]) -> None:
    filters, show, fmt = saved
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


# ---- logging -------------------------------------------------------------------------------------


def _put_logging_disable(saved: int) -> None:
    if logging.root.manager.disable != saved:
        logging.disable(saved)


def _loggers() -> dict[str, tuple[Any, int, list[Any], bool, bool]]:
    found = {"": (logging.root, logging.root.level, list(logging.root.handlers), True, logging.root.disabled)}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            found[name] = (logger, logger.level, list(logger.handlers), logger.propagate, logger.disabled)
    return found


def _put_loggers(saved: dict[str, tuple[Any, int, list[Any], bool, bool]]) -> None:
    if len(logging.Logger.manager.loggerDict) + 1 != len(saved):
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if name not in saved and isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
                # Made during the test (getLogger(__name__).setLevel(DEBUG)): a fresh process would make
                # it again with no level of its own. Its handlers are left: libraries add theirs on import.
                logger.setLevel(logging.NOTSET)
    for logger, level, handlers, propagate, disabled in saved.values():
        if logger.level != level:
            logger.setLevel(level)
        if logger.handlers != handlers:
            logger.handlers[:] = handlers
        if logger.propagate != propagate:
            logger.propagate = propagate
        if logger.disabled != disabled:
            logger.disabled = disabled


# ---- signals -------------------------------------------------------------------------------------

_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def _put_signals(saved: dict[int, Any]) -> None:
    for sig, handler in saved.items():
        if handler is None:
            continue  # installed outside Python; nothing Python can put back
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


def _put_timer(saved: float) -> None:
    if saved == 0.0 and signal.getitimer(signal.ITIMER_REAL)[0] != 0.0:
        signal.setitimer(signal.ITIMER_REAL, 0)  # an alarm the test left would fire in a later test


# ---- torch ---------------------------------------------------------------------------------------

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

_torch_flags: list[tuple[str, Callable[[], Any], Callable[[Any], Any]]] | None = None


def _with_torch(get: Callable[[], Any]) -> Callable[[], Any]:
    """A record function for torch's state: :data:`UNWATCHED` while torch is not imported (nothing to change)."""
    return lambda: get() if "torch" in sys.modules else UNWATCHED


def _default_device() -> Any:
    import torch

    return getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)


def _put_default_device(saved: Any) -> None:
    import torch

    if _default_device() is not saved:
        torch.set_default_device(None)  # the harness records after setting None (rank_task._reset_state)


def _function_modes() -> int:
    import torch

    return torch._C._len_torch_function_stack()


def _pop_function_modes(saved: int) -> None:
    import torch

    while torch._C._len_torch_function_stack() > saved:
        torch._C._pop_torch_function_stack()  # a `with SomeMode():` entered and never left


def _dispatch_modes() -> int:
    import torch

    return torch._C._len_torch_dispatch_stack()


def _pop_dispatch_modes(saved: int) -> None:
    import torch

    if torch._C._len_torch_dispatch_stack() > saved:
        from torch.utils._python_dispatch import _pop_mode

        while torch._C._len_torch_dispatch_stack() > saved:
            _pop_mode()


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


def _flags() -> dict[str, Any]:
    return {name: get() for name, get, _ in _flag_table()}


def _put_flags(saved: dict[str, Any]) -> None:
    for name, get, put in _flag_table():
        # Read again just before writing: putting back one flag may already have put back another.
        if name in saved and get() != saved[name]:
            put(saved[name])


def _print_options() -> dict[str, Any]:
    import torch

    return dict(vars(torch._tensor_str.PRINT_OPTS))


def _put_print_options(saved: dict[str, Any]) -> None:
    import torch

    opts = torch._tensor_str.PRINT_OPTS
    if vars(opts) != saved:
        vars(opts).update(saved)


def _module_hooks() -> tuple[dict[str, list[Any]], Any]:
    import torch.nn.modules.module as nn_module

    hooks = {name: list(getattr(nn_module, name)) for name in _MODULE_HOOKS if hasattr(nn_module, name)}
    return hooks, getattr(nn_module, "_global_is_full_backward_hook", None)


def _put_module_hooks(saved: tuple[dict[str, list[Any]], Any]) -> None:
    import torch.nn.modules.module as nn_module

    keys_before, full_backward = saved
    for name, keys in keys_before.items():
        hooks = getattr(nn_module, name)
        for key in [k for k in hooks if k not in keys]:
            del hooks[key]
    if getattr(nn_module, "_global_is_full_backward_hook", None) != full_backward:
        nn_module._global_is_full_backward_hook = full_backward


# ---- torch.compile -------------------------------------------------------------------------------

# torch.compile's configs: restored entry by entry (their values live in ContextVars of the main thread).
_CONFIGS = ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config")
_MISSING = object()


def _dynamo_frames() -> int:
    """Frames dynamo has compiled in this process (0 before it is imported)."""
    dynamo = sys.modules.get("torch._dynamo")
    return dynamo.convert_frame.FRAME_COUNTER if dynamo is not None else 0


def _reset_dynamo(saved: int) -> None:
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None and dynamo.convert_frame.FRAME_COUNTER != saved:
        # The test compiled something: a fresh process has no compiled code, no guards, and no
        # compiles counted toward recompile limits.
        dynamo.reset()
        dynamo.utils.counters.clear()


def _configs() -> dict[str, dict[str, Any]]:
    return {name: _config_values(sys.modules[name]) for name in _CONFIGS if name in sys.modules}


def _config_values(config: Any) -> dict[str, Any]:
    try:
        return {name: _override(entry) for name, entry in config._config.items() if entry.alias is None}
    except AttributeError:  # a torch whose config modules are built differently: not restored
        return {}


def _override(entry: Any) -> Any:
    """The value a test set on a config entry (a ContextVar in recent torch, a plain attribute before)."""
    value = entry.user_override
    return value.get() if isinstance(value, contextvars.ContextVar) else value


def _put_configs(saved_configs: dict[str, dict[str, Any]]) -> None:
    if not any(name in sys.modules for name in _CONFIGS):
        return
    from torch.utils._config_module import _UNSET_SENTINEL as unset

    for name in _CONFIGS:
        config = sys.modules.get(name)
        if config is None:
            continue
        saved = saved_configs.get(name)
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


# ---- what cannot be put back: checked, and the ranks replaced --------------------------------------

# Modules and classes whose functions tests replace ("dist.all_reduce = spy"). Only those already
# imported when a test starts are watched; additions (lazy submodules, caches) are never reported.
_WATCHED = ("torch", "torch.Tensor", "torch.nn.Module", "torch.nn.functional", "torch.autograd", "torch.cuda",
            "torch.distributed", "torch.distributed.distributed_c10d", "torch.distributed.device_mesh",
            "torch.distributed.fsdp", "torch.distributed.tensor", "torch.utils.checkpoint")
_THREAD_GRACE = 0.5  # seconds threads a test started get to finish before they count as left running


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


def _replaced(saved: dict[str, tuple[Any, dict[str, Any]]]) -> list[str]:
    left = []
    for name, (obj, before) in saved.items():
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


def _thread_ids() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def _threads_left(saved: set[int]) -> list[str]:
    started = [t for t in threading.enumerate() if t.ident not in saved and t.is_alive()]
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


# ---- the table -----------------------------------------------------------------------------------

#: Every kind of state a test may change, in the order :func:`restore` puts them back (torch's modes
#: and flags before the torch.compile state, the Python state after both) and then checks them.
RESOURCES: tuple[Resource, ...] = (
    # torch: put back
    Resource("torch default device", _with_torch(_default_device), _put_default_device),
    Resource("torch function modes", _with_torch(_function_modes), _pop_function_modes),
    Resource("torch dispatch modes", _with_torch(_dispatch_modes), _pop_dispatch_modes),
    Resource("torch flags", _with_torch(_flags), _put_flags),
    Resource("torch print options", _with_torch(_print_options), _put_print_options),
    Resource("nn.Module global hooks", _with_torch(_module_hooks), _put_module_hooks),
    Resource("CUDA memory statistics", _with_torch(lambda: None), lambda saved: cuda_state.reset_statistics()),
    # torch.compile: put back
    Resource("torch._dynamo caches", _dynamo_frames, _reset_dynamo),
    Resource("torch.compile configs", _configs, _put_configs),
    # Python: put back
    Resource("os.environ", os.environ.copy, _put_environ),
    Resource("cwd", _getcwd, _put_cwd),
    *(_sys_list(name) for name in ("path", "meta_path", "path_hooks", "argv")),
    *(_sys_attr(name) for name in _SYS_ATTRS),
    Resource("sys.settrace / setprofile", lambda: (sys.gettrace(), sys.getprofile()), _put_trace),
    Resource("sys.setrecursionlimit", sys.getrecursionlimit, _put_recursion_limit),
    Resource("gc", lambda: (gc.isenabled(), gc.get_threshold()), _put_gc),
    Resource("umask", _get_umask, os.umask),
    Resource("socket.setdefaulttimeout", socket.getdefaulttimeout, _put_socket_timeout),
    Resource("warnings", lambda: (list(warnings.filters), warnings.showwarning, warnings.formatwarning),
             _put_warnings),
    Resource("logging.disable", lambda: logging.root.manager.disable, _put_logging_disable),
    Resource("loggers", _loggers, _put_loggers),
    Resource("signal handlers", lambda: {s: signal.getsignal(s) for s in _SIGNALS}, _put_signals),
    Resource("interval timer", lambda: signal.getitimer(signal.ITIMER_REAL)[0], _put_timer),
    # cannot be put back: checked
    Resource("torch functions", _modules, check=_replaced),
    Resource("child processes", child_processes.running, check=child_processes.kill_left),
    Resource("threads", _thread_ids, check=_threads_left),
)
