#!/usr/bin/env python
"""Drawn worlds against a hand-written exhaustive loop: time to the first failure, and total time.

One module is generated into a temporary directory and run with the runner (``python -m harness``), each
variant as a whole process, side by side in one run. The space: world sizes 1 to 8, every valid placement
(``Replicate``, ``Shard(0)``, ``Shard(1)``, ``Partial``) of a 2-D tensor on every 1-D and 2-D mesh of
that world (352 configurations). The op under test checks, on every rank, that the local shard has the
rows ``torch.chunk`` gives it and that the tensor gathers back whole; the planted bug (``BENCH_BUG=1``)
takes every shard to hold n // pieces rows in an odd world, which only an uneven shard shows.

* ``exhaustive``  one test per world size (8 classes, ``world_size = w``), each looping over its meshes and
                  placements with ``itertools.product`` (a tensor of one row per shard plus one on each
                  dim: uneven everywhere), as upstream writes such tests; ``--failfast`` for the bug;
* ``hypothesis``  one test, ``@given(case=shardings(world_sizes(1, 8), max_mesh_dims=2, ndim=2))``,
                  under the ``nightly`` profile (50 examples, each in a world of its drawn size).

For each, with the bug: seconds from the process's start to the first failing check (a rank prints
the time), and to the end (hypothesis: with the failure shrunk to the smallest configuration); without
it: the whole run. Every figure is the wall time of a whole process on this machine, template start and
the import of torch included.

Example::

    python tools/bench_drawn_worlds.py                # about four minutes on 2 cores
    python tools/bench_drawn_worlds.py --rounds 2
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''
import itertools
import os
import time

import torch
from hypothesis import given
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

from harness import DTensorTestBase, with_comms
from harness.strategies import shardings, shards_per_dim, world_sizes

BUG = os.environ.get("BENCH_BUG") == "1"


def rows_on(rank, n, pieces, world):
    if BUG and world % 2:  # the planted bug: in an odd world, every shard taken to hold n // pieces rows
        return n // pieces
    per = -(-n // pieces)
    return max(0, min(per, n - per * rank))


def check(test, mesh, placements, shape):
    """The op under test: this rank's shard has the rows it should, and the tensor gathers back whole."""
    full = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape)
    dt = distribute_tensor(full, mesh, placements)
    local = dt.to_local()
    coords = mesh.get_coordinate()
    for mesh_dim, p in enumerate(placements):
        if isinstance(p, Shard) and [q for q in placements if q == p] == [p]:
            want = rows_on(coords[mesh_dim], shape[p.dim], mesh.size(mesh_dim), test.world_size)
            if local.shape[p.dim] != want:
                print(f"BENCH-FAIL {time.time():.3f}", flush=True)
                test.assertEqual(local.shape[p.dim], want)
    test.assertEqual(dt.full_tensor(), full)


def mesh_shapes(world):
    return [(world,)] + [(a, world // a) for a in range(1, world + 1) if world % a == 0]


CHOICES = [Replicate(), Shard(0), Shard(1), Partial("sum")]


class _Exhaustive(DTensorTestBase):
    @with_comms
    def test_every_placement(self):
        for shape in mesh_shapes(self.world_size):
            mesh = init_device_mesh(self.device_type, shape)
            for placements in itertools.product(CHOICES, repeat=len(shape)):
                pieces = shards_per_dim(shape, placements, 2)
                check(self, mesh, placements, tuple(n + 1 if n > 1 else 2 for n in pieces))


for _w in range(1, 9):
    _name = f"TestExhaustiveW{_w}"
    globals()[_name] = type(_name, (_Exhaustive,), {"world_size": _w, "__qualname__": _name})
del _w, _name


class TestHypothesis(DTensorTestBase):
    @with_comms
    @given(case=shardings(world_sizes(1, 8), max_mesh_dims=2, ndim=2))
    def test_drawn(self, case):
        check(self, case.mesh, case.placements, case.shape)
'''


def run(module: Path, pattern: str, bug: bool, failfast: bool = False) -> tuple[float, float | None, str]:
    """(seconds to the end, seconds to the first failing check or None, output) of one runner process."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{module.parent}", "BENCH_BUG": "1" if bug else "0",
           "HARNESS_SHOW_OUTPUT": "1"}
    cmd = [sys.executable, "-m", "harness", str(module), "-k", pattern, "--hypothesis-profile", "nightly"]
    if failfast:
        cmd.append("--failfast")
    started = time.time()
    proc = subprocess.run(cmd, cwd=module.parent, env=env, capture_output=True, text=True, timeout=1800)
    ended = time.time()
    out = proc.stdout + proc.stderr
    stamps = [float(m) for m in re.findall(r"BENCH-FAIL (\d+\.\d+)", out)]
    first = min(stamps) - started if stamps else None
    return ended - started, first, out


def summary(out: str) -> str:
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    examples = re.search(r"\((\d+) examples\)", out)
    shrunk = re.search(r"Hypothesis example: (.*)", out)
    text = m.group(0) if m else "?"
    if examples:
        text += f", {examples.group(1)} examples"
    if shrunk:
        text += f"; shrunk to {shrunk.group(1)}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, alternating (default 1)")
    args = parser.parse_args()
    import torch

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} cores, commit {commit}")
    with tempfile.TemporaryDirectory(prefix="bench-drawn-") as tmp:
        module = Path(tmp) / "bench_drawn_module.py"
        module.write_text(MODULE)
        rows: dict[str, list[tuple[float, float | None, str]]] = {}
        variants = [("exhaustive, planted bug", "TestExhaustive", True, True),
                    ("hypothesis, planted bug", "TestHypothesis", True, False),
                    ("exhaustive, correct op", "TestExhaustive", False, False),
                    ("hypothesis, correct op", "TestHypothesis", False, False)]
        for _ in range(args.rounds):
            for name, pattern, bug, failfast in variants:
                total, first, out = run(module, pattern, bug, failfast)
                rows.setdefault(name, []).append((total, first, out))
                shown = f"{first:.1f} s" if first is not None else "-"
                print(f"  {name:26s} first failure {shown:>8s}  total {total:6.1f} s  ({summary(out)})", flush=True)
        print()
        print("| variant | first failure (s) | total (s) | outcome |")
        print("|---|---|---|---|")
        for name, _, _, _ in variants:
            got = rows[name]
            firsts = [f for _, f, _ in got if f is not None]
            first = f"{statistics.median(firsts):.1f}" if firsts else "-"
            total = statistics.median(t for t, _, _ in got)
            print(f"| {name} | {first} | {total:.1f} | {summary(got[-1][2])} |")


if __name__ == "__main__":
    main()
