"""The HTML report's page from entries as data (harness.runner.html): bad input leaves a small, escaped page."""
from __future__ import annotations

import re
import tempfile
import unittest
from pathlib import Path

from harness.judging import analysis as collectives
from harness.runner.html import MAX_FAILURES, TEXT_LIMIT, render, write_html
from harness.runner.results import Entry, Problem
from harness.shared.status import Status


def _call(group: str, seq: int, op: str, size: int, done: bool = True, t: int = 0) -> dict:
    return {"group": group, "desc": "default_pg", "seq": seq, "op": op, "done": done, "input_sizes": [[size]],
            "output_sizes": [[size]], "input_dtypes": ["Float"], "output_dtypes": ["Float"], "t": t or seq}


def desync(world: int) -> collectives.Picture:
    """Rank ``world - 1`` calls all_reduce where the others call all_gather (#3); every rank waits there."""
    dumps = {r: {"rank": r, "groups": {"0": {"ranks": list(range(world)), "desc": "default_pg"}},
                 "calls": [_call("0", 1, "all_reduce", 4), _call("0", 2, "broadcast", 4),
                           _call("0", 3, "all_reduce" if r == world - 1 else "all_gather", 4, done=False)]}
             for r in range(world)}
    said = {r: {"status": "timeout", "line": "timed out", "error": f"RankError on rank {r}"} for r in range(world)}
    return collectives.picture(dumps, said, world)


def sample_entries() -> list[Entry]:
    bad = Entry("m.T.test_beta", "m", "m.T", "test_beta", Status.ERROR, 2.5, "cpu/gloo", 4,
                problems=[Problem(Status.ERROR, "m.T.test_beta", "RankError: parted at #3")],
                triage="fails in fresh ranks too (alone): the test's own failure", picture=desync(4))
    return [Entry("m.T.test_alpha", "m", "m.T", "test_alpha", Status.PASSED, 1.0, "cpu/gloo", 2),
            bad, Entry("m.T.test_gamma", "m", "m.T", "test_gamma", Status.FAILED, 0.5, "cpu/gloo", 2,
                       problems=[Problem(Status.FAILED, "m.T.test_gamma", "AssertionError: 1 != 2")]),
            Entry("m.T.test_delta", "m", "m.T", "test_delta", Status.SKIPPED, 0.0, reason="needs 8 GPUs")]


class TestPicture(unittest.TestCase):
    def test_desync_marks_the_collective_where_ranks_parted(self):
        pic = desync(4)
        self.assertIn("different ops", pic.parted)
        for lane in pic.lanes:
            self.assertEqual([c.parted for c in lane.cells], [False, False, True], lane)
            self.assertTrue(lane.waiting)

    def test_equal_rows_collapse_at_64_ranks(self):
        page = render([dataclass_replace(sample_entries()[1], picture=desync(64))])
        rows = re.findall(r'<tr class="lane" data-ranks="([^"]+)">', page)
        self.assertEqual([r.count(",") + 1 for r in rows], [63, 1])
        self.assertIn("ranks 0-62 (63)", page)
        self.assertIn("rank 63<", page)
        self.assertEqual(page.count("<details>"), 1, "the ranks' texts differ only in their rank: shown once")
        self.assertIn("63 more ranks' texts not shown", page)
        self.assertIn("different ops: all_gather(float32[4]) on ranks 0-62; all_reduce(float32[4]) on rank 63", page)

    def test_never_called_is_a_gap(self):
        dumps = {0: {"calls": [_call("0", 1, "all_reduce", 3), _call("0", 2, "all_reduce", 3, done=False)],
                     "groups": {"0": {"ranks": [0, 1], "desc": "default_pg"}}},
                 1: {"calls": [_call("0", 1, "all_reduce", 3)], "groups": {}}}
        pic = collectives.picture(dumps, {0: {"status": "killed"}, 1: {"status": "passed"}}, 2)
        self.assertTrue(pic.lanes[1].missing.startswith("#2 all_reduce"))
        self.assertTrue(pic.lanes[0].waiting)
        self.assertFalse(pic.lanes[1].waiting)

    def test_a_rank_without_a_dump(self):
        pic = collectives.picture({0: {"calls": [_call("0", 1, "all_reduce", 3)], "groups": {}}},
                                  {0: {"status": "failed"}, 1: {"status": "crashed"}}, 2)
        self.assertFalse(pic.lanes[1].recorded)
        self.assertIn("no record", render([dataclass_replace(sample_entries()[1], picture=pic)]))


def dataclass_replace(entry: Entry, **changes) -> Entry:
    import dataclasses

    return dataclasses.replace(entry, **changes)


class TestBadInput(unittest.TestCase):
    def test_no_tests(self):
        page = render([])
        self.assertIn("0 passed, 0 failed, 0 skipped", page)
        self.assertNotIn("<h2>Failures", page)

    def test_huge_output_is_cut_with_a_marker(self):
        big = "x" * 80 + "\n"
        entry = dataclass_replace(sample_entries()[2], problems=[Problem(Status.FAILED, "t", big * 200_000)])
        page = render([entry])
        self.assertLess(len(page.encode()), 4 * TEXT_LIMIT + 20_000, "a 16 MB output leaves a small page")
        self.assertIn("bytes of output not shown", page)

    def test_a_run_where_everything_failed_stays_small(self):
        bad = sample_entries()[1]
        many = [dataclass_replace(bad, test_id=f"m.T.test_{i}",
                                  problems=[Problem(Status.ERROR, "t", "e" * 50_000)]) for i in range(1000)]
        page = render(many)
        self.assertEqual(page.count('<div class="fail"'), MAX_FAILURES)
        self.assertIn(f"{1000 - MAX_FAILURES} more failures not detailed here", page)
        self.assertEqual(page.count("<tr data-outcome="), 1000, "the table lists every test")
        self.assertLess(len(page.encode()), 5_000_000)

    def test_html_in_output_is_escaped(self):
        evil = '<script>alert(1)</script><img src="http://x/y.png">'
        entry = dataclass_replace(sample_entries()[2], test_id="m.T.<b>x</b>",
                                  problems=[Problem(Status.FAILED, "t", evil)], output=evil)
        page = render([entry])
        self.assertNotIn("<script>alert", page)
        self.assertNotIn('<img src="http', page)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt;", page)
        self.assertNotIn("<b>x</b>", page)

    def test_bytes_not_utf8(self):
        raw = b"ok \xff\xfe bad \xc3( end".decode("utf-8", "surrogateescape")  # what a rank's stream may hold
        entry = dataclass_replace(sample_entries()[2], problems=[Problem(Status.FAILED, "t", raw)])
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "sub" / "r.html"
            write_html(str(path), [entry])
            text = path.read_bytes().decode("utf-8")  # valid UTF-8 however bad the input was
        self.assertIn("ok ", text)
        self.assertIn(" end", text)


class TestSkipsInThePage(unittest.TestCase):
    def test_a_gpu_test_that_failed_on_cpu_is_its_own_outcome_with_what_was_tried(self):
        tried = ("needs 2 GPUs (skip_if_lt_x_gpu(2)); tried on CPU for want of them: rank 1: TypeError: device(): "
                 "argument 'index' must be int, not str (t.py:12)")
        page = render([Entry("m.T.test_gpu", "m", "m.T", "test_gpu", Status.SKIPPED, 0.1, "cpu/gloo", 2, reason=tried),
                       Entry("m.T.test_own", "m", "m.T", "test_own", Status.SKIPPED, 0.0, reason="not today")])
        row = re.search(r'<tr data-outcome="tried-on-cpu" data-name="m.T.test_gpu">.*?</tr>', page).group(0)
        self.assertIn("tried on CPU for want of them: rank 1: TypeError", html_unescape(row))
        self.assertIn('class="s-tried-on-cpu">tried on cpu<', row)
        own = re.search(r'<tr data-outcome="skipped" data-name="m.T.test_own">.*?</tr>', page).group(0)
        self.assertIn("not today", own)
        self.assertIn('value="tried-on-cpu" checked> tried-on-cpu (1)', page)


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


if __name__ == "__main__":
    unittest.main()
