#!/usr/bin/env python
"""Which ``torch.testing._internal`` names a tree of test files imports, how often, and what the port does with each.

Point it at a checkout of PyTorch's ``test/distributed`` (or any project's tests)::

    python tools/scan_upstream_imports.py ~/pytorch/test/distributed
    python tools/scan_upstream_imports.py ~/pytorch/test/distributed --write docs/upstream-names.txt

Every import form counts: ``from X import a, b``; ``from torch.testing._internal import common_utils`` and
``import torch.testing._internal.common_fsdp as cf`` with the attributes the file reads on them; a plain
``import torch.testing._internal.common_utils`` with its dotted references. Each name is then one of:

* ``harness``: ``python -m harness.port`` moves it to ``from harness import``;
* ``namespace``: moved to ``harness.upstream_modules.<module>``;
* ``kept``: an upstream test body (``harness.port.KEPT``: the RPC suites, ``DistributedTest``, OpInfo's ``op_db``);
* ``other-release``: the installed torch's module does not define it (a name of another release);
* ``private``: none of these: a file importing it still needs torch's private harness after the port.

The summary counts the files that import a private name before the port and the files that keep one after it
(a name that is ``private``). ``--write`` saves one line per name (``count  module.name  status``), which
tests/unit/test_upstream_names.py reads to hold the port to it.
"""
from __future__ import annotations

import argparse
import ast
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.port import (MAPPING, NAMESPACES, _UPSTREAM, _installed_names, _python_files,  # noqa: E402
                          _star_names, _uses, kept, offered, port_source)
from harness.port_lost_imports import torch_module_source  # noqa: E402


def imported_names(source: str, path: str = "<string>") -> set[tuple[str, str]]:
    """The ``(module, name)`` pairs a file takes from ``torch.testing._internal``, in every import form."""
    tree = ast.parse(source, filename=path)
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(_UPSTREAM):
            module = node.module or ""
            for a in node.names:
                whole = f"{module}.{a.name}"
                if a.name == "*":  # the names the file reads that the star import supplies
                    names = _star_names(tree, module)
                    found.update((module, name) for name in (names if names is not None else {"*"}))
                elif whole in NAMESPACES or torch_module_source(whole):  # a module imported whole: what it reads on it
                    for attr in _uses(tree, a.asname or a.name)[0]:
                        found.add((whole, attr))
                else:
                    found.add((module, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(_UPSTREAM) and a.name != _UPSTREAM:
                    for attr in _uses(tree, a.asname or a.name)[0]:
                        found.add((a.name, attr))
    return found


def status(module: str, name: str) -> str:
    if name in MAPPING.get(module, frozenset()):
        return "harness"
    if name in offered(module):
        return "namespace"
    if kept(module, name):
        return "kept"
    defined = _installed_names(module)
    if defined is not None and name not in defined:
        return "other-release"
    return "private"


def scan(paths: list[str]) -> tuple[collections.Counter, dict[str, int]]:
    """Each ``module.name``'s count of files, and the summary's figures."""
    counts: collections.Counter = collections.Counter()
    files = importing = before = after = 0
    for path in _python_files(paths):
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            names = imported_names(source, path)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        files += 1
        if not names:
            continue
        importing += 1
        counts.update(f"{m}.{n}" for m, n in names)
        statuses = {status(m, n) for m, n in names}
        before += bool(statuses - {"kept"})
        after += "private" in statuses
        port_source(source, path)  # the port itself must take the file (it raises on what it cannot read)
    return counts, {"files": files, "importing": importing, "private_before": before, "private_after": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/scan_upstream_imports.py", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="test files or folders (their .py files)")
    parser.add_argument("--write", metavar="FILE", help="save the names, one a line: count  module.name  status")
    args = parser.parse_args(argv)
    counts, summary = scan(args.paths)
    lines = []
    for dotted, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        module, name = dotted.rsplit(".", 1)
        lines.append(f"{count:5d}  {dotted}  {status(module, name)}")
    print("\n".join(lines))
    by_status = collections.Counter(line.split()[-1] for line in lines)
    print(f"\n{summary['files']} files, {summary['importing']} import torch.testing._internal; "
          f"{len(counts)} names: " + ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())))
    print(f"files importing a private name: {summary['private_before']} before the port, "
          f"{summary['private_after']} after it (kept test bodies and other releases' names not counted)")
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            f.write("# torch.testing._internal names test files import: files  module.name  status\n"
                    "# (tools/scan_upstream_imports.py PATH --write FILE; statuses in its docstring)\n")
            f.write("\n".join(lines) + "\n")
    return 1 if summary["private_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
