#!/usr/bin/env python
"""What torch's flight recorder costs (harness.ranks.recorder keeps it on in every rank), on and off side by side.

Two measures, printed together in one run:

* per collective: two processes (gloo, CPU) run ``--collectives`` all_reduces of 4 floats, timed in the
  processes, with ``TORCH_FR_BUFFER_SIZE`` at the harness's value and at 0 (off), alternating ``--rounds``
  times; the median per collective of each, and the difference;
* per trivial test: ``tools/bench_overhead.py``'s harness variant (one all_reduce per test, reused ranks),
  with the recorder on and off (``TORCH_FR_BUFFER_SIZE=0``), alternating; the median of the later tests.

With ``--desync``, instead, what ending a desync at once costs and gives (harness.judging.analysis.never_meet):

* from the last rank blocking to the failure: 4-rank (and 2-rank) tests whose ranks call collectives that
  can never meet (different ops, different sizes, a group one member never joined); each rank notes the
  wall clock just before its last collective, the driver notes when unittest is told of the test's error;
  ``--desyncs`` runs of each, under HARNESS_TIMEOUT=60 (without the check each waits the 60 s);
* what the looks cost a passing suite: 4-rank tests whose ranks wait for one another (each rank in turn
  sleeps 0.2 s while the others wait in an all_reduce, the case that makes the parent read the ranks'
  recorders most often) and trivial ones, run from this checkout and from ``--baseline DIR`` (a checkout
  without the check, e.g. ``git worktree add /tmp/before <commit>``) alternating: the run's wall time and
  the CPU time of the whole run (the parent and its ranks).

Example::

    python tools/bench_collectives.py                      # about a minute on 2 cores
    python tools/bench_collectives.py --collectives 5000 --tests 100 --rounds 3
    python tools/bench_collectives.py --desync --baseline /tmp/before    # about 3 minutes on 2 cores
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_overhead  # noqa: E402
from harness.ranks.recorder import BUFFER  # noqa: E402

WORKER = """
import os, sys, time, json
import torch, torch.distributed as dist
rank, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", store=dist.FileStore(path, 2), rank=rank, world_size=2)
t = torch.ones(4)
for _ in range(200):
    dist.all_reduce(t)
dist.barrier()
start = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
elapsed = time.perf_counter() - start
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print("PER-COLLECTIVE " + json.dumps(elapsed / n))
"""


def per_collective(n: int, buffer: int, workdir: Path) -> float:
    """Seconds per all_reduce of 4 floats between two gloo processes, with the recorder's buffer at ``buffer``."""
    script = workdir / "worker.py"
    script.write_text(WORKER)
    store = tempfile.mktemp(dir=workdir)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(buffer), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(n), store], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    line = next((ln for ln in outs[0][0].splitlines() if ln.startswith("PER-COLLECTIVE ")), None)
    if line is None:
        raise SystemExit(f"the worker failed:\n{outs[0][1][-2000:]}\n{outs[1][1][-2000:]}")
    return float(json.loads(line.split(" ", 1)[1]))


def per_test(n: int, recorder: bool, workdir: Path) -> float:
    """Median seconds of a later trivial test (bench_overhead's harness variant), the recorder on or off."""
    saved = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFER if recorder else 0)
    try:
        (workdir / "bench_driver.py").write_text(bench_overhead.DRIVER)
        data = bench_overhead.run_variant("harness", n, 2, workdir, timeout=600)
    finally:
        if saved is None:
            os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
        else:
            os.environ["TORCH_FR_BUFFER_SIZE"] = saved
    if "error" in data:
        raise SystemExit(f"the trivial tests failed: {data['error']}")
    return data["steady_s"]


DESYNCS = """
import os, time
import torch, torch.distributed as dist
from harness import MultiProcessTestCase, with_comms

def blocking(self):
    with open(os.path.join(os.environ["BENCH_DIR"], f"block{self.rank}"), "w") as f:
        f.write(repr(time.time()))

class Desync(MultiProcessTestCase):
    world_size = 4

    @with_comms
    def test_ops_4(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        blocking(self)
        dist.broadcast(t, 0) if self.rank == 2 else dist.all_reduce(t)

    @with_comms
    def test_sizes_4(self):
        dist.all_reduce(torch.ones(4))
        blocking(self)
        dist.all_reduce(torch.ones(5 if self.rank == 1 else 4))

    @with_comms
    def test_group_4(self):
        pair = dist.new_group([0, 1])
        blocking(self)
        dist.all_reduce(torch.ones(4), group=pair) if self.rank == 0 else dist.all_reduce(torch.ones(4))

class Desync2(MultiProcessTestCase):
    world_size = 2

    @with_comms
    def test_ops_2(self):
        blocking(self)
        dist.broadcast(torch.ones(4), 0) if self.rank == 1 else dist.all_reduce(torch.ones(4))
"""

PASSING = """
import time
import torch, torch.distributed as dist
from harness import MultiProcessTestCase, with_comms

class Waiting(MultiProcessTestCase):
    world_size = 4

    @with_comms
    def test_take_turns(self):
        t = torch.ones(4)
        for i in range(8):
            if self.rank == i % 4:
                time.sleep(0.2)  # the others wait in the all_reduce: every rank idle
            dist.all_reduce(t)
""" + "".join("\n    @with_comms\n    def test_trivial_%02d(self):\n        dist.all_reduce(torch.ones(4))\n" % i
              for i in range(20))

DESYNC_DRIVER = """
import glob, json, os, sys, time, unittest, importlib


class Result(unittest.TestResult):
    out = {}

    def startTest(self, test):
        for path in glob.glob(os.path.join(os.environ["BENCH_DIR"], "block*")):
            os.remove(path)
        super().startTest(test)

    def addError(self, test, err):
        now = time.time()
        super().addError(test, err)
        blocked = []
        for path in glob.glob(os.path.join(os.environ["BENCH_DIR"], "block*")):
            with open(path) as f:
                blocked.append(float(f.read()))
        text = str(err[1])
        self.out[test.id().rsplit(".", 1)[1]] = {"s": now - max(blocked) if blocked else None,
                                                 "at_once": "stopped at once" in text,
                                                 "head": text.splitlines()[0][:300] if text else ""}


if __name__ == "__main__":
    mod = importlib.import_module(os.environ["BENCH_MODULE"])
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    result = Result()
    t0 = time.monotonic()
    suite.run(result)
    print("BENCH-RESULT " + json.dumps({"tests": result.out, "run_s": time.monotonic() - t0, "ran": result.testsRun,
                                        "passed": result.testsRun - len(result.errors) - len(result.failures),
                                        "problems": [e[1][-1500:] for e in result.errors + result.failures]}))
"""


def run_module(source: str, root: Path, workdir: Path, env_extra: dict[str, str]) -> dict:
    """Run the tests of ``source`` (a module) in a driver subprocess that imports the harness from ``root``:
    its result, with the wall and CPU seconds of the whole run (the driver and every process it waited for)."""
    (workdir / "bench_desync_mod.py").write_text(source)
    (workdir / "bench_desync_driver.py").write_text(DESYNC_DRIVER)
    env = {**os.environ, **env_extra, "BENCH_MODULE": "bench_desync_mod", "BENCH_DIR": str(workdir),
           "HARNESS_DEVICE": "cpu", "HARNESS_SHOW_OUTPUT": "0", "HARNESS_TRIAGE": "0",
           "PYTHONPATH": os.pathsep.join([str(workdir), str(root)])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(workdir / "bench_desync_driver.py")], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-RESULT ")), None)
    if line is None:
        raise SystemExit(f"the driver failed (exit code {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    data = json.loads(line.split(" ", 1)[1])
    data.update(wall_s=wall, cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return data


def desync_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-desync-") as tmp:
        workdir = Path(tmp)
        runs = [run_module(DESYNCS, ROOT, workdir, {"HARNESS_TIMEOUT": "60", "HARNESS_THREADS": "1"})
                for _ in range(args.desyncs)]
        print(f"From the last rank blocking to the test's error (HARNESS_TIMEOUT=60; {args.desyncs} runs; the error "
              "as unittest gets it, after the ranks were stopped and their stacks read):")
        for name in runs[0]["tests"]:
            figures = [r["tests"][name]["s"] for r in runs if r["tests"].get(name, {}).get("s") is not None]
            at_once = all(r["tests"].get(name, {}).get("at_once") for r in runs)
            shown = " / ".join(f"{x:.2f}" for x in figures)
            print(f"  {name:<14} {shown} s (median {statistics.median(figures):.2f} s)"
                  + ("" if at_once else "  [not every run ended at once: " + runs[0]["tests"][name]["head"] + "]"))
        if args.baseline is None:
            return 0
        rows: dict[str, list[dict]] = {"this checkout": [], f"baseline ({args.baseline})": []}
        for _ in range(args.rounds):
            for label, root in zip(list(rows), (ROOT, Path(args.baseline))):
                r = run_module(PASSING, root, workdir, {"HARNESS_THREADS": "1"})
                if r["passed"] != r["ran"]:
                    raise SystemExit(f"{label}: the passing suite failed:\n{r['problems'][:1]}")
                rows[label].append(r)
        print(f"\nA passing 4-rank suite (1 test whose ranks take turns to sleep 0.2 s while the others wait in an "
              f"all_reduce, 8 turns; 20 trivial tests), {args.rounds} rounds alternating:")
        for label, rs in rows.items():
            wall = [r["wall_s"] for r in rs]
            cpu = [r["cpu_s"] for r in rs]
            print(f"  {label:<40} wall {' / '.join(f'{x:.2f}' for x in wall)} s (median "
                  f"{statistics.median(wall):.2f}), CPU {' / '.join(f'{x:.2f}' for x in cpu)} s (median "
                  f"{statistics.median(cpu):.2f})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--collectives", type=int, default=2000, metavar="N", help="all_reduces per measure")
    p.add_argument("--tests", type=int, default=60, metavar="N", help="trivial tests per measure")
    p.add_argument("--rounds", type=int, default=3, metavar="K", help="on/off pairs, alternating")
    p.add_argument("--desync", action="store_true", help="measure ending a desync at once instead (see above)")
    p.add_argument("--desyncs", type=int, default=3, metavar="N", help="runs of the desync tests (--desync)")
    p.add_argument("--baseline", metavar="DIR", help="a checkout without the desync check (--desync)")
    args = p.parse_args(argv)
    if args.desync:
        return desync_main(args)
    coll = {True: [], False: []}
    test = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-collectives-") as tmp:
        workdir = Path(tmp)
        for _ in range(args.rounds):
            for on in (True, False):
                coll[on].append(per_collective(args.collectives, BUFFER if on else 0, workdir))
                test[on].append(per_test(args.tests, on, workdir))
    rows = [("", f"recorder on (TORCH_FR_BUFFER_SIZE={BUFFER})", "recorder off (0)", "on - off")]
    for name, data, unit, scale in (("per all_reduce of 4 floats", coll, "us", 1e6),
                                    ("per trivial test (reused ranks)", test, "ms", 1e3)):
        on, off = statistics.median(data[True]), statistics.median(data[False])
        rows.append((name, " / ".join(f"{x * scale:.1f}" for x in data[True]) + f" {unit} (median {on * scale:.1f})",
                     " / ".join(f"{x * scale:.1f}" for x in data[False]) + f" {unit} (median {off * scale:.1f})",
                     f"{(on - off) * scale:+.1f} {unit}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"({args.rounds} rounds, on and off alternating; {args.collectives} all_reduces and {args.tests} trivial "
          "tests per measure; two gloo ranks on CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
