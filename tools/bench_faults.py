#!/usr/bin/env python
"""What a fault test costs: its attempts' run time plus the restart, against the same body without faults.

One runner process (``python -m harness``) runs a generated module of ``--repeat`` copies each of:

* ``plain``    a body of ``--steps`` steps, each an all_reduce and ``--step-ms`` of work, on 2 ranks (reused pool);
* ``fault``    the same body with ``delay(1, 0)`` at its first all_reduce: a fault that changes nothing, so the
               test runs in a fresh world of its own (the cost of faults without a restart);
* ``restart``  the same body with ``kill(1, op="all_reduce", nth=STEPS)`` and ``@restarts(1)``: attempt 0 runs the
               whole body up to its last step, attempt 1 the whole body again.

It prints each test's median time (min, max) from the JUnit XML and the restart's overhead: ``restart - 2 x plain``
(what the restart costs beyond running the body twice: ending the world, starting fresh ranks from the template,
the peer's error), the figure the project holds under 0.3 s.

Then a sweep against its points run one by one: a resumable body of ``--steps`` steps (an all_reduce, the work,
its progress written) with ``@restarts(1)``, run

* ``plain``    without a fault;
* ``sweep``    ``@faults.sweep(faults.kill, rank=1)``: a count run and N points (one per all_reduce of rank 1);
* ``inject``   N tests, ``@faults.inject(faults.kill(1, nth=k))`` for k = 1..N: the same points by hand.

It prints the sweep's time against N x (plain + 0.3 s), the bound the project holds it to, and against the N
injects' total; ``-j`` is the runner's (and the sweep's points at once).

Example::

    python tools/bench_faults.py              # about a minute on 2 cores
    python tools/bench_faults.py --only sweep -j 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BODY = '''
import time
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, faults, restarts, with_comms

STEPS, STEP_S = {steps}, {step_s}


def body(test):
    for _ in range(STEPS):
        dist.all_reduce(torch.ones(4))
        time.sleep(STEP_S)


class TestBench(MultiProcessTestCase):
{tests}
'''

PLAIN = '''
    @with_comms
    def test_plain_{i}(self):
        body(self)
'''
FAULT = '''
    @faults.inject(faults.delay(1, 0, op="all_reduce", nth=1))
    @with_comms
    def test_fault_{i}(self):
        body(self)
'''
RESTART = '''
    @faults.inject(faults.kill(1, op="all_reduce", nth=STEPS))
    @restarts(1)
    @with_comms
    def test_restart_{i}(self):
        body(self)
'''


RESUMABLE = '''
import json
import os
import time
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, faults, restarts, with_comms, with_temp_dir

STEPS, STEP_S = {steps}, {step_s}


def body(test):
    path = os.path.join(test.temp_dir, f"progress{{test.rank}}.json")
    start = json.load(open(path))["step"] if os.path.exists(path) else 0
    for step in range(start, STEPS):
        dist.all_reduce(torch.ones(4))
        time.sleep(STEP_S)
        with open(path, "w") as f:
            json.dump({{"step": step + 1}}, f)


class TestSweepBench(MultiProcessTestCase):
{tests}
'''

SWEPT = '''
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_plain_{i}(self):
        body(self)

    @faults.sweep(faults.kill, rank=1)
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_sweep_{i}(self):
        body(self)
'''
INJECTED = '''
    @faults.inject(faults.kill(1, nth={k}))
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_inject_{i}_{k}(self):
        body(self)
'''


def _run(tmp: str, name: str, source: str, extra: list[str]) -> dict[str, list[float]]:
    """Run a generated module under the runner; each test's JUnit time, by kind (the name's second word)."""
    path = os.path.join(tmp, f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    xml = os.path.join(tmp, f"{name}.xml")
    proc = subprocess.run([sys.executable, "-m", "harness", path, "--junit-xml", xml, *extra], cwd=REPO,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the bench's tests failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    times: dict[str, list[float]] = {}
    for case in ET.parse(xml).iter("testcase"):
        kind = case.get("name", "").split("_")[1]
        times.setdefault(kind, []).append(float(case.get("time", "0")))
    return times


def bench_sweep(args: argparse.Namespace, tmp: str) -> None:
    steps, repeat = args.steps, args.repeat
    extra = ["-j", str(args.jobs)] if args.jobs > 1 else []
    swept = RESUMABLE.format(steps=steps, step_s=args.step_ms / 1000,
                             tests="".join(SWEPT.format(i=i) for i in range(repeat)))
    times = _run(tmp, "bench_sweep_tests", swept, extra)
    injected = RESUMABLE.format(steps=steps, step_s=args.step_ms / 1000,
                                tests="".join(INJECTED.format(i=i, k=k) for i in range(repeat)
                                              for k in range(1, steps + 1)))
    inject_times = _run(tmp, "bench_inject_tests", injected, extra)["inject"]
    plain, sweep = statistics.median(times["plain"]), statistics.median(times["sweep"])
    # each copy's N injects, summed: what the same points cost by hand, one test each
    by_hand = statistics.median([sum(inject_times[i * steps:(i + 1) * steps]) for i in range(repeat)])
    bound = steps * (plain + 0.3)
    print(f"\nsweep: a resumable body of {steps} steps (an all_reduce and {args.step_ms:g} ms each), @restarts(1), "
          f"2 ranks, cpu/gloo, {steps} points (rank 1's all_reduces); {repeat} runs each; points at once: "
          f"{args.jobs if args.jobs > 1 else 'the default'}")
    print(f"{'run':<34} {'median s':>9} {'vs bound':>9}")
    print(f"{'plain (no fault)':<34} {plain:9.3f}")
    print(f"{'sweep, ' + str(steps) + ' points':<34} {sweep:9.3f} {sweep / bound:8.2f}x")
    print(f"{str(steps) + ' injects, one test each (sum)':<34} {by_hand:9.3f} {by_hand / bound:8.2f}x")
    print(f"{'bound: N x (plain + 0.3 s)':<34} {bound:9.3f} {1.0:8.2f}x")
    print(f"sweep per point: {sweep / steps:.3f} s (plain {plain:.3f} s); the sweep against the injects by hand: "
          f"{sweep / by_hand:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="copies of each test (default 5)")
    parser.add_argument("--steps", type=int, default=10, help="steps of the body (default 10)")
    parser.add_argument("--step-ms", type=float, default=20.0, help="work per step in ms (default 20)")
    parser.add_argument("--only", choices=("restart", "sweep"), help="only the restart's figures, or the sweep's")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="the runner's -j for the sweep's part (default 1)")
    args = parser.parse_args()
    if args.only != "sweep":
        bench_restart(args)
    if args.only != "restart":
        with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
            bench_sweep(args, tmp)


def bench_restart(args: argparse.Namespace) -> None:
    tests = "".join(t.format(i=i) for i in range(args.repeat) for t in (PLAIN, FAULT, RESTART))
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        path = os.path.join(tmp, "bench_fault_tests.py")
        with open(path, "w") as f:
            f.write(BODY.format(steps=args.steps, step_s=args.step_ms / 1000, tests=tests))
        xml = os.path.join(tmp, "junit.xml")
        proc = subprocess.run([sys.executable, "-m", "harness", path, "--junit-xml", xml], cwd=REPO,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"the bench's tests failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        times: dict[str, list[float]] = {"plain": [], "fault": [], "restart": []}
        for case in ET.parse(xml).iter("testcase"):
            kind = case.get("name", "").split("_")[1]
            if kind in times:
                times[kind].append(float(case.get("time", "0")))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"body: {args.steps} steps of an all_reduce and {args.step_ms:g} ms, 2 ranks, cpu/gloo; "
          f"{args.repeat} runs each (the first of each kind included)")
    print(f"{'test':<10} {'median s':>9} {'min':>7} {'max':>7} {'vs plain':>9}")
    for k, v in times.items():
        print(f"{k:<10} {med[k]:9.3f} {min(v):7.3f} {max(v):7.3f} {med[k] / med['plain']:8.2f}x")
    print(f"fault without restart, beyond the body: {med['fault'] - med['plain']:+.3f} s (a fresh world)")
    print(f"restart overhead, restart - 2 x plain:  {med['restart'] - 2 * med['plain']:+.3f} s per restart "
          "(goal: <= 0.3 s; both attempts' fresh worlds counted)")
    print(f"the restart alone, restart - fault - plain: {med['restart'] - med['fault'] - med['plain']:+.3f} s "
          "(the second attempt's world, beyond what a fault test without a restart pays)")


if __name__ == "__main__":
    main()
