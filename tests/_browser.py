"""A real headless browser (Debian's ``chromium``) for the tests of the HTML report; they skip without it.

Chromium is started once per page with a new empty profile and everything that reaches out switched off;
``--enable-logging=stderr`` makes it print each console message (errors, uncaught exceptions, and each
request the page's Content-Security-Policy blocked) as an ``INFO:CONSOLE`` line, which the tests count.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

__all__ = ["chromium", "needs_chromium", "Page", "load"]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def needs_chromium(cls: type) -> type:
    return unittest.skipIf(chromium() is None, "needs Debian's chromium (apt-get install chromium); "
                                               "not installed on this machine")(cls)


@dataclasses.dataclass
class Page:
    dom: str  # the page's DOM after its script ran (--dump-dom)
    console: list[str]  # its console lines: errors, exceptions, blocked requests


def load(path: Path, fragment: str = "", screenshot: Path | None = None, size: str = "1400,2400") -> Page:
    """Open ``path`` (file://, with ``#fragment``) and return its DOM and console lines (or write a PNG)."""
    exe = chromium()
    assert exe is not None
    profile = tempfile.mkdtemp(prefix="html-report-chromium-")
    try:
        what = [f"--screenshot={screenshot}", f"--window-size={size}"] if screenshot else ["--dump-dom"]
        url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
        r = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *what, url], capture_output=True,
                           text=True, errors="replace", timeout=120)
        console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
        return Page(r.stdout, console)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
