"""Real upstream test files under both harnesses, file by file, on this machine: never worse than upstream.

Give it a folder of test files from PyTorch's ``test/distributed`` (the release that matches the installed
torch: its ``torch.testing._internal`` is the one they import). Each file runs twice under pytest, on the
same machine, one file at a time:

* **upstream**: the file as it is, on ``torch.testing._internal`` (the distharness plugin off);
* **port**: a copy whose imports ``python -m harness.port`` rewrote, with the distharness plugin.

Then it prints one line per file (passed / failed / skipped and seconds, both ways) and, test by test, every
test the port fails where upstream passed or skipped: the files where the port is **worse**; and every test the
port skips where upstream passed, with the port's reason (upstream passes a test whose world has 0 ranks, a class
that sizes its world by the GPUs on a machine without them, without running it). A side still running after
``--limit`` seconds is interrupted as Ctrl-C would: its outcomes are those of the tests that ran by then; a port
interrupted before tests that upstream ran is **timed out** (a hang looks the same). The exit code is 1 when any file
is worse or timed out, 0 otherwise. JUnit XML of both runs and a JSON summary go to ``--out``.

    python tools/compare_upstream.py upstream_samples/             # every test_*.py under it
    python tools/compare_upstream.py upstream_samples/ --limit 60 --budget 210 --out gpu-check/upstream

The files are not part of this repository (they are PyTorch's); ``upstream_samples/`` is ignored by git.
On a lent GPU machine they travel with the working tree as an ignored path (tools/gpu_check.sh).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class Side:
    """One file's run under one harness: each test's outcome, by its JUnit id, and the run's seconds."""
    outcomes: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # each skipped test's reason
    seconds: float = 0.0
    note: str = ""  # why the outcomes stop short (timed out: those of the tests that ran) or are none

    def counts(self) -> str:
        if not self.outcomes:
            return self.note or "no tests"
        values = list(self.outcomes.values())
        counts = f"{values.count(PASSED)}/{values.count(FAILED)}/{values.count(SKIPPED)}"
        return f"{counts} (then {self.note})" if self.note else counts


def _outcomes(xml_path: str) -> tuple[dict[str, str], dict[str, str]]:
    """Each test's outcome, and each skipped test's reason, by ``Class.test``."""
    if not os.path.exists(xml_path):
        return {}, {}
    found, reasons = {}, {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        if not case.get("name"):
            continue  # the test an interrupt stopped: pytest writes it without a name or an outcome
        name = f"{case.get('classname', '')}.{case.get('name', '')}".rsplit(".", 2)
        key = ".".join(name[-2:])  # Class.test: the module part differs between the two copies' paths
        tags = {child.tag for child in case}
        found[key] = FAILED if tags & {"failure", "error"} else SKIPPED if "skipped" in tags else PASSED
        if found[key] == SKIPPED:
            reasons[key] = next((c.get("message") or "" for c in case if c.tag == "skipped"), "")
    return found, reasons


def _pytest(path: str, xml_path: str, plugin: bool, limit: float, env: dict[str, str]) -> Side:
    """One side's run of one file. Past ``limit`` pytest is interrupted as Ctrl-C would (its JUnit XML then holds
    the tests that ran), then killed if it does not end within a grace."""
    cmd = [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider", f"--junitxml={xml_path}",
           "-o", "junit_family=xunit1"]
    if not plugin:
        cmd += ["-p", "no:distharness"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=os.path.dirname(path), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        note = "" if proc.returncode in (0, 1) else f"pytest exited {proc.returncode}: " + (
            out.strip().splitlines() or [""])[-1][:160]
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGINT)
        try:
            proc.communicate(timeout=_INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.communicate()
        note = f"timed out after {limit:.0f} s"
    return Side(*_outcomes(xml_path), time.monotonic() - start, note)


#: how long an interrupted pytest may take to stop its processes and write its JUnit XML
_INTERRUPT_GRACE_S = 15.0


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _port(path: str) -> str:
    """Rewrite the copy's imports; what the port could not map stays an upstream import (listed)."""
    proc = subprocess.run([sys.executable, "-m", "harness.port", path], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    kept = [line.strip() for line in proc.stderr.splitlines() if line.startswith("  ")]  # the names not mapped
    return "; ".join(kept) if proc.returncode in (0, 1) else f"the port failed: {proc.stderr.strip()[-200:]}"


def compare(folder: str, out: str, limit: float, budget: float | None = None) -> int:
    files = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs
                   if f.startswith("test_") and f.endswith(".py"))
    if not files:
        print(f"no test_*.py files under {folder}: put PyTorch's test/distributed files there (the release of the "
              "installed torch)", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="compare-upstream-")
    up_dir, port_dir = os.path.join(work, "upstream"), os.path.join(work, "port")
    shutil.copytree(folder, up_dir)
    shutil.copytree(folder, port_dir)  # siblings too: files import their neighbours (test_c10d_common, ...)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "EXPECTTEST_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    rows, worse_files, late_files = [], 0, 0
    print(f"{'file':<58} {'upstream p/f/s':>16} {'s':>6}   {'port p/f/s':>16} {'s':>6}  verdict")
    began, not_run = time.monotonic(), []
    try:
        for rel in files:
            if budget is not None and time.monotonic() - began + 2 * (limit + _INTERRUPT_GRACE_S) > budget:
                not_run.append(rel)  # both sides may take their limit and the interrupt's grace: over the budget
                continue
            stem = rel.replace(os.sep, "_").removesuffix(".py")
            up = _pytest(os.path.join(up_dir, rel), os.path.join(out, f"{stem}.upstream.xml"), False, limit, env)
            kept = _port(os.path.join(port_dir, rel))
            port = _pytest(os.path.join(port_dir, rel), os.path.join(out, f"{stem}.port.xml"), True, limit, env)
            worse = sorted(t for t, o in port.outcomes.items() if o == FAILED and up.outcomes.get(t, PASSED) != FAILED)
            if not port.outcomes and up.outcomes and any(o != FAILED for o in up.outcomes.values()):
                worse = [f"(the whole file: {port.note or 'no tests ran'})"]
            worse_files += bool(worse)
            # the port still running where upstream had run more: a hang looks the same, until each test's own limit
            left = sorted(set(up.outcomes) - set(port.outcomes))
            late = not worse and port.note.startswith("timed out") and bool(left)
            late_files += late
            verdict = "WORSE" if worse else "TIMED OUT" if late else (
                "better" if sum(o == FAILED for o in up.outcomes.values())
                > sum(o == FAILED for o in port.outcomes.values()) else "same")
            speed = (f" ({up.seconds / port.seconds:.1f}x)" if port.seconds and up.outcomes and port.outcomes
                     and not (up.note or port.note) else "")
            print(f"{rel:<58} {up.counts():>16} {up.seconds:6.1f}   {port.counts():>16} {port.seconds:6.1f}  "
                  f"{verdict}{speed}", flush=True)
            for test in worse:
                print(f"    port fails, upstream {up.outcomes.get(test, 'did not run it')}: {test}")
            if late:
                ended = f"upstream {up.note}" if up.note else f"upstream ended in {up.seconds:.0f} s"
                print(f"    the port {port.note} ({ended}); not run by then: "
                      f"{len(left)} test(s) upstream ran{': ' + ', '.join(left[:3]) if left else ''}"
                      f"{' ...' if len(left) > 3 else ''} (a larger --limit runs them)")
            for test in sorted(t for t, o in port.outcomes.items() if o == SKIPPED and up.outcomes.get(t) == PASSED):
                # not worse by the rule, but a pass less: the reason says whether upstream's pass ran anything
                print(f"    port skips, upstream passed: {test}: {port.reasons.get(test, '')[:160]}")
            if kept:
                print(f"    the port kept: {kept}")
            rows.append({"file": rel, "upstream": asdict(up), "port": asdict(port), "worse": worse, "kept": kept,
                         "timed_out": late})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    if not_run:
        print(f"not run, over the --budget of {budget:.0f} s: {len(not_run)} file(s): {', '.join(not_run[:5])}"
              f"{' ...' if len(not_run) > 5 else ''}")
    late = f", {late_files} timed out before tests upstream ran" if late_files else ""
    print(f"{len(files) - len(not_run)} files: {worse_files} worse under the port{late} (JUnit of each side and summary.json in "
          f"{out})")
    return 1 if worse_files or late_files else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of PyTorch test/distributed files (test_*.py, with their helpers)")
    parser.add_argument("--out", default="compare-upstream", help="where the JUnit XML and summary.json go")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds each file may take on each side")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole comparison: no file starts that could take it past them "
                             "(both sides at --limit, each interrupted then); those left are listed")
    args = parser.parse_args(argv)
    return compare(os.path.abspath(args.folder), os.path.abspath(args.out), args.limit, args.budget)


if __name__ == "__main__":
    sys.exit(main())
