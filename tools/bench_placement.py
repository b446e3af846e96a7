"""The suites on every placement this machine can carry, side by side: time, counts, GPU memory.

For each placement (``--device cpu``, ``cuda-shared``, ``nccl``; those this machine cannot carry are
left out and said so) one ``run_tests.py`` run of the suites, timed as a whole process, with the GPU's
peak used memory sampled from a separate process the whole time; then the memory one rank's CUDA
context costs, measured with 1, 2 and 4 processes on GPU 0 (what ranks sharing a GPU pay each).

    python tools/bench_placement.py                   # the four suites, every placement
    python tools/bench_placement.py -- --all          # extra arguments go to run_tests.py
    python tools/bench_placement.py --placements cpu cuda-shared

Prints one table; the ratios are against the CPU run. Nothing here asserts a time.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A process that prints the GPU's used memory (bytes, all processes) every 0.1 s until stdin closes.
_SAMPLER = r"""
import sys, threading, time, torch
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
while not done.is_set():
    free, total = torch.cuda.mem_get_info(0)
    print(total - free, flush=True)
    time.sleep(0.1)
"""

# A process that makes a CUDA context on GPU 0, says so, and waits for stdin to close.
_HOLDER = r"""
import sys, torch
torch.cuda.set_device(0)
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


class _Sampler:
    """The GPU's used memory, sampled by a separate process; ``since(t)`` the samples taken after ``t``."""

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, int]] = []
        self.proc = subprocess.Popen([sys.executable, "-c", _SAMPLER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self.samples.append((time.monotonic(), int(line)))

    def since(self, t: float) -> list[int]:
        return [used for when, used in self.samples if when >= t]

    def stop(self) -> int | None:
        self.proc.stdin.close()
        self.proc.wait()
        self.thread.join(5)
        return max((used for _, used in self.samples), default=None)


def context_overhead() -> list[tuple[int, int]]:
    """(processes, bytes of GPU memory they use together beyond the sampler's own context)."""
    rows = []
    for n in (1, 2, 4):
        sampler = _Sampler()
        time.sleep(3)
        quiet = time.monotonic()
        time.sleep(1)
        before = min(sampler.since(quiet))
        holders = [subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True) for _ in range(n)]
        for h in holders:
            h.stdout.readline()
        ready = time.monotonic()
        time.sleep(1)
        during = max(sampler.since(ready))
        for h in holders:
            h.stdin.close()
            h.wait()
        sampler.stop()
        rows.append((n, during - before))
    return rows


def run_suites(device: str, extra: list[str]) -> dict:
    sampler = _Sampler() if _gpus() else None
    env = dict(os.environ, HYPOTHESIS_PROFILE=os.environ.get("HYPOTHESIS_PROFILE", "ci"))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "run_tests.py", "--device", device, *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    seconds = time.monotonic() - started
    peak = sampler.stop() if sampler is not None else None
    text = proc.stdout + proc.stderr
    m = re.search(r"^(\d+) passed, (\d+) failed(?:, (\d+) skipped)?", text, re.M)
    counts = f"{m.group(1)} / {m.group(2)} / {m.group(3) or 0}" if m else "?"
    if proc.returncode not in (0, 1):
        print(f"--device {device}: exit code {proc.returncode}\n{text[-2000:]}", file=sys.stderr)
    return {"device": device, "seconds": seconds, "counts": counts, "peak": peak, "code": proc.returncode}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--placements", nargs="+", default=["cpu", "cuda-shared", "nccl"],
                        choices=["cpu", "cuda-shared", "nccl"])
    parser.add_argument("extra", nargs="*", help="arguments for run_tests.py (after --)")
    args = parser.parse_args(argv)
    gpus = _gpus()
    rows, left_out = [], []
    for device in args.placements:
        if device != "cpu" and gpus < 1:
            left_out.append(f"{device}: no GPU")
            continue
        print(f"  running the suites with --device {device} ...", file=sys.stderr)
        rows.append(run_suites(device, args.extra))
    import torch

    print(f"\nrun_tests.py {' '.join(args.extra)} on {os.cpu_count()} cores, {gpus} GPU(s), torch {torch.__version__}\n")
    base = next((r["seconds"] for r in rows if r["device"] == "cpu"), None)
    head = f"{'--device':<13} {'wall':>8} {'vs cpu':>7}  {'passed / failed / skipped':<26} {'GPU peak used':>14}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = f"{r['seconds'] / base:.2f}x" if base else "-"
        peak = _mib(r["peak"]) if r["peak"] is not None else "-"
        print(f"{r['device']:<13} {r['seconds']:>7.1f}s {ratio:>7}  {r['counts']:<26} {peak:>14}")
    for why in left_out:
        print(f"(left out: {why})")
    if gpus:
        print("\nCUDA context cost on GPU 0 (what each rank sharing a GPU pays before its tensors):")
        for n, used in context_overhead():
            print(f"  {n} process(es): {_mib(used)} together, {_mib(used / n)} each")
    return 0 if all(r["code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
