"""One run of tests in a process: its settings, its worlds of ranks, its notes; made by the entry point.

Each entry point makes a :class:`Run` and hands it to the tests through unittest's result object
(``result.harness_run``): the runner (``run_tests.py``), ``harness.run_tests()``, the pytest plugin.
``MultiProcessTestCase.run`` finds it there (:func:`run_for`) and passes it down: the test's settings,
the ranks it runs on (``run.worlds``) and what the run will say at its end (``run.notes``) all come
from it, never from module globals.

An entry point that makes none (plain ``python -m unittest``, a ``TestCase.run()`` by hand) gets the
process's default run (:func:`default_run`): settings read from the environment at each test, its
notes printed on stderr at exit.
"""
from __future__ import annotations

import atexit
from typing import Any

from harness.shared.config import Settings, settings as environment_settings
from harness.parent.hypothesis_support import check_profile, profile_name
from harness.judging.notes import Notes

__all__ = ["Run", "run_for", "default_run"]


class Run:
    """One run: ``settings`` (fixed, or read from the environment when None), ``worlds``, ``notes``, and the
    hypothesis profile its ``@given`` tests use (``hypothesis_profile``: the entry point's choice, or None).

    Example::

        run = Run(settings(timeout=60.0))
        result = run.attach(unittest.TestResult())
        suite.run(result)
        run.close()
        print(run.notes.end_of_run_lines())
    """

    def __init__(self, settings: Settings | None = None, hypothesis_profile: str | None = None) -> None:
        self._settings = settings
        self._hypothesis_profile = check_profile(hypothesis_profile) if hypothesis_profile else None
        self.notes = Notes()
        self._worlds: Any = None

    def warm(self) -> None:
        """Start the template ranks are forked from (harness.parent.template), in the background, so that they come
        fast when the tests want them; an entry point calls it as its run starts."""
        from harness.parent import template

        template.warm(None if self._settings is None else self._settings.template)

    @property
    def settings(self) -> Settings:
        """The settings in force: the entry point's, else the ``HARNESS_*`` environment as it is now."""
        return self._settings if self._settings is not None else environment_settings()

    @property
    def hypothesis_profile(self) -> str:
        """The hypothesis profile of this run's ``@given`` tests: the entry point's choice, else
        ``HYPOTHESIS_PROFILE`` as it is now, else ``ci`` under CI, else ``dev`` (harness.parent.hypothesis_support)."""
        return profile_name(self._hypothesis_profile)

    @property
    def worlds(self) -> Any:
        """Where this run's tests get their ranks (harness.shared.world.Worlds): the rank pools it spawns, or
        torchrun's launched job when this process is one of its ranks (made here, with this run's settings,
        and held by this run alone: a process joins its job once)."""
        if self._worlds is None:
            from harness.shared.launcher import launched

            if launched():
                from harness.torchrun.job import LaunchedJob

                self._worlds = LaunchedJob(self.settings)
            else:
                from harness.parent.pool import Pools

                self._worlds = Pools()
        return self._worlds

    def before_in_process(self) -> None:
        """A test that runs in this process (a plain ``TestCase``, thread ranks) is about to start: under torchrun,
        where this process is also a rank of the job, the default group the job's tests keep from test to test
        is released first, so that the test finds the process as it would without the harness (no default group:
        its own ``init_process_group()`` works); the next test on the job's ranks makes it again."""
        if self._worlds is not None:
            self._worlds.before_in_process()

    def elsewhere(self, test: Any, status: str, text: str) -> list[tuple[str, str, str]]:
        """How ``test``, which ran in this process (a plain ``TestCase``, thread ranks: not on ranks of the harness's),
        failed in the job's other processes, each ``(status, title, text)``: under torchrun every launched process
        runs it on its own, and rank 0's report, the job's, must not call it passed when it failed on rank 2
        (harness.torchrun.job.LaunchedJob.agree). ``[]`` where this process is no launched rank, and for a test
        stopped by Ctrl-C or SIGTERM (the job is ending). Call it once for every such test, on every rank."""
        from harness.shared.launcher import launched
        from harness.shared.status import Status

        if not launched() or status == Status.INTERRUPTED:
            return []  # (asked before self.worlds, which would start the pools of a run that needs none)
        # the others may end it later than this process did: up to the run's timeout (HARNESS_TIMEOUT) later
        return self.worlds.agree(test.id(), str(status), text, self.settings.timeout_for(None))

    def class_error(self, what: str, text: str) -> None:
        """A class or module set-up (or tear-down) raised here (``what``: unittest's "setUpClass (mod.Class)", or the
        pytest item whose set-up failed; ``text``: its traceback). Under torchrun the other launched processes may go
        on without this one at that class's tests: they show it when they find this process at another test
        (LaunchedJob.note_class_error)."""
        from harness.shared.launcher import launched

        if launched():
            self.worlds.note_class_error(what, text)

    def attach(self, result: Any) -> Any:
        """Give ``result`` (unittest's result object) this run; returns it."""
        result.harness_run = self
        return result

    def close(self) -> None:
        """Stop the ranks this run spawned (at once; they are started again if another test comes)."""
        if self._worlds is not None:
            self._worlds.close()


def run_for(result: Any) -> Run:
    """The run that ``result`` (what unittest hands ``TestCase.run``) belongs to, else the default run."""
    run = getattr(result, "harness_run", None)
    return run if isinstance(run, Run) else default_run()


_default: list[Run] = []  # the process's default run, made once, at first use


def default_run() -> Run:
    """The run of the tests no entry point made a run for: its notes are printed on stderr at exit."""
    if not _default:
        run = Run()
        _default.append(run)
        atexit.register(_end_default, run)
    return _default[0]


def _end_default(run: Run) -> None:
    run.close()
    run.notes.say()
