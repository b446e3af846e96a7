"""One frozen settings object, built from the ``HARNESS_*`` environment variables when needed.

Every setting is defined once, in :data:`VARIABLES`: its variable, default, allowed values, meaning
and the :class:`Settings` field it feeds. Parsing, :func:`settings`'s checks of a runner's values, the runner's
``--help``, ``tools/env_report.py`` and the table in ``docs/settings.md`` (checked by
``tests/unit/test_docs.py``) all follow it.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Any, NamedTuple

from harness.shared.errors import UsageError

__all__ = ["Variable", "VARIABLES", "Settings", "settings", "variables", "toml_file",
           "DEVICE_CHOICES", "ENV_CHANGED_CHOICES", "DEFAULT_TIMEOUT"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "nccl", "cuda-shared")
ENV_CHANGED_CHOICES = ("warn", "fail", "off")
DEFAULT_TIMEOUT = 300.0


class Variable(NamedTuple):
    """One ``HARNESS_*`` setting. ``VARIABLES[name][0]`` is its default and ``[1]`` its meaning."""

    default: str  # as the environment would give it; "" = unset (see ``unset``)
    meaning: str  # one line, for --help and reports (docs/settings.md says more)
    field: str  # the Settings field it feeds
    kind: str  # "choice", "flag", "int", "float" or "text"
    choices: tuple[str, ...] = ()  # kind "choice": the allowed values
    minimum: float | None = None  # kinds "int" and "float"
    unset: str = ""  # default "": what leaving it unset means (the field is then None)

    @property
    def shown_default(self) -> str:
        """The default as docs/settings.md and --help show it: the value, or what unset means."""
        return f"`{self.default}`" if self.default else self.unset

    @property
    def allowed(self) -> str:
        """The values it takes, in words: "auto | cpu | cuda", "1 or 0", "an int >= 1"."""
        if self.kind == "choice":
            return " | ".join(self.choices)
        if self.kind == "flag":
            return "1 or 0"
        if self.kind == "text":
            return "a fault to sweep, such as kill(rank=1)"
        return f"{'an' if self.kind == 'int' else 'a'} {self.kind} >= {self.minimum:g}"


VARIABLES: dict[str, Variable] = {
    "HARNESS_DEVICE": Variable(
        "auto", "where tests run: auto (one GPU per rank on NCCL when there are enough, else the ranks share the GPUs "
        "over gloo, else CPU/gloo), cpu, cuda (NCCL or shared GPUs), nccl (one GPU per rank) or cuda-shared",
        "device", "choice", choices=DEVICE_CHOICES),
    "HARNESS_TIMEOUT": Variable(
        "", "seconds one test may run before its ranks' stacks are dumped and they are killed (overrides a "
        "class's `timeout`)", "timeout", "float", minimum=0.1, unset=f"class `timeout`, else {DEFAULT_TIMEOUT:g}"),
    "HARNESS_REUSE": Variable(
        "1", "1: rank processes serve test after test; 0: fresh processes for every test, as upstream",
        "reuse", "flag"),
    "HARNESS_TEMPLATE": Variable(
        "1", "1: rank processes are forked from a template process that imported torch once (milliseconds "
        "each); 0: each rank is spawned and imports torch itself (seconds each)", "template", "flag"),
    "HARNESS_THREADS": Variable(
        "", "intra-op threads per rank", "threads", "int", minimum=1, unset="cores // world size"),
    "HARNESS_SEED": Variable(
        "1234", "the seed every rank is given before each test", "seed", "int", minimum=0),
    "HARNESS_PEER_GRACE": Variable(
        "5", "seconds the other ranks get to finish after one rank fails or dies, before their stacks are dumped "
        "and they are killed", "peer_grace", "float", minimum=0),
    "HARNESS_START_TIMEOUT": Variable(
        "120", "seconds a new rank process may take to start and import", "start_timeout", "float", minimum=1),
    "HARNESS_SHOW_OUTPUT": Variable(
        "1", "1: print what each rank printed, as a [rank N] block, after each test; 0: only in failure reports",
        "show_output", "flag"),
    "HARNESS_OUTPUT_LIMIT": Variable(
        "65536", "bytes of one rank's output kept per test: the first and last half, the cut said between them",
        "output_limit", "int", minimum=1024),
    "HARNESS_TRIAGE": Variable(
        "1", "1: a failure in reused ranks is run again in fresh ranks: alone (the test's own failure?), after the "
        "tests that ran before it (bisected to the one that causes it), else flaky; 0: not checked",
        "triage", "flag"),
    "HARNESS_TRIAGE_BUDGET": Variable(
        "300", "seconds a run may spend checking failures in fresh ranks (HARNESS_TRIAGE); then it says it stopped",
        "triage_budget", "float", minimum=0),
    "HARNESS_ENV_CHANGED": Variable(
        "warn", "the ranks put back the process state after each test; a test that leaves what cannot be put back "
        "(a replaced torch function, a thread, a child process) gets fresh ranks after it and is named at the end "
        "of the run (warn), or also fails (fail); off: nothing is recorded or restored",
        "env_changed", "choice", choices=ENV_CHANGED_CHOICES),
    "HARNESS_PDB": Variable(
        "0", "1: when a test fails in a rank, a post-mortem (Pdb) prompt opens in the first rank to fail, at the "
        "frame that raised, before the ranks go on (needs a terminal; the runner's --pdb)", "pdb", "flag"),
    "HARNESS_DEBUGPY": Variable(
        "", "a port: each rank listens for an IDE's debugger (debugpy; VS Code's attach) on port + rank and waits for "
        "it before its first test; the time limits and the peer grace are off for the run (pip install "
        "distharness[debug])", "ide_port", "int", minimum=1, unset="off"),
    "HARNESS_SWEEP": Variable(
        "", "a fault swept over every test that runs on rank processes, such as kill(rank=1): each test runs once "
        "per collective the rank makes, the fault injected at it (the runner's --sweep; docs/faults.md)",
        "sweep", "text", unset="off"),
    "HARNESS_SWEEP_JOBS": Variable(
        "", "a sweep's points run side by side, each in a fresh world: how many at once", "sweep_jobs", "int",
        minimum=1, unset="the runner's -j, else max(3, cores // world size + 1)"),
}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def variables() -> list[tuple[str, str, str]]:
    """(name, default as shown, meaning) of every setting, for help texts.

    Example::

        for name, default, meaning in variables():
            print(f"{name} (default {default}): {meaning}")
    """
    return [(name, var.shown_default, var.meaning) for name, var in VARIABLES.items()]


@dataclasses.dataclass(frozen=True)
class Settings:
    """The settings in force; each field is fed by one entry of :data:`VARIABLES`."""

    device: str  # one of DEVICE_CHOICES
    timeout: float | None  # None: not set; the class or DEFAULT_TIMEOUT decides
    reuse: bool
    threads: int | None  # None: not set; cores // world size
    seed: int
    peer_grace: float
    start_timeout: float
    show_output: bool
    env_changed: str  # one of ENV_CHANGED_CHOICES (harness.ranks.isolation)
    output_limit: int = 65536
    template: bool = True
    triage: bool = True
    triage_budget: float = 300.0
    pdb: bool = False
    ide_port: int | None = None  # HARNESS_DEBUGPY: the port rank 0 listens on for a debugger; None: off
    sweep: str | None = None  # HARNESS_SWEEP: a fault swept over every test (harness.parent.sweep); None: off
    sweep_jobs: int | None = None  # HARNESS_SWEEP_JOBS: a sweep's points at once; None: -j, else by the cores

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


def parse(name: str, raw: str) -> Any:
    """The value of setting ``name`` given as the text ``raw``; a bad value raises a UsageError naming both.

    Example::

        parse("HARNESS_TIMEOUT", "60")    # 60.0
        parse("HARNESS_TIMEOUT", "")      # None: the class's timeout, else 300
    """
    var = VARIABLES[name]
    text = raw.strip()
    unset = f"unset it for the default ({var.default})" if var.default else "unset it"
    if var.kind == "choice":
        if text.lower() not in var.choices:
            raise UsageError(f"{name}={raw!r} is not one of {', '.join(var.choices)}; set one of them or {unset}")
        return text.lower()
    if var.kind == "flag":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise UsageError(f"{name}={raw!r} is not a flag; use 1 or 0, or {unset}")
    if text == "" and not var.default:
        return None
    if var.kind == "text":
        from harness.shared.faults import parse_sweep

        try:
            parse_sweep(text)
        except UsageError as exc:
            raise UsageError(f"{name}={raw!r}: {exc}") from None
        return text
    kind = int if var.kind == "int" else float
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number; set it to {var.allowed} or {unset}") from None
    if var.minimum is not None and value < var.minimum:
        raise UsageError(f"{name}={raw!r} is too small; set it to {var.allowed} or {unset}")
    return value


def _check(name: str, value: Any) -> None:
    """A value given to :func:`settings` for setting ``name``: what the environment could give, or an error."""
    var = VARIABLES[name]
    given = f"settings({var.field}={value!r}) ({name})"
    if var.kind == "choice" and value not in var.choices:
        raise UsageError(f"{given}: not one of {', '.join(var.choices)}")
    if var.kind == "flag" and not isinstance(value, bool):
        raise UsageError(f"{given}: give True or False")
    if var.kind == "text":
        if value is not None:
            from harness.shared.faults import parse_sweep

            if not isinstance(value, str):
                raise UsageError(f"{given}: give the fault as text, such as 'kill(rank=1)'")
            parse_sweep(value)
        return
    if var.kind in ("int", "float"):
        if value is None and not var.default:
            return
        number = (int,) if var.kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number):
            raise UsageError(f"{given}: give {var.allowed}" + ("" if var.default else ", or None for the default"))
        if var.minimum is not None and value < var.minimum:
            raise UsageError(f"{given}: give {var.allowed}")


_BY_FIELD = {var.field: name for name, var in VARIABLES.items()}


def settings(**values: Any) -> Settings:
    """The settings from the ``HARNESS_*`` variables as they are now, with ``values`` (checked) over them.

    Cheap; called where a run is made (``harness.parent.run.Run``), never at import. The runner passes its
    command line as ``values``; the ranks a run spawns are handed the result (harness.parent.pool), so they
    never read the environment again.

    Example::

        settings()                              # the environment's
        settings(device="cpu", timeout=60.0)    # the runner's --device cpu --timeout 60 over them
    """
    unknown = sorted(set(values) - set(_BY_FIELD))
    if unknown:
        raise UsageError(f"settings(): unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_BY_FIELD))}")
    for field, value in values.items():
        _check(_BY_FIELD[field], value)
    from_env = {var.field: parse(name, os.environ.get(name, var.default)) for name, var in VARIABLES.items()
                if var.field not in values}
    return Settings(**from_env, **values)


def configure(**values: Any) -> Settings:
    """Gone: settings are no longer set for a whole process. Raises a UsageError that says what to use."""
    shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
    raise UsageError(f"configure({shown}): settings belong to a run now, not to the process; make one with "
                     f"harness.parent.run.Run(harness.shared.config.settings({shown})) and hand it to the tests "
                     "(run.attach(result)), or set the HARNESS_* variables, or pass the runner's flags "
                     "(--device, --timeout)")


def toml_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A TOML file (a project's ``pyproject.toml``, whose ``[tool.distharness]`` and ``[tool.pytest.ini_options]``
    the runner reads) as a dict. Raises ValueError for a file that is not TOML (tomllib's TOMLDecodeError is one).

    Python 3.10 has no ``tomllib``: there it is the ``tomli`` package, which the install brings on that Python.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)
