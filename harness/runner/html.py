"""``--html PATH``: one self-contained HTML file of a run, from the runner's entries (data), nothing more.

The file opens from disk with no network: its style and script are inline and its Content-Security-Policy
forbids anything fetched from elsewhere. Every text is escaped and bounded (harness.shared.output.bounded_output),
so a test that printed megabytes or HTML or bytes that are not UTF-8 leaves a small, well-formed page.
What a failing test shows: its report text (errors, stacks, output, subtests, hypothesis example, triage) and
its ranks x collectives (harness.judging.analysis.Picture), drawn as a table: one row per rank, one cell per
collective in the order the rank made them, the collective where the ranks parted marked.
"""
from __future__ import annotations

import collections
import datetime
import html
import os
import platform
import string
import subprocess
from pathlib import Path
from typing import Any, Iterable, Sequence

from harness.judging.fallback import was_tried
from harness.shared.output import bounded_output
from harness.runner.results import Entry, counts
from harness.shared.status import BAD, Status

__all__ = ["write_html", "render", "picture_html", "failure_extra", "TEXT_LIMIT", "MAX_CELLS", "MAX_LANES",
           "MAX_FAILURES"]

#: bytes of one text (a failure's report, a rank's output) kept in the page: head and tail, the cut said
TEXT_LIMIT = 20_000
#: collectives drawn per rank; a longer test shows its last ones (where ranks part, the end matters)
MAX_CELLS = 60
#: distinct rows drawn per picture; equal rows are drawn once already ("ranks 0-62")
MAX_LANES = 64
#: ranks whose error, stack and output a failure shows
MAX_DETAILS = 8
#: failures detailed in the page; past them the table still lists every test (a run where everything failed
#: stays a page a browser opens: each failure is up to a few TEXT_LIMITs)
MAX_FAILURES = 100
_SLOWEST = 15

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

#: the picture's style (with the texts'): the page's and the pytest-html extra's
_PIC_STYLE = """
.s-passed,.s-xfail{color:#1a7f37}.s-failed,.s-error,.s-xpass,.s-interrupted{color:#c62828;font-weight:600}
.s-skipped{color:#8a6d00}.s-tried-on-cpu{color:#b35c00;font-weight:600}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:30em;white-space:pre-wrap;word-break:break-all}
.pic td{border:1px solid #ccc;font:12px/1.2 monospace;white-space:nowrap;padding:3px 5px}
.pic td.rank{font:bold 13px system-ui;background:#fafafa;white-space:normal;min-width:10em;max-width:22em}
.pic td.ok{background:#e8f5e9}.pic td.open{background:#fff3cd;border:2px dashed #b8860b}
.pic td.parted{background:#ffcdd2;border:2px solid #c62828}
.pic td.gap{background:repeating-linear-gradient(45deg,#fff,#fff 4px,#eee 4px,#eee 8px);color:#c62828;
border:2px dashed #c62828}
.pic td.none{color:#888;font-style:italic}
.pic small{color:#555}
.parted-line{color:#c62828;font-weight:600}
"""

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.meta td:first-child{color:#666}
.fail{border-left:4px solid #c62828;padding-left:12px;margin:1.5em 0}
.bar{background:#5c6bc0;height:12px;display:inline-block}
#filters label{margin-right:1em}
""" + _PIC_STYLE

_SCRIPT = """
(function(){
  var boxes=document.querySelectorAll('#filters input[type=checkbox]');
  var q=document.getElementById('q');
  function apply(){
    var on={};boxes.forEach(function(b){on[b.value]=b.checked;});
    var text=q.value.toLowerCase();var shown=0;
    document.querySelectorAll('#tests tbody tr').forEach(function(tr){
      var ok=on[tr.dataset.outcome]!==false&&tr.dataset.name.toLowerCase().indexOf(text)>=0;
      tr.hidden=!ok;if(ok)shown++;});
    document.getElementById('shown').textContent=shown;
  }
  // #outcome=failed,error&q=name: a link (or a test) opens the page filtered
  var h=new URLSearchParams(location.hash.slice(1));
  if(h.has('outcome')){
    var want=h.get('outcome').split(',');
    boxes.forEach(function(b){b.checked=want.indexOf(b.value)>=0;});
  }
  if(h.has('q')){q.value=h.get('q');}
  boxes.forEach(function(b){b.addEventListener('change',apply);});
  q.addEventListener('input',apply);
  apply();
  document.body.dataset.ready='1';  // the script ran to its end: a browser test reads it
})();
"""

_PAGE = string.Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="$csp">
<title>$title</title><style>$style</style></head>
<body>
<h1>$title</h1>
<table class="meta">$meta</table>
<h2>Tests</h2>
<div id="filters">$boxes <input id="q" type="search" placeholder="search by name"> <span id="shown"></span> shown</div>
<table id="tests"><thead><tr><th>test</th><th>outcome</th><th>seconds</th><th>world</th><th>placement</th>
<th>triage, or why skipped</th></tr></thead><tbody>$rows</tbody></table>
$failures
$slowest
<script>$script</script>
</body></html>
""")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _bounded(text: str, limit: int = TEXT_LIMIT) -> str:
    return bounded_output(text.encode("utf-8", "replace"), limit)


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def _pre(text: str) -> str:
    return f"<pre>{_e(_bounded(text))}</pre>" if text else ""


def _git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _torch_version() -> str:
    import sys

    torch = sys.modules.get("torch")  # the run imported it, or it was not needed: never imported for the page
    return str(getattr(torch, "__version__", "")) if torch is not None else ""


def _meta(entries: Sequence[Entry], wall: float, front: str, notes: Sequence[str], root: Path) -> str:
    places = collections.Counter(e.placement for e in entries if e.placement)
    rows = [("counts", str(counts(entries))), ("commit", _git_commit(root) or "not in git"),
            ("torch", _torch_version() or "not imported"), ("python", platform.python_version()),
            ("placement", ", ".join(f"{p} ({n})" for p, n in places.most_common()) or "none"),
            ("front end", front),
            ("finished", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("wall time", f"{wall:.1f} s"), ("host", platform.node())]
    rows += [("note", n) for n in notes]
    return "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)


#: the outcome shown for a test that asked for GPUs, ran on CPU for want of them and failed there: a skip by
#: default (HARNESS_DEVICE=cpu makes it a failure), drawn apart from the skips a test chose itself
TRIED = "tried-on-cpu"


def _outcome(e: Entry) -> str:
    return TRIED if e.status == Status.SKIPPED and was_tried(e.reason) else e.status.value


def _test_rows(entries: Sequence[Entry]) -> str:
    out = []
    for i, e in enumerate(entries):
        link = f'<a href="#f{i}">{_e(e.test_id)}</a>' if e.status in BAD else _e(e.test_id)
        outcome = _outcome(e)
        why = e.triage or (_short(e.reason, 300) if e.status in (Status.SKIPPED, Status.XFAIL, Status.XPASS) else "")
        if e.faults:
            why = (why + "; " if why else "") + "faults: " + e.faults
        out.append(f'<tr data-outcome="{_e(outcome)}" data-name="{_e(e.test_id)}"><td>{link}</td>'
                   f'<td class="s-{_e(outcome)}">{_e(outcome.replace("-", " "))}</td><td>{e.seconds:.2f}</td>'
                   f'<td>{_e(e.world_size or "")}</td><td>{_e(e.placement)}</td><td>{_e(why)}</td></tr>')
    return "".join(out)


def _boxes(entries: Sequence[Entry]) -> str:
    seen = collections.Counter(_outcome(e) for e in entries)
    return " ".join(f'<label><input type="checkbox" value="{_e(s)}" checked> {_e(s)} ({n})</label>'
                    for s, n in sorted(seen.items()))


def _ranks_word(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]} ({len(ranks)})"
    return f"ranks {', '.join(map(str, ranks))} ({len(ranks)})"


def _cell(c: Any) -> str:
    kind = "parted" if c.parted else ("ok" if c.done else "open")
    ms = f" {c.ms:.1f} ms" if c.ms is not None else ""
    title = f"#{c.seq} {c.op}({c.tensors}) on {c.group}{ms}" + ("" if c.done else ", unfinished")
    return (f'<td class="{kind}" title="{_e(title)}">#{c.seq} {_e(c.op)}<br><small>{_e(c.tensors)}</small>'
            f'<br><small>{_e(c.group)}{_e(ms)}</small></td>')


def picture_html(pic: Any) -> str:
    """A Picture as an HTML table: equal rows drawn once ("ranks 2-63 (62)")."""
    groups: dict[Any, list[Any]] = {}
    for lane in pic.lanes:
        key = (lane.status, lane.line, lane.recorded, lane.cells, lane.missing, lane.waiting)
        groups.setdefault(key, []).append(lane)
    rows = []
    for key, lanes in list(groups.items())[:MAX_LANES]:
        lane = lanes[0]
        cells = list(lane.cells)
        cut = len(cells) - MAX_CELLS
        tds = [f'<td class="rank">{_e(_ranks_word([x.rank for x in lanes]))}<br>'
               f'<small class="s-{_e(lane.status)}">{_e(_short(lane.line, 200))}</small></td>']
        if cut > 0:
            tds.append(f'<td class="none">{cut} earlier not drawn</td>')
            cells = cells[-MAX_CELLS:]
        if not lane.recorded:
            tds.append('<td class="none">no record (the rank died, or has no flight recorder)</td>')
        elif not cells and not lane.missing:
            tds.append('<td class="none">called no collective in this test</td>')
        tds += [_cell(c) for c in cells]
        if lane.missing:
            tds.append(f'<td class="gap" title="never called">never called<br><small>{_e(lane.missing)}</small></td>')
        if lane.waiting:
            tds.append('<td class="none">&larr; waits here</td>')
        rows.append(f'<tr class="lane" data-ranks="{_e(",".join(str(x.rank) for x in lanes))}">{"".join(tds)}</tr>')
    more = len(groups) - MAX_LANES
    tail = f"<p>{more} more distinct rows not drawn</p>" if more > 0 else ""
    parted = f'<p class="parted-line">where the ranks parted: {_e(pic.parted)}</p>' if pic.parted else ""
    return f'{parted}<table class="pic">{"".join(rows)}</table>{tail}'


def _rank_details(pic: Any) -> str:
    """Each rank's texts, folded; ranks with texts that repeat another's are not shown twice, at most
    MAX_DETAILS ranks in all (at 64 ranks the picture says who did what, the first ranks' texts say how)."""
    out, seen, left = [], set(), 0
    for lane in pic.lanes:
        parts = [("error", lane.error), ("stack when stopped", lane.stack), ("output", lane.output)]
        body = "".join(f"<h4>{_e(k)}</h4>{_pre(v)}" for k, v in parts if v)
        key = (lane.line, lane.error.replace(f"rank {lane.rank}", "rank N"), lane.output)
        if not body:
            continue
        if key in seen or len(out) >= MAX_DETAILS:
            left += 1
            continue
        seen.add(key)
        out.append(f"<details><summary>rank {lane.rank}: {_e(_short(lane.line, 300))}</summary>{body}</details>")
    if left:
        out.append(f"<p>{left} more ranks' texts not shown (like those above, or past the first {MAX_DETAILS})</p>")
    return "".join(out)


def _failure(i: int, e: Entry) -> str:
    head = (f'<div class="fail" id="f{i}"><h3>{_e(e.test_id)} <span class="s-{_e(e.status.value)}">'
            f'{_e(e.status.value)}</span></h3>')
    bits = [head]
    if e.triage:
        bits.append(f"<p>triage: {_e(e.triage)}</p>")
    if e.attempts:
        bits.append(f"<p>faults: {_e(e.faults)}</p><pre>{_e(chr(10).join(e.attempts))}</pre>")
    if e.examples > 1:
        bits.append(f"<p>hypothesis examples run: {e.examples}</p>")
    if e.picture is not None and e.picture.lanes:
        bits.append("<h4>ranks &times; collectives</h4>" + picture_html(e.picture))
    for p in e.problems:
        bits.append(f"<h4>{_e(p.kind.value)}: {_e(p.title)}</h4>{_pre(p.text)}")
    if e.picture is not None:
        bits.append(_rank_details(e.picture))
    if e.output:
        bits.append("<h4>output</h4>" + _pre(e.output))
    bits.append("</div>")
    return "".join(bits)


def failure_extra(pic: Any) -> str:
    """One failure's picture and its ranks' texts as a piece of HTML with its own style: what the pytest plugin
    adds to pytest-html's report."""
    return f'<div class="distharness"><style>{_PIC_STYLE}</style>{picture_html(pic)}{_rank_details(pic)}</div>'


def _slowest(entries: Sequence[Entry]) -> str:
    ran = sorted((e for e in entries if e.real and e.status != Status.SKIPPED), key=lambda e: -e.seconds)[:_SLOWEST]
    if not ran or ran[0].seconds <= 0:
        return ""
    top = ran[0].seconds
    rows = "".join(f'<tr><td>{_e(e.test_id)}</td><td>{e.seconds:.2f} s</td><td><span class="bar" '
                   f'style="width:{max(1, int(300 * e.seconds / top))}px"></span></td></tr>' for e in ran)
    return f"<h2>Slowest tests</h2><table>{rows}</table>"


def render(entries: Sequence[Entry], wall: float = 0.0, front: str = "python -m harness",
           notes: Iterable[str] = (), title: str = "distharness run", root: Path | None = None) -> str:
    """The page, as text."""
    bad = [(i, e) for i, e in enumerate(entries) if e.status in BAD]
    failures = ("<h2>Failures</h2>" + "".join(_failure(i, e) for i, e in bad[:MAX_FAILURES])) if bad else ""
    if len(bad) > MAX_FAILURES:
        failures += (f"<p>{len(bad) - MAX_FAILURES} more failures not detailed here (the console's report and the "
                     "JUnit XML have them all)</p>")
    return _PAGE.substitute(csp=_CSP, title=_e(title), style=_STYLE, script=_SCRIPT,
                            meta=_meta(entries, wall, front, list(notes), root or Path.cwd()),
                            boxes=_boxes(entries), rows=_test_rows(entries), failures=failures,
                            slowest=_slowest(entries))


def write_html(path: str, entries: Sequence[Entry], wall: float = 0.0, front: str = "python -m harness",
               notes: Iterable[str] = ()) -> None:
    """Write the page to ``path`` (its folder made where missing), as UTF-8 (what cannot be encoded replaced)."""
    page = render(entries, wall, front, notes)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="replace") as f:
        f.write(page)
