"""Upstream's threaded classes against distharness's, on the same file of tests, side by side in one run.

Writes one file of trivial ``FSDPTestMultiThread`` tests (``fully_shard`` a two-layer model, check each
parameter's full shape) twice: once on upstream's class (``torch.testing._internal``, run with
``python -m unittest``) and once on distharness's (run with ``python -m harness``), for each world size;
runs both in turn, ``--rounds`` times, and prints the wall times and the ratio distharness / upstream.

Example::

    python tools/bench_threaded.py --tests 20 --world-sizes 1,2,4,8 --rounds 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BODY = '''
import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
{import_line}


class TestTrivial(FSDPTestMultiThread):
    @property
    def world_size(self):
        return {world_size}

{tests}

if __name__ == "__main__":
    run_tests()
'''

TEST = '''    def test_shard_{i}(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 8))
        shapes = [p.shape for p in model.parameters()]
        fully_shard(model)
        for p, shape in zip(model.parameters(), shapes):
            self.assertEqual(p.full_tensor().shape, shape)
'''

IMPORTS = {
    "upstream": "from torch.testing._internal.common_fsdp import FSDPTestMultiThread\n"
                "from torch.testing._internal.common_utils import run_tests",
    "distharness": "from harness import FSDPTestMultiThread, run_tests",
}


def write(directory: str, kind: str, world_size: int, tests: int) -> str:
    path = os.path.join(directory, f"test_threaded_{kind}_ws{world_size}.py")
    body = "\n".join(TEST.format(i=i) for i in range(tests))
    with open(path, "w") as f:
        f.write(BODY.format(import_line=IMPORTS[kind], world_size=world_size, tests=body))
    return path


def run_once(kind: str, path: str, **extra: str) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, **extra)
    command = [sys.executable, path] if kind == "upstream" else [sys.executable, "-m", "harness", path]
    started = time.monotonic()
    done = subprocess.run(command, cwd=os.path.dirname(path), env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{kind} {path} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20, help="tests in the file (default 20)")
    parser.add_argument("--world-sizes", default="1,2,4,8", help="comma-separated (default 1,2,4,8)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternating (default 2)")
    parser.add_argument("--no-template-too", action="store_true",
                        help="also run distharness with HARNESS_TEMPLATE=0 (what the speculative template start costs)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.world_sizes.split(",")]
    print(f"{args.tests} trivial FSDPTestMultiThread tests per file, {args.rounds} round(s), wall time of the "
          f"whole command (start included), median")
    print(f"{'ws':>3} {'upstream s':>11} {'distharness s':>14} {'ratio':>6}")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-threaded-") as directory:
        for ws in sizes:
            paths = {kind: write(directory, kind, ws, args.tests) for kind in IMPORTS}
            times: dict[str, list[float]] = {kind: [] for kind in (*IMPORTS, "off")}
            for _ in range(args.rounds):
                for kind in IMPORTS:
                    times[kind].append(run_once(kind, paths[kind]))
                if args.no_template_too:
                    times["off"].append(run_once("distharness", paths["distharness"], HARNESS_TEMPLATE="0"))
            up, ours = statistics.median(times["upstream"]), statistics.median(times["distharness"])
            worst = max(worst, ours / up)
            off = (f"   no template {statistics.median(times['off']):.2f} s "
                   f"({statistics.median(times['off']) / up:.2f}x)") if times["off"] else ""
            print(f"{ws:>3} {up:>11.2f} {ours:>14.2f} {ours / up:>5.2f}x{off}", flush=True)
    print(f"worst ratio {worst:.2f}x (goal: at most 1.00x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
