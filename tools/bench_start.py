#!/usr/bin/env python
"""How fast rank processes start: forked from the template (the default) against spawned (HARNESS_TEMPLATE=0).

Each figure is taken for both ways of starting ranks, alternating (``--rounds`` pairs), in one run on
one machine, and printed side by side with their ratio (medians; min and max beside them):

* ``floor``          a bare ``python -c "import torch.distributed"``: what any run of torch code pays;
* ``one test, N ranks`` one trivial test (an all_reduce, CPU/gloo) run as a whole process with the
                     runner (``python -m harness one_test.py``), for each world size of ``--whole-ws``,
                     and its ratio to the floor;
* ``world of 4 ready`` once the template is up: a new world of 4 ranks started and Ready;
* ``ranks replaced`` after a test that leaves the process altered (a thread left running): the next
                     test's time, which includes stopping the old ranks and starting new ones;
* ``REUSE=0 per test`` ``HARNESS_REUSE=0``: fresh ranks for every trivial test of 2 ranks (median of
                     ``--tests`` tests after the first);
* ``watch: save to result line`` ``python -m harness --watch one_test.py``: from the save of the test file
                     to its ``[1/1] PASS`` line (median of ``--saves`` saves; forked only: --watch needs the
                     template);
* ``through the server`` one trivial 2-rank test as a whole command while a server started with
                     ``--serve`` runs (median of ``--saves`` runs; forked only).

The runner itself (the thin parent) imports no torch: the whole-process rows are the template's torch
import, the runner process forked from it, and the ranks.

The in-process figures are timed by a driver in a subprocess of its own that runs the tests through
unittest, from the parent's ``startTest`` to ``stopTest``.

Example::

    python tools/bench_start.py                  # about 1-2 minutes on 2 cores
    python tools/bench_start.py --rounds 5 --tests 30 --whole-ws 2,4,8
    python tools/bench_start.py --baseline /tmp/base   # and another commit's checkout, in the same rounds
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

ONE_TEST = """
import os
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, run_tests, with_comms


class TestOne(MultiProcessTestCase):
    @property
    def world_size(self):
        return int(os.environ["BENCH_WS"])

    @with_comms
    def test_one(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((4,), float(self.world_size)))


if __name__ == "__main__":
    run_tests()
"""

MANY_TESTS = """
import threading
import time
import torch
import torch.distributed as dist
from harness import MultiProcessTestCase, with_comms


class TestMany(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    def _body(self):
        t = torch.ones(4)
        dist.all_reduce(t)
        self.assertEqual(t, torch.full((4,), 2.0))


for _i in range({n}):
    setattr(TestMany, f"test_{{_i:04d}}", with_comms(lambda self: self._body()))


class TestAltering(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    def test_0_alters(self):
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()  # left running: the ranks are replaced

    @with_comms
    def test_1_after(self):
        t = torch.ones(4)
        dist.all_reduce(t)


class TestWorld4(MultiProcessTestCase):
    @property
    def world_size(self):
        return 4

    def test_ready(self):
        pass
"""

DRIVER = """
import json, sys, time, unittest
sys.path.insert(0, {tmp!r})
from harness.parent import template
from harness.parent.run import Run
template.warm()
import many_tests
durations = {{}}

class Timed(unittest.TestResult):
    def startTest(self, test):
        self._t = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        durations[test.id().split(".", 1)[1]] = time.monotonic() - self._t
        super().stopTest(test)

if __name__ == "__main__":
    run = Run()
    loader = unittest.TestLoader()
    # the template is up before the timed tests: the first test waits for it
    result = run.attach(Timed())
    names = sys.argv[1].split(",")
    for name in names:
        loader.loadTestsFromName(name, many_tests).run(result)
    run.close()
    bad = result.failures + result.errors
    if bad:
        sys.exit(f"bench tests failed: {{bad[0][1][-2000:]}}")
    print(json.dumps(durations))
"""


def _env(template: bool, root: Path = ROOT, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    env.update(PYTHONPATH=str(root), CUDA_VISIBLE_DEVICES="", HARNESS_SHOW_OUTPUT="0",
               HARNESS_TEMPLATE="1" if template else "0", HYPOTHESIS_PROFILE="ci", **extra)
    return env


def _wall(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds


def _driver(tmp: str, template: bool, names: list[str], **extra: str) -> dict[str, float]:
    proc = subprocess.run([sys.executable, os.path.join(tmp, "driver.py"), ",".join(names)], cwd=tmp,
                          env=_env(template, **extra), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _watch(tmp: str, saves: int) -> list[float]:
    """Seconds from each save of one_test.py to its result line under ``--watch``."""
    import re
    import signal

    env = _env(True, BENCH_WS="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "--watch", "one_test.py"], cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)

    def until(pattern: str) -> None:
        for line in proc.stdout:
            if re.search(pattern, line):
                return
        sys.exit(f"--watch ended (exit {proc.wait()}) before {pattern!r}")

    path = Path(tmp, "one_test.py")
    times = []
    try:
        until("waiting for a save")
        for i in range(saves):
            time.sleep(0.5)
            text = ONE_TEST + f"\n# save {i}\n"
            started = time.monotonic()
            path.write_text(text)
            until(r"\[1/1\] PASS")
            times.append(time.monotonic() - started)
            until("waiting for a save")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        path.write_text(ONE_TEST)
    return times


def _served(tmp: str, runs: int) -> list[float]:
    """Seconds of one trivial 2-rank test as a whole command, through a server started with --serve."""
    import glob
    import signal

    env = _env(True, BENCH_WS="2")
    subprocess.run([sys.executable, "-m", "harness", "--serve", "--idle", "60"], cwd=tmp, env=env, check=True,
                   capture_output=True)
    try:
        _wall([sys.executable, "-m", "harness", "one_test.py"], env, tmp)  # the template's import
        return [_wall([sys.executable, "-m", "harness", "one_test.py"], env, tmp) for _ in range(runs)]
    finally:
        base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
        for info in glob.glob(os.path.join(base, f"distharness-servers-{os.getuid()}", "*.json")):
            try:
                if json.loads(Path(info).read_text()).get("root") == str(Path(tmp).resolve()):
                    os.kill(json.loads(Path(info).read_text())["pid"], signal.SIGTERM)
            except (OSError, ValueError):
                pass


def commit(root: Path) -> str:
    """The checkout's commit, short, with "+changes" when its tracked files differ from it."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    tmp = tempfile.mkdtemp(prefix="bench-start-")
    Path(tmp, "one_test.py").write_text(ONE_TEST)
    Path(tmp, "many_tests.py").write_text(MANY_TESTS.format(n=args.tests + 1))
    Path(tmp, "driver.py").write_text(DRIVER.format(tmp=tmp))
    figures: dict[str, dict[str, list[float]]] = {}

    def add(name: str, how: str, value: float) -> None:
        figures.setdefault(name, {"forked": [], "spawned": []})[how].append(value)

    many = [f"TestMany.test_{i:04d}" for i in range(args.tests + 1)]
    for round_ in range(args.rounds):
        for template in (True, False) if round_ % 2 == 0 else (False, True):
            how = "forked" if template else "spawned"
            add("floor", how, _wall([sys.executable, "-c", "import torch.distributed"], _env(template), tmp))
            for ws in args.whole_ws:
                add(f"one test, {ws} ranks (whole process)", how,
                    _wall([sys.executable, "-m", "harness", "one_test.py"], _env(template, BENCH_WS=str(ws)), tmp))
                if args.baseline:  # the same, with the other checkout's harness, in the same round
                    add(f"  at {commit(args.baseline)}, {ws} ranks", how, _wall(
                        [sys.executable, "-m", "harness", "one_test.py"],
                        _env(template, args.baseline, BENCH_WS=str(ws)), tmp))
            # the template (or nothing) warmed by the first test; then the figures
            d = _driver(tmp, template, [many[0], "TestWorld4.test_ready", "TestAltering.test_0_alters",
                                        "TestAltering.test_1_after"])
            add("world of 4 ready", how, d["TestWorld4.test_ready"])
            add("ranks replaced after an altered test", how, d["TestAltering.test_1_after"])
            d = _driver(tmp, template, many, HARNESS_REUSE="0")
            add("REUSE=0 per test (2 ranks)", how, statistics.median(d[n] for n in many[1:]))
            if template:
                for value in _watch(tmp, args.saves):
                    add("watch: save to result line (2 ranks)", how, value)
                for value in _served(tmp, args.saves):
                    add("one test, 2 ranks, through the server (whole command)", how, value)
            print(f"round {round_ + 1}/{args.rounds} {how} done", file=sys.stderr, flush=True)
    return figures


def report(figures: dict[str, dict[str, list[float]]]) -> str:
    floor = {how: statistics.median(v) for how, v in figures["floor"].items()}
    rows = [("figure", "forked (template)", "spawned", "spawned / forked", "forked / floor")]
    for name, by in figures.items():
        med = {how: statistics.median(v) for how, v in by.items() if v}
        cell = {how: f"{med[how]:.3f} s [{min(v):.3f}-{max(v):.3f}]" if v else "-" for how, v in by.items()}
        to_floor = (f"{med['forked'] / floor['forked']:.2f}x" if "whole" in name or " at " in name or "watch" in name
                    else "")
        ratio = f"{med['spawned'] / med['forked']:.1f}x" if len(med) == 2 else "-"
        rows.append((name, cell["forked"], cell["spawned"], ratio, to_floor))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of forked/spawned measurements (default 3)")
    parser.add_argument("--tests", type=int, default=15, help="trivial tests timed for REUSE=0 (default 15)")
    parser.add_argument("--whole-ws", default="2,8", help="world sizes of the whole-process run (default 2,8)")
    parser.add_argument("--saves", type=int, default=5, help="saves timed under --watch, and runs through the "
                        "server, per round (default 5)")
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit (git worktree add): its "
                        "whole-process figures are taken in the same rounds, on the row under this one's")
    args = parser.parse_args()
    args.whole_ws = [int(x) for x in args.whole_ws.split(",")]
    import torch

    print(f"bench_start: commit {commit(ROOT)}; torch {torch.__version__}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores; "
          f"{args.rounds} rounds, medians [min-max]", flush=True)
    figures = measure(args)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
