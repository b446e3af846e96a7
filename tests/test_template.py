"""Rank processes forked from the template: the rank a spawn would make, fast, and nothing left behind."""
import os
import signal
import time
import unittest

from tests._support import (nightly, FixtureTestCase, base_env, end_run, processes_with_token, start_fixture,
                            wait_until_gone)

TEMPLATE = "tests.fixtures.fx_template"
SPAWN_NOTE = "harness: rank processes are spawned, not forked from a template"


def _parent_pid(run) -> str:
    """The run's own process (the ranks print it: the fixture hands it to them in the environment)."""
    pids = {row["run"] for row in run.rank_lines("TEMPLATE")}
    assert len(pids) == 1 and "-" not in pids, run.describe()
    return pids.pop()


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


class TestForkedRanks(FixtureTestCase):
    """The default: the runner starts the template, every rank is forked from it."""

    ARGS = [f"{TEMPLATE}.TestAForked", f"{TEMPLATE}.TestBAfterImportTimeChange", "-v"]
    RUNNER = "harness"

    def setUp(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.lines = self.r.rank_lines("TEMPLATE")

    def test_every_rank_is_a_child_of_the_template_not_of_the_run(self):
        forked = [row for row in self.lines if row["cls"] == "TestAForked"]
        self.assertEqual(sorted(row["_rank"] for row in forked), ["0", "1", "2", "3"], self.r.describe())
        parents = {row["ppid"] for row in self.lines}
        self.assertEqual(len(parents), 1, self.lines)  # one template for the run, both classes' worlds
        self.assertNotIn(_parent_pid(self.r), parents)
        self.assertNotIn(SPAWN_NOTE, self.r.output)

    def test_the_rank_has_the_parents_environment_as_a_spawned_one_would(self):
        forked = [row for row in self.lines if row["cls"] == "TestAForked"]
        self.assertEqual({row["var"] for row in forked}, {"set-after-the-template-started"})

    def test_intra_op_threads_work_in_four_forked_ranks(self):
        forked = [row for row in self.lines if row["cls"] == "TestAForked"]
        self.assertEqual({row["threads"] for row in forked}, {"2"})
        for row in forked:  # the OpenMP workers exist: the parallel op really ran on two threads
            self.assertGreaterEqual(int(row["tasks"]), 2, row)

    def test_the_templates_objects_are_out_of_the_ranks_collections(self):
        # gc.freeze() in the template: torch's hundreds of thousands of objects are never walked by a rank's collector
        forked = [row for row in self.lines if row["cls"] == "TestAForked"]
        self.assertTrue(all(int(row["frozen"]) > 100_000 for row in forked), forked)

    def test_cuda_is_never_initialised_in_the_template(self):
        self.assertEqual({row["bad_fork"] for row in self.lines}, {"False"})
        self.assertEqual({row["cuda_initialized"] for row in self.lines}, {"False"})

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("spawned ranks by TestTemplateOff")
class TestSpawnWhereForkingIsWrong(FixtureTestCase):
    """A variable torch reads at import changed since the template started: spawn, said once."""

    ARGS = [f"{TEMPLATE}.TestAForked", f"{TEMPLATE}.TestBAfterImportTimeChange", "-v"]
    RUNNER = "harness"
    ENV = {"FX_SPAWN_CASE": "1"}

    def test_the_later_world_is_spawned_and_the_run_says_why_once(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        lines = self.r.rank_lines("TEMPLATE")
        forked = {row["ppid"] for row in lines if row["cls"] == "TestAForked"}
        spawned = {row["ppid"] for row in lines if row["cls"] == "TestBAfterImportTimeChange"}
        self.assertEqual(spawned, {_parent_pid(self.r)}, lines)  # children of the run itself
        self.assertNotIn(_parent_pid(self.r), forked)
        self.assertEqual(self.r.output.count(SPAWN_NOTE), 1, self.r.describe())
        self.assertRegex(self.r.output, SPAWN_NOTE + r": PYTORCH_NO_CUDA_MEMORY_CACHING changed since the template")
        self.check_nothing_left()


class TestTemplateOff(FixtureTestCase):
    """HARNESS_TEMPLATE=0: every rank spawned by the run, as before; nothing to say about it."""

    ARGS = [f"{TEMPLATE}.TestBAfterImportTimeChange", "-v"]
    RUNNER = "harness"
    ENV = {"HARNESS_TEMPLATE": "0"}

    def test_ranks_are_children_of_the_run(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertEqual({row["ppid"] for row in self.r.rank_lines("TEMPLATE")}, {_parent_pid(self.r)})
        self.assertNotIn(SPAWN_NOTE, self.r.output)
        self.check_nothing_left()


class TestTemplateGone(unittest.TestCase):
    """No process of the run, the template included, outlives it: Ctrl-C, or SIGKILL of the parent."""

    def _running(self, env_extra=None):
        tmp_marker = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fx-started-{os.getpid()}-{time.time_ns()}")
        env = base_env(FX_STARTED_MARKER=tmp_marker, HARNESS_TIMEOUT="120", **(env_extra or {}))
        proc, token, tmpdir = start_fixture(["tests.fixtures.fx_slow", "-v"], env, runner="harness")
        deadline = time.monotonic() + 120
        while not os.path.exists(tmp_marker):
            self.assertIsNone(proc.poll(), "the run ended before the slow test started")
            self.assertLess(time.monotonic(), deadline, "the slow test never started")
            time.sleep(0.1)
        os.unlink(tmp_marker)
        running = {pid: cmd for pid, cmd in processes_with_token(token).items() if pid != proc.pid}
        # the template is the run's child; the runner process (harness.runner.forked: it collects and runs
        # the tests) and the ranks are the template's (and carry its command line)
        templates = [pid for pid, cmd in running.items() if "multiprocessing.forkserver" in cmd
                     and _ppid(pid) == proc.pid]
        self.assertEqual(len(templates), 1, running)
        ranks = [pid for pid in running if _ppid(pid) == templates[0]]
        self.assertEqual(len(ranks), 3, running)  # the runner process and 2 ranks
        return proc, token, tmpdir, running

    def _gone(self, proc, token, tmpdir, running):
        try:
            left = wait_until_gone(token, grace=15)
            self.assertEqual(left, {}, f"still running (of {running})")
            self.assertEqual(sorted(n for n in os.listdir(tmpdir) if n.startswith("harness-")), [])
        finally:
            end_run(proc, token, tmpdir)

    def test_ctrl_c_leaves_no_template_and_no_rank(self):
        proc, token, tmpdir, running = self._running()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(60)
        self.assertEqual(proc.returncode, 130)
        self._gone(proc, token, tmpdir, running)

    def test_sigkill_of_the_parent_leaves_no_template_and_no_rank(self):
        proc, token, tmpdir, running = self._running()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self.assertEqual(proc.returncode, -signal.SIGKILL)  # the run itself died; what it started must go too
        self._gone(proc, token, tmpdir, running)


_PRELOAD_PROBE = """
import sys
from harness.parent import template
template.warm(True)
if sys.argv[1] == "fsdp":
    import torch.distributed.fsdp  # as a test module that uses FSDP would, while the run collects
ctx, why = template.context(True)
assert not why, why
# a process forked from the template that runs no code of the run's: what it has, the template imported
p = ctx.Process(target=exec, args=("import sys; sys.exit(0 if 'torch.distributed.fsdp' in sys.modules else 3)",))
p.start()
p.join()
template.stop()
print("EXIT", p.exitcode)
"""


@nightly("the template's start by TestForkedRanks")
class TestPreloadFromTheTestsImports(unittest.TestCase):
    """The template imports FSDP (and the like) when the run's test modules did, and not otherwise."""

    def _forked_has_fsdp(self, what: str) -> bool:
        import subprocess
        import sys

        from tests._support import REPO

        r = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE, what], cwd=REPO, env=base_env(),
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        codes = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("EXIT ")]
        self.assertIn(codes, (["0"], ["3"]), r.stdout + r.stderr)
        return codes == ["0"]

    def test_fsdp_preloaded_when_the_run_imported_it(self):
        self.assertTrue(self._forked_has_fsdp("fsdp"))

    def test_fsdp_not_preloaded_when_no_test_uses_it(self):
        self.assertFalse(self._forked_has_fsdp("none"))


if __name__ == "__main__":
    unittest.main()
