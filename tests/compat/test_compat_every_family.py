"""On a machine without GPUs every class family runs on CPU: tests/compat/cx_every_family.py, one test of each, under
the runner, pytest, the module's own run_tests() and torchrun. GPUs are hidden from the run, so this holds on any
machine, and it means most with a CUDA build of torch (NCCL compiled in, no GPU to run it on): each family must
choose its device and backend from the GPUs there are, never from NCCL being built in."""
import re
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, nccl_skip_reason, nightly, under_each_front_end
from tests.test_torchrun import TORCHRUN, TorchrunCase, _env

MOD = "tests.compat.cx_every_family"
NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}

#: each family -> (its ranks, the backend of its default group): processes over gloo, threads over the harness's
#: in-process group, the local-tensor class over torch's fake group; every tensor on CPU
FAMILIES = {
    "MultiProcessTestCase": (2, "gloo"), "FSDPTest": (2, "gloo"), "DTensorTestBase": (2, "gloo"),
    "MultiProcContinuousTest": (2, "gloo"), "DTensorContinuousTestBase": (2, "gloo"), "FSDPTestContinuous": (2, "gloo"),
    "ShardedTensorTestBase": (2, "gloo"), "DistributedTestBase": (2, "gloo"),
    "DynamoDistributedMultiProcTestCase": (4, "gloo"), "DynamoDistributedSingleProcTestCase": (1, "gloo"),
    "MultiThreadedTestCase": (2, "harness_threaded"), "FSDPTestMultiThread": (2, "harness_threaded"),
    "DTensorOpTestBase": (2, "harness_threaded"), "LocalDTensorTestBase": (None, "fake"),
}
#: the families whose ranks are processes: under torchrun each launched process is one of their ranks
ON_PROCESSES = ["TestMultiProcess", "TestFSDP", "TestDTensor", "TestMultiProcContinuous", "TestDTensorContinuous",
                "TestFSDPContinuous", "TestShardedTensor", "TestDistributedBase", "TestDynamoMultiProc"]


def family_rows(text: str) -> dict[str, set[tuple[str, str, str]]]:
    """family -> {(rank, device, backend)} from the fixture's ``FAMILY name rank=R device=D backend=B`` lines."""
    rows: dict[str, set[tuple[str, str, str]]] = {}
    for name, rest in re.findall(r"FAMILY (\w+) (.*)$", text, re.M):
        kv = dict(part.split("=", 1) for part in rest.split())
        rows.setdefault(name, set()).add((kv.get("rank", "-"), kv["device"], kv["backend"]))
    return rows


class _Checks:
    def test_every_family_passes_and_the_nccl_test_is_a_needs_cuda_skip(self):
        self.assertEqual(self.r.returncode, 0, self.r.describe())
        self.assertRegex(self.r.output, r"14 passed(, 0 failed)?, 1 skipped|OK \(skipped=1\)", self.r.describe())
        self.assertIn(nccl_skip_reason(), self.r.output)

    def test_every_family_ran_on_cpu_with_its_backend(self):
        rows = family_rows(self.r.output)
        self.assertEqual(sorted(rows), sorted(FAMILIES), self.r.describe())
        for family, (ranks, backend) in FAMILIES.items():
            with self.subTest(family):
                self.assertEqual({(device, b) for _, device, b in rows[family]}, {("cpu", backend)}, self.r.describe())
                if ranks is not None:
                    self.assertEqual({r for r, _, _ in rows[family]}, {str(r) for r in range(ranks)})

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _RunnerLines:
    def test_the_process_families_say_cpu_gloo(self):
        for cls in ON_PROCESSES:
            self.assertMatchesReport(rf"PASS\s+tests\.compat\.cx_every_family\.{cls}\.test_family\s+cpu/gloo\s")

    def test_the_nccl_skip_is_counted_among_the_tests_that_need_cuda(self):
        self.assertMatchesReport(r"1 test needs CUDA, skipped \(a GPU or NCCL was missing\): "
                                 r"tests\.compat\.cx_every_family\.TestDynamoSingleProc\.test_nccl")


globals().update(under_each_front_end(MOD, _Checks, {THE_RUNNER: _RunnerLines, PYTEST: (), RUN_TESTS: ()},
                                      env=NO_GPUS, args={PYTEST: ["-rs", "-s"], THE_RUNNER: ["--verbose"]}))


@nightly("torchrun's placement is the same choose_placement the runner's run of this fixture and the unit tests check")
class TestUnderTorchrun(TorchrunCase):
    """The process families as one torchrun job of two processes on a node without GPUs: the launched world on
    CPU/gloo (the in-process families refuse torchrun's group by design)."""

    def test_the_launched_world_is_cpu_gloo(self):
        out = self.run_cmd([*TORCHRUN, "--standalone", "--nproc-per-node", "2", "tests/compat/cx_every_family.py",
                            "-v", *ON_PROCESSES], _env(self.tmpdir))
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertRegex(text, rf"Ran {len(ON_PROCESSES)} tests .*\n\nOK\n")
        rows = family_rows(text)
        for family in ("MultiProcessTestCase", "FSDPTest", "DTensorTestBase", "MultiProcContinuousTest",
                       "DTensorContinuousTestBase", "FSDPTestContinuous", "ShardedTensorTestBase", "DistributedTestBase",
                       "DynamoDistributedMultiProcTestCase"):
            with self.subTest(family):
                self.assertEqual(rows.get(family), {("0", "cpu", "gloo"), ("1", "cpu", "gloo")}, text)
        self.assertNothingLeft()


if __name__ == "__main__":
    unittest.main()
