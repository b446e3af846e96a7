"""Splitting the selected tests over N machines (``--shard``) or N workers (``--jobs``) by recorded durations,
each class whole, and the times file itself.

The unit of a split is a class: its tests and its ``setUpClass``/``tearDownClass`` run in one place, so a
fixture a class starts in ``setUpClass`` starts once. A test that has no class of its own (a module that
failed to import, a ``unittest.FunctionTestCase``) is a unit by itself. A unit weighs its tests' recorded
durations plus its class's recorded set-up/tear-down time.

The times file (JSON, written by ``--update-times``)::

    {"version": 2,
     "tests":   {"pkg.test_mod.TestX.test_a": 1.25, ...},   # seconds per test id (module.Class.method)
     "classes": {"pkg.test_mod.TestX": 3.5, ...}}           # seconds per class id (module.Class) spent
                                                            # outside its tests: setUpClass, tearDownClass
                                                            # (setUpModule with a module's first class,
                                                            # tearDownModule with its last)

A class id has no method part, so the two never clash; :func:`load_times` returns both in one mapping. A
version 1 file (``tests`` only) or a flat ``{id: seconds}`` mapping is read too. Ids that no longer exist
are ignored.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import unittest
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["Split", "class_key", "class_unit", "unit_of", "split", "split_by_class", "shard",
           "load_times", "save_times"]


def class_key(test_id: str) -> str:
    """``pkg.mod.Class.test_x`` -> ``pkg.mod.Class``: the class id of a test id (an id without a dot: itself)."""
    return test_id.rpartition(".")[0] or test_id


def class_unit(cls: Any) -> str | None:
    """The class id (``pkg.mod.Class``) of a test class; None for what has no class of its own: a module that
    failed to import (unittest's ``_FailedTest``), a ``FunctionTestCase``, anything not a TestCase class."""
    if not isinstance(cls, type) or not issubclass(cls, unittest.TestCase):
        return None
    if issubclass(cls, unittest.FunctionTestCase):
        return None
    unit = cls.__dict__.get("harness_unit")
    if unit:  # the tests pytest runs (harness.runner.pytest_items): a pytest class, or a module's functions
        return unit
    if cls.__name__ in ("_FailedTest", "ModuleSkipped"):  # harness.runner.selection.is_load_failure: a module's stand-in
        return None
    return f"{cls.__module__}.{cls.__qualname__}"


def unit_of(test: Any) -> str:
    """What a split keeps whole for ``test``: its class id (``pkg.mod.Class``); for a module that failed to
    import or a ``FunctionTestCase``, which have no class of their own, the test's own id.

    Example::

        unit_of(some_test)  # "test_distributed.test_pipeline.TestPipeline"
    """
    return class_unit(type(test)) or test.id()


@dataclasses.dataclass(frozen=True)
class Split:
    """Which shard (0-based) each test goes to, and what each shard is expected to take."""

    owners: list[int]  # owners[n]: the shard of the n-th test
    loads: list[float]  # expected seconds per shard
    default: float  # the weight of a test without a recorded time
    known: int  # how many of the tests had a recorded time
    units: list[str] = dataclasses.field(default_factory=list)  # units[n]: the class (unit) of the n-th test
    known_classes: int = 0  # how many of the classes had a recorded set-up/tear-down time
    weights: dict[str, float] = dataclasses.field(default_factory=dict)  # each unit's expected seconds

    def note(self, index: int, times_file: str) -> str:
        """The header line: what shard ``index`` (1-based) of this split runs."""
        mine = self.owners.count(index - 1)
        units = dict(zip(self.units, self.owners))
        my_units = sum(owner == index - 1 for owner in units.values())
        classes = f" (and the set-up of {self.known_classes} classes)" if self.known_classes else ""
        return (f"shard {index}/{len(self.loads)}: {mine} of {len(self.owners)} tests in {my_units} of {len(units)} "
                f"classes, about {self.loads[index - 1]:.0f} s expected (shards: "
                f"{', '.join(f'{x:.0f}' for x in self.loads)} s; {self.known} tests timed in "
                f"{os.path.relpath(times_file)}{classes}, the others counted at {self.default:.1f} s)")

    def parts(self) -> list[list[int]]:
        """The test indices of each shard, in order; shards without a test left out."""
        parts: list[list[int]] = [[] for _ in self.loads]
        for n, owner in enumerate(self.owners):
            parts[owner].append(n)
        return [part for part in parts if part]

    def id_parts(self, ids: Sequence[str]) -> list[list[str]]:
        """:meth:`parts` as the test ids ``ids`` (those this split was made of, in the same order)."""
        return [[ids[n] for n in part] for part in self.parts()]


def split(ids: Sequence[str], count: int, times: Mapping[str, float], units: Sequence[str] | None = None) -> Split:
    """Greedy longest-first bin packing of ``ids`` over ``count`` shards, each unit (class) whole.

    ``units[n]`` is the unit of ``ids[n]`` (default: :func:`class_key` of the id; :func:`shard` passes
    :func:`unit_of` of each test). A unit weighs its tests' times plus the unit's own record in ``times``
    (its class set-up/tear-down); a test without a record weighs the mean of those with one. Sums are exact
    (``math.fsum``) and ties are broken by unit id, so neither the order of ``ids`` nor that of ``times``
    changes the split: every machine given the same tests and times file computes the same one.

    Example::

        split(["a.T.t1", "a.T.t2", "b.U.t1"], 2, {"a.T.t1": 10.0, "b.U": 4.0}).owners  # [0, 0, 1]
    """
    units = [class_key(i) for i in ids] if units is None else list(units)
    if len(units) != len(ids):
        raise ValueError(f"split: {len(ids)} ids but {len(units)} units (give one unit per id, or none)")
    if count < 1:
        raise ValueError(f"split: {count} shards (give at least 1)")
    weight, default, known, own = _weights(ids, units, times)
    members: dict[str, list[str]] = {}
    for test_id, unit in zip(ids, units):
        members.setdefault(unit, []).append(test_id)
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for unit in sorted(members, key=lambda u: (-weight[u], u)):
        target = min(range(count), key=lambda s: (loads[s], s))
        loads[target] += weight[unit]
        owner[unit] = target
    return Split([owner[u] for u in units], loads, default, len(known), units, len(own), weight)


def _weights(ids: Sequence[str], units: Sequence[str], times: Mapping[str, float]
             ) -> tuple[dict[str, float], float, list[float], dict[str, float]]:
    """Each unit's expected seconds (its tests' times, a test without a record at the mean of those with one, plus
    the unit's own record: its class's set-up and tear-down), that default, the recorded times, the units' own."""
    known = [times[i] for i in ids if i in times]
    default = (math.fsum(known) / len(known) if known
               else (math.fsum(times.values()) / len(times) if times else 1.0))
    members: dict[str, list[str]] = {}
    for test_id, unit in zip(ids, units):
        members.setdefault(unit, []).append(test_id)
    test_ids = set(ids)
    own = {u: times[u] for u in members if u in times and u not in test_ids}  # a class's set-up/tear-down
    weight = {u: math.fsum([*(times.get(i, default) for i in tests), own.get(u, 0.0)])
              for u, tests in members.items()}
    return weight, default, known, own


def split_by_class(ids: Sequence[str], count: int, times: Mapping[str, float],
                   units: Sequence[str] | None = None) -> list[list[str]]:
    """``ids`` in at most ``count`` parts (``--jobs``), each class whole, in suite order, no part empty: :func:`split`.

    Example::

        split_by_class(["m.A.t1", "m.A.t2", "m.B.t1"], 2, {"m.A.t1": 5.0})   # [["m.A.t1", "m.A.t2"], ["m.B.t1"]]
    """
    return split(ids, count, times, units).id_parts(ids)


def shard(tests: Sequence[unittest.TestCase], index: int, count: int,
          times: Mapping[str, float]) -> tuple[list[unittest.TestCase], Split]:
    """Shard ``index`` of ``count`` (1-based, as ``--shard I N``): its tests in suite order, and the split.

    Example::

        mine, how = shard(tests, 1, 2, load_times(".ci/test-times.json"))
    """
    how = split([t.id() for t in tests], count, times, [unit_of(t) for t in tests])
    return [t for n, t in enumerate(tests) if how.owners[n] == index - 1], how


def _read(path: str) -> tuple[dict[str, float], dict[str, float]]:
    """The test records and the class records of a times file; none (with a warning) when it cannot be read."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, {}
    except (OSError, ValueError) as exc:
        print(f"warning: cannot read the times file {path}: {exc}; sharding by test count (fix or delete the "
              "file; --update-times writes a new one)", file=sys.stderr)
        return {}, {}
    if not isinstance(data, dict):
        return {}, {}

    def seconds(section: Any) -> dict[str, float]:
        if not isinstance(section, dict):
            return {}
        return {str(k): float(v) for k, v in section.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    return seconds(data.get("tests", data)), seconds(data.get("classes"))


def load_times(path: str) -> dict[str, float]:
    """Seconds per test id and per class id (its set-up/tear-down) from a times file; none (with a warning)
    when it cannot be read.

    Example::

        load_times("test-times.json")  # {"pkg.test_x.TestX.test_a": 1.25, "pkg.test_x.TestX": 3.5, ...}
    """
    tests, classes = _read(path)
    return {**tests, **classes}


def save_times(path: str, new: Mapping[str, float], classes: Mapping[str, float] | None = None) -> None:
    """Merge ``new`` test durations and ``classes`` set-up/tear-down times into the times file (written
    whole, then renamed into place).

    Example::

        save_times("test-times.json", {"pkg.test_x.TestX.test_a": 1.25}, {"pkg.test_x.TestX": 3.5})
    """
    old_tests, old_classes = _read(path)
    old_tests.update({k: round(v, 3) for k, v in new.items()})
    old_classes.update({k: round(v, 3) for k, v in (classes or {}).items()})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": 2,
                   "note": "written by --update-times (python -m harness, run_tests.py): tests: seconds per test id; "
                           "classes: seconds per class id spent outside its tests (setUpClass, tearDownClass)",
                   "tests": dict(sorted(old_tests.items())), "classes": dict(sorted(old_classes.items()))}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
