"""The README and docs/ say what the code says.

Each table that states a fact the code decides (the settings, the runner's flags and exit codes, the
placements, the hypothesis profiles, the names ``harness.port`` maps, the modules) is read from its page
and compared with the code; every link resolves; and no page speaks of how the project was made instead
of what it is. Pure: no process is started.
"""
from __future__ import annotations

import argparse
import os
import re
import unittest
from pathlib import Path
from unittest import mock

import harness
from harness.shared.config import DEVICE_CHOICES, VARIABLES
from harness.parent.hypothesis_support import PROFILES
from harness.shared.placement import KINDS, Placement
from harness.port import MAPPING, RENAMED
from harness.runner.cli import Defaults, build_parser
from harness.shared.status import ExitCode
from harness.judging.upstream import HARNESS_NAMES, UPSTREAM_PREFIX

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """The README and every page under docs/."""
    return [README] + sorted(DOCS.glob("*.md"))


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
_SPAN = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code: what the page says in its own words."""
    return _SPAN.sub("", _FENCE.sub("", text))


def _cells(line: str) -> list[str]:
    """A table row's cells; ``\\|`` inside a cell is a literal bar."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip().replace("\\|", "|") for c in parts[1:-1]]


def table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the one table whose header row starts with the cell ``first_header``."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        if line.startswith("|") and _cells(line)[:1] == [first_header] and i + 1 < len(lines) \
                and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                rows.append(_cells(body))
            found.append(rows)
    if len(found) != 1:
        raise AssertionError(f"expected one table headed {first_header!r}, found {len(found)}")
    return found[0]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but ``-`` and ``_``), spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _FENCE.sub("", text), re.M)}


def links(text: str) -> list[str]:
    """The targets of the page's markdown links, outside code."""
    return re.findall(r"\]\(([^)\s]+)\)", _FENCE.sub("", text))


def run_tests_defaults() -> Defaults:
    """The ``Defaults`` this repository's ``run_tests.py`` hands the runner (its ``--all`` and
    ``--harness-tests`` are flags only it has), taken from the call rather than written here again."""
    import run_tests

    seen: list[Defaults] = []
    with mock.patch("harness.runner.main", lambda argv, defaults: seen.append(defaults) or 0):
        run_tests.main([])
    return seen[0]


class TestSettingsPage(unittest.TestCase):
    """docs/settings.md's table is harness.shared.config.VARIABLES."""

    def rows(self) -> dict[str, str]:
        rows: dict[str, str] = {}
        for cells in table(read(DOCS / "settings.md"), "variable"):
            name = code_spans(cells[0])[0]
            if name.startswith("HARNESS_"):
                self.assertNotIn(name, rows, f"docs/settings.md has two rows for {name}")
                rows[name] = cells[1]
        return rows

    def test_it_names_exactly_the_harness_variables(self):
        self.assertEqual(sorted(self.rows()), sorted(VARIABLES),
                         "docs/settings.md's table and harness/config.py's VARIABLES name different variables")

    def test_its_defaults_are_the_codes(self):
        rows = self.rows()
        for name, var in VARIABLES.items():
            with self.subTest(name):
                self.assertEqual(rows.get(name), var.shown_default,
                                 f"docs/settings.md's default for {name}; harness/config.py says {var.shown_default!r}")

    def test_no_other_page_has_a_table_of_them(self):
        for page in pages():
            if page.name != "settings.md":
                with self.subTest(rel(page)):
                    self.assertIsNone(re.search(r"^\| `HARNESS_[A-Z_]+` \|", read(page), re.M),
                                      f"{rel(page)} has a row of the settings table: link to docs/settings.md")


class TestRunnerPage(unittest.TestCase):
    """docs/runner.md's flags are the parser's, and its exit codes are ExitCode's."""

    @classmethod
    def setUpClass(cls):
        cls.text = read(DOCS / "runner.md")
        cls.parser = build_parser(run_tests_defaults())

    def documented(self) -> dict[str, str]:
        """flag -> the first column's text it came from."""
        flags = {}
        for cells in table(self.text, "flag"):
            for span in code_spans(cells[0]):
                flag = span.split()[0]
                self.assertRegex(flag, r"^--?[a-z]", f"docs/runner.md's flag column has {span!r}")
                flags[flag] = span
        return flags

    def actions(self) -> dict[str, argparse.Action]:
        return {s: a for a in self.parser._actions for s in a.option_strings if a.help != argparse.SUPPRESS}

    def test_every_documented_flag_exists(self):
        unknown = sorted(set(self.documented()) - set(self.actions()))
        self.assertEqual(unknown, [], "docs/runner.md documents flags harness.runner.cli.build_parser does not have")

    def test_every_flag_is_documented(self):
        missing = sorted(set(self.actions()) - set(self.documented()))
        self.assertEqual(missing, [], "flags of harness.runner.cli.build_parser missing from docs/runner.md's table")

    def test_the_choices_shown_are_the_parsers(self):
        actions = self.actions()
        for flag, span in self.documented().items():
            words = span.split()
            if len(words) > 1 and "|" in words[1]:
                with self.subTest(flag):
                    self.assertEqual(tuple(words[1].split("|")), tuple(actions[flag].choices))

    def test_the_exit_codes_are_exitcodes(self):
        listed = {int(cells[0]): code_spans(cells[1])[0] for cells in table(self.text, "code")}
        self.assertEqual(listed, {int(c): c.name for c in ExitCode},
                         "docs/runner.md's exit codes and harness.shared.status.ExitCode differ")


class TestPlacementPage(unittest.TestCase):
    """docs/placement.md's placements are harness.shared.placement's, and its device values are HARNESS_DEVICE's."""

    @classmethod
    def setUpClass(cls):
        cls.text = read(DOCS / "placement.md")

    def test_the_kinds_are_placement_kinds(self):
        rows = table(self.text, "placement (as reports label it)")
        self.assertEqual(sorted(code_spans(cells[1])[0] for cells in rows), sorted(KINDS),
                         "docs/placement.md's placements and harness.shared.placement.KINDS differ")

    def test_each_label_is_the_one_reports_print(self):
        for cells in table(self.text, "placement (as reports label it)"):
            label, kind = code_spans(cells[0])[0], code_spans(cells[1])[0]
            with self.subTest(kind):
                p = Placement(device_type="cpu" if kind == "cpu" else "cuda", world_size=2, reason="",
                              shared=kind == "cuda-shared", gpus=0 if kind == "cpu" else 1)
                self.assertEqual(p.kind, kind)
                self.assertEqual(p.label, label)

    def test_the_device_values_are_harness_devices(self):
        values = [code_spans(cells[0])[0] for cells in table(self.text, "value")]
        self.assertEqual(sorted(values), sorted(DEVICE_CHOICES),
                         "docs/placement.md's HARNESS_DEVICE values and harness.shared.config.DEVICE_CHOICES differ")
        self.assertEqual(VARIABLES["HARNESS_DEVICE"].choices, DEVICE_CHOICES)


class TestHypothesisPage(unittest.TestCase):
    def test_the_profiles_are_the_registered_ones(self):
        rows = table(read(DOCS / "hypothesis.md"), "profile")
        listed = {code_spans(c[0])[0]: (int(c[1]), c[2].startswith("yes")) for c in rows}
        self.assertEqual(listed, {name: (p["max_examples"], bool(p.get("derandomize"))) for name, p in PROFILES.items()},
                         "docs/hypothesis.md's profiles and harness.parent.hypothesis_support.PROFILES differ")


class TestCompatibilityPage(unittest.TestCase):
    """docs/compatibility.md's names are what harness.port maps, harness exports and harness.judging.upstream names."""

    @classmethod
    def setUpClass(cls):
        cls.text = read(DOCS / "compatibility.md")

    MODULE_WORDS = {m.rsplit(".", 1)[-1] for m in MAPPING}  # "common_distributed", named in a cell's prose

    def test_the_mapping_is_harness_ports(self):
        listed = {f"{UPSTREAM_PREFIX}.{code_spans(cells[0])[0]}": set(code_spans(cells[1])) - self.MODULE_WORDS
                  for cells in table(self.text, "upstream module")}
        self.assertEqual(sorted(listed), sorted(MAPPING), "docs/compatibility.md's modules and harness.port.MAPPING's")
        for module, names in MAPPING.items():
            with self.subTest(module):
                self.assertEqual(sorted(listed[module]), sorted(names))

    def test_every_name_it_maps_is_public(self):
        for cells in table(self.text, "upstream module"):
            for name in set(code_spans(cells[1])) - self.MODULE_WORDS:
                with self.subTest(name):
                    self.assertIn(RENAMED.get(name, name), harness.__all__)

    def test_the_upstream_bases_are_harness_upstreams(self):
        rows = table(self.text, "upstream base")
        listed = {code_spans(cells[0])[0]: code_spans(cells[1])[0] for cells in rows}
        self.assertEqual(listed, {name: f"harness.{ours}" for name, ours in HARNESS_NAMES.items()},
                         "docs/compatibility.md's bases and harness.judging.upstream.HARNESS_NAMES differ")
        for ours in HARNESS_NAMES.values():
            self.assertIn(ours, harness.__all__)


class TestLayoutPage(unittest.TestCase):
    def test_every_module_is_listed_and_every_listed_path_exists(self):
        rows = table(read(DOCS / "layout.md"), "path")
        listed = {code_spans(cells[0])[0].rstrip("/") for cells in rows}
        # every module, and the package's __init__ (the public names); a subpackage's __init__ is its modules'
        modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py")
                   if "__pycache__" not in p.parts and (p.name != "__init__.py" or p.parent == ROOT / "harness")}
        self.assertEqual(sorted(modules - listed), [], "modules of harness/ missing from docs/layout.md's table")
        for path in listed:
            with self.subTest(path):
                self.assertTrue((ROOT / path).exists(), f"docs/layout.md lists {path}, which does not exist")


class TestLinks(unittest.TestCase):
    def test_every_page_is_linked_from_the_readme(self):
        linked = {Path(os.path.normpath(ROOT / t.split("#")[0])) for t in links(read(README))}
        for page in sorted(DOCS.glob("*.md")):
            with self.subTest(rel(page)):
                self.assertIn(page, linked, f"README.md does not link {rel(page)}")

    def test_every_relative_link_resolves(self):
        texts = {page: read(page) for page in pages()}
        for page, text in texts.items():
            for target in links(text):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                with self.subTest(page=rel(page), link=target):
                    path, _, anchor = target.partition("#")
                    dest = Path(os.path.normpath(page.parent / path)) if path else page
                    self.assertTrue(dest.exists(), f"{rel(page)} links {target}: no such file")
                    if anchor and dest.suffix == ".md":
                        self.assertIn(anchor, anchors(texts.get(dest) or read(dest)),
                                      f"{rel(page)} links {target}: no such heading in {rel(dest)}")


class TestReadme(unittest.TestCase):
    def test_the_readmes_test_command_is_cis(self):
        ci = [line for line in read(ROOT / ".ci" / "run").splitlines() if "run_tests.py" in line
              and not line.lstrip().startswith("#")]
        self.assertEqual(len(ci), 1, ".ci/run should run run_tests.py once")
        command = ci[0].replace('"$PY"', "python").replace('"$@"', "").strip()
        self.assertIn(f"\n{command}\n", read(README), "the README's test command is not the one .ci/run runs")


class TestWording(unittest.TestCase):
    """The pages speak of the project as it is, not of how it was made."""

    EVERYWHERE = [
        (r"\bsession\b(?!\.py)", "'session'"),
        (r"\blent\b", "'lent'"),
        (r"\bfarm[-_]\w+", "a tool that is not the project's"),
        (r"\bduplicates\b", "a tool that is not the project's"),
        (r"\bdevice (?:tool|machine)\b", "a tool that is not the project's"),
    ]
    IN_PROSE = [
        (r"(?<![\w&])#\d+", "a numbered work item"),
        (r"\bissues?\b", "a work item"),
        (r"\btasks?\b", "a work item"),
        (r"README's \*|\bsee \*[A-Z]", "a README section: link to the page instead"),
    ]

    def test_no_page_speaks_of_how_it_was_made(self):
        found = []
        for page in pages():
            text = read(page)
            for checks, where in ((self.EVERYWHERE, text), (self.IN_PROSE, prose(text))):
                for pattern, what in checks:
                    for m in re.finditer(pattern, where, re.I):
                        line = where[:m.start()].count("\n") + 1
                        found.append(f"{rel(page)}: {m.group(0)!r} ({what}), line {line} of its "
                                     f"{'text' if where is text else 'prose'}")
        self.assertEqual(found, [], "rewrite these to say what the project is")

    def test_the_checks_catch_what_they_are_for(self):
        for sample in ("for #17", "issue 16", "the task", "this session's changes", "a lent machine",
                       "farm-bench", "see *Speed*"):
            with self.subTest(sample):
                self.assertTrue(any(re.search(p, sample, re.I) for p, _ in self.EVERYWHERE + self.IN_PROSE))
        for sample in ("harness/runner/session.py", "`protocol.Task`"):
            with self.subTest(sample):
                self.assertFalse(any(re.search(p, sample, re.I) for p, _ in self.EVERYWHERE)
                                 or any(re.search(p, prose(sample), re.I) for p, _ in self.IN_PROSE))


if __name__ == "__main__":
    unittest.main()
