"""pytest's outcome exceptions (``pytest.skip``, ``pytest.xfail``, ``pytest.fail``, ``pytest.importorskip``) read as
the harness's outcomes, wherever a test raised one: in a rank, in a thread rank, in the parent.

pytest is never imported here: a test that raised one of them imported it, so where ``pytest`` is not in
``sys.modules`` nothing was raised that needs reading. The classes are pytest's public ones
(``pytest.skip.Exception``, ``pytest.xfail.Exception``, ``pytest.fail.Exception``); ``XFailed`` derives from
``Failed``, so xfail is asked first.

``pytest.exit()`` is no outcome of one test: it stops the run. Where pytest ran a test for a front end that is not
pytest (harness.runner.pytest_items), its ``Exit`` becomes :class:`PytestExit`, which stops the run as Ctrl-C does
(pytest handles its ``Exit`` with ``KeyboardInterrupt``), its words and exit code pytest.exit()'s.
"""
from __future__ import annotations

import re
import sys
import unittest
from typing import Any

from harness.shared.errors import StrictXPass
from harness.shared.status import Status

__all__ = ["outcome", "is_skip", "skip_reason", "StrictXPass", "raise_xfail", "xfail_reason", "PytestExit", "is_exit",
           "stop_if_exit", "exit_status"]


def _pytest() -> Any:
    return sys.modules.get("pytest")


def outcome(exc: BaseException | None) -> tuple[Status, str] | None:
    """What a pytest outcome exception means: ``(SKIPPED, reason)`` for ``pytest.skip``/``importorskip``,
    ``(XFAIL, reason)`` for ``pytest.xfail``, ``(FAILED, message)`` for ``pytest.fail``; None for anything else.

    Example::

        outcome(pytest.skip.Exception("needs 4 GPUs"))   # (Status.SKIPPED, "needs 4 GPUs")
    """
    pytest = _pytest()
    if pytest is None or exc is None:
        return None
    if isinstance(exc, pytest.skip.Exception):
        return Status.SKIPPED, _msg(exc)
    if isinstance(exc, pytest.xfail.Exception):
        return Status.XFAIL, _msg(exc)
    if isinstance(exc, pytest.fail.Exception):
        return Status.FAILED, _msg(exc)
    return None


def _msg(exc: BaseException) -> str:
    msg = getattr(exc, "msg", None)
    return str(msg) if msg is not None else str(exc)


def is_skip(exc: BaseException | None) -> bool:
    """unittest's ``SkipTest`` or pytest's ``pytest.skip``/``importorskip``."""
    if isinstance(exc, unittest.SkipTest):
        return True
    found = outcome(exc)
    return found is not None and found[0] == Status.SKIPPED


def skip_reason(exc: BaseException) -> str:
    """The reason of a skip exception of either kind (:func:`is_skip`)."""
    found = outcome(exc)
    return found[1] if found is not None else str(exc)


def raise_xfail(reason: str) -> None:
    """Raise pytest's xfail outcome in the parent (a rank called ``pytest.xfail``: pytest is importable there).
    pytest reports it as xfailed; the harness's front ends as an expected failure."""
    import pytest

    raise pytest.xfail.Exception(reason)


def xfail_reason(exc: BaseException | None) -> str | None:
    """The reason of an ``XFailed`` (``pytest.xfail``, or an xfail mark that held), else None."""
    found = outcome(exc)
    return found[1] if found is not None and found[0] == Status.XFAIL else None


#: pytest's exit code for a run pytest.exit() stopped without ``returncode=`` (``pytest.ExitCode.INTERRUPTED``)
PYTEST_INTERRUPTED = 2
_STOPPED = "stopped by pytest.exit("


class PytestExit(KeyboardInterrupt):
    """``pytest.exit(reason, returncode)`` called in a test or a fixture: the run stops, as pytest's stops (pytest
    handles its ``Exit`` where it handles Ctrl-C); ``str()`` is the report's words, which carry the exit code.

    Example::

        str(PytestExit("the database is down", 3))   # "stopped by pytest.exit('the database is down', returncode=3)"
    """

    def __init__(self, reason: str, returncode: int | None = None) -> None:
        self.reason = reason
        self.returncode = returncode
        code = "" if returncode is None else f", returncode={int(returncode)}"
        super().__init__(f"{_STOPPED}{reason!r}{code})")

    @property
    def code(self) -> int:
        """The exit code pytest ends with: ``returncode``, else pytest's for an interrupted run (2)."""
        return PYTEST_INTERRUPTED if self.returncode is None else int(self.returncode)


def is_exit(exc: BaseException | None) -> bool:
    """``exc`` is pytest's ``Exit`` (``pytest.exit()``)."""
    pytest = _pytest()
    return pytest is not None and exc is not None and isinstance(exc, pytest.exit.Exception)


def stop_if_exit(exc: BaseException | None) -> None:
    """Raise :class:`PytestExit` when ``exc`` is pytest's ``Exit``: a front end's result object calls it with an
    error a test raised itself (a ``TestCase`` test no pytest runs), so that ``pytest.exit()`` there stops the run too,
    as pytest's unittest support stops it."""
    if is_exit(exc):
        raise PytestExit(str(getattr(exc, "msg", exc)), getattr(exc, "returncode", None)) from exc


def exit_status(words: str) -> int | None:
    """The exit code of a run :class:`PytestExit` stopped, read back from its words (a run's ``interrupted``, handed
    on as text by the runner's processes); None for words of another stop.

    Example::

        exit_status("stopped by pytest.exit('down', returncode=3)")   # 3
    """
    if not words.startswith(_STOPPED):
        return None
    found = re.search(r", returncode=(-?\d+)\)$", words)
    return int(found.group(1)) if found else PYTEST_INTERRUPTED
