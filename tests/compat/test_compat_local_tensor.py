"""Upstream's local-tensor twins run as upstream runs them (one process, every rank simulated), a class that mixes
upstream's LocalDTensorTestBase with the harness's DTensorTestBase is named as run by the harness, and skips that
mean "needs a GPU" are counted in any wording: tests/compat/cx_local_tensor.py under every front end. GPUs are
hidden from the run."""
import re
import unittest

from tests._support import PYTEST, RUN_TESTS, THE_RUNNER, UNITTEST, under_each_front_end

MOD = "tests.compat.cx_local_tensor"
NO_GPUS = {"CUDA_VISIBLE_DEVICES": ""}
TWIN = "TestShardsWithLocalTensor"
MIXED_LINE = (r"cx_local_tensor\.TestMixed mixes upstream's torch\.testing\._internal\.distributed\._tensor\."
              r"common_dtensor\.LocalDTensorTestBase with the harness's classes: its 1 test ran on distharness's rank "
              r"processes \(harness\.classes\.case\.MultiProcessTestCase\.run\(\) ran them; .*make the twin with "
              r"harness\.create_local_tensor_test_class")


class _Checks:
    def local_lines(self):
        return re.findall(r"^(.*)CX-LOCAL pid=(\d+) rank_type=(\w+) ws=(\d+) backend=(\w+) local_rows=(\d+)",
                          self.r.output, re.M)

    def test_the_twin_ran_once_in_one_process_with_every_rank_simulated(self):
        local = [row for row in self.local_lines() if row[2] == "SymInt"]
        self.assertEqual(len(local), 1, self.r.describe())
        prefix, _pid, _, ws, backend, rows = local[0]
        self.assertNotIn("[rank", prefix)  # printed by the test's own process, not by a rank
        self.assertEqual((ws, backend, rows), ("4", "fake", "2"))  # 8 rows over 4 simulated ranks

    def test_the_original_class_ran_on_four_rank_processes(self):
        rows = self.r.rank_lines("CX-LOCAL")
        self.assertEqual(sorted((row["_rank"], row["rank_type"], row["backend"]) for row in rows),
                         [(str(r), "int", "gloo") for r in range(4)], self.r.describe())
        self.assertEqual(len({row["pid"] for row in rows}), 4)

    def test_the_twin_fails_where_the_original_fails(self):
        self.assertMatchesReport(rf"{TWIN}\.test_wrong_on_purpose|test_wrong_on_purpose \(.*{TWIN}")
        self.assertGreaterEqual(self.r.output.count("16.0 != 17.0"), 2, self.r.describe())
        self.assertNotEqual(self.r.returncode, 0)

    def test_gpu_skips_in_any_wording_are_counted_and_others_are_not(self):
        line = self.assertMatchesReport(r"(\d+) tests? needs? CUDA( \(\d+ subtests\))?, skipped \(a GPU or NCCL was "
                                        r"missing\): (.*)$")
        self.assertEqual(line.group(1), "6", self.r.describe())
        self.assertMatchesReport(r"2 x Not enough CUDA devices: .*TestShards\.test_not_enough_cuda, .*"
                                 rf"{TWIN}\.test_not_enough_cuda")
        self.assertMatchesReport(r"2 x this test wants a GPU with bf16: ")
        self.assertMatchesReport(r"2 x hard-code CUDA, ran on CPU for want of GPUs .*TestShards\.test_subtests, .*"
                                 rf"{TWIN}\.test_subtests")
        self.assertNotRegex(self.r.output, r"x (flaky on ROCm|needs zstandard|Skipped test): ")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class _MixedNamed:
    def test_the_mixed_class_ran_on_the_harness_ranks_and_its_line_says_so(self):
        self.assertEqual(sorted(row["_rank"] for row in self.r.rank_lines("CX-MIXED")), ["0", "1", "2", "3"])
        self.assertMatchesReport(MIXED_LINE)
        self.assertNotRegex(self.r.output, r"TestMixed derives from upstream's .*ran on upstream's harness")


class _RunnerLines(_MixedNamed):
    def test_the_twins_lines_say_local_and_the_simulated_world(self):
        for name in ("test_shard_and_gather", "test_subtests"):
            self.assertMatchesReport(rf"PASS\s+tests\.compat\.cx_local_tensor\.{TWIN}\.{name}\s+local\s+ws=4\s")
        self.assertMatchesReport(r"placement: world size 4 simulated in one process \(LocalTensorMode over a fake "
                                 r"process group\) on cpu")
        self.assertMatchesReport(rf"FAIL\s+tests\.compat\.cx_local_tensor\.{TWIN}\.test_wrong_on_purpose\s+local\s+ws=4")
        # the harness ran the mixed class: its line shows where, not "upstream"
        self.assertMatchesReport(r"PASS\s+tests\.compat\.cx_local_tensor\.TestMixed\.test_world\s+cpu/gloo\s+ws=4")
        self.assertInReport("Upstream's bases mixed with the harness's, run by distharness (1 class(es)):")
        self.assertNotIn("Ran on upstream's harness, not distharness", self.r.output)


class _PytestSection(_MixedNamed):
    def test_the_summary_counts_the_local_tests(self):
        section = self.r.stdout.split(" distharness ", 1)[-1]
        self.assertRegex(section, r"7 on local with world size 4")


# Plain ``python -m unittest``: the harness counts what it runs itself; no hook sees a class's MRO (no _MixedNamed).
globals().update(under_each_front_end(MOD, _Checks, {RUN_TESTS: _MixedNamed, THE_RUNNER: _RunnerLines,
                                                     PYTEST: _PytestSection, UNITTEST: ()},
                                      env=NO_GPUS, args={THE_RUNNER: ["--verbose"], PYTEST: ["-s"]}))


if __name__ == "__main__":
    unittest.main()
