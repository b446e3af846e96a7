"""What pytest would give a test file that no other front end can: the fixtures a test needs (its arguments,
``usefixtures``, the autouse fixtures of its class, its module and the ``conftest.py`` files beside it and above
it), and the project's pytest configuration (its ini values, its rootdir).

Read from the files' text (``ast``), never by importing a ``conftest.py``: its hooks and imports belong to
pytest's run, and a front end that is not pytest must not run them. harness.parent.pytest_marks asks it.
"""
from __future__ import annotations

import ast
import configparser
import functools
import inspect
import os
import sys
import unittest
from pathlib import Path
from typing import Any

from harness.testing.parametrize import PARAMS_ATTR

__all__ = ["needs_fixtures", "test_file", "ini_values", "strict_default", "conftest_autouse"]


def test_file(test: unittest.TestCase) -> Path | None:
    """The file that defines ``test``'s class's module (None: it has none)."""
    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None)
    return _resolved(path) if path else None


@functools.lru_cache(maxsize=1024)
def _resolved(path: str) -> Path:
    return Path(path).resolve()


@functools.lru_cache(maxsize=256)
def _parsed(path: str, mtime: float) -> ast.Module | None:  # noqa: ARG001 - mtime: the cache's key
    try:
        return ast.parse(Path(path).read_text(errors="replace"), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _autouse(body: list[ast.stmt]) -> list[str]:
    """The autouse fixtures defined in ``body``: ``@pytest.fixture(autouse=True)`` (or ``@fixture(...)``)."""
    names = []
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call):
                continue
            func = deco.func
            if not ((isinstance(func, ast.Attribute) and func.attr == "fixture")
                    or (isinstance(func, ast.Name) and func.id == "fixture")):
                continue
            keywords = {k.arg: k.value for k in deco.keywords if k.arg}
            auto = keywords.get("autouse")
            if isinstance(auto, ast.Constant) and auto.value is True:
                name = keywords.get("name")
                names.append(name.value if isinstance(name, ast.Constant) and isinstance(name.value, str)
                             else node.name)
    return names


def _class_body(tree: ast.Module, qualname: str) -> list[ast.stmt] | None:
    body: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return body


@functools.lru_cache(maxsize=256)
def _conftests(start: Path) -> tuple[Path, ...]:
    """The ``conftest.py`` files pytest would load for a test file in ``start``: beside it and in each folder
    above it, up to the project's root (where its pytest configuration, or else its ``setup.py``, is)."""
    root = _rootdir(start)
    found = []
    folder = start
    while True:
        candidate = folder / "conftest.py"
        if candidate.is_file():
            found.append(candidate)
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    return tuple(found)


def _file_autouse(path: Path, qualname: str | None = None) -> tuple[str, ...]:
    """The autouse fixtures a file defines at its top (``qualname`` None) or in its class ``qualname``."""
    try:
        return _autouse_cached(str(path), path.stat().st_mtime, qualname)
    except OSError:
        return ()


@functools.lru_cache(maxsize=1024)
def _mentions_autouse(path: str, mtime: float) -> bool:  # noqa: ARG001 - mtime: the cache's key
    """Whether the file's text says ``autouse`` at all: a file that does not defines no autouse fixture, and is not
    parsed (most test files)."""
    try:
        return "autouse" in Path(path).read_text(errors="replace")
    except OSError:
        return False


@functools.lru_cache(maxsize=1024)
def _autouse_cached(path: str, mtime: float, qualname: str | None) -> tuple[str, ...]:
    if not _mentions_autouse(path, mtime):
        return ()
    tree = _parsed(path, mtime)
    if tree is None:
        return ()
    body = tree.body if qualname is None else _class_body(tree, qualname)
    return tuple(_autouse(body)) if body is not None else ()


#: modules whose classes define no pytest fixture a test of a project could need
_NOT_A_PROJECT = ("builtins", "unittest", "harness", "torch", "expecttest", "hypothesis", "abc", "typing")


@functools.lru_cache(maxsize=1024)
def _autouse_needs(cls: type, path: Path, stamp: float) -> tuple[str, ...]:  # noqa: ARG001 - stamp: the cache's key
    """The autouse fixtures every test of ``cls`` (defined in ``path``) gets: its classes', its module's, and those
    of the ``conftest.py`` files pytest would load for it; one answer per class while its file is unchanged."""
    needs: list[str] = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in _NOT_A_PROJECT:
            continue
        file = getattr(sys.modules.get(klass.__module__), "__file__", None)
        if file:
            needs += [f"{name} (autouse, class {klass.__name__})" for name in _file_autouse(Path(file), klass.__qualname__)]
    needs += [f"{name} (autouse, module)" for name in _file_autouse(path)]
    for conftest in _conftests(path.parent):
        needs += [f"{name} (autouse, {_shown(conftest)})" for name in _file_autouse(conftest)]
    return tuple(needs)


def conftest_autouse(folder: Path) -> tuple[str, ...]:
    """The autouse fixtures the ``conftest.py`` files pytest would load for a test file in ``folder`` define."""
    return tuple(name for conftest in _conftests(folder) for name in _file_autouse(conftest))


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def needs_fixtures(test: unittest.TestCase, marks: list[Any], path: Path | None) -> str | None:
    """The "needs pytest" reason of ``test`` (in file ``path``, with pytest ``marks``), which asks for pytest's
    fixtures, or None: which fixtures, from where, and the pytest command that runs it.

    Example::

        needs_fixtures(test, marks_of(test), test_file(test))   # 'needs pytest: fixtures tmp_path (argument); ...'
    """
    needs: list[str] = []
    arguments: list[str] = []
    fn = getattr(type(test), test._testMethodName, None)
    try:
        bound = getattr(test, test._testMethodName)
        params = inspect.signature(bound, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError, AttributeError):
        params = []
    given = set(getattr(fn, PARAMS_ATTR, {}) or {})  # harness.parametrize's values are given by the harness
    for p in params:
        if (p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY) and p.default is p.empty
                and p.name not in given):
            arguments.append(p.name)
    needs += [f"{name} (argument)" for name in arguments]
    for mark in (m for m in marks if m.name == "usefixtures"):
        needs += [f"{name} (usefixtures)" for name in mark.args if isinstance(name, str)]
    if path is not None:
        try:
            stamp = path.stat().st_mtime
        except OSError:
            stamp = 0.0
        needs += _autouse_needs(type(test), path, stamp)
    if not needs:
        return None
    node = f"{_shown(path)}::{type(test).__qualname__.replace('.', '::')}::{test._testMethodName}" if path else test.id()
    reason = f"needs pytest: fixtures {', '.join(dict.fromkeys(needs))}; run it with: python -m pytest {node}"
    if arguments:
        reason += (" (pytest gives no fixture to a unittest.TestCase method's arguments either: take them in an "
                   "autouse fixture of the class, e.g. @pytest.fixture(autouse=True) def _set(self, tmp_path): ...)")
    return reason


def _ini_section(path: Path) -> dict[str, Any] | None:
    """The pytest section of one configuration file, or None when it has none (pytest's rules for which counts)."""
    try:
        if path.name == "pyproject.toml":
            from harness.shared.config import toml_file

            tool = toml_file(path).get("tool", {}).get("pytest", None)
            if tool is None:
                return None
            section = tool.get("ini_options", tool)
            return {k: v for k, v in section.items() if not isinstance(v, dict)}
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path)
        name = {"setup.cfg": "tool:pytest"}.get(path.name, "pytest")
        if parser.has_section(name):
            return dict(parser.items(name))
        return {} if path.name in ("pytest.ini", ".pytest.ini") else None
    except Exception:  # a file pytest itself would refuse: pytest's defaults here
        return None


@functools.lru_cache(maxsize=64)
def _config_for(start: str) -> tuple[str | None, tuple[tuple[str, Any], ...]]:
    """(the folder of the pytest configuration that governs ``start``, its values), as pytest finds it: the first
    folder upward holding pytest.ini, .pytest.ini, pyproject.toml, tox.ini or setup.cfg with a pytest section."""
    folder = Path(start)
    while True:
        for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
            candidate = folder / name
            if candidate.is_file():
                section = _ini_section(candidate)
                if section is not None:
                    return str(folder), tuple(section.items())
        if folder.parent == folder:
            return None, ()
        folder = folder.parent


def ini_values(start: Path | None) -> dict[str, Any]:
    """The pytest configuration's values that govern a test file in folder ``start`` ({}: none)."""
    return dict(_config_for(str(start))[1]) if start is not None else {}


def _rootdir(start: Path) -> Path:
    """pytest's rootdir for a file in ``start``: its configuration's folder, else the nearest ``setup.py``'s, else
    the current directory when ``start`` is under it, else ``start``."""
    found = _config_for(str(start))[0]
    if found is not None:
        return Path(found)
    for folder in (start, *start.parents):
        if (folder / "setup.py").is_file():
            return folder
    cwd = Path.cwd().resolve()
    return cwd if start == cwd or cwd in start.parents else start


def strict_default(start: Path | None) -> bool:
    """``strict_xfail`` (``xfail_strict`` before pytest 9), else ``strict``, from the ini file; False by default."""
    values = ini_values(start)
    for name in ("strict_xfail", "xfail_strict", "strict"):
        if name in values:
            value = values[name]
            return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1", "yes", "on")
    return False
