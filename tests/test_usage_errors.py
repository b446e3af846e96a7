"""Mistakes in tests or settings: each is a clear error naming the test and the fix, never a pass."""
import re
import unittest

from tests._support import FixtureTestCase, nightly

MOD = "tests.fixtures.fx_usage"


class TestBadTests(FixtureTestCase):
    # fx_rank_import shares the world size, hence the pool: one start for both modules.
    ARGS = [MOD, "tests.fixtures.fx_rank_import", "-v"]

    def test_exit_code(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=9)")

    def test_world_size_zero_is_an_error(self):
        text = self.r.section("ERROR: test_world_size_zero")
        self.assertIn(f"UsageError: {MOD}.TestAWorldSizeZero.test_world_size_zero: world_size must be an int "
                      ">= 1, got 0", text)
        self.assertIn("return the number of ranks the test needs", text)
        self.assertNotIn("FIXTURE-RAN-WITH-ZERO-RANKS", self.r.output)

    def test_run_subtests_empty_list(self):
        text = self.r.section("ERROR: test_empty_list")
        self.assertIn(f"UsageError: {MOD}.TestBSubtestsBadConfig.test_empty_list: run_subtests "
                      "config['use_orig_params'] is an empty list", text.splitlines()[0])
        self.assertIn("give it at least one value or remove the key", text)

    def test_run_subtests_value_not_a_list(self):
        text = self.r.section("ERROR: test_not_a_list")
        self.assertIn(f"UsageError: {MOD}.TestBSubtestsBadConfig.test_not_a_list: run_subtests config['lr'] must "
                      "be a list of values; got 0.1", text.splitlines()[0])
        self.assertIn("Wrap a single value in a list: {'lr': [0.1]}", text)

    def test_module_that_fails_to_import_in_the_ranks(self):
        text = self.r.section("ERROR: test_anything")
        self.assertRegex(text.splitlines()[0],
                         r"tests\.fixtures\.fx_rank_import\.TestImportedOnlyInParent\.test_anything \[rank [01]/2\] "
                         r"raised on cpu/gloo: RuntimeError: FIXTURE-RANK-IMPORT")
        self.assertIn('fx_rank_import.py", line 7, in <module>', text)

    def test_record_without_a_process_group(self):
        text = self.r.section("ERROR: test_record_without_group")
        self.assertIn(f"UsageError: {MOD}.TestCRecordMisuse.test_record_without_group [rank 0]: record_collectives(): "
                      "no process group is up in this rank", text)
        self.assertIn("decorate the test with @with_comms", text)

    def test_not_a_record(self):
        text = self.r.section("ERROR: test_not_a_record")
        # every rank makes the same mistake: the report names whichever raised first (under load, rank 0 may still
        # be connecting when rank 1 raised, and its error is then the closed connection, after the root cause)
        self.assertRegex(text, re.escape(f"UsageError: {MOD}.TestCRecordMisuse.test_not_a_record [rank ") + r"[01]"
                         + re.escape("]: assertCollectivesInline(record, expect) takes the record that "
                                     "`with harness.record_collectives() as record:` gives; got list"))

    def test_assert_inside_the_block(self):
        text = self.r.section("ERROR: test_assert_inside_the_block")
        self.assertIn("assertCollectivesInline(record, ...) inside the record's own `with` block; call it after the "
                      "block ends", text)

    def test_record_of_another_rank(self):
        text = self.r.section("ERROR: test_record_of_another_rank")
        self.assertIn(f"UsageError: {MOD}.TestDRecordOfAnotherRank.test_record_of_another_rank [rank 1]: this "
                      f"collective record was made by {MOD}.TestDRecordOfAnotherRank.test_record_of_another_rank "
                      "[rank 0]", text)
        self.assertIn("make the record inside the test body, on every rank", text)

    def test_record_around_local_tensor_mode(self):
        text = self.r.section("ERROR: test_record_outside_local_tensor_mode")
        self.assertIn("UsageError: ", text)
        self.assertIn("a LocalTensorMode was entered inside record_collectives(): it answers collectives itself", text)
        self.assertIn("enter the record inside the LocalTensorMode", text)

    def test_nothing_left_behind(self):
        self.check_nothing_left()


class TestBadDecoratorArgument(FixtureTestCase):
    """skip_if_lt_x_gpu(0) fails when the module is imported, before any test could pass."""

    ARGS = ["tests.fixtures.fx_bad_gpu_decorator", "-v"]

    def test_import_error_names_the_mistake(self):
        self.assertNotEqual(self.r.returncode, 0, self.r.describe())
        self.assertInReport("UsageError: skip_if_lt_x_gpu(0): the number of GPUs must be an int >= 1")
        self.assertInReport('fx_bad_gpu_decorator.py", line 6')
        self.assertNotRegex(self.r.output, r"\bOK\b")

    def test_nothing_left_behind(self):
        self.check_nothing_left()


@nightly("a bad HARNESS_* value refused in every test of a run by tests.test_isolation.TestBadSetting; "
         "HARNESS_DEVICE's choices by tests.unit.test_settings")
class TestUnknownDevice(FixtureTestCase):
    ARGS = ["tests.fixtures.fx_pass.TestBPids", "-v"]
    ENV = {"HARNESS_DEVICE": "tpu"}

    def test_every_test_errors_with_the_choices(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertInReport("FAILED (errors=2)")
        for name in ("test_pid", "test_needs_four_gpus"):
            text = self.r.section(f"ERROR: {name} (tests.fixtures.fx_pass.TestBPids.{name})")
            self.assertIn("UsageError: HARNESS_DEVICE='tpu' is not one of auto, cpu, cuda", text)
        self.assertEqual(self.r.rank_lines("PID"), [])

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
