"""Settings from the HARNESS_* variables: parsed from the one table, bad values named, a runner's values on top."""
from __future__ import annotations

import dataclasses
import os
import unittest
from unittest import mock

from harness.shared import config
from harness.shared.config import VARIABLES, Settings, settings
from harness.errors import UsageError


# what every setting is with no HARNESS_* variable set, written out (not read from the table under test)
DEFAULTS = Settings(device="auto", timeout=None, reuse=True, threads=None, seed=1234, peer_grace=5.0,
                    start_timeout=120.0, show_output=True, env_changed="warn", output_limit=65536, template=True,
                    triage=True, triage_budget=300.0)


class _Clean(unittest.TestCase):
    """No HARNESS_* variable from the outer shell, in or after a test."""

    def setUp(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
        patched = mock.patch.dict(os.environ, env, clear=True)  # (no enterContext: Python 3.10 has none)
        patched.start()
        self.addCleanup(patched.stop)

    def env(self, **values: str) -> None:
        os.environ.update({f"HARNESS_{k.upper()}": v for k, v in values.items()})


class TestTheTable(unittest.TestCase):
    def test_every_settings_field_is_fed_by_exactly_one_variable(self):
        fed = sorted(var.field for var in VARIABLES.values())
        self.assertEqual(fed, sorted(f.name for f in dataclasses.fields(Settings)))

    def test_entries_read_as_default_then_meaning(self):
        # the runner's --help reads VARIABLES[name][0] and [1]
        self.assertEqual(VARIABLES["HARNESS_SEED"][0], "1234")
        self.assertEqual(VARIABLES["HARNESS_SEED"][1], VARIABLES["HARNESS_SEED"].meaning)
        self.assertIn(("HARNESS_THREADS", "cores // world size", VARIABLES["HARNESS_THREADS"].meaning),
                      config.variables())

    def test_every_default_parses_to_the_settings_default(self):
        for name, var in VARIABLES.items():
            with self.subTest(name):
                value, expected = config.parse(name, var.default), getattr(DEFAULTS, var.field)
                self.assertEqual((value, type(value)), (expected, type(expected)))

    def test_every_entry_is_complete(self):
        for name, var in VARIABLES.items():
            with self.subTest(name):
                self.assertTrue(name.startswith("HARNESS_") and var.meaning)
                self.assertIn(var.kind, ("choice", "flag", "int", "float", "text"))
                self.assertEqual(bool(var.choices), var.kind == "choice")
                self.assertTrue(var.default or var.unset, "an unset default must say what unset means")


class TestFromTheEnvironment(_Clean):
    def test_defaults(self):
        self.assertEqual(settings(), DEFAULTS)

    def test_values_are_parsed_to_their_types(self):
        self.env(device=" CPU ", timeout="60", reuse="no", threads="3", seed="7", peer_grace="0.5",
                 start_timeout="30", show_output="false", output_limit="2048", env_changed="FAIL")
        self.assertEqual(settings(), Settings(device="cpu", timeout=60.0, reuse=False, threads=3, seed=7,
                                              peer_grace=0.5, start_timeout=30.0, show_output=False,
                                              env_changed="fail", output_limit=2048))

    def test_a_bad_choice_names_the_variable_the_value_and_the_choices(self):
        self.env(device="tpu")
        with self.assertRaisesRegex(UsageError, r"^HARNESS_DEVICE='tpu' is not one of auto, cpu, cuda, nccl, "
                                                r"cuda-shared; set one of them or unset it for the default \(auto\)$"):
            settings()

    def test_a_bad_number_names_the_variable_and_what_it_takes(self):
        self.env(threads="two")
        with self.assertRaisesRegex(UsageError, r"^HARNESS_THREADS='two' is not a number; set it to an int >= 1 or "
                                                r"unset it$"):
            settings()

    def test_a_number_below_its_minimum_is_refused(self):
        self.env(output_limit="10")
        with self.assertRaisesRegex(UsageError, r"^HARNESS_OUTPUT_LIMIT='10' is too small; set it to an int >= 1024"):
            settings()

    def test_a_bad_flag_is_refused(self):
        self.env(reuse="maybe")
        with self.assertRaisesRegex(UsageError, r"^HARNESS_REUSE='maybe' is not a flag; use 1 or 0"):
            settings()

class TestValuesOverTheEnvironment(_Clean):
    def test_given_values_win_over_the_environment_and_change_nothing_else(self):
        self.env(device="cuda", timeout="5")
        self.assertEqual(settings(device="cpu").device, "cpu")
        self.assertEqual(settings(device="cpu").timeout, 5.0)
        self.assertEqual((settings().device, settings().timeout), ("cuda", 5.0))  # no state left behind

    def test_unknown_settings_are_refused_with_the_known_ones(self):
        with self.assertRaisesRegex(UsageError, r"unknown setting\(s\) colour; known: device, env_changed"):
            settings(colour="red")

    def test_bad_values_name_the_setting_and_its_variable(self):
        for values, message in [({"device": "tpu"}, r"settings\(device='tpu'\) \(HARNESS_DEVICE\): not one of auto"),
                                ({"threads": 0}, r"settings\(threads=0\) \(HARNESS_THREADS\): give an int >= 1"),
                                ({"reuse": "yes"}, r"\(HARNESS_REUSE\): give True or False"),
                                ({"timeout": "60"}, r"give a float >= 0.1, or None for the default")]:
            with self.subTest(values), self.assertRaisesRegex(UsageError, message):
                settings(**values)

    def test_configure_is_gone_with_a_message_that_says_what_to_use(self):
        from harness.shared.config import configure

        with self.assertRaisesRegex(UsageError, r"configure\(device='cpu'\): settings belong to a run now.*"
                                                r"harness.parent.run.Run\(harness.shared.config.settings\(device='cpu'\)\)"):
            configure(device="cpu")

    def test_a_ranks_copy_of_the_parents_settings_is_the_same(self):
        # harness.parent.pool hands the parent's Settings to each rank as they are, whatever the rank's environment says
        parent = settings(device="cpu", timeout=12.5, threads=2)
        self.env(device="cuda")
        self.assertEqual(settings(**dataclasses.asdict(parent)), parent)


if __name__ == "__main__":
    unittest.main()
