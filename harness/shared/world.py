"""The boundary between the parent and its ranks: a :class:`World` runs one test on every rank.

Two kinds of world exist, behind the same interface:

* ``harness.parent.pool.RankPool``: ranks this process spawned and reuses from test to test, one pool per
  world size and placement (``harness.parent.pool.Pools`` keeps them for a run);
* ``harness.torchrun.job.LaunchedJob``: the ranks torchrun launched, this process being one of them.

``harness.parent.testrun`` drives either the same way: it asks the run's :class:`Worlds` where a test goes
and for a world, builds one ``protocol.Task``, has the world run it, and hands the ranks' results to
one verdict (harness.judging.verdict), which harness.judging.report renders. A world knows how to reach its ranks,
nothing of verdicts.
"""
from __future__ import annotations

import abc
import contextlib
from typing import Any

from harness.shared.config import Settings
from harness.shared.outcome import RankResult
from harness.shared.placement import Placement
from harness.shared.protocol import Task

__all__ = ["World", "Worlds"]


class World(abc.ABC):
    """One world of ranks that runs tests: ``world_size`` ranks on one placement."""

    world_size: int
    placement: Placement
    #: the last test went wrong here: the ranks rebuild their process group before the next one
    pg_suspect: bool = False

    @property
    @abc.abstractmethod
    def pids(self) -> list[int]:
        """The processes of the ranks this process can see (all of a pool's; only its own under torchrun)."""

    @abc.abstractmethod
    def test_files(self, temp_dir: bool) -> contextlib.AbstractContextManager[tuple[str | None, str]]:
        """For one test: its ``@with_temp_dir`` directory (when ``temp_dir``) and a path for a FileStore,
        the same on every rank and removed after the test."""

    @abc.abstractmethod
    def run(self, task: Task, peer_grace: float) -> list[RankResult]:
        """Run ``task`` on every rank: one RankResult per rank, whatever happens (a rank that hangs past the
        test's time limit, ``task.timeout``, or runs ``peer_grace`` seconds after a peer failed, is stopped
        and reported)."""

    def debug_address(self) -> str | None:
        """Where a rank that stops at a breakpoint opens its prompt (harness.parent.relay); None: nowhere, the
        test fails at once (torchrun's ranks have no parent to relay a terminal)."""
        return None

    def same_example(self, kwargs: dict[str, Any], test_id: str) -> dict[str, Any]:
        """A hypothesis example as every rank runs it (where every rank draws its own: checked the same)."""
        return kwargs

    @property
    def history(self) -> list[Any]:
        """The tests these ranks ran, in order, since they started (``harness.judging.triage.Ran``; testrun adds them)."""
        try:
            return self._history
        except AttributeError:
            self._history: list[Any] = []
            return self._history

    def close(self) -> None:
        """Stop these ranks (a world made by :meth:`Worlds.fresh`, once its tests ran)."""

    @abc.abstractmethod
    def left_altered(self, results: list[RankResult]) -> str:
        """A test left the ranks altered beyond repair: make the next test start fresh where this world can.
        Returns what became of the ranks, in words ("ranks restarted")."""


class Worlds(abc.ABC):
    """Where one run's tests get their ranks."""

    #: this process reports the tests' outcomes and output (False on torchrun's ranks > 0: rank 0 does)
    reports = True

    def enough_gpus(self, gpus_asked: int) -> int:
        """The GPUs "a machine with enough GPUs" has for a test that asks for ``gpus_asked`` (0: it names no
        number; testrun.world_size_for then takes fallback.DEFAULT_GPUS)."""
        return gpus_asked

    @abc.abstractmethod
    def place(self, world_size: int, gpus_asked: int, conf: Settings, world_note: str = "") -> Placement:
        """Where a test of ``world_size`` ranks that asks for ``gpus_asked`` GPUs runs, and why (``world_note``:
        how its world size was taken, said first in the reason)."""

    def skip(self, world_size: int) -> str:
        """Why a test of ``world_size`` ranks cannot run on these worlds at all ("" when it can)."""
        return ""

    def start_examples(self, fn: Any) -> None:
        """A hypothesis test is about to draw its examples (where every rank draws its own: from one seed)."""

    def before_in_process(self) -> None:
        """A test that runs in this process, not on these worlds' ranks, is about to start (spawned pools: this
        process holds none of their groups, nothing to do)."""

    def agree(self, test_id: str, status: str, text: str, wait_s: float) -> list[tuple[str, str, str]]:
        """A test that ran in this process, not on these worlds' ranks, ended with ``status``: how it failed in
        the other processes that ran it too, each ``(status, title, text)`` (torchrun's launched ranks each run
        it; spawned pools: only this process ran it, so ``[]``)."""
        return []

    def note_class_error(self, test_id: str, text: str) -> None:
        """A class or module set-up (or tear-down) raised in this process (``test_id``: unittest's "setUpClass
        (mod.Class)"): under torchrun the other launched processes show it should they find this one at another
        test; spawned pools: nothing to tell."""

    @abc.abstractmethod
    def world(self, world_size: int, placement: Placement, conf: Settings) -> tuple[World, bool]:
        """The world for a test, and whether its ranks ran a test before (False: started for it)."""

    #: new ranks can be started for a test (:meth:`fresh`); False where they cannot (torchrun launched them)
    replaceable = False

    def fresh(self, world_size: int, placement: Placement, conf: Settings) -> World:
        """New ranks of their own, that no other test reuses (harness.judging.triage closes them); only where
        :attr:`replaceable`."""
        raise NotImplementedError(f"{type(self).__name__} cannot start new ranks (replaceable is False)")

    def done_with(self, world: World, conf: Settings) -> None:
        """The test is over; ``HARNESS_REUSE=0`` stops a spawned world now."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every world (their ranks and files)."""

