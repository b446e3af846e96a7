#!/usr/bin/env python
"""Environment report to paste into a bug report about distharness or a distributed test.

It prints PyTorch's own report (``torch.utils.collect_env``: OS, compilers, Python, CUDA, driver,
cuDNN, relevant pip/conda packages), then what matters to the harness: torch.distributed, NCCL,
gloo and MPI availability, the GPUs this process can see, the ``HARNESS_*`` settings in force, and
where the harness would run a test of world size 1, 2 and 4 (device/backend, and why).

Example::

    python tools/env_report.py                 # Markdown-friendly text on stdout
    python tools/env_report.py --json          # the same facts as JSON
    python tools/env_report.py --no-collect-env  # skip torch's (slower) report
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _try(fn: Any, default: Any = None) -> Any:
    try:
        return fn()
    except Exception as exc:  # a report must not fail because one probe does
        return default if default is not None else f"unavailable ({type(exc).__name__}: {exc})"


def gather(world_sizes: list[int], collect_env: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", ""),
        "torch_cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "distributed_available": dist.is_available(),
    }
    if dist.is_available():
        facts["nccl_available"] = dist.is_nccl_available()
        facts["nccl_version"] = _try(lambda: ".".join(map(str, torch.cuda.nccl.version())), "") \
            if facts["nccl_available"] else ""
        facts["gloo_available"] = dist.is_gloo_available()
        facts["mpi_available"] = dist.is_mpi_available()
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = _try(lambda i=i: torch.cuda.get_device_properties(i), None)
            gpus.append({"index": i, "name": _try(lambda i=i: torch.cuda.get_device_name(i)),
                         "memory_gib": round(props.total_memory / 2**30, 1) if props is not None else None,
                         "capability": ".".join(map(str, _try(lambda i=i: torch.cuda.get_device_capability(i),
                                                              ("?",))))})
    facts["gpu_count"] = len(gpus)
    facts["gpus"] = gpus
    facts["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")

    from harness.shared.placement import choose_placement
    from harness.shared.config import VARIABLES, settings
    from harness.parent.hypothesis_support import profile_choice

    facts["harness_env"] = {name: os.environ.get(name) for name in VARIABLES}
    facts["harness_defaults"] = {name: var.shown_default.replace("`", "") for name, var in VARIABLES.items()}
    profile, why = profile_choice()
    facts["hypothesis_profile"] = f"{profile} ({why})"
    try:
        conf = settings()
        facts["harness_settings"] = {k: getattr(conf, k) for k in conf.__dataclass_fields__}
        placements = {}
        for ws in world_sizes:
            pl = _try(lambda ws=ws: choose_placement(ws, 0, conf.device), None)
            if pl is None:
                placements[ws] = {"error": "choose_placement failed"}
                continue
            placements[ws] = {"runs_on": "" if pl.skip else pl.label, "reason": pl.reason, "skip": pl.skip}
        facts["placements"] = placements
    except Exception as exc:  # a bad HARNESS_* value: report it, it may be the bug
        facts["harness_settings"] = f"invalid: {exc}"
        facts["placements"] = {}
    for pkg in ("hypothesis", "expecttest", "junitparser", "pytest", "numpy"):
        facts.setdefault("packages", {})[pkg] = _try(lambda pkg=pkg: importlib.metadata.version(pkg), "not installed")
    if collect_env:
        from torch.utils import collect_env as ce

        # torch's own probes, run once: the raw namedtuple for --json, its pretty form for the text report
        info = _try(ce.get_env_info, None)
        if info is None or not hasattr(ce, "pretty_str"):
            facts["collect_env"] = _try(ce.get_pretty_env_info)
        else:
            facts["collect_env"] = _try(lambda: ce.pretty_str(info))
        if info is not None:
            facts["collect_env_raw"] = _try(info._asdict, {})
    return facts


def render(facts: dict[str, Any]) -> str:
    lines = ["## distharness environment report", ""]
    if "collect_env" in facts:
        lines += ["### torch.utils.collect_env", "", "```", str(facts["collect_env"]).rstrip(), "```", ""]
    lines += ["### torch and torch.distributed", "", "```",
              f"torch:                {facts['torch']} (git {facts['torch_git'] or '?'})",
              f"python:               {facts['python']} on {facts['platform']}, {facts['cpus']} CPUs",
              f"CUDA build / runtime: {facts['torch_cuda_build'] or 'none (CPU build)'} / "
              f"{'available' if facts['cuda_available'] else 'not available'}",
              f"torch.distributed:    {'available' if facts['distributed_available'] else 'NOT available'}"]
    if facts["distributed_available"]:
        nccl = "yes" + (f" ({facts['nccl_version']})" if facts.get("nccl_version") else "") \
            if facts["nccl_available"] else "no"
        lines += [f"NCCL: {nccl}   gloo: {'yes' if facts['gloo_available'] else 'no'}   "
                  f"MPI: {'yes' if facts['mpi_available'] else 'no'}"]
    lines += [f"GPUs visible:         {facts['gpu_count']}"
              + (f" (CUDA_VISIBLE_DEVICES={facts['CUDA_VISIBLE_DEVICES']})"
                 if facts["CUDA_VISIBLE_DEVICES"] is not None else "")]
    for g in facts["gpus"]:
        lines.append(f"  cuda:{g['index']}  {g['name']}  {g['memory_gib']} GiB  sm {g['capability']}")
    lines += ["packages:             " + ", ".join(f"{k} {v}" for k, v in facts.get("packages", {}).items()),
              "```", "", "### What the harness would do", "", "```"]
    width = max(map(len, facts["harness_env"]), default=0)
    for name, value in facts["harness_env"].items():  # every HARNESS_* variable harness.shared.config knows
        shown = f"{value}  (set)" if value is not None else f"{facts['harness_defaults'][name]}  (default)"
        lines.append(f"{name:<{width}}  {shown}")
    lines.append(f"{'HYPOTHESIS_PROFILE':<{width}}  {facts['hypothesis_profile']}")
    hs = facts["harness_settings"]
    if isinstance(hs, dict):
        lines.append("settings:             " + ", ".join(f"{k}={v}" for k, v in hs.items()))
    else:
        lines.append(f"settings:             {hs}")
    for ws, pl in facts["placements"].items():
        if "error" in pl:
            lines.append(f"world size {ws}:         {pl['error']}")
        elif pl["skip"]:
            lines.append(f"world size {ws}:         skipped: {pl['skip']}")
        else:
            lines.append(f"world size {ws}:         {pl['runs_on']}  ({pl['reason']})")
    lines += ["```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the facts as JSON instead of text")
    p.add_argument("--no-collect-env", dest="collect_env", action="store_false",
                   help="leave out torch.utils.collect_env's report (it runs nvidia-smi, pip, conda, ...)")
    p.add_argument("--world-sizes", default="1,2,4", metavar="LIST",
                   help="comma-separated world sizes to show the harness's placement for")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   help="show placements as with HARNESS_DEVICE set to this (default: the environment's)")
    args = p.parse_args(argv)
    try:
        sizes = [int(x) for x in args.world_sizes.split(",") if x.strip()]
    except ValueError:
        p.error(f"--world-sizes {args.world_sizes!r}: give integers, e.g. 1,2,4")
    if args.device:
        os.environ["HARNESS_DEVICE"] = args.device
    facts = gather(sizes, args.collect_env)
    print(json.dumps(facts, indent=1, default=str) if args.json else render(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
