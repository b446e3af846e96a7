"""Module paths of distharness 0.1, importable through 0.2 with a ``DeprecationWarning`` naming the new home.

0.2 put the modules in folders that say where they run (docs/layout.md). A test imports its names from
``harness`` itself, which did not change; code that reached into a module (``from harness.case import
MultiProcessTestCase``, ``from harness.config import settings``) keeps working for this release and is told
where the name lives now. A module that 0.2 split in two (``harness.debugging``, ``harness.collectives``,
``harness.capture``) answers with the names of both halves.

Example::

    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        from harness.case import MultiProcessTestCase   # the same class as harness.MultiProcessTestCase
    print(seen[0].message)   # harness.case moved to harness.classes.case ...
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any, Sequence

__all__ = ["MOVED", "install"]

#: old path (under harness.) -> where its names are now (under harness.), the first holding most of them
MOVED: dict[str, tuple[str, ...]] = {
    "config": ("shared.config",), "status": ("shared.status",), "outcome": ("shared.outcome",),
    "protocol": ("shared.protocol",), "placement": ("shared.placement",), "world": ("shared.world",),
    "grace": ("shared.grace",),
    "decorators": ("testing.decorators",), "subtests": ("testing.subtests",), "assertions": ("testing.assertions",),
    "rank": ("ranks.process",), "rank_task": ("ranks.task",), "comms": ("ranks.comms",),
    "isolation": ("ranks.isolation",), "child_processes": ("ranks.child_processes",),
    "cuda_state": ("ranks.cuda_state",), "gpu": ("ranks.gpu",),
    "verdict": ("judging.verdict",), "report": ("judging.report",), "report_text": ("judging.report_text",),
    "notes": ("judging.notes",), "fallback": ("judging.fallback",), "upstream": ("judging.upstream",),
    "triage": ("judging.triage",),
    "job_store": ("torchrun.job_store",),
    "run": ("parent.run",), "testrun": ("parent.testrun",), "pool": ("parent.pool",),
    "template": ("parent.template",), "hypothesis_support": ("parent.hypothesis_support",),
    "case": ("classes.case",), "compat": ("classes.compat", "inprocess.threaded_classes"),
    "local": ("inprocess.local",), "threaded": ("inprocess.threaded",), "threaded_pg": ("inprocess.threaded_pg",),
    "capture": ("ranks.capture", "shared.output"),
    "collectives": ("judging.analysis", "ranks.recorder", "parent.recorders"),
    "debugging": ("ranks.debugger", "parent.relay"),
}
#: the names ``harness.torchrun`` (a module in 0.1, a folder now) answered with, and their new homes
TORCHRUN_NAMES = {"LaunchedJob": "torchrun.job", "main_module_entry": "torchrun.job",
                  "launched": "shared.launcher", "launched_rank": "shared.launcher",
                  "report_stream": "shared.launcher"}


def _warn(old: str, new: Sequence[str], stacklevel: int) -> None:
    homes = " and ".join(f"harness.{n}" for n in new)
    warnings.warn(f"harness.{old} moved to {homes} in distharness 0.2 and goes in 0.3: import the public names "
                  "from harness itself (from harness import ...), or the others from their new module",
                  DeprecationWarning, stacklevel=stacklevel)


class _Forward(types.ModuleType):
    """The old module: each attribute read from the first new module that has it."""

    def __init__(self, old: str, new: Sequence[str]) -> None:
        super().__init__(f"harness.{old}")
        self.__dict__["_homes"] = [importlib.import_module(f"harness.{n}") for n in new]

    def __getattr__(self, name: str) -> Any:
        for home in self.__dict__["_homes"]:
            if hasattr(home, name):
                return getattr(home, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for home in self.__dict__["_homes"] for n in dir(home)})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, old = fullname.partition(".")
        if prefix != "harness" or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        old = spec.name.partition(".")[2]
        _warn(old, MOVED[old], stacklevel=5)
        return _Forward(old, MOVED[old])

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _torchrun_attribute(name: str) -> Any:
    """``harness.torchrun.NAME`` for a name 0.1's ``harness.torchrun`` module had (the folder's ``__getattr__``)."""
    if name not in TORCHRUN_NAMES:
        raise AttributeError(f"module 'harness.torchrun' has no attribute {name!r}")
    _warn(f"torchrun.{name}", [f"{TORCHRUN_NAMES[name]}.{name}"], stacklevel=4)
    return getattr(importlib.import_module(f"harness.{TORCHRUN_NAMES[name]}"), name)


def install() -> None:
    """Answer the old paths from now on (once a process; ``harness/__init__`` calls it)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
    folder = importlib.import_module("harness.torchrun")  # its __init__ imports nothing
    folder.__getattr__ = _torchrun_attribute  # type: ignore[attr-defined]  (PEP 562: read when a name is missing)
