"""A rank you can debug: the real front ends on a pseudo-terminal, typed at as a person would (pexpect).

Each run gets its own TMPDIR and token (tests._support): after it, no process of it may be alive and no
harness directory left. The timeouts are generous: the machine running the suite may be loaded.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

from tests._support import (PYTEST_PLUGIN, REPO, TOKEN_VAR, TRIAGE_ON, base_env, finish_fixture, fixture_line, nightly,
                            run_fixture, start_fixture, wait_until_gone)

try:
    import pexpect
except ImportError:  # the test extra installs it
    pexpect = None

FX = "tests/fixtures/fx_debug.py"
MOD = "tests.fixtures.fx_debug"
#: seconds pexpect waits for what a person would see (a loaded CI machine starts ranks slowly)
WAIT = 240
PROMPT = r"\(Pdb rank {}\) "


@unittest.skipIf(pexpect is None, "pexpect is not installed (pip install -e .[test])")
class OnTerminal(unittest.TestCase):
    """A run on a pseudo-terminal: ``self.term`` is what the person sees and types into."""

    maxDiff = None

    def start(self, args: list[str], runner: str = "harness", **env: str) -> None:
        self.token = uuid.uuid4().hex
        self.tmpdir = tempfile.mkdtemp(prefix="distharness-suite-")
        full_env = base_env(**{**TRIAGE_ON, **env})  # triage on: what it runs again matters here
        full_env.update({TOKEN_VAR: self.token, "TMPDIR": self.tmpdir, "HARNESS_THREADS": "1"})
        plugin = PYTEST_PLUGIN if runner == "pytest" else []
        self.term = pexpect.spawn(sys.executable, ["-m", runner, *plugin, *args], cwd=REPO, env=full_env,
                                  encoding="utf-8", codec_errors="replace", timeout=WAIT, dimensions=(50, 250))
        self.addCleanup(self._end)

    def _end(self) -> None:
        if self.term.isalive():
            self.term.kill(signal.SIGKILL)
        self.term.close(force=True)
        for pid in wait_until_gone(self.token, grace=1.0):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def prompt(self, rank: int) -> None:
        self.term.expect(PROMPT.format(rank))

    def type(self, line: str, expect: str, rank: int) -> str:
        """Type ``line`` at rank ``rank``'s prompt; what came back before the next prompt (``expect`` in it)."""
        self.term.sendline(line)
        self.prompt(rank)
        seen = self.term.before
        self.assertIn(expect, seen)
        return seen

    def finish(self) -> str:
        """Everything printed to the end of the run; checks that nothing of the run is left."""
        self.term.expect(pexpect.EOF)
        rest = self.term.before
        self.term.close()
        self.assertEqual(wait_until_gone(self.token), {}, "processes of the run still alive after it ended")
        self.assertEqual(sorted(n for n in os.listdir(self.tmpdir) if n.startswith("harness-")), [],
                         "harness directories left in the run's TMPDIR")
        return rest


class TestBreakpointInARank(OnTerminal):
    def test_p_reads_a_local_then_c_past_the_time_limit_and_the_test_passes(self):
        self.start([FX, "-k", "test_breakpoint", "-k", "test_zz_after"], HARNESS_TIMEOUT="2")
        self.term.expect(r"DebugTest\.test_breakpoint, rank 1: breakpoint\(\) at .*fx_debug\.py:"
                         + str(fixture_line("fx_debug", "breakpoint()")))
        self.prompt(1)
        self.type("p secret", "41", 1)
        self.type("l", "breakpoint()", 1)
        time.sleep(4)  # twice HARNESS_TIMEOUT at the prompt: nothing stops the ranks
        self.term.sendline("n")
        # Python 3.13's breakpoint() stops at its own line, earlier ones at the line after it: one step more there
        if self.term.expect(["after the breakpoint on rank 1", PROMPT.format(1)]) == 1:
            self.term.sendline("n")
            self.term.expect("after the breakpoint on rank 1")  # what the rank prints while debugged: live
        self.prompt(1)
        self.term.sendline("c")
        rest = self.finish()
        self.assertRegex(rest, r"PASS\s+tests\.fixtures\.fx_debug\.DebugTest\.test_breakpoint")
        self.assertIn("2 passed, 0 failed", rest)
        self.assertEqual(self.term.exitstatus, 0, rest)

    def test_q_fails_the_test_and_the_next_one_runs(self):
        self.start([FX, "-k", "test_set_trace", "-k", "test_zz_after"])
        self.prompt(0)
        self.type("p secret", "set-trace-0", 0)
        self.term.sendline("q")
        rest = self.finish()
        self.assertIn("quit in the debugger (q) on rank 0", rest)
        self.assertRegex(rest, r"ERROR\s+tests\.fixtures\.fx_debug\.DebugTest\.test_set_trace")
        self.assertRegex(rest, r"PASS\s+tests\.fixtures\.fx_debug\.DebugTest\.test_zz_after")
        self.assertNotIn("fresh ranks", rest)  # a quit is the user's: never run again by triage

    @nightly("the prompt by test_p_reads_a_local...")
    def test_a_test_that_stopped_then_failed_is_not_run_again_in_fresh_ranks(self):
        # after another test, in reused ranks: triage would run a plain failure again in fresh ranks, where
        # the same breakpoint would stop a second time
        self.start([FX, "-k", "test_set_trace", "-k", "test_stops_then_fails"])
        self.prompt(0)
        self.term.sendline("c")
        self.prompt(0)
        self.term.sendline("c")
        self.assertEqual(self.term.expect([PROMPT.format(0), pexpect.EOF]), 1, "a second prompt for the same test")
        rest = self.term.before
        self.assertRegex(rest, r"FAIL\s+tests\.fixtures\.fx_debug\.DebugTest\.test_stops_then_fails")
        self.assertNotIn("fresh ranks", rest)

    @nightly("the prompt by test_p_reads_a_local...")
    def test_torch_distributed_breakpoint_gets_the_prompt_on_the_rank_it_names(self):
        self.start([FX, "-k", "test_torch_breakpoint"])
        self.term.expect("rank 1: torch.distributed.breakpoint")
        self.prompt(1)
        self.type("up", "dist.breakpoint(rank=1)", 1)
        self.type("p secret", "torch-1", 1)
        self.term.sendline("c")
        rest = self.finish()
        self.assertIn("1 passed, 0 failed", rest)

    @nightly("the same prompt under the runner (test_p_reads_a_local...)")
    def test_under_plain_unittest(self):
        self.start([f"{MOD}.DebugTest.test_breakpoint", "-v"], runner="unittest")
        self.prompt(1)
        self.type("p secret", "41", 1)
        self.term.sendline("c")
        rest = self.finish()
        self.assertIn("OK", rest)
        self.assertEqual(self.term.exitstatus, 0, rest)

    @nightly("the same prompt in reused ranks")
    def test_spawned_fresh_ranks(self):
        self.start([FX, "-k", "test_breakpoint"], HARNESS_TEMPLATE="0", HARNESS_REUSE="0")
        self.prompt(1)
        self.type("p secret", "41", 1)
        self.term.sendline("c")
        self.assertIn("1 passed, 0 failed", self.finish())


    @nightly("the prompt by test_p_reads_a_local...")
    def test_two_ranks_get_the_terminal_one_at_a_time_each_prompt_labelled(self):
        self.start([FX, "-k", "test_both_ranks_stop"])
        first = self.term.expect([PROMPT.format(0), PROMPT.format(1)])
        self.type("p mine", f"mine-{first}", first)
        self.term.sendline("c")
        second = 1 - first
        self.prompt(second)
        self.type("p mine", f"mine-{second}", second)
        self.term.sendline("c")
        self.assertIn("1 passed, 0 failed", self.finish())

    @nightly("the same prompt under the runner")
    def test_under_pytest(self):
        self.start([FX, "-k", "test_breakpoint or test_zz_after", "-p", "no:cacheprovider", "--color=no"], runner="pytest")
        self.prompt(1)
        self.type("p secret", "41", 1)
        self.term.sendline("c")
        self.assertIn("2 passed", self.finish())

    @nightly("the same prompt under the runner")
    def test_under_run_tests_py(self):
        self.start([FX, "-k", "test_set_trace"], runner="run_tests")
        self.prompt(0)
        self.type("p secret", "set-trace-0", 0)
        self.term.sendline("c")
        self.assertIn("1 passed, 0 failed", self.finish())

    @nightly("the same prompt under the runner")
    def test_under_the_modules_own_main(self):
        self.start(["DebugTest.test_breakpoint"], runner=MOD)
        self.prompt(1)
        self.type("p secret", "41", 1)
        self.term.sendline("c")
        rest = self.finish()
        self.assertIn("OK", rest)


class TestPostMortem(OnTerminal):
    def test_pdb_opens_at_the_failing_frame_of_the_failing_rank_then_the_run_goes_on(self):
        self.start([FX, "-k", "test_fails_on_rank_1", "-k", "test_zz_after", "--pdb"])
        self.term.expect("rank 1: post-mortem of AssertionError")
        self.prompt(1)
        self.type("p failing_local", "14", 1)
        self.term.sendline("c")
        rest = self.finish()
        self.assertRegex(rest, r"FAIL\s+tests\.fixtures\.fx_debug\.DebugTest\.test_fails_on_rank_1")
        self.assertRegex(rest, r"PASS\s+tests\.fixtures\.fx_debug\.DebugTest\.test_zz_after")

    @nightly("--pdb by test_pdb_opens_at_the_failing_frame...")
    def test_after_a_quit_no_peer_gets_a_post_mortem_of_its_consequence(self):
        # rank 1 quits at its breakpoint; rank 0, waiting in all_reduce, then fails because rank 1's group
        # closed: that is no failure of its own to look at, and the user asked the test to end
        self.start([FX, "-k", "test_breakpoint", "-k", "test_zz_after", "--pdb"])
        self.prompt(1)
        self.term.sendline("q")
        self.assertEqual(self.term.expect([PROMPT.format(0), pexpect.EOF]), 1, "a post-mortem after the quit")
        rest = self.term.before
        self.term.close()
        self.assertIn("quit in the debugger (q) on rank 1", rest)
        self.assertNotIn("harness:quit", rest)  # the relay's mark is not shown
        self.assertRegex(rest, r"PASS\s+tests\.fixtures\.fx_debug\.DebugTest\.test_zz_after")

    @nightly("the runner's --pdb post-mortem (test_pdb_opens_at_the_failing_frame...)")
    def test_pytest_pdb_opens_the_ranks_post_mortem_first(self):
        self.start([FX, "-k", "test_fails_on_rank_1 or test_zz_after", "--pdb", "-p", "no:cacheprovider", "--color=no"],
                   runner="pytest")
        self.prompt(1)
        self.type("p failing_local", "14", 1)
        self.term.sendline("c")
        self.term.expect(r"\(Pdb\) ")  # then pytest's own, in the parent, as --pdb does for any test
        self.term.sendline("c")
        rest = self.finish()
        self.assertIn("1 failed, 1 passed", rest)


class TestWithoutATerminal(unittest.TestCase):
    """CI, stdin redirected: a breakpoint fails its test at once, naming where; PYTHONBREAKPOINT=0 skips it."""

    def test_a_breakpoint_fails_at_once_naming_its_place_the_rank_and_the_fix(self):
        # HARNESS_TIMEOUT far above the run's own limit: waiting for it would fail this test
        r = run_fixture([FX, "-k", "test_breakpoint", "-k", "test_torch_breakpoint", "-k", "test_zz_after"],
                        base_env(HARNESS_TIMEOUT="3600", HARNESS_THREADS="1", **TRIAGE_ON),
                        runner="harness", timeout=600)
        line = fixture_line("fx_debug", "breakpoint()")
        self.assertIn(f"breakpoint() at {os.path.join(REPO, FX)}:{line} on rank 1 of "
                      f"{MOD}.DebugTest.test_breakpoint", r.output, r.describe())
        self.assertIn("run the test from a terminal", r.output)
        self.assertIn("PYTHONBREAKPOINT=0", r.output)
        self.assertIn("torch.distributed.breakpoint() at", r.output)
        self.assertIn("1 passed, 2 failed", r.output, r.describe())
        self.assertEqual(r.leftover_processes, {})

    @nightly("no terminal by test_a_breakpoint_fails_at_once...")
    def test_pythonbreakpoint_0_skips_it(self):
        r = run_fixture([FX, "-k", "test_breakpoint"], base_env(PYTHONBREAKPOINT="0", HARNESS_THREADS="1", **TRIAGE_ON),
                        runner="harness")
        self.assertIn("1 passed, 0 failed", r.output, r.describe())


def _dap_attach(port: int) -> socket.socket:
    """Attach to a rank as an IDE does (the Debug Adapter Protocol): initialize, attach, configurationDone."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    pending = b""
    for number, (command, arguments) in enumerate([("initialize", {"adapterID": "debugpy"}),
                                                   ("attach", {"justMyCode": False}), ("configurationDone", {})], 1):
        body = json.dumps({"seq": number, "type": "request", "command": command, "arguments": arguments}).encode()
        conn.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while True:  # until the answer this step waits for: the response, or (attach) the initialized event
            while b"\r\n\r\n" not in pending:
                pending += conn.recv(65536)
            head, _, pending = pending.partition(b"\r\n\r\n")
            size = int(head.split(b":")[1])
            while len(pending) < size:
                pending += conn.recv(65536)
            message, pending = json.loads(pending[:size]), pending[size:]
            if (message.get("event") == "initialized" if command == "attach"
                    else message.get("command") == command and message.get("type") == "response"):
                break
    return conn


@unittest.skipIf(importlib.util.find_spec("debugpy") is None, "debugpy is not installed (pip install -e .[debug])")
@nightly("the prompt in the terminal by TestBreakpointInARank")
class TestIdeDebugger(unittest.TestCase):
    def attach_each_rank(self, args: list[str], runner: str, **env: str) -> str:
        """Run ``args`` with HARNESS_DEBUGPY, wait past the time limit, attach to each rank as an IDE does; the
        run's output, once it ended with nothing left running."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        started = time.monotonic()
        proc, token, tmpdir = start_fixture(args, base_env(HARNESS_DEBUGPY=str(port), HARNESS_TIMEOUT="1",
                                                           HARNESS_THREADS="1", **env), runner=runner)
        ports, said = set(), []
        for line in proc.stderr:
            said.append(line)
            found = re.search(r"rank \d: waiting for a debugger on 127\.0\.0\.1:(\d+)", line)
            if found:
                ports.add(int(found.group(1)))
            if len(ports) == 2:
                break
        self.assertEqual(ports, {port, port + 1}, "".join(said))
        time.sleep(2)  # twice HARNESS_TIMEOUT: nothing stops a rank that waits for its debugger
        for conn in [_dap_attach(p) for p in sorted(ports)]:
            conn.close()  # the IDE detaches: the ranks go on
        r = finish_fixture(proc, token, tmpdir, started)
        self.assertEqual(r.leftover_processes, {})
        return r.output

    def test_each_rank_waits_for_a_debugger_past_the_time_limit_then_the_test_runs(self):
        out = self.attach_each_rank([FX, "-k", "test_ide", "-k", "test_zz_after"], "harness")
        self.assertIn("2 passed, 0 failed", out)

    @nightly("debugpy under the pool (test_each_rank_waits_for_a_debugger...)")
    def test_under_torchrun(self):
        out = self.attach_each_rank(["--standalone", "--nproc-per-node", "2", FX, "DebugTest.test_ide",
                                     "DebugTest.test_zz_after"], "torch.distributed.run", PYTHONPATH=REPO,
                                    OMP_NUM_THREADS="1")
        self.assertIn("Ran 2 tests", out)
        self.assertIn("\nOK", out)


class TestUnderTorchrun(unittest.TestCase):
    """torchrun's ranks have no parent holding the terminal: a breakpoint fails its test at once, saying so."""

    def test_a_breakpoint_fails_at_once_and_says_to_run_without_torchrun(self):
        tmpdir = tempfile.mkdtemp(prefix="distharness-torchrun-")
        self.addCleanup(shutil.rmtree, tmpdir, True)
        env = base_env(TMPDIR=tmpdir, PYTHONPATH=REPO, OMP_NUM_THREADS="1", HARNESS_TIMEOUT="3600")
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                              FX, "DebugTest.test_breakpoint", "DebugTest.test_zz_after"], cwd=REPO, env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        text = out.stdout + out.stderr
        self.assertIn(f"breakpoint() at {os.path.join(REPO, FX)}:{fixture_line('fx_debug', 'breakpoint()')} on rank 1",
                      text)
        self.assertIn("under torchrun there is no parent to hold a prompt", text)
        self.assertIn("Ran 2 tests", text)
        self.assertIn("FAILED (errors=1)", text)
        self.assertEqual(sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-")), [])


if __name__ == "__main__":
    unittest.main()
