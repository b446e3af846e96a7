#!/usr/bin/env python
"""Per-test overhead of distharness against upstream PyTorch's multi-process test cases.

Every variant runs the same trivial test (one ``all_reduce`` of 4 floats, world size 2, CPU/gloo) N
times, in a subprocess of its own, from a module generated into a temporary directory:

* ``harness``        distharness ``MultiProcessTestCase`` with rank processes reused (the default)
* ``harness-norestore`` the same with ``HARNESS_ENV_CHANGED=off``: the ranks neither record nor restore
                     their process state around each test (harness.ranks.isolation); the difference is its cost
* ``harness-noreuse`` the same with ``HARNESS_REUSE=0``: fresh rank processes for every test
* ``upstream``       ``torch.testing._internal.common_distributed.MultiProcessTestCase``: spawns the
                     ranks for every test, each test makes its own process group
* ``continuous``     upstream ``MultiProcContinuousTest`` (ranks spawned once per class), where this
                     torch has it

A small driver times each test from the parent's ``startTest`` to ``stopTest``. The table gives the
first test (which pays for starting the ranks), the median of the later tests (the steady per-test
cost), the start-up cost, and the ratios against the harness with reuse, both per steady test and for
a whole run of N tests (first + (N - 1) x steady). Spawn-per-test variants cost seconds per test, so
they run fewer tests (``--slow-tests``); the per-test figures are comparable all the same.

This compares the harness with upstream's base classes only; it is not the suite-versus-upstream
benchmark. Upstream classes are used here and nowhere in the suite.

With ``--baseline DIR`` (a checkout of this repository at another commit, e.g. made with ``git worktree
add /tmp/before <commit>``), every harness variant also runs from that checkout, alternating with this
one (``--rounds`` pairs), and the table shows both side by side: a change's cost per test, measured in
one run on one machine.

Example::

    python tools/bench_overhead.py                     # about 1-3 minutes on 2 cores
    python tools/bench_overhead.py --tests 50 --slow-tests 10 --json bench.json
    python tools/bench_overhead.py --variants harness,harness-norestore --baseline /tmp/before --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BODY = """
    def _bench_body(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t[0].item() == {ws}.0, t
"""

MODULES = {
    "harness": """
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, with_comms


class TestBench(MultiProcessTestCase):
    @property
    def world_size(self):
        return {ws}
{body}

for _i in range({n}):
    setattr(TestBench, f"test_{{_i:04d}}", with_comms(lambda self: self._bench_body()))
""",
    "upstream": """
import os
import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase


class TestBench(MultiProcessTestCase):
    @property
    def world_size(self):
        return {ws}

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def tearDown(self):
        super().tearDown()
        try:
            os.remove(self.file_name)
        except OSError:
            pass
{body}

def _test(self):
    store = dist.FileStore(self.file_name, self.world_size)
    dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size)
    try:
        self._bench_body()
    finally:
        dist.destroy_process_group()


for _i in range({n}):
    setattr(TestBench, f"test_{{_i:04d}}", _test)
""",
    "continuous": """
import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcContinuousTest


class TestBench(MultiProcContinuousTest):
    world_size = {ws}

    @classmethod
    def backend_str(cls):
        return "gloo"

    @classmethod
    def device_type(cls):
        return "cpu"
{body}

for _i in range({n}):
    setattr(TestBench, f"test_{{_i:04d}}", lambda self: self._bench_body())
""",
}

DRIVER = """
import json, os, sys, time, unittest, importlib

if __name__ == "__main__":
    t0 = time.monotonic()
    mod = importlib.import_module(os.environ["BENCH_MODULE"])
    imported = time.monotonic() - t0
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    times = []

    class Result(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            self.t = time.monotonic()

        def stopTest(self, test):
            super().stopTest(test)
            times.append(time.monotonic() - self.t)

    result = Result()
    t1 = time.monotonic()
    suite.run(result)
    total = time.monotonic() - t1
    bad = result.failures + result.errors
    print("BENCH-RESULT " + json.dumps({
        "import_s": imported, "run_s": total, "times": times, "failed": len(bad),
        "skipped": len(result.skipped), "first_problem": bad[0][1][-2000:] if bad else "",
        "skip_reason": result.skipped[0][1] if result.skipped else "",
    }))
"""

# variant -> (module template, extra environment, slow: spawns per test)
VARIANTS = {
    "harness": ("harness", {"HARNESS_REUSE": "1", "HARNESS_ENV_CHANGED": "warn"}, False),
    "harness-norestore": ("harness", {"HARNESS_REUSE": "1", "HARNESS_ENV_CHANGED": "off"}, False),
    "harness-noreuse": ("harness", {"HARNESS_REUSE": "0"}, True),
    "upstream": ("upstream", {}, True),
    "continuous": ("continuous", {}, False),
}


def has_continuous() -> bool:
    try:
        from torch.testing._internal import common_distributed
    except Exception:
        return False
    return hasattr(common_distributed, "MultiProcContinuousTest")


def run_variant(name: str, n: int, world_size: int, workdir: Path, timeout: float, root: Path = ROOT,
                label: str = "") -> dict:
    """One variant's run of ``n`` tests, in a subprocess that imports the harness from ``root``."""
    template, extra_env, _ = VARIANTS[name]
    module = f"bench_{name.replace('-', '_')}"
    (workdir / f"{module}.py").write_text(textwrap.dedent(MODULES[template]).format(
        n=n, ws=world_size, body=BODY.format(ws=world_size)))
    env = dict(os.environ)
    env.update(extra_env)
    env.update({"BENCH_MODULE": module, "HARNESS_DEVICE": "cpu", "HARNESS_SHOW_OUTPUT": "0",
                "PYTHONPATH": os.pathsep.join([str(workdir), str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(workdir / "bench_driver.py")], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": label or name, "error": f"timed out after {timeout:.0f} s"}
    wall = time.monotonic() - started
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH-RESULT ")), None)
    if line is None:
        tail = (proc.stdout + proc.stderr)[-1500:]
        return {"name": label or name, "error": f"exit code {proc.returncode}, no result:\n{tail}"}
    data = json.loads(line[len("BENCH-RESULT "):])
    data.update(name=label or name, n=n, wall_s=wall)
    times = data["times"]
    if not times:
        data["error"] = f"no test ran ({data.get('skip_reason') or 'unknown reason'})"
        return data
    later = times[1:] or times
    data["first_s"] = times[0]
    data["steady_s"] = statistics.median(later)
    data["startup_s"] = max(0.0, times[0] - data["steady_s"])
    if data["failed"]:
        data["error"] = f"{data['failed']} of {len(times)} tests failed:\n{data['first_problem']}"
    return data


def table(results: list[dict], n: int) -> str:
    base = next((r for r in results if r["name"].split(" ")[0] == "harness" and "(baseline)" not in r["name"]
                 and "steady_s" in r), None)
    head = ["variant", "tests", "import s", "run s", "first test s", "later tests s (median)",
            "start-up s", f"{n} tests s (proj.)", "x per test", f"x for {n} tests"]
    rows = [head]
    for r in results:
        if "steady_s" not in r:
            rows.append([r["name"], "-", "-", "-", "-", "-", "-", "-", "-", "-"])
            continue
        projected = r["first_s"] + (n - 1) * r["steady_s"]
        r["projected_s"] = projected
        if base is not None:
            base_projected = base["first_s"] + (n - 1) * base["steady_s"]
            per = f"{r['steady_s'] / base['steady_s']:.1f}" if base["steady_s"] > 0 else "-"
            whole = f"{projected / base_projected:.1f}"
        else:
            per = whole = "-"
        rows.append([r["name"], str(len(r["times"])), f"{r['import_s']:.2f}", f"{r['run_s']:.2f}",
                     f"{r['first_s']:.3f}", f"{r['steady_s']:.3f}", f"{r['startup_s']:.2f}", f"{projected:.1f}",
                     per, whole])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--tests", type=int, default=30, metavar="N",
                   help="trivial tests per run for the variants that keep their ranks (harness, continuous)")
    p.add_argument("--slow-tests", type=int, default=4, metavar="M",
                   help="tests per run for the variants that spawn ranks for every test (harness-noreuse, upstream)")
    p.add_argument("--world-size", type=int, default=2, help="ranks per test")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="comma-separated subset of: " + ", ".join(VARIANTS))
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one variant's subprocess may take")
    p.add_argument("--json", metavar="PATH", help="also write the raw figures (per-test times included) as JSON")
    p.add_argument("--keep", action="store_true", help="keep the generated modules and print where they are")
    p.add_argument("--baseline", metavar="DIR", type=Path,
                   help="a checkout of this repository at another commit: its harness variants run too, side by side")
    p.add_argument("--rounds", type=int, default=1, metavar="K",
                   help="with --baseline: run each harness variant K times from each checkout, alternating")
    args = p.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "harness" / "__init__.py").is_file():
        p.error(f"--baseline {args.baseline}: not a checkout of this repository (no harness/__init__.py there)")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.tests < 2 or args.slow_tests < 2:
        p.error("--tests and --slow-tests must be >= 2 (the first test pays for start-up)")
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")

    import torch

    workdir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    (workdir / "bench_driver.py").write_text(textwrap.dedent(DRIVER))
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; world size "
          f"{args.world_size}, gloo, one all_reduce per test; modules in {workdir}", flush=True)
    results = []
    for name in names:
        if name == "continuous" and not has_continuous():
            print(f"  {name}: skipped, torch {torch.__version__} has no MultiProcContinuousTest", flush=True)
            continue
        n = args.slow_tests if VARIANTS[name][2] else args.tests
        paired = args.baseline is not None and name.startswith("harness")
        sides = [(ROOT, name), (args.baseline, f"{name} (baseline)")] if paired else [(ROOT, name)]
        for round_ in range(args.rounds if paired else 1):
            for root, label in sides:
                shown = label + (f" #{round_ + 1}" if args.rounds > 1 and paired else "")
                print(f"  {shown}: {n} tests ...", end="", flush=True)
                r = run_variant(name, n, args.world_size, workdir, args.timeout, root, shown)
                results.append(r)
                if "steady_s" in r:
                    print(f" {r['wall_s']:.1f} s (first {r['first_s']:.2f} s, then {r['steady_s'] * 1000:.1f} ms per "
                          "test)", flush=True)
                if r.get("error"):
                    print(f"\n  {shown}: {r['error']}", flush=True)
    print()
    print(table(results, args.tests))
    if args.baseline is not None:
        print(f"\nbaseline: {args.baseline}; this checkout: {ROOT}. Per-test cost (median later test), ms:")
        for name in names:
            if not name.startswith("harness"):
                continue
            here = [r["steady_s"] * 1000 for r in results if "steady_s" in r and r["name"].split(" ")[0] == name
                    and "(baseline)" not in r["name"]]
            there = [r["steady_s"] * 1000 for r in results if "steady_s" in r and r["name"].split(" ")[0] == name
                     and "(baseline)" in r["name"]]
            if here and there:
                print(f"  {name:18} this checkout {' / '.join(f'{x:.1f}' for x in here):24} baseline "
                      f"{' / '.join(f'{x:.1f}' for x in there):24} ratio of medians "
                      f"{statistics.median(here) / statistics.median(there):.2f}")
    by_name = {r["name"]: r for r in results if "steady_s" in r}
    if "harness" in by_name and "harness-norestore" in by_name:
        with_, without = by_name["harness"]["steady_s"] * 1000, by_name["harness-norestore"]["steady_s"] * 1000
        print(f"\nper-test overhead with state restored: {with_:.1f} ms; without (HARNESS_ENV_CHANGED=off): "
              f"{without:.1f} ms; restore costs {with_ - without:+.1f} ms per test")
    print(f"\nx: ratio to 'harness' (ranks reused). 'proj.': first test + ({args.tests} - 1) x the median later "
          "test, so variants measured with fewer tests compare at the same N. The first test includes starting "
          "the ranks (spawn + import torch); 'import s' is loading the test module in the parent.")
    if args.json:
        Path(args.json).write_text(json.dumps({"torch": torch.__version__, "cpus": os.cpu_count(),
                                               "world_size": args.world_size, "results": results}, indent=1))
        print(f"raw figures: {args.json}")
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
