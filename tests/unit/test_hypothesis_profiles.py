"""Which hypothesis profile a run uses, and the settings a @given test gets from it (harness.parent.hypothesis_support).

The profile is the run's (harness.parent.run.Run), handed to run_given: no module state, and hypothesis's own
process-wide default untouched. Examples go to a list here instead of to ranks.
"""
from __future__ import annotations

import os
import unittest
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import UsageError
from harness.parent.hypothesis_support import PROFILES, check_profile, profile_choice, run_given, settings_for
from harness.parent.run import Run


def _environment(**values: str) -> mock._patch:
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "CI")}
    return mock.patch.dict(os.environ, {**env, **values}, clear=True)


class TestTheChoice(unittest.TestCase):
    def test_the_runners_choice_over_the_environment_over_ci_over_dev(self):
        with _environment(HYPOTHESIS_PROFILE="nightly", CI="true"):
            self.assertEqual(profile_choice("ci"), ("ci", "the runner's --hypothesis-profile"))
            self.assertEqual(profile_choice(), ("nightly", "HYPOTHESIS_PROFILE"))
        with _environment(CI="true"):
            self.assertEqual(profile_choice(), ("ci", "CI is set"))
        with _environment():
            self.assertEqual(profile_choice(), ("dev", "the default"))

    def test_a_runners_choice_is_checked_with_the_choices_named(self):
        self.assertEqual(check_profile("nightly"), "nightly")
        with self.assertRaisesRegex(UsageError, r"hypothesis profile 'weekly' is not one of ci, dev, nightly"):
            check_profile("weekly")

    def test_the_run_carries_the_choice(self):
        with _environment(HYPOTHESIS_PROFILE="dev"):
            self.assertEqual(Run(hypothesis_profile="nightly").hypothesis_profile, "nightly")
            self.assertEqual(Run().hypothesis_profile, "dev")  # the environment, read when asked
        with _environment(HYPOTHESIS_PROFILE="ci"):
            self.assertEqual(Run().hypothesis_profile, "ci")
        with self.assertRaisesRegex(UsageError, "'weekly'"):
            Run(hypothesis_profile="weekly")


class TestSettingsFor(unittest.TestCase):
    def test_a_test_without_settings_gets_the_profile(self):
        ci = settings_for(None, "ci")
        self.assertEqual((ci.max_examples, ci.derandomize, ci.database, ci.deadline, ci.print_blob),
                         (PROFILES["ci"]["max_examples"], True, None, None, True))
        self.assertNotIn("explain", [p.name for p in ci.phases])
        self.assertIn(HealthCheck.too_slow, ci.suppress_health_check)
        for name in ("dev", "nightly"):
            with self.subTest(name):
                self.assertEqual(settings_for(None, name).max_examples, PROFILES[name]["max_examples"])

    def test_a_tests_own_settings_keep_what_they_set_over_the_profile(self):
        own = settings(max_examples=3)
        ci = settings_for(own, "ci")
        self.assertEqual((ci.max_examples, ci.derandomize, ci.database, ci.deadline), (3, True, None, None))
        self.assertNotIn("explain", [p.name for p in ci.phases])
        self.assertIn(HealthCheck.too_slow, ci.suppress_health_check)

    def test_a_tests_own_deadline_is_removed_and_its_health_checks_kept(self):
        own = settings(deadline=500, suppress_health_check=[HealthCheck.filter_too_much])
        dev = settings_for(own, "dev")
        self.assertIsNone(dev.deadline)
        self.assertEqual(set(dev.suppress_health_check), {HealthCheck.filter_too_much, HealthCheck.too_slow})

    def test_an_unknown_profile_from_the_environment_names_the_variable_and_the_profiles(self):
        with self.assertRaisesRegex(UsageError, r"HYPOTHESIS_PROFILE='weekly' is not a registered profile; "
                                                r"use one of ci, dev, nightly"):
            settings_for(None, "weekly")


class TestRunGiven(unittest.TestCase):
    """run_given draws the examples under the profile it is handed; nothing is left in hypothesis's default."""

    def make(self, explicit: bool = False):
        class Case(unittest.TestCase):
            @given(seed=st.integers(0, 10**6))
            def test_given(self, seed):
                pass

        if explicit:
            Case.test_given = settings(max_examples=3)(Case.test_given)
        return Case("test_given"), Case.test_given

    def draw(self, test, fn, profile):
        drawn: list[int] = []
        run_given(fn, test, lambda kwargs: drawn.append(kwargs["seed"]), profile)
        return drawn

    def test_each_profile_draws_its_number_of_examples_and_ci_the_same_ones(self):
        default = settings.default
        test, fn = self.make()
        first = self.draw(test, fn, "ci")
        self.assertEqual(len(first), PROFILES["ci"]["max_examples"])
        self.assertEqual(len(self.draw(test, fn, "dev")), PROFILES["dev"]["max_examples"])
        self.assertEqual(self.draw(test, fn, "ci"), first)  # derandomized, also after another profile
        self.assertEqual(self.draw(*self.make(), "ci"), first)
        self.assertIs(settings.default, default)

    def test_a_test_with_its_own_settings_is_derandomized_under_ci(self):
        test, fn = self.make(explicit=True)
        first = self.draw(test, fn, "ci")
        self.assertEqual(len(first), 3)
        self.assertEqual(self.draw(*self.make(explicit=True), "ci"), first)


if __name__ == "__main__":
    unittest.main()
