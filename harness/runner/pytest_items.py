"""pytest-style tests under the runner: what pytest collects in a test file that unittest does not, collected and run
by pytest inside the runner's process, each test reported as the runner's own.

A module is *pytest-style* when, once imported, it holds what pytest collects and unittest does not (a ``test_*``
function, a ``Test*`` class that is no ``TestCase``; the project's ``python_functions``/``python_classes``), or a
``TestCase`` test that needs pytest's fixtures (an argument, ``usefixtures``, an autouse fixture of its class, module
or a ``conftest.py``: harness.parent.pytest_fixtures). pytest collects such modules' files once
(:func:`expand`): every item becomes a test of the run, in pytest's order; a ``TestCase`` test that needs no fixture
stays the runner's own, every other item is a :class:`PytestTest`, which pytest runs. Modules that are not
pytest-style are left as unittest collected them, and pytest is not started for them.

The tests pytest runs share one pytest session, open while the runner runs all its tests (:func:`in_session`: its
``pytest_runtestloop`` runs the runner's suite), so a session or module fixture is set up once, as under pytest.
The distharness plugin is loaded there with the runner's run lent to it (its ranks, its notes): a harness class's
failure is its rank report, and its placement is the entry's. Each test's reports are judged as pytest's terminal
counts them (``pytest_report_teststatus``) and given to the runner's result as data.

A module's own ``run_tests()`` (harness.main) takes the same path for its module: :func:`expand` on what unittest
loaded from ``__main__`` (pytest's items named by that module), :func:`in_session` around unittest's run.

``pytest.exit()`` in a test or a fixture pytest runs here stops the run as it stops pytest's: pytest's ``Exit``
becomes harness.shared.pytest_outcomes.PytestExit, which unwinds the runner's suite as Ctrl-C does, its words the
report's and its exit code pytest's.

pytest's cache plugin stays on, with a cache directory of each run's own (:func:`_pytest_main`).

Without pytest such tests are skips that say pytest runs them.
"""
from __future__ import annotations

import ast
import dataclasses
import fnmatch
import functools
import importlib.util
import inspect
import os
import re
import sys
import unittest
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from harness.parent.pytest_fixtures import ini_values, needs_fixtures
from harness.parent.pytest_marks import marks_of
from harness.shared import pytest_outcomes
from harness.shared.status import Status

__all__ = ["Node", "PytestTest", "available", "pytest_style", "candidates", "hosted", "expand", "in_session",
           "judge", "folders_outside_packages"]

#: pytest's own options for the sessions the runner starts: the distharness plugin once (under its module's name,
#: whether or not an entry point would load it); the cache is the session's own (:func:`_pytest_main`)
_PLUGIN = "harness.pytest_plugin"
_INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED: Ctrl-C while pytest collected
_ARGS = ("-p", "no:distharness", "-p", _PLUGIN)


def available() -> bool:
    """pytest is importable here."""
    if "pytest" in sys.modules:
        return sys.modules["pytest"] is not None  # None: an import of it fails
    return importlib.util.find_spec("pytest") is not None


@dataclasses.dataclass(frozen=True)
class Node:
    """One item pytest collected, by its names: ``nodeid`` (``path::Class::test[param]``), the module, the class's
    qualified name ("" for a function) and the item's name (with its parameters)."""

    nodeid: str
    module: str
    cls: str
    name: str

    @property
    def test_id(self) -> str:
        """The runner's id: ``module.Class.name`` (``module.name`` for a function)."""
        return ".".join(p for p in (self.module, self.cls, self.name) if p)


class PytestTest(unittest.TestCase):
    """A test of the run that pytest runs: the runner's stand-in for a pytest item. Inside :func:`in_session` it
    runs there; elsewhere (no pytest, or no session) it is a skip, or an error, that says why."""

    #: harness.parent.pytest_marks leaves it alone: pytest reads its marks
    harness_pytest_item = True
    harness_unit = ""

    def __init__(self, node: Node, skip: str = "") -> None:
        super().__init__("_in_pytest")
        self.harness_node = node
        self._skip = skip

    def _in_pytest(self) -> None:
        if self._skip or not available():
            raise unittest.SkipTest(self._skip or f"pytest runs it: python -m pytest {self.harness_node.nodeid}")
        raise RuntimeError(f"pytest's run did not start, so it did not run (pytest said why above); run it with: "
                           f"python -m pytest {self.harness_node.nodeid}")

    def id(self) -> str:
        return self.harness_node.test_id

    def __str__(self) -> str:
        return self.harness_node.nodeid

    def __repr__(self) -> str:
        return f"<PytestTest {self.harness_node.nodeid}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PytestTest) and other.harness_node == self.harness_node

    def __hash__(self) -> int:
        return hash(self.harness_node)

    def run(self, result: Any = None) -> Any:
        session = _SESSION[0] if _SESSION else None
        if session is None or self._skip or result is None:
            return super().run(result)
        return session.run_test(self, result)


@functools.lru_cache(maxsize=None)
def _class_for(module: str, qualname: str) -> type:
    """The stand-ins' class for the items of one pytest class (or of one module's functions): named as it, so that
    sharding, ``-j`` and ``--shuffle`` keep it whole, and every report names its module."""
    name = qualname.rpartition(".")[2] or "functions"
    return type(name, (PytestTest,), {"__module__": module, "__qualname__": qualname or "<functions>",
                                      "harness_unit": f"{module}.{qualname}" if qualname else module})


def _stand_in(node: Node, skip: str = "") -> PytestTest:
    return _class_for(node.module, node.cls)(node, skip)


# ---- which modules are pytest-style -------------------------------------------------------------------------------


def _names(module: ModuleType) -> tuple[list[str], list[str]]:
    """The project's ``python_functions`` and ``python_classes`` (pytest's defaults: ``test``, ``Test``)."""
    path = getattr(module, "__file__", None)
    values = ini_values(Path(path).resolve().parent) if path else {}

    def split(value: Any, default: str) -> list[str]:
        items = value if isinstance(value, list) else str(value or "").split()
        return items or [default]

    return split(values.get("python_functions"), "test"), split(values.get("python_classes"), "Test")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    """pytest's rule for ``python_functions``/``python_classes``: a prefix, or a glob pattern."""
    return any(name.startswith(p) or (any(c in p for c in "*?[") and fnmatch.fnmatch(name, p)) for p in patterns)


def _pytest_only(module: ModuleType) -> list[str]:
    """What in ``module`` pytest collects and unittest does not: its test functions and non-TestCase test classes."""
    functions, classes = _names(module)
    found = []
    for name, obj in list(vars(module).items()):
        if getattr(obj, "__test__", True) is False:
            continue
        if inspect.isfunction(obj) and _matches(name, functions):
            found.append(name)
        elif inspect.isclass(obj) and not issubclass(obj, unittest.TestCase) and _matches(name, classes):
            found.append(name)
    return found


def _needs(test: unittest.TestCase) -> str | None:
    from harness.parent.pytest_fixtures import test_file

    return needs_fixtures(test, marks_of(test), test_file(test))


def pytest_style(module: ModuleType, tests: Sequence[unittest.TestCase]) -> bool:
    """Whether ``module`` (with ``tests``, its tests as unittest collected them) has a test only pytest runs right."""
    return bool(_pytest_only(module)) or any(_needs(t) is not None for t in tests)


# ---- collecting -------------------------------------------------------------------------------------------------------


class _Quiet:
    """In a pytest session of the runner's: no terminal reporter (the runner reports), its options still known."""

    @staticmethod
    def _silence(config: Any) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


class _Collector(_Quiet):
    """``pytest --collect-only``'s items, kept as :class:`Node`; each file's collection error."""

    def __init__(self, modules: dict[str, str]) -> None:
        self.modules = modules  # file -> module, as the runner imported it
        self.nodes: list[Node] = []
        self.errors: dict[str, str] = {}  # the nodeid of what failed to collect -> pytest's words
        self.collected = False

    def pytest_configure(self, config: Any) -> None:
        self._silence(config)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors[report.nodeid] = report.longreprtext

    def pytest_collection_finish(self, session: Any) -> None:
        self.nodes = [_node_of(item, self.modules) for item in session.items]
        self.collected = True


def _node_of(item: Any, modules: dict[str, str]) -> Node:
    """``item`` as a :class:`Node`, named by the module of its file in ``modules`` (file -> module: the name the
    front end imported it by, ``__main__`` under ``run_tests()``), else by the module pytest imported."""
    import pytest

    module = item.getparent(pytest.Module)
    cls = item.getparent(pytest.Class)
    name = modules.get(str(Path(str(item.path)).resolve()))
    if name is None:
        name = getattr(getattr(module, "obj", None), "__name__", None) if module is not None else None
    if name is None:  # an item of a collector of the project's own
        name = Path(str(item.path)).stem
    qualname = getattr(getattr(cls, "obj", None), "__qualname__", "") if cls is not None else ""
    return Node(item.nodeid, name, qualname, item.name)


def _pytest_main(args: list[str], plugin: Any) -> int:
    """``pytest.main`` with the runner's options, and a cache of its own: pytest's cache plugin stays on (the ``cache``
    fixture works, and a project's ``addopts`` may name ``--lf``/``--ff``/``--sw``), its directory a new one that is
    removed afterwards (``-o cache_dir``), as a fresh checkout's: nothing of the project's ``.pytest_cache`` is read or
    written (pytest's own runs keep it; the runner's select with ``-k``/``-i``)."""
    import shutil
    import tempfile

    import pytest

    cache = tempfile.mkdtemp(prefix="harness-pytest-cache-")
    try:
        return int(pytest.main([*args, *_ARGS, "-o", f"cache_dir={cache}"], plugins=[plugin]))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@dataclasses.dataclass
class _Module:
    module: ModuleType
    tests: list[unittest.TestCase]


def _file(module: ModuleType) -> str:
    return str(Path(module.__file__).resolve())  # type: ignore[arg-type]


def expand(found: Sequence[unittest.TestCase], modules: Sequence[ModuleType],
           module_of: Callable[[Any], str]) -> list[unittest.TestCase]:
    """``found`` (the tests unittest collected from ``modules``) with each pytest-style module's tests as pytest
    collects them: the TestCase tests that need no fixture the runner's own, every other item a :class:`PytestTest`.
    Without pytest, what only pytest runs is a skip that says so. ``module_of``: a test's module
    (harness.runner.selection's).

    Example::

        tests = expand(unittest_tests, loader.modules, module_of)
    """
    by_name: dict[str, _Module] = {}
    for module in modules:
        if getattr(module, "__file__", None) and module.__name__ not in by_name:
            by_name[module.__name__] = _Module(module, [])
    for test in found:
        entry = by_name.get(module_of(test))
        if entry is not None:
            entry.tests.append(test)
    styled = {name: m for name, m in by_name.items() if pytest_style(m.module, m.tests)}
    if not styled:
        return list(found)
    if not available():
        replaced = {name: _without_pytest(m) for name, m in styled.items()}
    else:
        replaced = _with_pytest(styled)
    out: list[unittest.TestCase] = []
    done: set[str] = set()
    for test in found:
        name = module_of(test)
        if name in replaced:
            if name not in done:
                done.add(name)
                out += replaced[name]
        else:
            out.append(test)
    out += [t for name, tests in replaced.items() if name not in done for t in tests]  # modules of no TestCase
    return out


def _without_pytest(m: _Module) -> list[unittest.TestCase]:
    """No pytest here: each test only pytest runs is a skip that says so (a function or class once: unparametrized)."""
    path = os.path.relpath(_file(m.module))
    out: list[unittest.TestCase] = []
    for test in m.tests:
        needs = _needs(test)
        if needs is None:
            out.append(test)
        else:
            node = Node(f"{path}::{type(test).__qualname__.replace('.', '::')}::{test._testMethodName}",
                        m.module.__name__, type(test).__qualname__, test._testMethodName)
            out.append(_stand_in(node, f"needs pytest, which is not installed: {needs.removeprefix('needs pytest: ')}"))
    for name in _pytest_only(m.module):
        node = Node(f"{path}::{name}", m.module.__name__, "", name)
        out.append(_stand_in(node, f"needs pytest, which is not installed: pytest runs it: python -m pytest {node.nodeid}"))
    return out


def _with_pytest(styled: dict[str, _Module]) -> dict[str, list[unittest.TestCase]]:
    files = {_file(m.module): name for name, m in styled.items()}
    host = _HOST[-1] if _HOST else None
    if host is not None and set(files) <= host.files:  # the session that imported them collected them
        collector: Any = host
    else:
        collector = _plugin(_Collector)(files)
        code = _pytest_main(["--collect-only", "--continue-on-collection-errors", *files], collector)
        if not collector.collected:  # pytest did not start (a usage error of the project's options): it said why
            collector.errors.update({f: f"pytest ended before it collected anything (exit code {code}; "
                                     "its message is above)" for f in files})
    replaced: dict[str, list[unittest.TestCase]] = {name: [] for name in styled}
    own = {name: {(type(t).__qualname__, t._testMethodName): t for t in m.tests if hasattr(t, "_testMethodName")}
           for name, m in styled.items()}
    used: set[int] = set()
    for node in collector.nodes:
        if node.module not in replaced:
            continue
        test = own[node.module].get((node.cls, node.name))
        if test is not None and _needs(test) is None:
            replaced[node.module].append(test)  # a TestCase test the runner runs itself
            used.add(id(test))
        else:
            if test is not None:
                used.add(id(test))
            replaced[node.module].append(_stand_in(node))
    for nodeid, text in collector.errors.items():  # a file pytest could not collect: an error of its own
        file = nodeid.split("::")[0]
        name = next((n for f, n in files.items() if f.endswith(os.sep + file) or f == file), None)
        if name is not None:
            error = type("CollectError", (_CollectError,), {"__module__": name, "harness_unit": name})
            replaced[name].append(error(Node(nodeid, name, "", "collect"), text))
    for name, m in styled.items():  # a TestCase test pytest did not collect: the runner's as before
        replaced[name] += [t for t in m.tests if id(t) not in used and _needs(t) is None]
    return replaced


class _CollectError(PytestTest):
    """A file, or part of it, that pytest could not collect: an error with pytest's words."""

    def __init__(self, node: Node, text: str) -> None:
        super().__init__(node)
        self._text = text

    def run(self, result: Any = None) -> Any:
        if result is None:
            return None
        result.startTest(self)
        try:
            add = getattr(result, "add_reported", None)
            if add is not None:
                add(self, Status.ERROR, texts=[(Status.ERROR, f"pytest could not collect {self.harness_node.nodeid}:"
                                                              f"\n{self._text}")])
            else:
                result.addError(self, (RuntimeError, RuntimeError(self._text), None))
        finally:
            result.stopTest(self)
        return result


# ---- running ----------------------------------------------------------------------------------------------------------


def judge(reports: Sequence[Any], config: Any) -> tuple[Status, str, list[tuple[Status, str]]]:
    """One test's verdict from its reports (set-up, call, tear-down), as pytest's terminal counts them: (status,
    reason, the failure texts). A failing call is FAILED (a strict XPASS: XPASS); an error in set-up or tear-down
    is ERROR; a non-strict XPASS is a pass whose reason says so (pytest counts it apart, and fails no run on it).

    Example::

        status, reason, texts = judge(reports, item.config)
    """
    main: tuple[Any, str] | None = None
    errors: list[tuple[Status, str]] = []
    for rep in reports:
        category = config.hook.pytest_report_teststatus(report=rep, config=config)[0]
        if category == "error" or (rep.failed and rep.when != "call"):
            errors.append((Status.ERROR, _text(rep, f"error in {rep.when}")))
        elif rep.when == "call" or (rep.when == "setup" and rep.skipped):
            main = (rep, category)
    if main is not None and main[0].failed:
        rep = main[0]
        if rep.longreprtext.startswith("[XPASS(strict)]"):
            return Status.XPASS, rep.longreprtext.removeprefix("[XPASS(strict)] "), [(Status.XPASS, _text(rep))]
        return Status.FAILED, "", [(Status.FAILED, _text(rep)), *errors]
    if errors:
        return Status.ERROR, "", errors
    if main is None:
        return Status.PASSED, "", []
    rep, category = main
    if category == "xfailed" or (rep.skipped and hasattr(rep, "wasxfail")):
        return Status.XFAIL, str(rep.wasxfail), []
    if rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3 else rep.longreprtext
        return Status.SKIPPED, str(reason).removeprefix("Skipped: "), []
    if category == "xpassed" or hasattr(rep, "wasxfail"):
        return Status.PASSED, f"XPASS (not strict): {rep.wasxfail}", []
    return Status.PASSED, "", []


def _text(rep: Any, title: str = "") -> str:
    """A report's failure as pytest words it, with the output it captured."""
    parts = [f"[{title}]"] if title else []
    parts.append(rep.longreprtext.rstrip())
    for name, content in rep.sections:
        if name.startswith("Captured") and content.strip():
            parts.append(f"{'-' * 20} {name} {'-' * 20}\n{content.rstrip()}")
    return "\n".join(parts)


def _output(reports: Sequence[Any]) -> str:
    """What a test printed: the last report's sections hold every phase's."""
    return "".join(content for name, content in (reports[-1].sections if reports else ())
                   if name.startswith("Captured") and content.strip())


def _distharness(config: Any) -> Any:
    """The distharness plugin of a session of the runner's (harness.pytest_plugin, loaded by :data:`_ARGS`), found as
    pytest's plugins find each other: by its name."""
    return config.pluginmanager.get_plugin(_PLUGIN)


#: the session the stand-ins run in while :func:`in_session` runs the runner's tests (none: a skip or an error)
_SESSION: list[_Session] = []
#: the session :func:`hosted` opened before the run's collection, while it is open
_HOST: list[_Session] = []


class _Session(_Quiet):
    """The pytest session of one run: the items of the stand-ins, each run when the runner's suite reaches it."""

    def __init__(self, tests: list[PytestTest], run: Any, body: Callable[[], Any], files: Sequence[str] = (),
                 hosting: bool = False) -> None:
        self.run = run
        self.body = body
        self.files = set(files)
        self.hosting = hosting  # opened before the run's collection (:func:`hosted`): every item kept
        self.items: dict[str, Any] = {}
        self.nodes: list[Node] = []  # every item collected, in pytest's order
        self.errors: dict[str, str] = {}
        self.raised: BaseException | None = None
        self.value: Any = None
        self.entered = False
        self.config: Any = None
        self._reports: list[Any] | None = None
        self.bind(tests, run)

    def bind(self, tests: list[PytestTest], run: Any) -> None:
        """The stand-ins to run, in this order, and the runner's run, lent to the distharness plugin."""
        self.tests = tests
        self.wanted = {t.harness_node.nodeid: n for n, t in enumerate(tests)}
        self.order = [t.harness_node.nodeid for t in tests if t.harness_node.nodeid in self.items]
        self.position = {nodeid: n for n, nodeid in enumerate(self.order)}
        self.run = run
        if self.config is not None and run is not None:
            _distharness(self.config).lend_run(self.config, run)

    def pytest_configure(self, config: Any) -> None:
        self._silence(config)
        self.config = config
        self.bind(self.tests, self.run)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.errors[report.nodeid] = report.longreprtext

    def modify_items(self, config: Any, items: list[Any]) -> None:
        """pytest's items cut to the stand-ins', in their order (last: after the project's own hooks); a session
        opened before the collection keeps them all (the runner selects later)."""
        if self.hosting:
            return
        keep = sorted((i for i in items if i.nodeid in self.wanted), key=lambda i: self.wanted[i.nodeid])
        dropped = [i for i in items if i.nodeid not in self.wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def loop(self, session: Any) -> bool:
        """pytest's run loop: the runner's suite, which runs each stand-in's item as it comes (first: instead of
        pytest's own loop)."""
        self.items = {item.nodeid: item for item in session.items}
        self.nodes = [_node_of(item, {}) for item in session.items]
        self.bind(self.tests, self.run)
        self.entered = True
        stack = _HOST if self.hosting else _SESSION
        stack.append(self)
        try:
            self._release_terminal()
            self.value = self.body()
        except BaseException as exc:  # noqa: B902 - Ctrl-C, SIGTERM: raised again once pytest has torn down
            self.raised = exc
        finally:
            stack.remove(self)
        return True

    def _release_terminal(self) -> None:
        """Between pytest's items its capture keeps stdin (it suspends only the output): the runner's own tests, and a
        rank's debugger prompt (harness.parent.relay), get the terminal back."""
        capman = self.config.pluginmanager.get_plugin("capturemanager") if self.config is not None else None
        if capman is not None:
            capman.suspend_global_capture(in_=True)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self._reports is not None:
            self._reports.append(report)

    def _next(self, nodeid: str) -> Any:
        """The item that runs after ``nodeid``'s: pytest tears down the fixtures it does not share."""
        at = self.position[nodeid] + 1
        return self.items[self.order[at]] if at < len(self.order) else None

    def run_test(self, test: PytestTest, result: Any) -> Any:
        nodeid = test.harness_node.nodeid
        item = self.items.get(nodeid)
        result.startTest(test)
        reports: list[Any] = []
        try:
            if item is None:
                why = next((t for k, t in self.errors.items() if nodeid.startswith(k)), "")
                result.add_reported(test, Status.ERROR, texts=[(Status.ERROR, f"pytest did not collect {nodeid} in "
                                                                              f"this run{': ' + why if why else ''}")])
                return result
            self._reports = reports
            try:
                item.ihook.pytest_runtest_protocol(item=item, nextitem=self._next(nodeid))
            except Exception as exc:  # pytest re-raises only its Exit (pytest.exit()) from a test's protocol
                if not pytest_outcomes.is_exit(exc):
                    raise
                self._stopped(test, result, reports, exc)
            finally:
                self._reports = None
                self._release_terminal()
            # (Ctrl-C in it: no verdict, the runner's result marks it interrupted)
            status, reason, texts = judge(reports, item.config)
            result.add_reported(test, status, reason, texts, record=_distharness(item.config).record_of(item),
                                output=_output(reports))
        finally:
            result.stopTest(test)
        return result


    def _stopped(self, test: PytestTest, result: Any, reports: list[Any], exc: Any) -> None:
        """``pytest.exit()`` in the test or a fixture: the verdict its call already had (pytest counts a call that
        passed before a tear-down called it), else none (the runner's result marks it interrupted); then the run
        stops, as pytest's does: :class:`PytestExit` unwinds the runner's suite as Ctrl-C does, once pytest has torn
        its fixtures down."""
        if any(rep.when == "call" or rep.failed or rep.skipped for rep in reports):
            status, reason, texts = judge(reports, self.config)
            result.add_reported(test, status, reason, texts, output=_output(reports))
        pytest_outcomes.stop_if_exit(exc)


@functools.lru_cache(maxsize=None)
def _plugin(base: type) -> type:
    """``base`` with its hooks' order marked, made where pytest is imported (a run of no pytest-style test never
    imports it): its configuration after the terminal reporter's (which it removes), its cut of the items after the
    project's own, its run loop instead of pytest's."""
    import pytest

    class Plugin(base):  # type: ignore[valid-type, misc]
        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config: Any) -> None:
            base.pytest_configure(self, config)

        if hasattr(base, "loop"):
            @pytest.hookimpl(trylast=True)
            def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
                self.modify_items(config, items)

            @pytest.hookimpl(tryfirst=True)
            def pytest_runtestloop(self, session: Any) -> bool:
                return self.loop(session)

    Plugin.__name__ = Plugin.__qualname__ = base.__name__
    return Plugin


def in_session(tests: Sequence[unittest.TestCase], run: Any, body: Callable[[], None], capture: bool = True) -> None:
    """Call ``body`` (which runs ``tests`` through the runner's result) inside one pytest session that holds the items
    of the :class:`PytestTest` among them, so that each runs there; without such tests, or without pytest, just
    ``body``. What ``body`` raised (Ctrl-C) is raised again once pytest has torn its fixtures down.

    Example::

        in_session(tests, run, lambda: unittest.TestSuite(tests).run(result))
    """
    mine = [t for t in tests if isinstance(t, PytestTest) and not isinstance(t, _CollectError) and not t._skip]
    if not mine or not available():
        body()
        return
    host = _HOST[-1] if _HOST else None
    if host is not None and all(t.harness_node.nodeid in host.items for t in mine):
        host.bind(mine, run)  # the session the run's collection was made in runs them
        _SESSION.append(host)
        try:
            body()
        finally:
            _SESSION.remove(host)
        return
    files = list(dict.fromkeys(_source(t) for t in mine))
    session = _plugin(_Session)(mine, run, body)
    args = ["--continue-on-collection-errors", *([] if capture else ["--capture=no"]), *files]
    code = _pytest_main(args, session)
    if not session.entered:  # pytest stopped before running anything: Ctrl-C, or a usage error of the project's
        if code == _INTERRUPTED:
            raise KeyboardInterrupt
        body()
    if session.raised is not None:
        raise session.raised


def _source(test: PytestTest) -> str:
    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None)
    return str(Path(path).resolve()) if path else test.harness_node.nodeid.split("::")[0]


# ---- one session for the whole run ---------------------------------------------------------------------------------

#: a first look at a file's text: what may be pytest-style (read further by :func:`_reads_pytest_style`); literal
#: starts, which the regular expression engine finds fast
_MAYBE = re.compile(r"\n(?:async\s+)?def\s+test|\nclass\s+Test\w*\s*(?::|\(\s*(?:object\s*)?\)\s*:)|@(?:pytest\.)?fixture"
                    r"|usefixtures")


def _decorated_fixture(node: ast.AST) -> bool:
    for deco in getattr(node, "decorator_list", ()):
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("fixture", "usefixtures") or (isinstance(target, ast.Attribute)
                                                  and getattr(target, "attr", "") == "usefixtures"):
            return True
    return False


def _reads_pytest_style(path: str) -> bool:
    """Whether a file's text holds what only pytest runs: a test function, a ``Test*`` class of no base, a fixture or
    ``usefixtures``. A guess that costs no import: a file it misses is still found once imported (:func:`expand`),
    at the cost of a second pytest run."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return False
    if not _MAYBE.search("\n" + text):
        return False
    try:
        tree = ast.parse(text, path)
    except (SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (node.name.startswith("test")
                                                                          or _decorated_fixture(node)):
            return True
        if isinstance(node, ast.ClassDef):
            if node.name.startswith("Test") and all(getattr(b, "id", "") == "object" for b in node.bases):
                return True
            if _decorated_fixture(node):
                return True
            maybe_tests = node.name.startswith("Test") or any("Test" in ast.unparse(b) or "Case" in ast.unparse(b)
                                                              for b in node.bases)
            for member in node.body if maybe_tests else ():
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and _decorated_fixture(member):
                    return True
    return False


def candidates(targets: Sequence[str], folders: Sequence[str], root: Path, patterns: Sequence[str]) -> list[str]:
    """The files of a run (its targets, else its folders, walked as unittest's discovery walks them) that read as
    pytest-style, or that a ``conftest.py`` with an autouse fixture governs."""
    from harness.parent.pytest_fixtures import conftest_autouse

    files: list[str] = []
    for where in targets or folders:
        name = where.partition("::")[0]
        path = Path(name) if targets else root / name
        if path.is_file() and path.suffix == ".py":
            files.append(str(path.resolve()))
        elif path.is_dir():
            files += _walk(path.resolve(), patterns)
    found = []
    autouse: dict[Path, bool] = {}
    for file in dict.fromkeys(files):
        folder = Path(file).parent
        if folder not in autouse:
            autouse[folder] = bool(conftest_autouse(folder))
        if autouse[folder] or _reads_pytest_style(file):
            found.append(file)
    return found


def _walk(start: Path, patterns: Sequence[str]) -> list[str]:
    """The test files a folder's discovery imports under ``start`` (harness.runner.selection.discover): those of
    every folder pytest enters."""
    out = []
    for folder in [start, *(d for d in _below(start))]:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        out += [str(folder / n) for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)
                and (folder / n).is_file()]
    return out


#: the folders pytest does not enter unless told (its ``norecursedirs`` default)
NORECURSE = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}", "__pycache__")


def _below(start: Path) -> list[Path]:
    """Every folder under ``start`` that pytest enters: not one of the project's ``norecursedirs`` (else pytest's
    default), nor a virtual environment."""
    values = ini_values(start)
    skip = values.get("norecursedirs")
    skip = (skip if isinstance(skip, list) else str(skip).split()) if skip else list(NORECURSE)
    found = []
    for dirpath, dirnames, _ in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if not any(fnmatch.fnmatch(d, p) for p in (*skip, "__pycache__"))
                             and not (Path(dirpath, d) / "pyvenv.cfg").is_file())
        found += [Path(dirpath, d) for d in dirnames]
    return found


def folders_outside_packages(start: Path) -> list[Path]:
    """The folders under ``start`` that pytest enters and unittest's discovery does not: those that are no package
    (unittest's discovery enters only packages), each discovered on its own, its files by their bare names.

    Example::

        folders_outside_packages(Path("tests"))   # [PosixPath('tests/unit'), ...] where tests/unit has no __init__.py
    """
    return [d for d in _below(start) if not (d / "__init__.py").is_file()]


def hosted(targets: Sequence[str], folders: Sequence[str], root: Path, patterns: Sequence[str], fn: Callable[[], Any],
           capture: bool = True) -> Any:
    """``fn()`` (a run's collection and its tests), inside one pytest session that has first collected the run's
    files that read as pytest-style (:func:`candidates`): pytest imports them as it would (its assertions rewritten,
    its ``conftest.py`` files first), :func:`expand` takes its items, :func:`in_session` runs them there. Without
    such files, or without pytest, just ``fn()``.

    Example::

        code = hosted(options.targets, options.folders, options.root, options.file_patterns, lambda: run(options))
    """
    if not available():
        return fn()
    files = candidates(targets, folders, root, patterns)
    if not files:
        return fn()
    host = _plugin(_Session)([], None, fn, files=files, hosting=True)
    code = _pytest_main(["--continue-on-collection-errors", *([] if capture else ["--capture=no"]), *files], host)
    if not host.entered:  # pytest stopped before its run loop: Ctrl-C, or a usage error of the project's options
        if code == _INTERRUPTED:
            raise KeyboardInterrupt
        return fn()
    if host.raised is not None:
        raise host.raised
    return host.value
