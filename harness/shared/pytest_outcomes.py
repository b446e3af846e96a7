"""pytest's outcome exceptions (``pytest.skip``, ``pytest.xfail``, ``pytest.fail``, ``pytest.importorskip``) read as
the harness's outcomes, wherever a test raised one: in a rank, in a thread rank, in the parent.

pytest is never imported here: a test that raised one of them imported it, so where ``pytest`` is not in
``sys.modules`` nothing was raised that needs reading. The classes are pytest's public ones
(``pytest.skip.Exception``, ``pytest.xfail.Exception``, ``pytest.fail.Exception``); ``XFailed`` derives from
``Failed``, so xfail is asked first.
"""
from __future__ import annotations

import sys
import unittest
from typing import Any

from harness.shared.errors import StrictXPass
from harness.shared.status import Status

__all__ = ["outcome", "is_skip", "skip_reason", "StrictXPass", "raise_xfail", "xfail_reason"]


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
