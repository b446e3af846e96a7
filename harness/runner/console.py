"""What the runner prints: the header, one line per test, and the summary that ends with the count line."""
from __future__ import annotations

import collections
from typing import Sequence, TextIO

from harness.runner.results import Entry, counts
from harness.shared.status import BAD, Status

__all__ = ["LABEL", "Console", "table"]

#: the five-column word a test line starts with
LABEL = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.ERROR: "ERROR", Status.SKIPPED: "SKIP",
         Status.XFAIL: "XFAIL", Status.XPASS: "XPASS", Status.INTERRUPTED: "INTR"}

_BAR = "=" * 78


def table(rows: list[list[str]], right: set[int]) -> str:
    """Columns padded to their widest cell (``right``: the right-aligned ones), a rule under the header row."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Console:
    """Writes the run to ``out`` as it goes; listens to :class:`harness.runner.results.RunnerResult`.

    Example::

        console = Console(sys.stdout, total=len(tests), verbose=False, width=60)
        ...
        console.summary(result.entries, slowest=10, wall=12.5)
        console.count_line(result.entries)
    """

    def __init__(self, out: TextIO, total: int, verbose: bool, width: int = 0) -> None:
        self.out = out
        self.total = total
        self.verbose = verbose
        self.width = width  # the id column: as wide as the longest selected id, at most 90

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    # ---- as the tests run ----

    def test_done(self, e: Entry, started: int | None) -> None:
        """``[ 3/12] PASS  module.Class.test  cpu/gloo  ws=2     1.23s (4 subtests)``; ``started`` None: an
        error outside any test (a class's set-up), which takes no place in the progress."""
        digits = len(str(self.total))
        count = f"[{started:>{digits}}/{self.total}]" if started is not None else f"[{'-':>{digits}}/{self.total}]"
        where = e.placement or "-"
        ws = f"ws={e.world_size}" if e.world_size else "ws=-"
        extra = ""
        if e.subtests:
            bits = [f"{e.subtests} subtests"]
            if e.sub_failed:
                bits.append(f"{len(e.sub_failed)} failed")
            if e.sub_skipped:
                bits.append(f"{len(e.sub_skipped)} skipped")
            extra = " (" + ", ".join(bits) + ")"
        if e.examples > 1:
            extra += f" ({e.examples} examples)"
        if e.status in (Status.SKIPPED, Status.XFAIL, Status.XPASS, Status.PASSED) and e.reason:  # a pass: pytest's XPASS
            extra += f": {e.reason.splitlines()[0][:160]}"
        self.width = max(self.width, min(len(e.test_id), 90))
        lines = [f"{count} {LABEL[e.status]:<5} {e.test_id:<{self.width}}  {where:<9} {ws:<5} {e.seconds:7.2f}s{extra}"]
        if e.triage:  # with or without -v: it changes how the outcome reads
            lines.append(f"        triage: {e.triage}")
        if e.faults:  # a passing test's line names what was injected
            lines.append(f"        faults: {e.faults}")
            if self.verbose:
                lines += [f"        {ln}" for ln in e.attempts]
        if self.verbose:
            if e.why_placed:
                lines.append(f"        placement: {e.why_placed}")
            if e.output.strip() and e.status not in BAD:
                lines += [f"        | {ln}" for ln in e.output.rstrip().splitlines()]
        self.write("".join(line + "\n" for line in lines))

    def subtest_done(self, status: Status, params: str, reason: str) -> None:
        """Under ``-v``: one line per subtest."""
        if self.verbose:
            tail = f": {reason}" if reason else ""
            self.write(f"        {LABEL[status]:<5} subtest {params}{tail}\n")

    # ---- at the end ----

    def summary(self, entries: Sequence[Entry], slowest: int, wall: float, stopped: str = "", not_run: int = 0,
                notes: Sequence[str] = ()) -> None:
        """The failures in full, a table per module, the skips by reason, the slowest tests, the failed ones,
        why the run stopped early (or that some tests never started), then ``notes`` (paragraphs)."""
        out: list[str] = []
        problems = [p for e in entries for p in e.problems]
        if problems:
            out.append(f"\n{_BAR}\nFAILURES AND ERRORS ({len(problems)})\n")
            for p in problems:
                out.append(f"{_BAR}\n{LABEL.get(p.kind, str(p.kind).upper())}: {p.title}\n{'-' * 78}\n"
                           f"{p.text.rstrip()}\n")
        out.append(f"\n{_BAR}\nSUMMARY ({len(entries)} tests in {wall:.1f} s)\n{_BAR}\n")
        if entries:
            out.append(self._module_table(entries) + "\n")
        out.append(self._skip_ledger(entries))
        if slowest > 0 and entries:
            out.append(f"\nSlowest {min(slowest, len(entries))} tests:\n")
            for e in sorted(entries, key=lambda e: -e.seconds)[:slowest]:
                out.append(f"  {e.seconds:8.2f}s  {e.test_id}  ({e.placement or '-'}, ws={e.world_size or '-'})\n")
        bad = [e for e in entries if e.status in BAD]
        if bad:
            out.append("\nFailed:\n")
            for e in bad:
                subs = f" ({len(e.sub_failed)} of {e.subtests} subtests)" if e.sub_failed else ""
                out.append(f"  {LABEL[e.status]:<5} {e.test_id}{subs}\n")
        if stopped:
            out.append(f"\n{stopped}\n")
        elif not_run:
            out.append(f"\n{not_run} selected tests did not run (their class or module set-up failed or skipped them; see above)\n")
        out += [f"\n{note.rstrip()}\n" for note in notes if note]
        self.write("".join(out))

    @staticmethod
    def _module_table(entries: Sequence[Entry]) -> str:
        by_module: dict[str, list[Entry]] = collections.OrderedDict()
        for e in entries:
            by_module.setdefault(e.module, []).append(e)

        def row(name: str, group: Sequence[Entry]) -> list[str]:
            c = counts(group)
            return [name, str(len(group)), str(c.passed), str(c.failed), str(c.skipped),
                    str(sum(e.subtests for e in group)), str(sum(len(e.sub_skipped) for e in group)),
                    f"{sum(e.seconds for e in group):.1f}"]

        rows = [["module", "tests", "passed", "failed", "skipped", "subtests", "sub skipped", "seconds"]]
        rows += [row(module, group) for module, group in by_module.items()]
        rows.append(row("total", entries))
        return table(rows, right={1, 2, 3, 4, 5, 6, 7})

    @staticmethod
    def _skip_ledger(entries: Sequence[Entry]) -> str:
        """The skip reasons grouped, most frequent first, with up to three tests each."""
        reasons: dict[str, list[str]] = collections.OrderedDict()
        for e in entries:
            if e.status == Status.SKIPPED:
                reasons.setdefault(e.reason.splitlines()[0] if e.reason else "(no reason given)", []).append(e.test_id)
            for params, why in e.sub_skipped:
                reasons.setdefault((why.splitlines()[0] if why else "(no reason given)") + "  [subtests]",
                                   []).append(f"{e.test_id} {params}")
        if not reasons:
            return ""
        out = ["\nSkipped, by reason:\n"]
        for why, ids in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            out.append(f"  {len(ids):>4} x {why}\n")
            out += [f"         {tid}\n" for tid in ids[:3]]
            if len(ids) > 3:
                out.append(f"         ... and {len(ids) - 3} more\n")
        return "".join(out)

    def count_line(self, entries: Sequence[Entry], selected: int, discovered: int, where: str,
                   interrupted: bool = False) -> None:
        """Why nothing ran (when so), then the very last line: ``N passed, N failed, N skipped``."""
        c = counts(entries)
        if not selected:
            self.write(f"no tests ran: nothing selected (discovered {discovered} tests in {where}; "
                       "check -k/-i/-x/--shard)\n")
        elif c.passed + c.failed == 0 and not interrupted:
            self.write(f"no tests ran: all {c.skipped} selected tests were skipped (see the reasons above); "
                       "a run that tests nothing is not a success\n")
        self.write(f"{c}\n")
