#!/usr/bin/env python
"""What recording collectives costs (``harness.record_collectives``): the suites' heaviest test with and without a
record open around its whole body, side by side in one run.

The heaviest test of ``test_distributed/`` (by ``.ci/test-times.json``: ``test_fine_tuning``, FSDP training, DCP
saves and loads, three rounds, 4 ranks) is run through the harness's runner as a subclass of its class three ways, each in a runner of its own (a fresh
pool: each pays the same start), the order rotated each round, the ``ci`` hypothesis profile (the same examples
each run): plain; with a record around each training phase (``_train``: every step's forward, backward and
optimizer step, what a test pinning its communication records); and with a record around the whole body
(``setUp`` enters it, ``tearDown`` leaves it: model building, DCP saves and loads, state-dict checks, every
collective, and every op the dispatch mode then sees). The runner's own per-test seconds are read; the medians of ``--rounds`` rounds, and their ratio, are
printed. The goal: at most 5 % more.

Example::

    python tools/bench_record.py               # about 2 minutes on 2 cores
    python tools/bench_record.py --rounds 5
"""
from __future__ import annotations

import argparse
import os
import re
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


def one_run(folder: str, kind: str) -> float:
    """The runner's per-test seconds of the heaviest test, plain or recorded, in a runner of its own (a fresh pool:
    both kinds pay the same start)."""
    module, cls, method = HEAVIEST
    name = f"bench_record_{kind}"
    path = os.path.join(folder, name + ".py")
    with open(path, "w") as f:
        f.write(MODULES[kind].format(module=module, cls=cls))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, str(ROOT)]), "HYPOTHESIS_PROFILE": "ci"}
    proc = subprocess.run([sys.executable, "-m", "harness", path, "-v"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"the runner failed:\n{proc.stdout[-6000:]}")
    m = re.search(rf"PASS\s+{name}\.\w+\.{method}\s+\S+\s+ws=\d+\s+([\d.]+)s", proc.stdout)
    if m is None:
        raise SystemExit(f"no time for {name} in:\n{proc.stdout[-4000:]}")
    return float(m.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each kind, the order rotated each round")
    args = parser.parse_args()
    kinds = list(MODULES)
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-record-") as folder:
        for i in range(args.rounds):
            order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
            for kind in order:
                times[kind].append(one_run(folder, kind))
            print(f"round {i + 1}: " + ", ".join(f"{kind} {times[kind][-1]:.2f} s" for kind in kinds), flush=True)
    base = statistics.median(times["plain"])
    print()
    print(f"{'.'.join(HEAVIEST)}: the runner's per-test seconds, median of {args.rounds}")
    print(f"{'':<34}{'seconds':<10}{'ratio':<8}goal")
    labels = {"plain": "without a record", "steps": "its training steps recorded", "body": "its whole body recorded"}
    for kind in kinds:
        median = statistics.median(times[kind])
        goal = "" if kind == "plain" else "<= 1.05"
        print(f"{labels[kind]:<34}{median:<10.2f}{median / base:<8.3f}{goal}")


if __name__ == "__main__":
    main()
