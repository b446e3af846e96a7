"""Which tests run: discovery of folders, files and modules, then ``-k``/``-i``/``-x`` and ``--shuffle``."""
from __future__ import annotations

import collections
import fnmatch
import os
import random
import sys
import unittest
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from harness.shared import pytest_outcomes
from harness.shared.errors import UsageError

__all__ = ["FILE_PATTERNS", "iter_tests", "is_load_failure", "skipped_module", "module_of", "discover", "load_target", "collect", "module_matches",
           "id_matches", "within", "select", "check_includes", "shuffle"]


def iter_tests(suite: Iterable[Any]) -> Iterator[unittest.TestCase]:
    """The tests of a (nested) suite, in order.

    Example::

        ids = [t.id() for t in iter_tests(unittest.defaultTestLoader.discover("tests"))]
    """
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from iter_tests(item)
        else:
            yield item


def is_load_failure(test: Any) -> bool:
    """True for a stand-in for a whole module: unittest's when a module cannot be imported, and
    :func:`skipped_module`'s when it skipped itself while it was imported."""
    return type(test).__name__ in ("_FailedTest", "ModuleSkipped")


def skipped_module(module: str, reason: str) -> unittest.TestCase:
    """One skipped test that stands for ``module``, which skipped itself while it was imported
    (``pytest.importorskip``, ``pytest.skip(allow_module_level=True)``, ``raise unittest.SkipTest``): a skip with
    its reason, as pytest reports it, not an import error. Named as unittest's own stand-ins are, by the module.

    Example::

        skipped_module("tests.test_hf", "could not import 'transformers': No module named 'transformers'")
    """
    @unittest.skip(reason)
    def skipped(self: unittest.TestCase) -> None:
        pass

    cls = type("ModuleSkipped", (unittest.TestCase,), {module: skipped, "id": lambda self: module,
                                                       "__str__": lambda self: f"{module} (skipped at import)"})
    return cls(module)


class _Loader(unittest.TestLoader):
    """unittest's loader, a module that skipped itself with pytest's ``skip`` read as unittest's ``SkipTest``; the
    modules it loaded tests from, in order (``modules``: harness.runner.pytest_items looks in them for pytest's)."""

    def __init__(self) -> None:
        super().__init__()
        self.modules: list[Any] = []

    def loadTestsFromModule(self, module: Any, *args: Any, pattern: Any = None) -> Any:  # noqa: N802 - unittest's
        self.modules.append(module)
        return super().loadTestsFromModule(module, *args, pattern=pattern)

    def _get_module_from_name(self, name: str) -> Any:
        try:
            return super()._get_module_from_name(name)
        except unittest.SkipTest:
            raise
        except BaseException as exc:  # noqa: B902 - pytest's outcomes derive from BaseException
            if pytest_outcomes.is_skip(exc):
                raise unittest.SkipTest(pytest_outcomes.skip_reason(exc)) from None
            raise


def _own_stand_in(test: Any) -> Any:
    """unittest's stand-in for a module that skipped itself, as :func:`skipped_module`'s (named by the module)."""
    if type(test).__name__ == "ModuleSkipped" and type(test).__module__ == "unittest.loader":
        method = getattr(test, test._testMethodName, None)
        return skipped_module(test._testMethodName, str(getattr(method, "__unittest_skip_why__", "") or ""))
    return test


def module_of(test: Any) -> str:
    """The module a test belongs to; an import failure belongs to the module that failed to import.

    Example::

        module_of(some_test)  # "test_distributed.test_pipeline"
    """
    if is_load_failure(test):
        return test._testMethodName
    if isinstance(test, unittest.case._SubTest):
        test = test.test_case
    module = type(test).__module__
    if module == "unittest.suite" and hasattr(test, "description"):  # _ErrorHolder: "setUpClass (mod.Class)"
        inner = test.description.rpartition("(")[2].rstrip(")")
        return inner.rsplit(".", 1)[0] if "." in inner else inner
    return module


def _top_level(folder: Path) -> Path:
    """The directory a folder's modules are imported from: above the outermost package that holds it
    (a folder that is no package is its own top level, its modules imported by their bare names)."""
    if not (folder / "__init__.py").is_file():
        return folder
    top = folder
    while (top.parent / "__init__.py").is_file():
        top = top.parent
    return top.parent


#: the test files a folder's discovery finds when a project names none: pytest's defaults
FILE_PATTERNS = ("test_*.py", "*_test.py")


def discover(folder: str | Path, root: Path, file_patterns: Sequence[str] = FILE_PATTERNS,
             loader: _Loader | None = None) -> list[unittest.TestCase]:
    """The tests of the files under ``folder`` (relative to ``root`` unless absolute) whose names match one of
    ``file_patterns`` (shell patterns, as pytest's ``python_files``), each once, in every folder pytest enters
    (unittest's discovery for its packages; a folder that is no package on its own, its files by their bare names);
    a folder that does not exist has none.

    Example::

        tests = discover("test_distributed", Path.cwd())
        tests = discover("src", Path.cwd(), ["*_test.py"])
    """
    from harness.runner.pytest_items import folders_outside_packages

    start = (root / folder).resolve()
    if not start.is_dir():
        return []
    found: list[unittest.TestCase] = []
    seen: set[str] = set()
    loader = loader or _Loader()
    # unittest's discovery enters packages only; pytest enters every folder: each one that is no package is
    # discovered on its own, its files imported by their bare names from it, as pytest imports them
    for where, top in [(start, _top_level(start)), *((d, d) for d in folders_outside_packages(start))]:
        for pattern in file_patterns:
            if where != start and not any(fnmatch.fnmatch(n, pattern) for n in os.listdir(where)):
                continue  # (a folder of no test file: not put on sys.path)
            suite = loader.discover(str(where), pattern=pattern, top_level_dir=str(top))
            for test in map(_own_stand_in, iter_tests(suite)):
                key = test.id() if not is_load_failure(test) else f"failed:{test.id()}"
                if key not in seen:  # a file two patterns match (test_x_test.py) is collected once
                    seen.add(key)
                    found.append(test)
    return found


def load_target(target: str, root: Path, file_patterns: Sequence[str] = FILE_PATTERNS) -> list[unittest.TestCase]:
    """The tests of one command-line target: a folder, a ``.py`` file, or a dotted ``module[.Class[.method]]``.
    Paths are taken from the current directory; a file under ``root`` is imported by its dotted name. (What only
    pytest runs is added by :func:`collect`.)

    Example::

        load_target("tests.fixtures.fx_pass.TestPass", Path.cwd())
    """
    return _load(target, root, file_patterns, _Loader())[0]


def _dotted(target: str, root: Path) -> str:
    """A ``.py`` file (or pytest's ``path.py::Class::test`` node id) as the dotted name it is imported by."""
    path, _, rest = target.partition("::")
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise FileNotFoundError("no such file")
    # by its packages' names from above the outermost (a file in no package: its bare name from its own folder), as
    # discovery and pytest import it: one module, whoever imports it first
    top = _top_level(resolved.parent)
    if str(top) not in sys.path:
        sys.path.insert(0, str(top))
    dotted = ".".join(resolved.relative_to(top).with_suffix("").parts)
    return ".".join([dotted, *(p for p in rest.split("::") if p)])


def _only_pytest_runs(target: str) -> tuple[Any, str] | None:
    """(module, the test id prefix) when dotted ``target`` names what only pytest runs: a test function, a class that
    is no TestCase or what is in one, or a parametrized test (``mod.test_f[1-2]``); else None (unittest loads it)."""
    import importlib

    base = target.split("[", 1)[0]
    parts = base.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - unittest imports it again and reports it
            return None
        except BaseException as exc:  # noqa: B902 - a module that skipped itself: unittest's loader says so
            if pytest_outcomes.is_skip(exc):
                return None
            raise
        obj: Any = module
        for part in parts[cut:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return None
            if isinstance(obj, type) and not issubclass(obj, unittest.TestCase):
                return module, target  # a class pytest collects, or in one
        if "[" in target or callable(obj) and not isinstance(obj, type) and cut == len(parts) - 1:
            return module, target  # a function at the module's top: unittest would call it
        return None
    return None


def _load(target: str, root: Path, file_patterns: Sequence[str], loader: _Loader) -> tuple[list[unittest.TestCase],
                                                                                           tuple[Any, str] | None]:
    """:func:`load_target`'s tests, and (module, test id prefix) where the target names what only pytest runs."""
    path = Path(target)
    if path.is_dir():
        return discover(path, root, file_patterns, loader), None
    if target.endswith(".py") or ".py::" in target:
        target = _dotted(target, root)
    found = _only_pytest_runs(target) if "." in target else None
    if found is not None:
        loader.modules.append(found[0])
        return [], found
    try:
        return list(iter_tests(loader.loadTestsFromName(target))), None
    except BaseException as exc:  # noqa: B902 - pytest's outcomes derive from BaseException
        if pytest_outcomes.is_skip(exc):
            return [skipped_module(target, pytest_outcomes.skip_reason(exc))], None  # the module (or what was named)
        if isinstance(exc, (ImportError, AttributeError)) or not isinstance(exc, Exception):
            raise  # a name that is not there: the caller's usage error; Ctrl-C, SystemExit: as they are
        # the module raised while it was imported (a RuntimeError at its top, say): that module's error, with its
        # traceback, as discovery reports a folder's module that fails to import; the other targets still run
        failed, _ = unittest.loader._make_failed_import_test(target, loader.suiteClass)  # (suite, message)
        return list(iter_tests(failed)), None


def collect(targets: Sequence[str], folders: Sequence[str], root: Path,
            file_patterns: Sequence[str] = FILE_PATTERNS) -> list[unittest.TestCase]:
    """The tests of the targets given, else of the default folders. A target that cannot be loaded is a
    usage error that names it.

    Example::

        collect([], ["test_distributed"], Path.cwd())
    """
    from harness.runner.pytest_items import expand

    loader = _Loader()
    if not targets:
        found = [t for folder in folders for t in discover(folder, root, file_patterns, loader)]
        return expand(found, loader.modules, module_of)
    found = []
    parts: dict[str, list[str]] = {}  # module -> the test id prefixes its targets named (none: the whole module)
    whole: set[str] = set()
    for target in targets:
        try:
            tests, part = _load(target, root, file_patterns, loader)
        except (ImportError, AttributeError, FileNotFoundError) as exc:
            raise UsageError(f"{target}: {exc} (give a folder, a .py file, a dotted module[.Class[.method]] "
                             "importable from the current directory, or pytest's path.py::Class::test)") from None
        if part is not None:
            parts.setdefault(part[0].__name__, []).append(part[1])
            continue
        found += tests
        named_within = "." in target and not target.endswith(".py") and not Path(target).is_dir()
        for test in tests:
            module = sys.modules.get(module_of(test))
            if module is not None and not is_load_failure(test):
                if module not in loader.modules:
                    loader.modules.append(module)
                if named_within and module.__name__ != target:
                    parts.setdefault(module.__name__, []).append(target)
                else:
                    whole.add(module.__name__)
    expanded = expand(found, loader.modules, module_of)
    # what a target named within a module (a class, a test) keeps of the module pytest collected
    return [t for t in expanded if not (module_of(t) in parts and module_of(t) not in whole
                                        and not any(within(t.id(), p) for p in parts[module_of(t)]))]


def within(test_id: str, prefix: str) -> bool:
    """Whether ``prefix`` (a module, a class, a test, ``test_f`` of ``test_f[param]``) names ``test_id``."""
    return test_id == prefix or test_id.startswith(prefix + ".") or ("[" not in prefix and test_id.startswith(prefix + "["))


def module_matches(module: str, spec: str) -> bool:
    """Whether ``-i``/``-x`` ``spec`` names ``module``: the module or a package of it, its last part,
    a path to its file, or a shell pattern.

    Example::

        module_matches("test_distributed.test_pipeline", "test_pipe*")  # True
    """
    spec = spec.strip()
    if spec.endswith(".py"):
        spec = spec[:-3]
    spec = spec.strip("/").replace("/", ".").replace(os.sep, ".")
    if not spec:
        return False
    last = module.rsplit(".", 1)[-1]
    return (module == spec or module.startswith(spec + ".") or module.endswith("." + spec)
            or fnmatch.fnmatchcase(module, spec) or fnmatch.fnmatchcase(last, spec))


def id_matches(test_id: str, pattern: str) -> bool:
    """``-k``: the id contains ``pattern`` or matches it as a shell pattern."""
    return pattern in test_id or fnmatch.fnmatchcase(test_id, pattern)


def select(tests: Sequence[unittest.TestCase], patterns: Sequence[str] = (), include: Sequence[str] = (),
           exclude: Sequence[str] = ()) -> list[unittest.TestCase]:
    """The tests that ``-k`` (any pattern), ``-i`` (any module) and ``-x`` (none; wins over ``-i``) let
    through, in their order.

    Example::

        select(tests, patterns=["parity"], exclude=["test_pipeline"])
    """
    chosen = []
    for t in tests:
        module = module_of(t)
        if include and not any(module_matches(module, m) for m in include):
            continue
        if any(module_matches(module, m) for m in exclude):
            continue
        # A module that failed to import is never filtered out by -k: its tests are unknown.
        if patterns and not is_load_failure(t) and not any(id_matches(t.id(), p) for p in patterns):
            continue
        chosen.append(t)
    return chosen


def check_includes(tests: Sequence[unittest.TestCase], include: Sequence[str]) -> None:
    """A ``-i`` that names no discovered module is a typo, not an empty run: say which modules there are."""
    modules = {module_of(t) for t in tests}
    for spec in include:
        if not any(module_matches(m, spec) for m in modules):
            known = ", ".join(sorted(modules)) or "none"
            raise UsageError(f"-i {spec}: no discovered module matches (modules: {known})")


def shuffle(tests: Sequence[unittest.TestCase], seed: int) -> list[unittest.TestCase]:
    """A random order that keeps each class's tests together (so its setUpClass runs once): the classes
    shuffled, then the tests within each class. The same seed and test list give the same order.

    Example::

        shuffle(tests, seed=7)
    """
    rng = random.Random(seed)
    groups: dict[str, list[unittest.TestCase]] = collections.OrderedDict()
    for t in tests:
        key = f"{module_of(t)}.{type(t).__qualname__}" if not is_load_failure(t) else t.id()
        groups.setdefault(key, []).append(t)
    order = list(groups.values())
    rng.shuffle(order)
    for group in order:
        rng.shuffle(group)
    return [t for group in order for t in group]
