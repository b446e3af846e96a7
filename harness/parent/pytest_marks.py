"""pytest's marks and outcomes honoured by the front ends that are not pytest (the runner, ``run_tests()``).

Wherever pytest is importable, :func:`honoured` makes each test of a suite run as pytest would run it:

- ``@pytest.mark.skip``/``skipif`` (a bool with ``reason=``, or a string evaluated as pytest evaluates it: the
  test function's globals plus ``os``, ``sys``, ``platform`` and ``config``) and ``@pytest.mark.xfail``
  (``reason``, ``strict``, ``raises``, ``run=False``, a condition), on the test function, its class (and the
  classes it derives from) and its module's ``pytestmark`` (a mark or a list), closest first, as pytest's
  ``iter_markers`` reads them; each reason in pytest's words;
- ``pytest.skip()``, ``pytest.xfail()`` and ``pytest.fail()`` raised by the test (in this process, or a rank's
  outcome raised here by harness.judging.report) read as unittest's skip, expected failure and failure;
- a test that needs pytest's fixtures (arguments beyond ``self``, ``@pytest.mark.usefixtures``, an autouse
  fixture of its class, its module or a ``conftest.py`` beside it or above it) is not run wrong: it is a skip
  that says "needs pytest" and the command that runs it.

Under pytest nothing here runs: pytest reads its own marks. Marks are read through their public attributes
(``pytestmark``, ``Mark.name``/``.args``/``.kwargs``); pytest's outcome classes through ``pytest.skip.Exception``
and friends (harness.shared.pytest_outcomes); the fixtures a test needs, and the project's pytest configuration,
by harness.parent.pytest_fixtures.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import platform
import sys
import unittest
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from harness.parent.pytest_fixtures import ini_values, needs_fixtures, strict_default, test_file
from harness.shared import pytest_outcomes
from harness.shared.status import Status

__all__ = ["honoured", "available", "Decision", "Xfail", "decide", "marks_of", "xfail_of_rank_failure"]

# Frames of this module are hidden from unittest's tracebacks.
__unittest = True


def available() -> bool:
    """pytest is importable here (it is not imported: a test that uses its marks imported it already)."""
    return "pytest" in sys.modules or importlib.util.find_spec("pytest") is not None


# ---- reading the marks --------------------------------------------------------------------------------------


def _unpacked(found: Any) -> list[Any]:
    """A ``pytestmark`` value (a mark, a mark decorator, or a list of them) as a list of ``Mark``s."""
    if found is None:
        return []
    items = found if isinstance(found, (list, tuple)) else [found]
    marks = []
    for item in items:
        mark = getattr(item, "mark", item)  # a MarkDecorator holds its Mark
        if isinstance(getattr(mark, "name", None), str) and hasattr(mark, "args") and hasattr(mark, "kwargs"):
            marks.append(mark)
    return marks


def _function(test: unittest.TestCase) -> Any:
    return getattr(type(test), test._testMethodName, None)


def marks_of(test: unittest.TestCase, *, function: bool = True) -> list[Any]:
    """The pytest marks that apply to ``test``, closest first: its function's, its class's (and those of the
    classes it derives from, each its own), its module's ``pytestmark``.

    Example::

        [m.name for m in marks_of(test)]   # ['xfail', 'skipif']
    """
    marks = _unpacked(getattr(_function(test), "pytestmark", None)) if function else []
    for klass in type(test).__mro__:
        marks += _unpacked(klass.__dict__.get("pytestmark"))
    module = sys.modules.get(type(test).__module__)
    marks += _unpacked(getattr(module, "pytestmark", None))
    return marks


# ---- pytest's rules for skip, skipif and xfail ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Xfail:
    """An xfail mark that holds for a test: pytest's ``Xfail``."""

    reason: str
    run: bool
    strict: bool
    raises: Any


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a test's marks and fixtures say before it runs: skip it (``skip``, the reason), expect it to fail
    (``xfail``), or fail it at once (``error``: a condition that cannot be evaluated, in pytest's words)."""

    skip: str | None = None
    xfail: Xfail | None = None
    error: str | None = None


class _Config:
    """What a string condition's ``config`` is outside pytest: no command-line option was given (``getoption``
    returns its default), and the ini values of the project's pytest configuration (``getini``)."""

    def __init__(self, start: Path | None) -> None:
        self._start = start

    def getoption(self, name: str, default: Any = None, skip: bool = False) -> Any:  # noqa: ARG002 - pytest's
        return default

    def getini(self, name: str) -> Any:
        return ini_values(self._start).get(name, "")


def _globals(test: unittest.TestCase, start: Path | None) -> dict[str, Any]:
    """A string condition's namespace, as pytest builds it: os, sys, platform, config, then the test function's
    globals (those of the module that defines it)."""
    namespace: dict[str, Any] = {"os": os, "sys": sys, "platform": platform, "config": _Config(start)}
    fn = _function(test)
    found = getattr(fn, "__globals__", None)
    if found is None:
        found = vars(sys.modules[type(test).__module__]) if type(test).__module__ in sys.modules else {}
    namespace.update(found)
    return namespace


class _Unevaluable(Exception):
    """A skipif or xfail condition pytest would fail the test on: the message is pytest's."""


def _condition(mark: Any, condition: Any, namespace: Callable[[], dict[str, Any]]) -> tuple[bool, str]:
    """pytest's ``evaluate_condition``: (holds, reason)."""
    import traceback

    if isinstance(condition, str):
        try:
            result = eval(compile(condition, f"<{mark.name} condition>", "eval"), namespace())
        except SyntaxError as exc:
            raise _Unevaluable("\n".join([f"Error evaluating {mark.name!r} condition", "    " + condition,
                                          "    " + " " * (exc.offset or 0) + "^", "SyntaxError: invalid syntax"]))
        except Exception as exc:
            raise _Unevaluable("\n".join([f"Error evaluating {mark.name!r} condition", "    " + condition,
                                          *traceback.format_exception_only(exc)]).rstrip())
    else:
        try:
            result = bool(condition)
        except Exception as exc:
            raise _Unevaluable("\n".join([f"Error evaluating {mark.name!r} condition as a boolean",
                                          *traceback.format_exception_only(exc)]).rstrip())
    reason = mark.kwargs.get("reason", None)
    if reason is None:
        if not isinstance(condition, str):
            raise _Unevaluable(f"Error evaluating {mark.name!r}: you need to specify reason=STRING when using "
                               "booleans as conditions.")
        reason = "condition: " + condition
    return bool(result), reason


def _conditions(mark: Any) -> tuple[Any, ...]:
    return (mark.kwargs["condition"],) if "condition" in mark.kwargs else tuple(mark.args)


def _skip(marks: list[Any], namespace: Callable[[], dict[str, Any]]) -> str | None:
    """pytest's ``evaluate_skip_marks``: the reason to skip, or None."""
    for mark in (m for m in marks if m.name == "skipif"):
        conditions = _conditions(mark)
        if not conditions:
            return mark.kwargs.get("reason", "")
        for condition in conditions:
            holds, reason = _condition(mark, condition, namespace)
            if holds:
                return reason
    for mark in (m for m in marks if m.name == "skip"):
        def reason_of(reason: str = "unconditional skip") -> str:
            return reason

        try:
            return reason_of(*mark.args, **mark.kwargs)
        except TypeError as exc:
            raise _Unevaluable(f"{exc} - maybe you meant pytest.mark.skipif?") from None
    return None


def _xfail(marks: list[Any], namespace: Callable[[], dict[str, Any]], start: Path | None) -> Xfail | None:
    """pytest's ``evaluate_xfail_marks``: the xfail that holds, or None."""
    for mark in (m for m in marks if m.name == "xfail"):
        run = mark.kwargs.get("run", True)
        strict = mark.kwargs.get("strict")
        if strict is None:
            strict = strict_default(start)
        raises = mark.kwargs.get("raises", None)
        conditions = _conditions(mark)
        if not conditions:
            return Xfail(mark.kwargs.get("reason", ""), run, strict, raises)
        for condition in conditions:
            holds, reason = _condition(mark, condition, namespace)
            if holds:
                return Xfail(reason, run, strict, raises)
    return None


def decide(test: unittest.TestCase) -> Decision:
    """What ``test``'s marks and fixtures say, evaluated now (as pytest evaluates them at the test's set-up).

    Example::

        decide(test).skip   # 'needs 4 GPUs'
    """
    start = test_file(test)
    start_dir = start.parent if start is not None else None
    marks = marks_of(test)
    cache: list[dict[str, Any]] = []

    def namespace() -> dict[str, Any]:
        if not cache:
            cache.append(_globals(test, start_dir))
        return cache[0]

    try:
        reason = _skip(marks, namespace)
        if reason is not None:
            return Decision(skip=reason)
        needs = needs_fixtures(test, marks, start)
        if needs:
            return Decision(skip=needs)
        return Decision(xfail=_xfail(marks, namespace, start_dir))
    except _Unevaluable as exc:
        return Decision(error=str(exc))


# ---- running a test as its marks say -----------------------------------------------------------------------------


def _exc_info(exc: BaseException) -> tuple[type[BaseException], BaseException, Any]:
    return type(exc), exc, exc.__traceback__


def _raises_match(exc: BaseException, raises: Any) -> bool:
    """An xfail's ``raises=`` against what the test raised: its class, or a rank's failure by the classes of the
    rank's exception (``exc_types``, set by harness.judging.report)."""
    if raises is None:
        return True
    if not isinstance(raises, (type, tuple)) and callable(getattr(raises, "matches", None)):
        return bool(raises.matches(exc))  # pytest.RaisesExc
    types = raises if isinstance(raises, tuple) else (raises,)
    names = getattr(exc, "exc_types", None)
    if names:  # a rank's failure raised here: the rank's exception is the one to match
        return any(f"{t.__module__}.{t.__qualname__}" in names for t in types)
    return isinstance(exc, types)


def xfail_of_rank_failure(marks: list[Any], namespace: dict[str, Any], error: BaseException) -> str | None:
    """Under pytest: the reason of the xfail among ``marks`` whose ``raises=`` names the class of the exception a
    rank raised (``error``: the RankFailure or RankError the parent raised for it), else None. pytest matches
    ``raises=`` against the parent's exception, which is never the rank's class (the pytest plugin asks this).

    Example::

        xfail_of_rank_failure(list(item.iter_markers("xfail")), namespace, error)   # 'gloo lacks it'
    """
    try:
        found = _xfail(marks, lambda: namespace, None)
    except _Unevaluable:
        return None
    if found is None or found.raises is None or not getattr(error, "exc_types", None):
        return None
    return found.reason if _raises_match(error, found.raises) else None


def _xfailed(reason: str, cause: BaseException | None = None) -> BaseException:
    import pytest

    exc = pytest.xfail.Exception(reason)
    exc.__cause__ = cause
    return exc


class _Outcomes:
    """unittest's result as one test's run sees it: pytest's outcome exceptions read as unittest's outcomes, and
    the test's xfail applied; everything else goes to the result as it came."""

    def __init__(self, result: Any, test: unittest.TestCase, xfail: Xfail | None) -> None:
        self._result = result
        self._test = test
        self._xfail = xfail
        self._running = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)

    @property
    def wrapped_result(self) -> Any:
        """The result this one passes to (the harness fails a test that already ran there: HARNESS_ENV_CHANGED=fail)."""
        return self._result

    def _own(self, test: Any) -> bool:
        return self._running and test is self._test

    def _problem(self, test: Any, err: Any, add: Callable[[Any, Any], None]) -> None:
        if not self._own(test):
            add(test, err)
            return
        exc = err[1]
        found = pytest_outcomes.outcome(exc)
        if found is not None and found[0] == Status.SKIPPED:
            self._result.addSkip(test, found[1])
        elif found is not None and found[0] == Status.XFAIL:
            self._result.addExpectedFailure(test, err)
        elif self._xfail is not None and _raises_match(exc, self._xfail.raises):  # pytest.fail() too, as pytest
            self._result.addExpectedFailure(test, _exc_info(_xfailed(self._xfail.reason, exc)))
        elif found is not None:  # pytest.fail(): a failure, not an error
            self._result.addFailure(test, err)
        else:
            add(test, err)

    def addError(self, test: Any, err: Any) -> None:  # noqa: N802 - unittest's names
        self._problem(test, err, self._result.addError)

    def addFailure(self, test: Any, err: Any) -> None:  # noqa: N802
        self._problem(test, err, self._result.addFailure)

    def addSuccess(self, test: Any) -> None:  # noqa: N802
        if self._own(test) and self._xfail is not None and self._xfail.strict:
            self._result.addFailure(test, _exc_info(pytest_outcomes.StrictXPass(self._xfail.reason)))
            return
        self._result.addSuccess(test)  # a non-strict xfail that passed: pytest's XPASS, which is no failure

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:  # noqa: N802
        if err is not None and pytest_outcomes.is_skip(err[1]):
            self._result.addSkip(subtest, pytest_outcomes.skip_reason(err[1]))
            return
        self._result.addSubTest(test, subtest, err)


def _skip_stub(method: Any, reason: str) -> Any:
    """The test method as unittest's own skip decorator leaves it: the test and the harness's classes then skip it
    the way they skip ``@unittest.skip`` (counted where the reason means "needs a GPU")."""
    @functools.wraps(method)
    def skipped(*args: Any, **kwargs: Any) -> None:
        raise unittest.SkipTest(reason)

    skipped.__unittest_skip__ = True  # type: ignore[attr-defined]
    skipped.__unittest_skip_why__ = reason  # type: ignore[attr-defined]
    return skipped


def _run(test: unittest.TestCase, original: Callable[..., Any], result: Any = None) -> Any:
    """``test.run(result)`` as pytest would run the test: its marks decided first."""
    if result is None:
        return original(result)
    decision = decide(test)
    if decision.error is not None:  # pytest fails the test at its set-up, in these words
        import pytest

        result.startTest(test)
        try:
            result.addError(test, _exc_info(pytest.fail.Exception(decision.error, pytrace=False)))
        finally:
            result.stopTest(test)
        return result
    if decision.xfail is not None and not decision.xfail.run:
        result.startTest(test)
        try:
            result.addExpectedFailure(test, _exc_info(_xfailed("[NOTRUN] " + decision.xfail.reason)))
        finally:
            result.stopTest(test)
        return result
    outcomes = _Outcomes(result, test, decision.xfail)
    name = test._testMethodName
    missing = object()
    saved = test.__dict__.get(name, missing)
    if decision.skip is not None:
        test.__dict__[name] = _skip_stub(getattr(test, name), decision.skip)
    if decision.xfail is not None:
        test._harness_xfail = True  # type: ignore[attr-defined]  # its failure is expected: triage leaves it alone
    try:
        return original(outcomes)
    finally:
        outcomes._running = False
        test.__dict__.pop("_harness_xfail", None)
        if decision.skip is not None:
            if saved is missing:
                test.__dict__.pop(name, None)
            else:
                test.__dict__[name] = saved


def _tests(suite: Any) -> Iterator[unittest.TestCase]:
    if isinstance(suite, unittest.TestSuite):
        for item in suite:
            yield from _tests(item)
    elif isinstance(suite, unittest.TestCase):
        yield suite
    elif isinstance(suite, Iterable) and not isinstance(suite, (str, bytes)):
        for item in suite:
            yield from _tests(item)


def _class_skip(test: unittest.TestCase) -> str | None:
    """The skip its class's and module's marks give every test of ``test``'s class, decided before the class's
    ``setUpClass`` (which pytest does not run for a class its marks skip); None when they give none, or when a
    condition cannot be evaluated (each test then fails with pytest's words)."""
    start = test_file(test)
    namespace = functools.partial(_globals, test, start.parent if start is not None else None)
    try:
        return _skip(marks_of(test, function=False), namespace)
    except _Unevaluable:
        return None


@contextlib.contextmanager
def honoured(tests: Any) -> Iterator[None]:
    """While the block runs ``tests`` (a suite, a list, a test), each runs as pytest's marks say (see the module's
    docstring); everything is put back afterwards. Nothing happens where pytest is not importable.

    Example::

        with honoured(tests):
            unittest.TestSuite(tests).run(result)
    """
    if not available():
        yield
        return
    undo: list[Callable[[], None]] = []
    seen: set[type] = set()
    try:
        for test in _tests(tests):
            if (type(test).__name__ in ("_FailedTest", "ModuleSkipped") or "run" in test.__dict__
                    or getattr(test, "harness_pytest_item", False)):  # pytest runs it and reads its marks itself
                continue
            cls = type(test)
            if cls not in seen:
                seen.add(cls)
                reason = _class_skip(test) if "pytest" in sys.modules else None
                if reason is not None and not cls.__dict__.get("__unittest_skip__", False):
                    had = {k: cls.__dict__[k] for k in ("__unittest_skip__", "__unittest_skip_why__") if k in cls.__dict__}
                    cls.__unittest_skip__ = True  # as @unittest.skip on the class: its setUpClass does not run either
                    cls.__unittest_skip_why__ = reason
                    undo.append(functools.partial(_restore_class, cls, had))
            test.run = functools.partial(_run, test, test.run)  # type: ignore[method-assign]
            undo.append(functools.partial(test.__dict__.pop, "run", None))
        yield
    finally:
        for step in reversed(undo):
            step()


def _restore_class(cls: type, had: dict[str, Any]) -> None:
    for key in ("__unittest_skip__", "__unittest_skip_why__"):
        if key in had:
            setattr(cls, key, had[key])
        elif key in cls.__dict__:
            delattr(cls, key)
