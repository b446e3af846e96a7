"""The test runner (``python -m harness``, ``distharness``, ``run_tests.py``): cli -> session -> selection,
sharding -> results -> console, junit, html.

May import: harness.shared, harness.testing, harness.judging, harness.parent, harness.classes, harness.inprocess.
"""
from __future__ import annotations

from harness.runner.cli import Defaults, FolderSet, console_main, main

__all__ = ["Defaults", "FolderSet", "main", "console_main"]
