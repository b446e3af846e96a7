"""The torch submodules a ported file reads that upstream's harness had imported for it.

Upstream's ``torch.testing._internal`` modules import torch submodules as they load: ``common_distributed``
imports ``torch._dynamo.test_case``, ``common_utils`` imports ``torch.utils._pytree`` and ``torch.backends.*``,
and each of those imports more. A file that reads ``torch._dynamo.test_case.TestCase`` while it imports only
``torch._dynamo`` works under upstream's harness because of that, and fails at import once the port has moved it
to the harness, whose modules import no more than they need (``AttributeError: module 'torch._dynamo' has no
attribute 'test_case'``). :func:`lost_imports` finds those submodules so that the port can import them itself.

A submodule counts where the file reads it as a dotted name on ``torch`` (``torch.a.b.Name``), the installed
torch has it as a file, the file imports neither it nor something below it, and it is not loaded anyway by what
the ported file imports (``torch`` itself, the file's own ``torch`` imports and its new ``harness`` ones, and
the modules torch loads when first read, such as ``torch._dynamo``). That last question is asked of a fresh
Python process that imports only those modules (never upstream's harness, never the file), and only for files
with a candidate; where it cannot be asked, every candidate is imported (importing a loaded module again is free).
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import subprocess
import sys

__all__ = ["lost_imports", "attribute_chain", "torch_module_source"]

_UPSTREAM = "torch.testing._internal"
_CHECK_TIMEOUT_S = 120

_CHECK = """
import importlib, json, sys
imports, firsts, candidates = json.loads(sys.argv[1])
import torch
for name in imports:
    try:
        importlib.import_module(name)
    except BaseException:
        pass
for first in firsts:
    try:
        getattr(torch, first)
    except BaseException:
        pass
print(json.dumps([c for c in candidates if c in sys.modules]))
"""


@functools.cache
def _torch_dir() -> str | None:
    try:
        spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec and spec.origin else None


def torch_module_source(dotted: str) -> str | None:
    """The source file of the installed torch's module ``dotted`` (``torch.a.b``: ``a/b.py`` or
    ``a/b/__init__.py`` under torch's folder), found without importing anything; None where torch or the module is
    not there."""
    base = _torch_dir()
    if base is None:
        return None
    path = os.path.join(base, *dotted.split(".")[1:])
    for source in (path + ".py", os.path.join(path, "__init__.py")):
        if os.path.isfile(source):
            return source
    return None


def attribute_chain(node: ast.AST) -> list[str] | None:
    """``["a", "b", "c"]`` for an attribute chain ``a.b.c`` on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _imports(tree: ast.AST) -> tuple[set[str], list[str]]:
    """The modules the file's imports load (each with its parents), and the import targets to load them again."""
    loaded: set[str] = set()
    targets: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        for name in names:
            parts = name.split(".")
            loaded.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            if name.startswith(("torch", "harness")) and not name.startswith(_UPSTREAM):
                targets.append(name)
    return loaded, targets


def _loaded_anyway(imports: list[str], candidates: list[str]) -> set[str] | None:
    """Which of ``candidates`` a fresh process has loaded after ``import torch`` and ``imports``; None if it
    could not tell."""
    firsts = sorted({c.split(".")[1] for c in candidates})
    try:
        proc = subprocess.run([sys.executable, "-c", _CHECK, json.dumps([imports, firsts, candidates])],
                              capture_output=True, text=True, timeout=_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        return set(json.loads(proc.stdout.strip().splitlines()[-1])) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def lost_imports(ported: str) -> dict[str, str]:
    """The torch submodules the ported source reads and nothing imports for it any more, each with the first
    dotted name it reads there: ``{"torch._dynamo.test_case": "torch._dynamo.test_case.TestCase"}``."""
    if _torch_dir() is None:
        return {}
    tree = ast.parse(ported)
    loaded, targets = _imports(tree)
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        chain = attribute_chain(node) if isinstance(node, ast.Attribute) else None
        if not chain or chain[0] != "torch" or len(chain) < 3:
            continue
        deepest = next((".".join(chain[:i]) for i in range(len(chain), 1, -1)
                        if torch_module_source(".".join(chain[:i]))), None)
        if deepest is None or deepest in loaded or deepest.startswith(_UPSTREAM):
            continue
        if deepest not in found or len(".".join(chain)) > len(found[deepest]):
            found[deepest] = ".".join(chain)
    if not found:
        return {}
    anyway = _loaded_anyway(sorted(set(targets)), sorted(found))
    return {m: found[m] for m in sorted(found) if anyway is None or m not in anyway}
