"""Splitting the selected tests over N machines by recorded durations, and the times file itself."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import unittest
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["Split", "split", "shard", "load_times", "save_times"]


@dataclasses.dataclass(frozen=True)
class Split:
    """Which shard (0-based) each test goes to, and what each shard is expected to take."""

    owners: list[int]  # owners[n]: the shard of the n-th test
    loads: list[float]  # expected seconds per shard
    default: float  # the weight of a test without a recorded time
    known: int  # how many of the tests had a recorded time

    def note(self, index: int, times_file: str) -> str:
        """The header line: what shard ``index`` (1-based) of this split runs."""
        mine = self.owners.count(index - 1)
        return (f"shard {index}/{len(self.loads)}: {mine} of {len(self.owners)} tests, about "
                f"{self.loads[index - 1]:.0f} s expected (shards: {', '.join(f'{x:.0f}' for x in self.loads)} s; "
                f"{self.known} tests timed in {os.path.relpath(times_file)}, the others counted at "
                f"{self.default:.1f} s)")


def split(ids: Sequence[str], count: int, times: Mapping[str, float]) -> Split:
    """Greedy longest-first bin packing of ``ids`` over ``count`` shards.

    A test without a record weighs the mean of those with one. Ties are broken by id, never by the
    order of ``times``, so every machine given the same ids and times file computes the same split.

    Example::

        split(["a.T.t1", "a.T.t2", "b.T.t1"], 2, {"a.T.t1": 10.0}).owners  # [0, 1, 0]
    """
    known = [times[i] for i in ids if i in times]
    default = sum(known) / len(known) if known else (sum(times.values()) / len(times) if times else 1.0)
    weights = [times.get(i, default) for i in ids]
    order = sorted(range(len(ids)), key=lambda n: (-weights[n], ids[n], n))
    loads = [0.0] * count
    owners = [0] * len(ids)
    for n in order:
        target = min(range(count), key=lambda s: (loads[s], s))
        loads[target] += weights[n]
        owners[n] = target
    return Split(owners, loads, default, len(known))


def shard(tests: Sequence[unittest.TestCase], index: int, count: int,
          times: Mapping[str, float]) -> tuple[list[unittest.TestCase], Split]:
    """Shard ``index`` of ``count`` (1-based, as ``--shard I N``): its tests in suite order, and the split.

    Example::

        mine, how = shard(tests, 1, 2, load_times(".ci/test-times.json"))
    """
    how = split([t.id() for t in tests], count, times)
    return [t for n, t in enumerate(tests) if how.owners[n] == index - 1], how


def load_times(path: str) -> dict[str, float]:
    """Seconds per test id from a times file; none (with a warning) when it cannot be read.

    Example::

        load_times("test-times.json")  # {"pkg.test_x.TestX.test_a": 1.25, ...}
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        print(f"warning: cannot read the times file {path}: {exc}; sharding by test count", file=sys.stderr)
        return {}
    tests = data.get("tests", data) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in tests.items() if isinstance(v, (int, float))}


def save_times(path: str, new: Mapping[str, float]) -> None:
    """Merge ``new`` durations into the times file (written whole, then renamed into place).

    Example::

        save_times("test-times.json", {"pkg.test_x.TestX.test_a": 1.25})
    """
    merged = load_times(path)
    merged.update({k: round(v, 3) for k, v in new.items()})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": 1, "note": "seconds per test id, written by --update-times (python -m harness, "
                   "run_tests.py)", "tests": dict(sorted(merged.items()))}, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
