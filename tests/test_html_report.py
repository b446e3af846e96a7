"""``--html``: the page of a real failing run (tests/fixtures/fx_collectives.py under ``python -m harness -j 2``),
read as text and opened in a real headless chromium (skipped where there is none)."""
from __future__ import annotations

import html
import re
import shutil
import tempfile
import unittest
from pathlib import Path

from tests._browser import load, needs_chromium
from tests._support import nightly, FixtureTestCase

FIX = "tests/fixtures/fx_collectives.py"


def lanes(page: str, test: str) -> dict[str, str]:
    """The picture's rows of one failing test: first rank of the row -> the row's HTML."""
    at = page.index(f"<h3>tests.fixtures.fx_collectives.{test} ")
    block = page[at:page.index("</table>", at)]
    return {m.group(1).split(",")[0]: m.group(2)
            for m in re.finditer(r'<tr class="lane" data-ranks="([^"]+)">(.*?)</tr>', block)}


class TestHtmlOfAFailingRun(FixtureTestCase):
    RUNNER = "harness"
    ENV = {"HARNESS_PEER_GRACE": "3", "HARNESS_THREADS": "1"}

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = Path(tempfile.mkdtemp(prefix="html-report-test-"))
        cls.path = cls.dir / "out" / "report.html"
        # -j 2: the pictures cross from the workers. The two desyncs, a passing test, and a rank that prints
        # HTML, bytes that are not UTF-8 and 3 MB (tests/fixtures/fx_html.py), in one run: CI's time is short
        cls.ARGS = [FIX, "tests/fixtures/fx_html.py", "-j", "2", "-k", "DifferentOps", "-k", "NeverCalled",
                    "-k", "Passing", "-k", "NastyOutput", "--html", str(cls.path)]
        super().setUpClass()
        cls.raw = cls.path.read_bytes() if cls.path.exists() else b""
        cls.page = cls.raw.decode("utf-8")  # raises if bytes that are not UTF-8 came through as they were

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_written_and_said(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        self.assertTrue(self.page, self.r.describe())
        self.assertInReport(f"HTML report: {self.path}")
        self.assertIn("1 passed, 3 failed, 0 skipped", self.page)
        self.check_nothing_left()

    def test_self_contained(self):
        self.assertNotRegex(self.page, r"""(src|href)=["']?(https?:|//)""", "nothing is fetched from elsewhere")
        self.assertIn("default-src 'none'", self.page)

    def test_different_ops_marked_where_they_parted(self):
        rows = lanes(self.page, "TestBDifferentOps.test_different_ops")
        self.assertEqual(sorted(rows), ["0", "1"])
        # both ranks made #1 and #2 alike; #3 is where they parted: all_gather on rank 0, all_reduce on rank 1
        self.assertRegex(rows["0"], r'class="parted"[^>]*>#3 all_gather')
        self.assertRegex(rows["1"], r'class="parted"[^>]*>#3 all_reduce')
        self.assertRegex(rows["0"], r'class="ok"[^>]*>#1 all_reduce.*class="ok"[^>]*>#2 broadcast')
        self.assertIn("waits here", rows["0"])

    def test_never_called_shows_the_gap_and_the_waiting_rank(self):
        rows = lanes(self.page, "TestCNeverCalled.test_never_called")
        self.assertIn('class="gap"', rows["1"])
        self.assertIn("#2 all_reduce", rows["1"])
        self.assertNotIn('class="gap"', rows["0"])
        self.assertRegex(rows["0"], r'class="parted"[^>]*>#2 all_reduce')
        self.assertIn("waits here", rows["0"])
        self.assertNotIn("waits here", rows["1"])

    def test_nasty_output_small_escaped_and_utf8(self):
        page = self.page
        self.assertLess(len(self.raw), 400_000, "3 MB of a rank's output leaves a small page")
        self.assertIn("bytes of output not shown", page)
        self.assertIn("FIXTURE-NASTY &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;", page)
        self.assertNotIn("<script>alert", page)
        self.assertNotIn('<img src="http', page)
        self.assertIn("FIXTURE-FAIL rank 1 &lt;b&gt;fails&lt;/b&gt;", page)
        self.assertIn("FIXTURE-END", page, "the output's tail is kept")

    @nightly("the page's markup, escaping and collectives as text by this class's other tests (CI installs no browser)")
    def test_opens_in_chromium_without_console_lines(self):
        from tests._browser import chromium

        if chromium() is None:
            self.skipTest("needs Debian's chromium (apt-get install chromium); not installed on this machine")
        page = load(self.path)
        self.assertEqual(page.console, [], "no console error and no blocked request")
        self.assertIn('data-ready="1"', page.dom)
        self.assertIn("#3 all_gather", page.dom)


@needs_chromium
@nightly("the page as text by TestHtmlOfAFailingRun (CI installs no browser)")
class TestHtmlInABrowser(unittest.TestCase):
    """The same page in chromium: it loads with no console line (no error, no blocked request), draws the
    picture, and its filters hide rows."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = Path(tempfile.mkdtemp(prefix="html-report-browser-"))
        from harness.runner.html import write_html
        from tests.unit.test_html import sample_entries

        cls.path = cls.dir / "report.html"
        write_html(str(cls.path), sample_entries())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_loads_without_console_lines(self):
        page = load(self.path)
        self.assertEqual(page.console, [])
        self.assertIn('data-ready="1"', page.dom, "the page's script ran to its end")
        self.assertIn('class="parted"', page.dom)

    def test_the_check_sees_a_request_and_an_error(self):
        """What the console check is for: a page of ours that fetched anything, or threw, would show here."""
        from harness.runner.html import render

        bad = self.dir / "bad.html"
        bad.write_text(render([]).replace("<script>", '<img src="http://192.0.2.1/x.png"><script>throw Error("x");',
                                          1), encoding="utf-8")
        console = "\n".join(load(bad).console)
        self.assertIn("Content Security Policy", console)
        self.assertIn("Uncaught Error: x", console)

    def test_filter_by_outcome(self):
        dom = load(self.path, "outcome=failed").dom
        shown = re.findall(r'<tr data-outcome="(\w+)"[^>]*?(hidden="")?>', dom)
        self.assertTrue(shown)
        self.assertEqual({o for o, hidden in shown if not hidden}, {"failed"})
        self.assertIn("passed", {o for o, hidden in shown if hidden})

    def test_search_by_name(self):
        dom = load(self.path, "q=alpha").dom
        rows = re.findall(r'<tr data-outcome="\w+" data-name="([^"]+)"( hidden="")?>', dom)
        self.assertEqual([n for n, hidden in rows if not hidden], ["m.T.test_alpha"])

    def test_screenshot(self):
        png = self.dir / "shot.png"
        load(self.path, screenshot=png)
        self.assertTrue(png.read_bytes().startswith(b"\x89PNG"))


@nightly("the page by TestHtmlOfAFailingRun")
class TestPytestHtmlExtras(FixtureTestCase):
    """Under pytest with pytest-html, a failure's report carries the same picture as an extra."""

    RUNNER = "pytest"
    ENV = {"HARNESS_PEER_GRACE": "3", "HARNESS_THREADS": "1"}

    @classmethod
    def setUpClass(cls) -> None:
        try:
            import pytest_html  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("needs pytest-html (pip install pytest-html; the test extra declares it)")
        cls.dir = Path(tempfile.mkdtemp(prefix="html-report-pytest-"))
        cls.path = cls.dir / "pytest.html"
        cls.ARGS = [FIX, "-k", "NeverCalled", f"--html={cls.path}", "--self-contained-html"]
        super().setUpClass()

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_the_picture_is_an_extra(self):
        self.assertEqual(self.r.returncode, 1, self.r.describe())
        text = html.unescape(self.path.read_text(encoding="utf-8"))  # pytest-html keeps its data as escaped JSON
        self.assertIn("where the ranks parted: rank 1 never called #2 all_reduce", text)
        self.check_nothing_left()

    def test_drawn_in_chromium(self):
        from tests._browser import chromium

        if chromium() is None:
            self.skipTest("needs Debian's chromium (apt-get install chromium); not installed on this machine")
        page = load(self.path)
        self.assertEqual(page.console, [])
        self.assertEqual(page.dom.count('class="gap"'), 1, "rank 1's missing all_reduce, drawn by pytest-html's page")

