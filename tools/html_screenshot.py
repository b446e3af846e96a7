#!/usr/bin/env python
"""The README's picture of a failing run's HTML report, made again from a real run.

Runs tests/fixtures/fx_collectives.py (ranks that part in their collectives: different ops at one
collective, a rank that never calls one, a subgroup, a group's creation) with the runner's ``--html``,
then has headless chromium take a screenshot of the page, focused on the failures (``#f1``).

Example::

    python tools/html_screenshot.py                          # writes docs/html-report.png
    python tools/html_screenshot.py --keep /tmp/report.html  # and keeps the page
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._browser import FLAGS, chromium  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "html-report.png"), help="the PNG (default: %(default)s)")
    p.add_argument("--keep", metavar="PATH", help="also keep the HTML page there")
    p.add_argument("--size", default="1280,1500", help="the window, as chromium's --window-size")
    args = p.parse_args()
    exe = chromium()
    if exe is None:
        print("needs chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="html-screenshot-"))
    try:
        page = work / "report.html"
        env = {**os.environ, "HARNESS_PEER_GRACE": "3", "HARNESS_THREADS": "1"}
        run = subprocess.run([sys.executable, "-m", "harness", "tests/fixtures/fx_collectives.py", "--html", str(page)],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        if not page.exists():
            print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
            return 1
        # the failures first: the page without its header and test table, as a reader scrolled to them
        text = page.read_text(encoding="utf-8")
        focused = work / "failures.html"
        focused.write_text(text.replace("<h2>Failures</h2>", '<h2 id="top">Failures</h2>')
                           .replace("<style>", "<style>body>h1,body>.meta,body>h2:first-of-type,#filters,#tests"
                                               "{display:none}"), encoding="utf-8")
        profile = work / "profile"
        subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={args.out}",
                        f"--window-size={args.size}", focused.as_uri()], capture_output=True, timeout=120)
        if args.keep:
            shutil.copy(page, args.keep)
        print(f"{args.out} (from a run of {run.stdout.strip().splitlines()[-1]})")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
