"""Hypothesis tests under ``python -m pytest``: examples drawn in the parent, the same on every rank."""
import unittest

from tests._support import FixtureTestCase, fixture_line


class TestHypothesisUnderPytest(FixtureTestCase):
    RUNNER = "pytest"
    ARGS = ["tests/fixtures/fx_hypothesis.py", "-s", "-rA", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]

    def examples(self, tag):
        """[(seed, ...)] per example, checking that every rank printed the same example."""
        rows = self.r.rank_lines(tag)
        self.assertTrue(rows, self.r.describe())
        pairs = []
        for i in range(0, len(rows), 2):  # the harness prints one block per example, rank 0 then rank 1
            r0, r1 = rows[i], rows[i + 1]
            self.assertEqual((r0["_rank"], r1["_rank"]), ("0", "1"), self.r.describe())
            self.assertEqual({k: v for k, v in r0.items() if k not in ("_rank", "rank")},
                             {k: v for k, v in r1.items() if k not in ("_rank", "rank")},
                             "ranks ran different examples")
            pairs.append(r0)
        return pairs

    def test_failing_example_is_shown(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertMatchesReport(r"^FAILED tests/fixtures/fx_hypothesis\.py::TestBGivenFails::test_fails_for_big_seeds")
        self.assertInReport("[rank 1/2] failed on cpu/gloo: AssertionError: 10 not less than 10 : "
                            "FIXTURE-HYP seed too big")
        self.assertInReport(f'fx_hypothesis.py", line {fixture_line("fx_hypothesis", "FIXTURE-HYP-ASSERT")}, '
                            "in test_fails_for_big_seeds")
        self.assertInReport("Hypothesis example: seed=10")
        self.assertInReport("put @example(seed=10) above @given")
        # hypothesis >= 6.150 says "Failing test case:", older releases "Falsifying example:"
        self.assertMatchesReport(r"(Falsifying example|Failing test case): test_fails_for_big_seeds\(\n.*\n.*seed=10,")
        self.assertNotIn("Explanation:", self.r.output)  # hypothesis would point at harness lines

    def test_every_rank_ran_the_same_examples(self):
        failing = self.examples("EXAMPLE")
        seeds = [int(row["seed"]) for row in failing]
        self.assertIn(10, seeds)  # shrunk to the smallest failing seed, run on both ranks
        self.assertTrue(any(s >= 10 for s in seeds[:2]), seeds)
        same = self.examples("SAME")
        self.assertGreaterEqual(len(same), 2)

    def test_ci_profile_is_used(self):
        # HYPOTHESIS_PROFILE=ci: 2 examples for a passing test, no 200 ms deadline for a distributed one
        self.assertEqual(len(self.examples("SAME")), 2, self.r.describe())
        self.assertNotIn("DeadlineExceeded", self.r.output)
        self.assertNotIn("Flaky", self.r.output)

    def test_explicit_settings_keep_their_examples_without_a_deadline(self):
        self.assertEqual(len(self.examples("EXPLICIT")), 3, self.r.describe())
        self.assertNotIn("DeadlineExceeded", self.r.output)

    # Under pytest, a test run through MultiProcessTestCase.run must give back the instance attribute
    # pytest sets (and deletes afterwards); it used not to, and every passing test errored.
    def test_passing_hypothesis_test_passes_under_pytest(self):
        self.assertMatchesReport(r"^PASSED tests/fixtures/fx_hypothesis\.py::TestAGivenSame::test_same_example")
        self.assertMatchesReport(r"^PASSED tests/fixtures/fx_hypothesis\.py::TestCExplicitSettings::")
        self.assertMatchesReport(r"^PASSED tests/fixtures/fx_hypothesis\.py::TestDGivenTensor::")
        self.assertMatchesReport(r"=+ 1 failed, 3 passed")

    def test_a_drawn_tensor_is_a_copy_on_each_rank(self):
        rows = self.examples("TENSOR")  # the same example on both ranks
        self.assertTrue(rows, self.r.describe())
        self.assertEqual([float(row["total"]) for row in rows], [3.0 * int(row["n"]) for row in rows])

    def test_nothing_left_behind(self):
        self.check_nothing_left()


if __name__ == "__main__":
    unittest.main()
