"""The README's table of environment variables says what harness.config.VARIABLES says."""
from __future__ import annotations

import os
import re
import unittest

from harness.config import VARIABLES

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def readme_rows() -> dict[str, str]:
    """``HARNESS_*`` name -> the default column, from the README's ``| `HARNESS_X` | default | meaning |`` rows."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    rows = {}
    for m in re.finditer(r"^\| `(HARNESS_[A-Z_]+)` \| ([^|]*) \|", text, re.M):
        if m.group(1) in rows:
            raise AssertionError(f"README.md has two rows for {m.group(1)}")
        rows[m.group(1)] = m.group(2).strip()
    return rows


class TestReadmeTable(unittest.TestCase):
    def test_it_names_exactly_the_harness_variables(self):
        rows = readme_rows()
        self.assertEqual(sorted(rows), sorted(VARIABLES),
                         "README.md's table and harness/config.py's VARIABLES name different variables")

    def test_its_defaults_are_the_tables(self):
        rows = readme_rows()
        for name, var in VARIABLES.items():
            with self.subTest(name):
                self.assertEqual(rows.get(name), var.shown_default,
                                 f"README.md's default for {name}; harness/config.py says {var.shown_default!r}")


if __name__ == "__main__":
    unittest.main()
