"""Upstream's TestCase surface on harness.TestCase that starts a process: ``_attempt_load_from_subprocess``.

The rest of that surface, checked in this process, is in tests/unit/test_assertions.py.
"""
import os
import shutil
import tempfile
import unittest

import torch

from tests._support import nightly
from tests.unit.test_assertions import _probe


class TestLoadInASubprocess(unittest.TestCase):
    def setUp(self):
        self.t = _probe()
        here = tempfile.mkdtemp(prefix="distharness-load-")
        self.addCleanup(shutil.rmtree, here, True)
        self.good, self.bad = os.path.join(here, "t.pt"), os.path.join(here, "bad.pt")
        torch.save({"w": torch.ones(2)}, self.good)
        with open(self.bad, "w") as f:
            f.write("CX not a checkpoint")

    def test_attempt_load_from_subprocess(self):
        good, bad = self.good, self.bad
        self.assertIsNone(self.t._attempt_load_from_subprocess(good, ""))
        # the check reads what the subprocess said
        self.t._attempt_load_from_subprocess(bad, "", expected_failure_message="Weights only load failed")

    @nightly("the subprocess's load and its words read by test_attempt_load_from_subprocess")
    def test_attempt_load_from_subprocess_mismatches(self):
        good, bad = self.good, self.bad
        with self.assertRaisesRegex(AssertionError, r"succeeded; expected it to fail with 'CX never said'"):
            self.t._attempt_load_from_subprocess(good, "", expected_failure_message="CX never said")
        with self.assertRaisesRegex(RuntimeError, "Weights only load failed"):
            self.t._attempt_load_from_subprocess(bad, "")


if __name__ == "__main__":
    unittest.main()
