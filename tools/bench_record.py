#!/usr/bin/env python
"""What recording collectives costs (``harness.record_collectives``): the suites' heaviest test with and without
records, side by side in one run.

The heaviest test of ``test_distributed/`` (by ``.ci/test-times.json``: ``test_fine_tuning``, FSDP training, DCP
saves and loads, three rounds, 4 ranks) is run through the harness's runner as a subclass of its class three
ways, each in a runner of its own (a fresh pool: each pays the same start), the order rotated each round, the ``ci`` hypothesis profile (the same examples
each run): plain; with a record around each training phase (``_train``: every step's forward, backward and
optimizer step, what a test pinning its communication records); and with a record around the whole body
(``setUp`` enters it, ``tearDown`` leaves it: model building, DCP saves and loads, state-dict checks, every
collective, and every op the dispatch mode then sees). Printed: the medians of ``--rounds`` runs of the
runner's own seconds for the test, and of the CPU seconds of the whole run (the runner and all its ranks:
steadier than wall time on a shared machine), each with its ratio to the plain run's. The goal: at most 5 %
more.

Example::

    python tools/bench_record.py               # about 3 minutes on 2 cores
    python tools/bench_record.py --rounds 5
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEAVIEST = ("test_distributed.test_fine_tuning", "TestFineTuning", "test_fine_tuning")

MODULES = {
    "plain": """
import {module} as _heaviest


class TestPlain(_heaviest.{cls}):
    pass
""",
    "steps": """
import {module} as _heaviest
from harness import record_collectives


class TestSteps(_heaviest.{cls}):
    def _train(self, *args, **kwargs):
        with record_collectives() as record:
            super()._train(*args, **kwargs)
        assert record.counts()["all_gather"] or record.counts()["all_gather_into_tensor"], record.lines()
""",
    "body": """
import {module} as _heaviest
from harness import record_collectives


class TestBody(_heaviest.{cls}):
    def setUp(self):
        super().setUp()
        self._bench_record = record_collectives().__enter__()

    def tearDown(self):
        self._bench_record.__exit__(None, None, None)
        assert self._bench_record.lines(), "the record saw no collective"
        super().tearDown()
""",
}


def one_run(folder: str, kind: str) -> tuple[float, float]:
    """The runner's per-test seconds of the heaviest test, plain or recorded, in a runner of its own (a fresh pool:
    both kinds pay the same start)."""
    module, cls, method = HEAVIEST
    name = f"bench_record_{kind}"
    path = os.path.join(folder, name + ".py")
    with open(path, "w") as f:
        f.write(MODULES[kind].format(module=module, cls=cls))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(ROOT)]), "HYPOTHESIS_PROFILE": "ci"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "harness", path, "-v"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"the runner failed:\n{proc.stdout[-6000:]}")
    m = re.search(rf"PASS\s+{name}\.\w+\.{method}\s+\S+\s+ws=\d+\s+([\d.]+)s", proc.stdout)
    if m is None:
        raise SystemExit(f"no time for {name} in:\n{proc.stdout[-4000:]}")
    return float(m.group(1)), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each kind, the order rotated each round")
    args = parser.parse_args()
    kinds = list(MODULES)
    wall: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-record-") as folder:
        for i in range(args.rounds):
            order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
            for kind in order:
                w, c = one_run(folder, kind)
                wall[kind].append(w)
                cpu[kind].append(c)
            print(f"round {i + 1}: " + ", ".join(f"{kind} {wall[kind][-1]:.2f} s (CPU {cpu[kind][-1]:.1f} s)"
                                                 for kind in kinds), flush=True)
    base_wall, base_cpu = statistics.median(wall["plain"]), statistics.median(cpu["plain"])
    print()
    print(f"{'.'.join(HEAVIEST)}, median of {args.rounds} runs each: the test's seconds (the runner's, wall), and "
          "the CPU seconds of the whole run (the runner and every rank)")
    print(f"{'':<30}{'test s':<9}{'ratio':<8}{'run CPU s':<11}{'ratio':<8}goal")
    labels = {"plain": "without a record", "steps": "its training steps recorded", "body": "its whole body recorded"}
    for kind in kinds:
        w, c = statistics.median(wall[kind]), statistics.median(cpu[kind])
        goal = "" if kind == "plain" else "<= 1.05"
        print(f"{labels[kind]:<30}{w:<9.2f}{w / base_wall:<8.3f}{c:<11.1f}{c / base_cpu:<8.3f}{goal}")


if __name__ == "__main__":
    main()
