"""The pytest plugin (entry point ``pytest11``): a rank's failure reads as its report, and each test says where it ran.

Installed with the package, pytest loads it by itself (``-p no:distharness`` turns it off). For a
harness test it

- shows a failure that came from the ranks (``RankFailure``/``RankError``) as the harness's report,
  which already carries the failing rank's own traceback, instead of the parent's harness and
  unittest frames above it (``--tb=native`` keeps pytest's rendering; ``--tb=line`` and ``no`` are
  pytest's as ever);
- records where the test ran in ``item.user_properties`` (``harness_placement``,
  ``harness_world_size``, ``harness_reason``, ``harness_examples``), which ``--junit-xml`` writes as
  properties, and as a ``harness`` section of the report (shown with a failure, and with ``-rP``);
- ends the run with a ``distharness`` section: the tests per placement and world size, then what a
  unittest run prints at exit (tests on CPU for want of GPUs, tests that need CUDA, tests that left
  the process altered).
"""
from __future__ import annotations

import collections
import dataclasses
import os
import platform
import sys
import unittest
from typing import Any, Generator

import pytest

from harness.inprocess import watchdog
from harness.parent import relay
from harness.shared.config import settings
from harness.shared.errors import RankError, RankFailure
from harness.judging.notes import short_id
from harness.parent.run import Run

__all__ = ["RankReport", "lend_run", "record_of"]

_RUN = pytest.StashKey[Run]()
_LENT = pytest.StashKey[bool]()
_STDERR = pytest.StashKey[int]()  # a copy of the real stderr, for the watchdog (harness.inprocess.watchdog)
_RECORD = pytest.StashKey[Any]()
_UPSTREAM = pytest.StashKey[Any]()


def _run(config: pytest.Config) -> Run:
    """The pytest session's run (harness.parent.run): made at configure, closed at unconfigure. pytest's ``--pdb``
    is the harness's too: a post-mortem prompt in the first rank to fail (harness.parent.relay)."""
    run = config.stash.get(_RUN, None)
    if run is None:
        values: dict[str, Any] = {"pdb": True} if config.getoption("usepdb", False) else {}
        swept = config.getoption("harness_sweep", None)
        if swept:
            values["sweep"] = _sweep_option(swept)
        run = config.stash[_RUN] = Run(settings(**values) if values else None)
    return run


def _sweep_option(text: str) -> str:
    """``--sweep FAULT``, checked before any test is collected: a bad one is pytest's usage error."""
    from harness.shared.errors import UsageError
    from harness.shared.faults import NOT_SWEPT, parse_sweep

    try:
        kind = parse_sweep(text).kind
    except UsageError as exc:
        raise pytest.UsageError(f"--sweep: {exc}") from None
    if kind in NOT_SWEPT:
        raise pytest.UsageError(f"--sweep {text}: {NOT_SWEPT[kind]}")
    return text


def pytest_addoption(parser: Any) -> None:
    parser.getgroup("distharness").addoption(
        "--sweep", dest="harness_sweep", metavar="FAULT", default=None,
        help="sweep a fault over every test on rank processes, such as 'kill(rank=1)': each test runs once per "
             "collective the rank makes, the fault injected at it (HARNESS_SWEEP; docs/faults.md)")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: Any) -> Generator[None, None, None]:
    # Outside pytest's capture (which takes fd 0 from here on): a breakpoint in a rank gets a prompt on the
    # terminal the session was started from, written past the capture (harness.parent.relay).
    relay.started_on_terminal(os.isatty(0))
    yield


def pytest_configure(config: pytest.Config) -> None:
    # No template is started here: the plugin is loaded for every pytest run where distharness is installed.
    # A harness test class starts it when its module is imported (harness.classes.case), during collection.
    _run(config)
    try:  # the watchdog of the tests whose ranks live in this process writes to the real stderr, not a capture
        config.stash[_STDERR] = os.dup(2)
        watchdog.keep_stderr(config.stash[_STDERR])
    except OSError:
        pass


def lend_run(config: pytest.Config, run: Run) -> None:
    """Run the session's harness tests in ``run`` (the runner's, whose session this is: harness.runner.pytest_items):
    its ranks, its notes; the session neither closes it nor says its notes, which are the runner's to say."""
    config.stash[_RUN] = run
    config.stash[_LENT] = True


def record_of(item: pytest.Item) -> Any:
    """Where a harness test ran, as the harness recorded it (harness.judging.notes), once it has run; else None."""
    return item.stash.get(_RECORD, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    fd = config.stash.get(_STDERR, None)
    if fd is not None:
        watchdog.keep_stderr(None)
        os.close(fd)
    run = config.stash.get(_RUN, None)
    if run is not None and not config.stash.get(_LENT, False):
        run.close()
        run.notes.say()  # whatever was not said in the terminal summary (none, normally)


@dataclasses.dataclass
class _Crash:
    """Where a failure is reported and its first line (what pytest's one-line summaries read)."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"


class RankReport:
    """A failure's ``longrepr``: the harness's text (root-cause rank first, its traceback, the other ranks),
    then any notes (hypothesis's failing example)."""

    def __init__(self, text: str, crash: _Crash) -> None:
        self.text = text
        self.reprcrash = crash

    def toterminal(self, tw: Any) -> None:
        first, _, rest = self.text.partition("\n")
        tw.line(first, red=True, bold=True)
        if rest:
            tw.line(rest)

    def __str__(self) -> str:
        return self.text


def _rank_report(item: pytest.Item, error: BaseException) -> RankReport:
    notes = [str(n) for n in getattr(error, "__notes__", ())]
    text = "\n\n".join([str(error).rstrip(), *notes])
    path, lineno, _ = item.location
    first = text.split("\n", 1)[0]
    return RankReport(text, _Crash(path, (lineno or 0) + 1, f"{type(error).__name__}: {first}"))


def _instance(item: pytest.Item) -> Any:
    """The unittest.TestCase instance of a unittest item (None for other items, or once it is gone)."""
    if getattr(item, "cls", None) is None or not isinstance(item.cls, type) or not issubclass(item.cls,
                                                                                              unittest.TestCase):
        return None
    try:
        return item.instance  # type: ignore[attr-defined]
    except Exception:
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under torchrun: a test that runs in this process (not on the harness's ranks) finds no default group of the
    job's (harness.parent.run.Run.before_in_process)."""
    if _in_process(item):
        _run(item.config).before_in_process()


def _in_process(item: pytest.Item) -> bool:
    """The item runs in this process, not on the harness's ranks (read from its class: its instance is made by its
    own set-up)."""
    from harness.runner.results import uses_ranks

    cls = getattr(item, "cls", None)
    return not (isinstance(cls, type) and uses_ranks(cls))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """Hand the test the session's run, and take the record of where it ran (harness.judging.notes, by test id).

    pytest passes the item itself as unittest's result (``TestCase.run(result=item)``), so the run goes
    on the item, where ``MultiProcessTestCase.run`` finds it (harness.parent.run.run_for)."""
    run = _run(item.config)
    run.attach(item)
    instance = _instance(item)
    found = run.notes.test_class_seen(instance) if instance is not None else None
    if found is not None:  # its class still derives from upstream's base: it runs on upstream's harness
        item.stash[_UPSTREAM] = found
        item.user_properties.append(("harness_placement", "upstream harness"))
    try:
        return (yield)
    finally:
        rec = run.notes.take_record(short_id(instance)) if instance is not None else None
        if rec is not None:
            item.stash[_RECORD] = rec
            item.user_properties.extend([("harness_placement", rec.placement or "not run"),
                                         ("harness_world_size", rec.world_size),
                                         ("harness_reason", rec.reason)])
            if rec.examples > 1:
                item.user_properties.append(("harness_examples", rec.examples))
            if rec.triage:
                item.user_properties.append(("harness_triage", rec.triage))
            if rec.faults:
                item.user_properties.append(("harness_faults", rec.faults))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    rep = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if rep.failed and isinstance(error, (RankFailure, RankError)) and item.config.option.tbstyle in ("auto", "long",
                                                                                                   "short"):
        rep.longrepr = _rank_report(item, error)
    if rep.failed and call.when == "call" and isinstance(error, (RankFailure, RankError)):
        reason = _rank_xfail(item, error)
        if reason is not None:  # the rank raised the class an xfail mark's raises= names: xfailed, as pytest says
            rep.outcome = "skipped"
            rep.wasxfail = reason
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        instance = _instance(item)
        if instance is not None:  # a test the harness did not run itself, skipped for want of a GPU or NCCL
            _run(item.config).notes.skip_seen(instance, str(rep.longrepr[2]).removeprefix("Skipped: "))
    if call.when == "call" or (call.when == "setup" and not rep.passed):  # once a test, on every launched rank
        _add_elsewhere(item, rep)
    if call.when == "setup" and rep.failed and not _in_process(item):  # (its class's set-up, say: it takes no step)
        _run(item.config).class_error(f"the set-up of {item.nodeid}", str(rep.longrepr))
    found = item.stash.get(_UPSTREAM, None)
    if call.when == "call" and found is not None:
        rep.sections.append(("harness", found.line()))
    rec = item.stash.get(_RECORD, None)
    if call.when == "call" and rec is not None:
        where = f"ran on {rec.placement}" if rec.placement else "did not run on ranks"
        rep.sections.append(("harness", f"{where}, world size {rec.world_size}: {rec.reason}"))
        if rec.triage:
            rep.sections.append(("harness triage", rec.triage))
        if rec.faults:
            rep.sections.append(("harness faults", "\n".join([rec.faults, *rec.attempts])))
        if rep.failed and rec.picture is not None:
            _html_extra(item, rep, rec.picture)
    return rep


def _add_elsewhere(item: pytest.Item, rep: pytest.TestReport) -> None:
    """Under torchrun: a test that runs in this process (not on the harness's ranks) ran in every launched process;
    where it failed in another one it fails here, with that rank's text (harness.parent.run.Run.elsewhere)."""
    from harness.shared import launcher

    if not launcher.launched() or item.config.stash.get(_LENT, False) or not _in_process(item):
        return  # (lent: the runner's result compares them)
    status = "failed" if rep.failed else "skipped" if rep.skipped else "passed"
    own = str(rep.longrepr) if rep.failed else ""
    found = _run(item.config).elsewhere(_Named(item.nodeid), status, own)
    if found and not rep.failed:  # the failures elsewhere are the test's failure
        rep.outcome = "failed"
        rep.longrepr = "\n\n".join(f"{title}\n{text}" for _, title, text in found)
    else:  # beside this process's own failure
        rep.sections.extend((title, text) for _, title, text in found)


class _Named:
    """A pytest item as Run.elsewhere names a test: by its node id."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    def id(self) -> str:
        return self.nodeid


def _rank_xfail(item: pytest.Item, error: BaseException) -> str | None:
    """The reason of an xfail mark whose ``raises=`` the rank's exception matches (pytest's own check sees only the
    parent's RankFailure or RankError); None when there is none, or under ``--runxfail``."""
    if item.config.getoption("runxfail", False) or not getattr(error, "exc_types", None):
        return None
    from harness.parent.pytest_marks import xfail_of_rank_failure

    namespace = {"os": os, "sys": sys, "platform": platform, "config": item.config,
                 **getattr(getattr(item, "obj", None), "__globals__", {})}
    return xfail_of_rank_failure(list(item.iter_markers(name="xfail")), namespace, error)


def _html_extra(item: pytest.Item, rep: pytest.TestReport, picture: Any) -> None:
    """With pytest-html: the failure's ranks x collectives (harness.runner.html) as an extra of its report."""
    if not item.config.pluginmanager.hasplugin("html"):
        return
    try:
        from pytest_html import extras
    except ImportError:
        return
    from harness.runner.html import failure_extra

    rep.extras = [*getattr(rep, "extras", []), extras.html(failure_extra(picture))]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """HARNESS_ENV_CHANGED=fail: a test that triage found left state that made a later test fail fails the
    session (an item that is over cannot be failed in pytest; the distharness section names it)."""
    run = _run(session.config)
    from harness.judging.triage import POLLUTED

    guilty = [f for f in run.notes.triaged if f.kind == POLLUTED]
    if guilty and run.settings.env_changed == "fail" and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if terminalreporter.config.stash.get(_LENT, False):
        return
    run = _run(terminalreporter.config)
    places = collections.Counter((rec.placement, rec.world_size) for rec in run.notes.records if rec.placement)
    lines = []
    if places:
        shown = ", ".join(f"{count} on {place} with world size {ws}" for (place, ws), count in sorted(places.items()))
        lines.append(f"tests on ranks: {shown}")
    lines += run.notes.end_of_run_lines()
    run.notes.forget()  # said here, not again at unconfigure
    if lines:
        terminalreporter.write_sep("=", "distharness")
        for line in lines:
            terminalreporter.write_line(f"harness: {line}")
