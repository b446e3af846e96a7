#!/usr/bin/env python
"""What triage costs: a run with a polluted test, checked in fresh ranks, against the same run with --no-triage.

Two modules are generated into a temporary directory and run with the runner (``python -m harness``),
each as a whole process, triage on and off alternating (``--rounds`` pairs):

* ``fixture``  three tests of 2 ranks: ``test_a`` appends to a module-level list, ``test_b`` all_reduces,
               ``test_c`` asserts the list is empty (fails in reused ranks, passes in fresh ones);
* ``30 tests`` 30 tests of 2 ranks (an all_reduce each), the 7th of which leaves a module global set,
               the last of which fails when it finds it set.

For each: the wall time of the whole run with triage and without, the difference, and what the run's
summary says triage did (re-runs, seconds) and found (the polluter named).

Example::

    python tools/bench_triage.py               # about a minute on 2 cores
    python tools/bench_triage.py --rounds 5
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

FIXTURE = """
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, with_comms

CACHE = []


class TestPolluted(MultiProcessTestCase):
    def test_a(self):
        CACHE.append(self.rank)

    @with_comms
    def test_b(self):
        t = torch.ones(2)
        dist.all_reduce(t)

    def test_c(self):
        self.assertEqual(CACHE, [])
"""

THIRTY = """
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, with_comms

STATE = {{}}


class TestThirty(MultiProcessTestCase):
    def _body(self, i):
        t = torch.ones(2)
        dist.all_reduce(t)
        if i == {polluter}:
            STATE["left"] = True
        if i == {n} - 1:
            self.assertNotIn("left", STATE)


for _i in range({n}):
    setattr(TestThirty, f"test_{{_i:02d}}", with_comms(lambda self, _i=_i: self._body(_i)))
"""


def _run(tmp: str, module: str, triage: bool) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", HYPOTHESIS_PROFILE="ci")
    cmd = [sys.executable, "-m", "harness", module] + ([] if triage else ["--no-triage"])
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
    return time.monotonic() - started, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs with and without triage (default 3)")
    args = parser.parse_args()
    import torch

    tmp = tempfile.mkdtemp(prefix="bench-triage-")
    Path(tmp, "fx_polluted.py").write_text(FIXTURE)
    Path(tmp, "fx_thirty.py").write_text(THIRTY.format(n=30, polluter=6))
    print(f"bench_triage: torch {torch.__version__}, {os.cpu_count()} cores, {args.rounds} rounds, medians [min-max]",
          flush=True)
    rows = [("module", "with triage", "--no-triage", "difference", "triage says")]
    for name, module, expect in (("fixture (3 tests)", "fx_polluted.py", "test_a"),
                                 ("30 tests, 1 polluter", "fx_thirty.py", "test_06")):
        on, off, said = [], [], ""
        for round_ in range(args.rounds):
            for triage in (True, False) if round_ % 2 == 0 else (False, True):
                seconds, out = _run(tmp, module, triage)
                (on if triage else off).append(seconds)
                if triage:
                    m = re.search(r"^triage: \d+ failure.*\((\d+ re-runs?, [\d.]+ s)\)$", out, re.M)
                    named = re.search(rf"fails after \S+\.{expect} in shared ranks", out)
                    if not (m and named):
                        sys.exit(f"{module}: triage did not name {expect}:\n{out[-3000:]}")
                    said = f"{m.group(1)}; names {expect}"
        mo, mf = statistics.median(on), statistics.median(off)
        rows.append((name, f"{mo:.2f} s [{min(on):.2f}-{max(on):.2f}]", f"{mf:.2f} s [{min(off):.2f}-{max(off):.2f}]",
                     f"+{mo - mf:.2f} s", said))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
