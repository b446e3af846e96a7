"""Time a project written for pytest under pytest (with the distharness plugin) and under the runner, side by side.

The project is written to a temporary folder, as a pytest-based project lays out its tests: no package, a
``conftest.py`` with a fixture of the widest scope and an autouse fixture of each module, then ``--files`` files of
plain test functions (parametrized, taking fixtures, one class that is no ``TestCase``); with ``--torch``, each file
imports torch and one more file holds ``--dist`` harness distributed tests (world size 2) that use a fixture. pytest
runs it as installed, and without hypothesis's pytest plugin (which imports hypothesis, about a second, for the
statistics it prints at the end, which the runner does not print). The tools run it alternately, ``--rounds`` times, each a fresh process from the interpreter's start (so each figure
includes imports and, for the runner, its template), and the medians are printed side by side with each tool's
verdict counts (which must agree).

    python tools/bench_pytest_style.py                       # plain functions, no torch
    python tools/bench_pytest_style.py --torch --dist 4      # files that import torch, and harness tests
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = '''
import os

import pytest


@pytest.fixture(scope="session")
def config():
    return {"world": 2}


@pytest.fixture(autouse=True, scope="module")
def module_env():
    os.environ["BENCH_MODULE"] = "1"
    yield
'''

FILE = '''
import os

import pytest
{torch}

@pytest.fixture
def numbers():
    return list(range(10))


@pytest.mark.parametrize("n", range({params}))
def test_square(n):
    assert n * n >= 0


def test_fixture(numbers, config):
    assert sum(numbers) == 45 and config["world"] == 2


def test_env():
    assert os.environ["BENCH_MODULE"] == "1"


def test_tmp(tmp_path):
    (tmp_path / "x").write_text("1")


class TestGroup:
    @pytest.mark.parametrize("word", ["a", "b", "c"])
    def test_word(self, word):
        assert word.isalpha()

    @pytest.mark.skip(reason="not here")
    def test_skipped(self):
        pass
'''

DIST = '''
import pytest
import torch
import torch.distributed as dist

from harness import MultiProcessTestCase, with_comms


@pytest.mark.usefixtures("config")
class TestDist(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2
{tests}
'''

DIST_TEST = '''
    @with_comms
    def test_all_reduce_{n}(self):
        t = torch.ones(2) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [3.0, 3.0])
'''


def write_project(folder: Path, files: int, params: int, torch: bool, dist: int) -> int:
    """Write the project; returns how many tests it has."""
    (folder / "conftest.py").write_text(CONFTEST)
    for k in range(files):
        (folder / f"test_bench_{k:02d}.py").write_text(
            FILE.format(params=params, torch="import torch\n" if torch else ""))
    if dist:
        (folder / "test_bench_dist.py").write_text(
            DIST.format(tests="".join(DIST_TEST.format(n=n) for n in range(dist))))
    return files * (params + 3 + 4) + dist


def _counts(text: str, tool: str) -> str:
    if tool.startswith("pytest"):
        line = text.strip().splitlines()[-1] if text.strip() else ""
        return re.sub(r"\s+in [\d.]+s.*$", "", line.strip("= "))
    return text.strip().splitlines()[-1] if text.strip() else ""


def time_one(cmd: list[str], env: dict[str, str], cwd: Path, tool: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    return took, _counts(proc.stdout, tool)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--files", type=int, default=10, help="files of plain test functions (default 10)")
    parser.add_argument("--params", type=int, default=20, help="cases of each file's parametrized test (default 20)")
    parser.add_argument("--torch", action="store_true", help="each file imports torch")
    parser.add_argument("--dist", type=int, default=0, help="harness distributed tests (world size 2) in one more "
                                                            "file; implies --torch (default 0)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tool, alternating (default 3)")
    args = parser.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="distharness-bench-pytest-"))
    try:
        total = write_project(folder, args.files, args.params, args.torch or bool(args.dist), args.dist)
        env = dict(os.environ, PYTHONPATH=str(ROOT), HYPOTHESIS_PROFILE="ci", OMP_NUM_THREADS="1")
        env.pop("CI", None)
        tools = {
            # the plugin loaded once, whether or not this checkout is installed (as the tests run pytest)
            "pytest": [sys.executable, "-m", "pytest", "-p", "no:distharness", "-p", "harness.pytest_plugin",
                       "-p", "no:cacheprovider", "-q", str(folder)],
            # hypothesis's own pytest plugin imports hypothesis (about a second) for its end-of-run statistics, which
            # the runner does not print: pytest without it too
            "pytest-nohyp": [sys.executable, "-m", "pytest", "-p", "no:distharness", "-p", "harness.pytest_plugin",
                             "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q", str(folder)],
            "runner": [sys.executable, "-m", "harness", str(folder), "--no-server"],
        }
        times: dict[str, list[float]] = {name: [] for name in tools}
        counts: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, cmd in tools.items():
                took, said = time_one(cmd, env, folder, name)
                times[name].append(took)
                counts[name] = said
        print(f"project: {args.files} files, {total} tests, torch imported: {args.torch or bool(args.dist)}, "
              f"harness distributed tests: {args.dist}; {args.rounds} rounds, alternating")
        print(f"{'tool':<13} {'median s':>9}  {'each round s':<34} verdicts")
        for name in tools:
            rounds = " ".join(f"{t:.2f}" for t in times[name])
            print(f"{name:<13} {statistics.median(times[name]):>9.2f}  {rounds:<34} {counts[name]}")
        for other in ("pytest", "pytest-nohyp"):
            ratio = statistics.median(times["runner"]) / statistics.median(times[other])
            print(f"runner / {other}: {ratio:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
