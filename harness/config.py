"""One frozen settings object, built from the ``HARNESS_*`` environment variables when needed."""
from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any

from harness.errors import UsageError

__all__ = ["Settings", "settings", "configure", "output_limit", "DEVICE_CHOICES", "ENV_CHANGED_CHOICES"]

DEVICE_CHOICES = ("auto", "cpu", "cuda")
ENV_CHANGED_CHOICES = ("warn", "fail", "off")

# name -> (default, one-line meaning); the README's table says the same for users.
VARIABLES: dict[str, tuple[str, str]] = {
    "HARNESS_DEVICE": ("auto", "auto | cpu | cuda: where tests run (auto: CUDA/NCCL when there are enough GPUs, else CPU/gloo)"),
    "HARNESS_TIMEOUT": ("", "seconds one test may run before its ranks' stacks are dumped and they are killed (overrides a class's `timeout`; default 300)"),
    "HARNESS_REUSE": ("1", "1: rank processes serve test after test; 0: fresh processes for every test, as upstream"),
    "HARNESS_THREADS": ("", "intra-op threads per rank (default: cores // world size, at least 1)"),
    "HARNESS_SEED": ("1234", "the seed every rank is given before each test"),
    "HARNESS_PEER_GRACE": ("5", "seconds the other ranks get to finish after one rank fails or dies, before their stacks are dumped and they are killed"),
    "HARNESS_START_TIMEOUT": ("120", "seconds a new rank process may take to start and import"),
    "HARNESS_SHOW_OUTPUT": ("1", "1: print what each rank printed, as a [rank N] block, after each test; 0: only in failure reports"),
    "HARNESS_OUTPUT_LIMIT": ("65536", "bytes of one rank's output kept per test: the first and last half, the cut said between them"),
    "HARNESS_ENV_CHANGED": ("warn", "warn | fail | off: the ranks put back the process state after each test; a test that leaves what cannot be put back (a replaced torch function, a thread, a child process) gets fresh ranks after it and is named at the end of the run (warn), or also fails (fail); off: nothing is recorded or restored"),
}

DEFAULT_TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class Settings:
    device: str
    timeout: float | None  # None: not set in the environment; the class or DEFAULT_TIMEOUT decides
    reuse: bool
    threads: int | None
    seed: int
    peer_grace: float
    start_timeout: float
    show_output: bool
    env_changed: str  # "warn", "fail" or "off" (harness.isolation)
    output_limit: int = 65536

    def timeout_for(self, class_timeout: Any, test_id: str = "") -> float:
        """The environment wins over the class so that a run can raise or lower every limit at once.

        A class's ``timeout`` may be seconds or a ``datetime.timedelta`` (upstream's continuous tests).
        """
        if self.timeout is not None:
            return self.timeout
        if class_timeout is None:
            return DEFAULT_TIMEOUT
        if isinstance(class_timeout, datetime.timedelta):
            class_timeout = class_timeout.total_seconds()
        if isinstance(class_timeout, bool) or not isinstance(class_timeout, (int, float)) or class_timeout <= 0:
            raise UsageError(f"{test_id}: timeout = {class_timeout!r} on the class; give seconds > 0 "
                             "(e.g. timeout = 120) or a datetime.timedelta")
        return float(class_timeout)


def _get(name: str) -> str:
    return os.environ.get(name, VARIABLES[name][0]).strip()


def _number(name: str, kind: type, minimum: float) -> float | int | None:
    raw = _get(name)
    if raw == "":
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number; set it to a {kind.__name__} >= {minimum} or unset it") from None
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be >= {minimum}")
    return value


def _flag(name: str) -> bool:
    raw = _get(name).lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"{name}={raw!r} is not a flag; use 1 or 0")


#: values set in this process over the environment's (the runner's command line: harness.config.configure)
_overrides: dict[str, Any] = {}


def configure(**values: Any) -> Settings:
    """Set settings for this process over the ``HARNESS_*`` environment, and return the result.

    The runner passes its command line this way instead of writing environment variables. Rank
    processes receive the parent's settings when they start (harness.pool).

    Example::

        configure(device="cpu", timeout=60.0)
    """
    names = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(f"configure(): unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    if "device" in values and values["device"] not in DEVICE_CHOICES:
        raise UsageError(f"device={values['device']!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if "env_changed" in values and values["env_changed"] not in ENV_CHANGED_CHOICES:
        raise UsageError(f"env_changed={values['env_changed']!r} is not one of {', '.join(ENV_CHANGED_CHOICES)}")
    _overrides.update(values)
    return settings()


def settings() -> Settings:
    """Read the ``HARNESS_*`` variables now (cheap; called where a value is needed, never at import),
    with whatever :func:`configure` set in this process on top."""
    base = _from_environment()
    return dataclasses.replace(base, **_overrides) if _overrides else base


def _from_environment() -> Settings:
    device = _get("HARNESS_DEVICE").lower()
    if device not in DEVICE_CHOICES:
        raise UsageError(
            f"HARNESS_DEVICE={os.environ.get('HARNESS_DEVICE')!r} is not one of {', '.join(DEVICE_CHOICES)}; "
            "use auto (GPUs when there are enough, else CPU), cpu or cuda"
        )
    env_changed = _get("HARNESS_ENV_CHANGED").lower()
    if env_changed not in ENV_CHANGED_CHOICES:
        raise UsageError(
            f"HARNESS_ENV_CHANGED={os.environ.get('HARNESS_ENV_CHANGED')!r} is not one of "
            f"{', '.join(ENV_CHANGED_CHOICES)}; use warn (report tests that alter the process), fail (they fail) "
            "or off (restore nothing)"
        )
    return Settings(
        device=device,
        timeout=_number("HARNESS_TIMEOUT", float, 0.1),
        reuse=_flag("HARNESS_REUSE"),
        threads=_number("HARNESS_THREADS", int, 1),
        seed=int(_number("HARNESS_SEED", int, 0)),
        peer_grace=float(_number("HARNESS_PEER_GRACE", float, 0)),
        start_timeout=float(_number("HARNESS_START_TIMEOUT", float, 1)),
        show_output=_flag("HARNESS_SHOW_OUTPUT"),
        output_limit=int(_number("HARNESS_OUTPUT_LIMIT", int, 1024)),
        env_changed=env_changed,
    )


def output_limit() -> int:
    """HARNESS_OUTPUT_LIMIT, for the places that bound a rank's output (a bad value: the default; the parent
    has already refused it with a message when the run started)."""
    try:
        return settings().output_limit
    except UsageError:
        return int(VARIABLES["HARNESS_OUTPUT_LIMIT"][0])
