"""Time all of test_distributed on this harness and on upstream's, side by side, and print the ratios.

Both sides run the same test bodies (the baseline re-hosts them on torch.testing._internal's
spawn-per-test MultiProcessTestCase, adapted to CPU/gloo: see tools/_upstream_baseline.py) under the same
hypothesis profile, one subprocess per module and harness, so each figure includes interpreter start and
imports. The harness is also timed on the whole suite in one process, where its rank pools are shared
across modules, which is how ``python run_tests.py`` runs.

    python tools/bench_suite.py                       # every module, both harnesses (several minutes)
    python tools/bench_suite.py -m test_pipeline      # one module
    python tools/bench_suite.py --skip-upstream       # just this harness
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["test_fine_tuning", "test_fsdp_fine_tune", "test_fully_shard_checkpoint", "test_pipeline"]


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, str, int]:
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        code, tail = proc.returncode, (proc.stdout + proc.stderr)[-400:]
    except subprocess.TimeoutExpired:
        code, tail = -1, f"did not finish within {timeout:.0f} s"
    return time.monotonic() - started, tail, code


def _status(code: int) -> str:
    return "ok" if code == 0 else ("TIMEOUT" if code == -1 else f"FAILED ({code})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("-m", "--module", action="append", choices=MODULES,
                        help="a test_distributed module to time (repeatable; default: all four)")
    parser.add_argument("--profile", default="ci", help="HYPOTHESIS_PROFILE for both sides (default: ci)")
    parser.add_argument("--skip-upstream", action="store_true", help="time only this harness")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per run (default 1800)")
    args = parser.parse_args(argv)
    modules = args.module or MODULES

    env = dict(os.environ, HYPOTHESIS_PROFILE=args.profile, HARNESS_SHOW_OUTPUT="0", PYTHONPATH=str(ROOT))
    env.pop("HARNESS_REUSE", None)
    rows = []
    for name in modules:
        ours, tail_o, code_o = _run([sys.executable, "-m", "unittest", f"test_distributed.{name}"], env, args.timeout)
        row = {"module": name, "ours": ours, "ours_status": _status(code_o)}
        if code_o != 0:
            print(f"{name} (distharness) {_status(code_o)}:\n{tail_o}", file=sys.stderr)
        if not args.skip_upstream:
            up_env = dict(env, HARNESS_BASELINE_MODULES=f"test_distributed.{name}")
            theirs, tail_u, code_u = _run([sys.executable, "-m", "unittest", "tools._upstream_baseline"], up_env,
                                          args.timeout)
            row.update(upstream=theirs, upstream_status=_status(code_u))
            if code_u != 0:
                print(f"{name} (upstream) {_status(code_u)}:\n{tail_u}", file=sys.stderr)
        rows.append(row)
        print(f"  timed {name}: distharness {ours:.1f} s" +
              ("" if args.skip_upstream else f", upstream {row['upstream']:.1f} s"), file=sys.stderr)

    whole, tail_w, code_w = _run([sys.executable, "-m", "unittest", *(f"test_distributed.{m}" for m in modules)],
                                 env, args.timeout)
    if code_w != 0:
        print(f"whole suite (distharness) {_status(code_w)}:\n{tail_w}", file=sys.stderr)

    print(f"\ntest_distributed, HYPOTHESIS_PROFILE={args.profile}, {os.cpu_count()} cores, one process per run\n")
    head = f"{'module':<30} {'distharness':>12} {'upstream':>12} {'upstream/ours':>14}  status"
    print(head)
    print("-" * len(head))
    total_o = total_u = 0.0
    for row in rows:
        total_o += row["ours"]
        up = row.get("upstream")
        ratio = f"{up / row['ours']:.2f}x" if up else "-"
        total_u += up or 0.0
        status = row["ours_status"] + ("" if up is None else f" / {row['upstream_status']}")
        print(f"{row['module']:<30} {row['ours']:>11.1f}s {(f'{up:.1f}s' if up else '-'):>12} {ratio:>14}  {status}")
    ratio_total = f"{total_u / total_o:.2f}x" if total_u else "-"
    print(f"{'sum of modules':<30} {total_o:>11.1f}s {(f'{total_u:.1f}s' if total_u else '-'):>12} {ratio_total:>14}")
    ratio_whole = f"{total_u / whole:.2f}x" if total_u else "-"
    print(f"{'whole suite in one process':<30} {whole:>11.1f}s {(f'{total_u:.1f}s' if total_u else '-'):>12} "
          f"{ratio_whole:>14}  {_status(code_w)}")
    failed = any(r["ours_status"] != "ok" or r.get("upstream_status", "ok") != "ok" for r in rows) or code_w != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
