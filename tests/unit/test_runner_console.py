"""harness.runner.console: the per-test line, the summary's counts, the skip ledger, and the last line."""
from __future__ import annotations

import io
import unittest

from harness.runner.console import Console, table
from harness.runner.results import counts
from harness.shared.status import Status
from tests.unit._fakes import entry


def run_entries():
    return [
        entry("pkg.test_a.TestA.test_pass", seconds=3.0, placement="cpu/gloo", world_size=2),
        entry("pkg.test_a.TestA.test_fail", Status.FAILED, seconds=1.0),
        entry("pkg.test_a.TestA.test_xfail", Status.XFAIL),
        *[entry(f"pkg.test_b.TestB.test_skip{n}", Status.SKIPPED, seconds=0.0, reason="needs 4 GPUs\ndetail")
          for n in range(5)],
        entry("pkg.test_b.TestB.test_subs", seconds=2.0, sub_passed=3, sub_skipped=[("(a=1)", "no offload")]),
        entry("pkg.test_b.TestB.test_error", Status.ERROR, seconds=0.5),
    ]


class TestCounts(unittest.TestCase):
    def test_errors_count_as_failed_expected_failures_as_passed(self):
        c = counts(run_entries())
        self.assertEqual((c.passed, c.failed, c.skipped), (3, 2, 5))
        self.assertEqual(str(c), "3 passed, 2 failed, 5 skipped")


class TestConsole(unittest.TestCase):
    def console(self, verbose: bool = False) -> tuple[Console, io.StringIO]:
        out = io.StringIO()
        return Console(out, total=12, verbose=verbose, width=30), out

    def test_the_per_test_line(self):
        c, out = self.console()
        c.test_done(entry("pkg.test_b.TestB.test_subs", seconds=2.0, placement="cpu/gloo", world_size=4,
                          sub_passed=3, sub_skipped=[("(a=1)", "x")]), 7)
        c.test_done(entry("pkg.test_b.TestB.test_skip", Status.SKIPPED, seconds=0.0, reason="needs 4 GPUs\nmore"), 8)
        c.test_done(entry("pkg.test_b.TestB.setUpClass", Status.ERROR, seconds=0.0), None)
        self.assertEqual(out.getvalue().splitlines(), [
            "[ 7/12] PASS  pkg.test_b.TestB.test_subs      cpu/gloo  ws=4     2.00s (4 subtests, 1 skipped)",
            "[ 8/12] SKIP  pkg.test_b.TestB.test_skip      -         ws=-     0.00s: needs 4 GPUs",
            "[ -/12] ERROR pkg.test_b.TestB.setUpClass     -         ws=-     0.00s",
        ])

    def test_subtest_lines_only_when_verbose(self):
        quiet, out = self.console()
        quiet.subtest_done(Status.FAILED, "(a=1)", "")
        self.assertEqual(out.getvalue(), "")
        loud, out = self.console(verbose=True)
        loud.subtest_done(Status.SKIPPED, "(a=1)", "no GPU")
        self.assertEqual(out.getvalue(), "        SKIP  subtest (a=1): no GPU\n")

    def test_the_summary(self):
        c, out = self.console()
        c.summary(run_entries(), slowest=2, wall=9.0, notes=["Altered the process (1 test(s)):\n  x altered\n"])
        text = out.getvalue()
        self.assertIn("FAILURES AND ERRORS (2)", text)
        self.assertIn("SUMMARY (10 tests in 9.0 s)", text)
        rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()
                if line.startswith(("pkg.test_a ", "pkg.test_b ", "total "))}
        # tests, passed, failed, skipped, subtests, sub skipped, seconds
        self.assertEqual(rows["pkg.test_a"], ["3", "2", "1", "0", "0", "0", "5.0"])
        self.assertEqual(rows["pkg.test_b"], ["7", "1", "1", "5", "4", "1", "2.5"])
        self.assertEqual(rows["total"], ["10", "3", "2", "5", "4", "1", "7.5"])
        ledger = text.split("Skipped, by reason:\n")[1]
        self.assertTrue(ledger.startswith("     5 x needs 4 GPUs\n"), ledger)  # the most frequent first
        self.assertIn("         ... and 2 more\n", ledger)
        self.assertIn("     1 x no offload  [subtests]\n         pkg.test_b.TestB.test_subs (a=1)\n", ledger)
        self.assertIn("Slowest 2 tests:\n      3.00s  pkg.test_a.TestA.test_pass  (cpu/gloo, ws=2)\n"
                      "      2.00s  pkg.test_b.TestB.test_subs  (-, ws=-)\n", text)
        self.assertIn("Failed:\n  FAIL  pkg.test_a.TestA.test_fail\n  ERROR pkg.test_b.TestB.test_error\n", text)
        self.assertTrue(text.endswith("\nAltered the process (1 test(s)):\n  x altered\n"), text)

    def test_why_the_run_stopped(self):
        c, out = self.console()
        c.summary(run_entries()[:1], slowest=0, wall=1.0, stopped="interrupted (Ctrl-C): 3 of 4 selected tests did not run")
        self.assertTrue(out.getvalue().endswith("\ninterrupted (Ctrl-C): 3 of 4 selected tests did not run\n"))
        c, out = self.console()
        c.summary(run_entries()[:1], slowest=0, wall=1.0, not_run=2)
        self.assertIn("2 selected tests did not run (their class or module set-up failed or skipped them", out.getvalue())

    def test_the_last_line_and_why_nothing_ran(self):
        c, out = self.console()
        c.count_line(run_entries(), selected=10, discovered=10, where="tests")
        self.assertEqual(out.getvalue(), "3 passed, 2 failed, 5 skipped\n")
        c, out = self.console()
        c.count_line([], selected=0, discovered=7, where="tests")
        self.assertEqual(out.getvalue().splitlines(), [
            "no tests ran: nothing selected (discovered 7 tests in tests; check -k/-i/-x/--shard)",
            "0 passed, 0 failed, 0 skipped"])
        c, out = self.console()
        c.count_line([entry("m.T.test_s", Status.SKIPPED)], selected=1, discovered=1, where="tests")
        self.assertIn("no tests ran: all 1 selected tests were skipped", out.getvalue())

    def test_table(self):
        self.assertEqual(table([["a", "n"], ["long", "10"]], right={1}), "a      n\n----  --\nlong  10")


if __name__ == "__main__":
    unittest.main()
