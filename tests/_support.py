"""Run a fixture module in a subprocess as a user would, and check what it leaves behind.

Every run gets a unique token in its environment (inherited by the rank processes the harness spawns)
and its own TMPDIR, so that after the run we can tell whether any of *its* processes are still alive
(by scanning /proc/*/environ for the token) and whether it left harness temp dirs behind, without
being confused by other runs on the same machine.

:class:`FixtureTestCase` runs one fixture once for its tests; :func:`under_each_front_end` makes one such class per
front end (run_tests, the runner, pytest, plain unittest) from a single mixin of checks.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOKEN_VAR = "DISTHARNESS_SUITE_TOKEN"
# A generous bound for one fixture run on a loaded 2-core machine; never a timing assertion.
RUN_TIMEOUT = 300
# pytest runs with the harness's plugin loaded once, as an installed package has it (entry point
# "distharness"), whether or not this checkout is installed: the entry point off, the module on.
PYTEST_PLUGIN = ["-p", "no:distharness", "-p", "harness.pytest_plugin"]


#: set to 1 to run the nightly tier too: checks that repeat what CI already covers through another front end or
#: signal, slow and rarely failing (the GitHub workflow's nightly job sets it; CI's run skips them, saying so)
NIGHTLY_VAR = "DISTHARNESS_NIGHTLY"


def nightly(why: str):
    """Run the decorated test or class only in the nightly tier (``DISTHARNESS_NIGHTLY=1``); ``why``: what CI
    already checks in its place."""
    return unittest.skipUnless(os.environ.get(NIGHTLY_VAR) == "1", f"nightly tier ({NIGHTLY_VAR}=1 runs it): {why}")


def fixture_line(module: str, marker: str) -> int:
    """The line number of the first line of a fixture module that contains ``marker``.

    ``module``: a name in tests/fixtures (``"fx_fail"``) or a dotted module of the repository
    (``"tests.compat.cx_needs_cuda"``).
    """
    path = (os.path.join(REPO, *module.split(".")) if "." in module else os.path.join(FIXTURES, module)) + ".py"
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number
    raise AssertionError(f"{marker!r} not found in {path}")


def suite_modules() -> set[str]:
    """The harness's own test modules as on disk (tests/, tests/compat/, tests/unit/), by dotted name."""
    return {f"tests.{folder + '.' if folder else ''}{name[:-3]}" for folder in ("", "compat", "unit")
            for name in os.listdir(os.path.join(REPO, "tests", folder)) if re.fullmatch(r"test_\w+\.py", name)}


def gpus() -> int:
    """The GPUs this machine has (a test that needs them skips, saying so, where there are too few)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def nccl_skip_reason() -> str:
    """What the harness's ``requires_nccl()`` says on a machine without GPUs: upstream's words on a CPU build of
    torch, and on a CUDA build (NCCL compiled in, no GPU to run it) the harness's."""
    import torch.distributed as dist

    from harness.testing.requirements import NCCL_WITHOUT_GPU

    return NCCL_WITHOUT_GPU if dist.is_nccl_available() else "c10d was not compiled with the NCCL backend"


#: base_env's override that leaves triage to the harness's default (on), as a user's run has it
TRIAGE_ON: dict[str, str | None] = {"HARNESS_TRIAGE": None}


def base_env(**extra: str | None) -> dict[str, str]:
    """The caller's environment without HARNESS_* settings (a run must not depend on the outer shell).

    The GPUs are hidden (``CUDA_VISIBLE_DEVICES=""``): the fixtures' reports describe a machine without
    GPUs, whatever machine runs them. A test about GPUs passes ``CUDA_VISIBLE_DEVICES=None`` to see them.

    Triage is off (``HARNESS_TRIAGE=0``, as ``--no-triage``): a fixture's failures are its own on purpose, and
    triage would run each of them again in fresh ranks (a hang's whole timeout again) for a finding no check
    reads. The tests of triage, and those that read its line, pass :data:`TRIAGE_ON`.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HARNESS_") and k not in ("HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS", "CI")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["HARNESS_TRIAGE"] = "0"
    env["HYPOTHESIS_PROFILE"] = "ci"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def processes_with_token(token: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment carries ``token``."""
    found = {}
    needle = f"{TOKEN_VAR}={token}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
            if needle not in environ:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone, or not ours to read
        found[int(name)] = cmdline
    return found


def wait_until_gone(token: str, grace: float = 15.0) -> dict[int, str]:
    """Processes of the run still alive after ``grace`` seconds (a rank notices its parent's death
    within about half a second; the grace only absorbs a loaded machine)."""
    deadline = time.monotonic() + grace
    while True:
        left = processes_with_token(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def end_run(proc: subprocess.Popen, token: str, tmpdir: str) -> None:
    """After a test that started a run itself (start_fixture): kill whatever of it is left, and remove its files."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in processes_with_token(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.stdout.close()
    proc.stderr.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


@dataclasses.dataclass
class FixtureRun:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    leftover_processes: dict[int, str]
    leftover_temp: list[str]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def describe(self) -> str:
        return (f"command: {' '.join(self.args)}\nexit code: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-12000:]}")

    def sections(self) -> dict[str, str]:
        """unittest's failure sections: 'FAIL: test_x (mod.Class.test_x)' -> its text."""
        out = {}
        chunks = self.stderr.split("\n" + "=" * 70 + "\n")
        for chunk in chunks[1:]:
            header, _, body = chunk.partition("\n" + "-" * 70 + "\n")
            body = re.split(r"\n-{70}\nRan \d+ tests? in ", body)[0]
            out[header.strip()] = body
        return out

    def section(self, fragment: str) -> str:
        """The one failure section whose header contains ``fragment``."""
        found = [body for header, body in self.sections().items() if fragment in header]
        if len(found) != 1:
            raise AssertionError(f"expected one report section matching {fragment!r}, found {len(found)}; "
                                 f"headers: {list(self.sections())}\n{self.describe()}")
        return found[0]

    def rank_lines(self, tag: str) -> list[dict[str, str]]:
        """Parse '[rank N] TAG k=v k=v' lines the fixtures print (shown by the harness in the parent).

        A rank's output is printed once: after the test (stdout), or, for the rank a failure report is
        about, inside that report (unittest writes it to stderr).
        """
        rows = []
        for line in (self.stdout + "\n" + self.stderr).splitlines():
            if line.startswith("E "):
                continue  # pytest's copy of a failure report, not the output of a test
            # pytest's progress ("path.py " or "F") may precede a block on the same line
            m = re.search(rf"\[rank (\d+)\] {re.escape(tag)} (.*)$", line)
            if m:
                row = dict(kv.split("=", 1) for kv in m.group(2).split())
                row["_rank"] = m.group(1)
                rows.append(row)
        return rows


def start_fixture(args: list[str], env: dict[str, str] | None = None, runner: str = "unittest"
                  ) -> tuple[subprocess.Popen, str, str]:
    """Start ``python -m <runner> <args>`` in the repository (``python <runner> <args>`` for a ``.py`` file, as a user
runs a test file's own ``run_tests()``); returns (process, token, tmpdir)."""
    token = uuid.uuid4().hex
    tmpdir = tempfile.mkdtemp(prefix="distharness-suite-")
    full_env = dict(base_env() if env is None else env)
    full_env[TOKEN_VAR] = token
    full_env["TMPDIR"] = tmpdir
    cmd = [sys.executable, *([runner] if runner.endswith(".py") else ["-m", runner]),
           *(PYTEST_PLUGIN if runner == "pytest" else []), *args]
    # stdin from /dev/null, as in CI: a run started from a terminal must not find one here
    proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, token, tmpdir


def _sample_cpu(token: str, stop: threading.Event, seen: dict[int, tuple[float, str]]) -> None:
    """Until ``stop``: each live process carrying ``token`` -> (its CPU seconds so far, what it is)."""
    tick = os.sysconf("SC_CLK_TCK")
    while not stop.wait(0.25):
        for pid, cmd in processes_with_token(token).items():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                seen[pid] = ((int(fields[11]) + int(fields[12])) / tick,
                             "template" if "forkserver" in cmd else cmd.split(" -m ")[-1].split()[0][:40])
            except (OSError, IndexError, ValueError):
                pass


def finish_fixture(proc: subprocess.Popen, token: str, tmpdir: str, started: float,
                   timeout: float = RUN_TIMEOUT) -> FixtureRun:
    seen: dict[int, tuple[float, str]] = {}
    stop = threading.Event()
    if os.environ.get("DISTHARNESS_FIXTURE_LOG"):
        threading.Thread(target=_sample_cpu, args=(token, stop, seen), daemon=True).start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the session we started for it, and nothing else
        stdout, stderr = proc.communicate()
        stderr += f"\n[suite] killed after {timeout} s"
    seconds = time.monotonic() - started
    stop.set()
    left = wait_until_gone(token)
    for pid in left:  # do not leave them to the next test; report them below
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    leftover_temp = sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-"))
    shutil.rmtree(tmpdir, ignore_errors=True)
    if os.environ.get("DISTHARNESS_FIXTURE_LOG"):  # what each fixture run cost, for the CI time's accounting
        with open(os.environ["DISTHARNESS_FIXTURE_LOG"], "a") as f:
            kinds: dict[str, float] = {}
            for cpu, kind in seen.values():
                kinds[kind] = round(kinds.get(kind, 0.0) + cpu, 2)
            f.write(json.dumps({"args": list(proc.args)[1:], "seconds": round(seconds, 2), "processes": len(seen),
                                "cpu": round(sum(c for c, _ in seen.values()), 2), "kinds": kinds}) + "\n")
    return FixtureRun(list(proc.args), proc.returncode, unittest_names(stdout), unittest_names(stderr), seconds, left,
                      leftover_temp)


#: a test as Python 3.10's unittest names it in its lines: ``test_x (mod.Class)``, at a line's start or after "FAIL: "
_OLD_NAME = re.compile(r"^(\s*|(?:FAIL|ERROR|UNEXPECTED SUCCESS): )(\w+) \(((?:\w+\.)+[A-Z_]\w*)\)", re.M)


#: unittest writes a line for each subtest that failed or was skipped (``  test_x (...) (a=2) ... skipped 'why'``): Python
#: 3.11 on; 3.10 writes the outcome alone, after the test's own line
SUBTEST_LINES = sys.version_info >= (3, 11)


def unittest_names(text: str) -> str:
    """unittest's lines as Python 3.11 on writes them (``test_x (mod.Class.test_x) ... ok``), on every Python, so that
    the checks read one format: 3.10 leaves the method out of the parentheses."""
    if sys.version_info >= (3, 11):
        return text
    return _OLD_NAME.sub(lambda m: f"{m[1]}{m[2]} ({m[3]}.{m[2]})", text)


def run_fixture(args: list[str], env: dict[str, str] | None = None, runner: str = "unittest",
                timeout: float = RUN_TIMEOUT) -> FixtureRun:
    started = time.monotonic()
    proc, token, tmpdir = start_fixture(args, env, runner)
    return finish_fixture(proc, token, tmpdir, started, timeout)


class FixtureTestCase(unittest.TestCase):
    """Runs ``ARGS`` once for the class; its tests check the report. Checks nothing was left behind."""

    ARGS: list[str] = []
    ENV: dict[str, str | None] = {}
    RUNNER = "unittest"
    FRONT_END = ""  # set by under_each_front_end: which front end ran the fixture
    run_result: FixtureRun

    maxDiff = None

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.run_result = run_fixture(cls.ARGS, base_env(**cls.ENV), cls.RUNNER)

    @property
    def r(self) -> FixtureRun:
        return self.run_result

    def assertInReport(self, needle: str, text: str | None = None) -> None:
        haystack = self.r.output if text is None else text
        if needle not in haystack:
            self.fail(f"{needle!r} not in the report\n{text if text is not None else self.r.describe()}")

    def assertMatchesReport(self, pattern: str, text: str | None = None) -> re.Match:
        haystack = self.r.output if text is None else text
        m = re.search(pattern, haystack, re.M)
        if m is None:
            self.fail(f"/{pattern}/ not in the report\n{text if text is not None else self.r.describe()}")
        return m

    def check_nothing_left(self) -> None:
        self.assertEqual(self.r.leftover_processes, {}, "processes of the run still alive after it ended")
        self.assertEqual(self.r.leftover_temp, [], "harness temp dirs left in the run's TMPDIR")


# ---- one fixture module under each front end a user runs it with ------------------------------------------

RUN_TESTS = "RunTests"  # python -m MODULE -v: the module's own run_tests()
THE_RUNNER = "TheRunner"  # python -m harness PATH: the harness's runner
PYTEST = "Pytest"  # python -m pytest PATH -q: pytest with the harness's plugin
UNITTEST = "Unittest"  # python -m unittest MODULE -v: plain unittest, no hook of the harness's at the end


def _front_end(front_end: str, module: str) -> tuple[str, list[str], str]:
    """(what ``python -m`` runs, its arguments, the class docstring) for ``module`` under ``front_end``."""
    path = module.replace(".", "/") + ".py"
    return {RUN_TESTS: (module, ["-v"], f"``python -m {module} -v``: the module's own run_tests()."),
            THE_RUNNER: ("harness", [path], f"``python -m harness {path}``: the harness's runner."),
            PYTEST: ("pytest", [path, "-q", "-p", "no:cacheprovider"],
                     f"``python -m pytest {path}``: pytest with the harness's plugin."),
            UNITTEST: ("unittest", [module, "-v"], f"``python -m unittest {module} -v``: plain unittest.")}[front_end]


def under_each_front_end(module: str, checks: type, front_ends: dict[str, type | tuple[type, ...]],
                         env: dict[str, str | None] | None = None,
                         args: dict[str, list[str]] | None = None,
                         nightly_only: tuple[str, ...] | None = None, suffix: str = ""
                         ) -> dict[str, type[FixtureTestCase]]:
    """One FixtureTestCase class per front end, ``TestUnder<front end>``: each runs fixture ``module`` once the way
    that front end runs it, and has the tests of the ``checks`` mixin (``self.FRONT_END`` says which front end ran).

    ``front_ends``: each front end to run under -> a mixin (or a tuple of them, or ``()``) with the tests only that
    front end has. ``env``: the fixture's environment (base_env's overrides). ``args``: arguments added to a front
    end's own (``{THE_RUNNER: ["--verbose"]}``). ``nightly_only``: front ends whose class runs in the nightly tier
    alone (:func:`nightly`), where the others already check the same fixture in CI; by default every front
    end but the first (each front end's own path has tests of its own that CI runs). ``suffix``: added to each class's
    name, for a second fixture in the same test module. Make the classes module
    globals, for unittest and pytest to find::

        globals().update(under_each_front_end(MOD, _Checks, {RUN_TESTS: (), PYTEST: _PytestOnly}, env=NO_GPUS))
    """
    classes = {}
    if nightly_only is None:
        nightly_only = tuple(front_ends)[1:]
    for front_end, extra in front_ends.items():
        runner, front_args, doc = _front_end(front_end, module)
        name = f"TestUnder{front_end}{suffix}"
        extras = extra if isinstance(extra, tuple) else (extra,)
        classes[name] = type(name, (*extras, checks, FixtureTestCase), {
            "__module__": checks.__module__, "__qualname__": name, "__doc__": doc, "FRONT_END": front_end,
            "RUNNER": runner, "ARGS": front_args + (args or {}).get(front_end, []), "ENV": dict(env or {})})
        if front_end in nightly_only:
            others = ", ".join(f for f in front_ends if f not in nightly_only) or "the module's own CI classes"
            classes[name] = nightly(f"the same checks under {others}")(classes[name])
    return classes
