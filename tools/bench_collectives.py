#!/usr/bin/env python
"""What torch's flight recorder costs (harness.ranks.recorder keeps it on in every rank), on and off side by side.

Two measures, printed together in one run:

* per collective: two processes (gloo, CPU) run ``--collectives`` all_reduces of 4 floats, timed in the
  processes, with ``TORCH_FR_BUFFER_SIZE`` at the harness's value and at 0 (off), alternating ``--rounds``
  times; the median per collective of each, and the difference;
* per trivial test: ``tools/bench_overhead.py``'s harness variant (one all_reduce per test, reused ranks),
  with the recorder on and off (``TORCH_FR_BUFFER_SIZE=0``), alternating; the median of the later tests.

Example::

    python tools/bench_collectives.py                      # about a minute on 2 cores
    python tools/bench_collectives.py --collectives 5000 --tests 100 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--collectives", type=int, default=2000, metavar="N", help="all_reduces per measure")
    p.add_argument("--tests", type=int, default=60, metavar="N", help="trivial tests per measure")
    p.add_argument("--rounds", type=int, default=3, metavar="K", help="on/off pairs, alternating")
    args = p.parse_args(argv)
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
