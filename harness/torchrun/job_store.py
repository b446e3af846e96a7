"""torchrun's store as the launched ranks speak it: typed messages under one key scheme.

Under torchrun there is no parent: the ranks of a job (``harness.torchrun.job``) tell each other what a pool's
ranks tell their parent (``harness.shared.protocol``) through torchrun's store. What they post there is a
pickled message (``protocol.Meet``, ``protocol.Done``, and this module's few more), never a raw string;
where it goes is decided by :class:`Keys` alone; and which test a key belongs to is a number every rank
counts for itself (:class:`Steps`), never one sent between them.

One test under torchrun, as the store sees it (``t7``: its step)::

    t7/temp_dir                 TempDir(path)          rank 0 made the test's directory
    t8/meet/<index>/<rank>      Meet(index, outcome)   a run_subtests combination ended on that rank
    t8/arrivals                 a counter              the order in which the ranks' failures became known
    t8/result/<rank>            Done(result)           the test is over on that rank
    t8/fr/<rank>                Collectives(dump)      its collectives, when the test went wrong
    t8/ended/<rank>             Ended(status, dump)    its body ended: how, and the collectives it called
    t8/ended                    a counter              how many Ended were posted: a waiting rank looks when it moves
    t8/blocked/<rank>           Blocked(dump, round)   its main thread is idle in a collective (harness.torchrun.desync)
    t8/blocked                  a counter              how many Blocked were posted: rank 0 reads them when it moves
    t8/look                     Look(round, found)     rank 0 asks for fresh Blocked dumps, or says it is a desync

and for a test that runs in each launched process rather than on the job's ranks (a plain ``TestCase``, thread
ranks; ``t9``: its step)::

    t9/outcome/<rank>           Outcome(test_id, ...)  how the test ended in that rank's process

and, for the whole job, ``exit/<rank>`` (Leaving: that rank is about to exit), ``done`` (JobOver), and
``class_error/<rank>/<n>`` (Outcome: a class or module set-up that raised in that rank's process, counted in
``class_errors/<rank>``), which a rank that finds another at a different test shows (harness.torchrun.job).
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Iterable

__all__ = ["TempDir", "Seed", "Example", "Collectives", "Ended", "Blocked", "Look", "Outcome", "Leaving", "JobOver", "Keys",
           "Steps", "JobStore"]


# ---- the messages that only the store carries (the rest are harness.shared.protocol's) --------------------------


@dataclasses.dataclass
class TempDir:
    """The test's ``@with_temp_dir`` directory, made by rank 0 (one node: one directory for every rank)."""

    path: str


@dataclasses.dataclass
class Seed:
    """Rank 0's seed for a hypothesis test: every rank's engine draws from it (harness.torchrun.job)."""

    value: int


@dataclasses.dataclass
class Example:
    """The example rank 0 drew: every rank checks it drew the same."""

    kwargs: dict[str, Any]


@dataclasses.dataclass
class Collectives:
    """A rank's collectives in a test that went wrong (harness.ranks.recorder: a dump)."""

    dump: dict[str, Any] | None


@dataclasses.dataclass
class Ended:
    """A rank's test body ended (``status``: protocol.BodyEnded's) after calling the collectives in ``dump``: it
    calls none more, so a peer waiting in one it never called waits for ever (harness.torchrun.desync)."""

    status: str
    dump: dict[str, Any] | None


@dataclasses.dataclass
class Blocked:
    """A rank's dump (harness.ranks.recorder) taken while its main thread was idle inside torch's collective
    code, after it read ``round`` at ``Keys.look`` (0: none posted yet): harness.torchrun.desync."""

    dump: dict[str, Any] | None
    round: int


@dataclasses.dataclass
class Look:
    """Rank 0's word on a possible desync: ``round``, the dumps it wants next (each rank posts a fresh
    Blocked for it), or ``found``, harness.judging.analysis.never_meet's answer: the ranks stop their test."""

    round: int
    found: tuple[int, str] | None = None


@dataclasses.dataclass
class Outcome:
    """How a test that runs in each launched process (not on the job's ranks) ended in one of them: ``status``
    (harness.shared.status.Status's value) and, for a failure, its text. ``test_id`` says which test it was, so
    that ranks that no longer run the same tests are told, not mixed up."""

    test_id: str
    status: str
    text: str = ""


@dataclasses.dataclass
class Leaving:
    """This rank's process is about to exit: the ranks leave together (torchrun stops the job at the first)."""


@dataclasses.dataclass
class JobOver:
    """Rank 0 has reported (or torchrun is stopping the job): a rank waiting to be read can go."""


# ---- where they go ---------------------------------------------------------------------------------


class Keys:
    """The store's key scheme, in one place: ``Keys(n)`` names the keys of step ``n`` (all under ``t<n>/``);
    the job's own keys (:meth:`leaving`, :data:`DONE`) are the class's.

    Example::

        keys = Keys(7)
        keys.result(1)          # "t7/result/1"
        keys.meet(2, 0)         # "t7/meet/2/0"
        Keys.leaving(3)         # "exit/3"
    """

    #: rank 0 has reported, or the job is being stopped (JobOver)
    DONE = "done"

    def __init__(self, step: int) -> None:
        if step < 1:
            raise ValueError(f"a step is numbered from 1, got {step!r}")
        self.step = step
        self.prefix = f"t{step}"

    def __repr__(self) -> str:
        return f"Keys({self.step})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keys) and other.step == self.step

    def __hash__(self) -> int:
        return hash(self.step)

    @property
    def temp_dir(self) -> str:
        return f"{self.prefix}/temp_dir"

    @property
    def seed(self) -> str:
        return f"{self.prefix}/hypothesis_seed"

    @property
    def example(self) -> str:
        return f"{self.prefix}/example"

    @property
    def arrivals(self) -> str:
        """A counter: each rank takes the next number when its failure (or its result) becomes known."""
        return f"{self.prefix}/arrivals"

    def result(self, rank: int) -> str:
        return f"{self.prefix}/result/{rank}"

    def results(self, world_size: int) -> list[str]:
        return [self.result(r) for r in range(world_size)]

    def meet(self, index: int, rank: int) -> str:
        """Where ``rank`` says how combination ``index`` went. A rank posts each meeting in order, from 1, so
        this key is there exactly when ``rank`` reached meeting ``index`` (or went past it)."""
        return f"{self.prefix}/meet/{index}/{rank}"

    def body_ended(self, rank: int) -> str:
        """Where ``rank`` says its test body ended (protocol.BodyEnded), before its tearDown waits for the others."""
        return f"{self.prefix}/body/{rank}"

    def collectives(self, rank: int) -> str:
        return f"{self.prefix}/fr/{rank}"

    def outcome(self, rank: int) -> str:
        return f"{self.prefix}/outcome/{rank}"

    def ended(self, rank: int) -> str:
        """Where ``rank`` says its body ended, with its collectives (Ended), just before its BodyEnded."""
        return f"{self.prefix}/ended/{rank}"

    @property
    def ended_posts(self) -> str:
        """A counter: each Ended posted adds one, so a rank waiting in a collective reads them when it moves."""
        return f"{self.prefix}/ended"

    def blocked(self, rank: int) -> str:
        """Where ``rank`` posts its dump while its main thread is idle in a collective (Blocked)."""
        return f"{self.prefix}/blocked/{rank}"

    @property
    def blocked_posts(self) -> str:
        """A counter: each Blocked posted adds one, so rank 0 reads the dumps only when one changed."""
        return f"{self.prefix}/blocked"

    @property
    def look(self) -> str:
        """Rank 0's Look: the round of dumps it asks for, or the desync it found."""
        return f"{self.prefix}/look"

    @staticmethod
    def leaving(rank: int) -> str:
        return f"exit/{rank}"

    @staticmethod
    def class_error(rank: int, n: int) -> str:
        """The ``n``-th class or module set-up (or tear-down) that raised in ``rank``'s process (Outcome): no step of
        its own, so that a process whose set-up failed there alone is not a step behind for it."""
        return f"class_error/{rank}/{n}"

    @staticmethod
    def class_errors(rank: int) -> str:
        """A counter: how many set-ups raised in ``rank``'s process (:meth:`class_error`)."""
        return f"class_errors/{rank}"


class Steps:
    """The job's step numbers: which test a store key belongs to, the same on every rank without a word.

    Each rank of a job runs the same tests in the same order (the same command line, the same loader), and
    for each test it takes the same steps: a number for its files (``test_files``), one to seed a hypothesis
    test (``start_examples``), one per example checked (``same_example``, only where the world has more than
    one rank, which is then so on every rank), one per run of the body (``run``), and one for a test that ran in
    each launched process instead (``agree``: a plain ``TestCase``, thread ranks). So the n-th number taken on
    one rank names the same step as the n-th on every other, and rank 0's ``t<n>/temp_dir`` is the one rank 1
    reads. The invariant this needs: **a step is taken on every rank or on none**; taking one under a
    condition that can differ between ranks would shift every later key on that rank and mix tests up.

    Example::

        steps = Steps()
        steps.next()        # Keys(1)
        steps.next()        # Keys(2)
    """

    def __init__(self) -> None:
        self._taken = 0

    def next(self) -> Keys:
        """The keys of the next step (numbers start at 1)."""
        self._taken += 1
        return Keys(self._taken)

    @property
    def taken(self) -> int:
        """How many steps this rank took so far."""
        return self._taken


class JobStore:
    """torchrun's store (``store``: a ``torch.distributed.Store``), carrying pickled messages.

    Example::

        store = JobStore(torch.distributed.HashStore())
        store.post(Keys(1).temp_dir, TempDir("/tmp/x"))
        store.read(Keys(1).temp_dir)      # TempDir(path="/tmp/x"), once it is there (read waits)
    """

    def __init__(self, store: Any) -> None:
        self.store = store  # the raw store, for what is not a message (the process groups' rendezvous)

    def post(self, key: str, message: Any) -> None:
        self.store.set(key, pickle.dumps(message))

    def read(self, key: str) -> Any:
        """The message at ``key``; waits until it is there (the store's own timeout)."""
        return pickle.loads(self.store.get(key))

    def has(self, *keys: str) -> bool:
        """Every one of ``keys`` has a message (no waiting)."""
        return bool(self.store.check(list(keys)))

    def read_posted(self, key: str) -> Any:
        """The message at ``key`` if it is there, else None (no waiting)."""
        return self.read(key) if self.has(key) else None

    def at_meeting(self, keys: Keys, index: int, ranks: Iterable[int]) -> tuple[set[int], set[int]]:
        """Which of ``ranks`` reached run_subtests' meeting ``index`` of the step (there, or already past it), and
        which left the test without reaching it (its result is posted); a rank in neither is still inside the
        combination.

        A rank posts its meeting before its result, so the result is read first and the meeting after: a fast
        peer that got through the meeting on this rank's post and ended its test between two looks counts as
        there, not as gone (the other order of reads took it for a rank that left, and stopped the test).

        Example::

            store.post(keys.meet(2, 1), Meet(2, outcome)); store.post(keys.result(1), Done(result))
            store.at_meeting(keys, 2, [1])    # ({1}, set()): it was there, then ended its test
            store.at_meeting(keys, 3, [1])    # (set(), {1}): it ended without reaching meeting 3
        """
        at: set[int] = set()
        left: set[int] = set()
        for r in ranks:
            ended = self.has(keys.result(r))
            if self.has(keys.meet(index, r)):
                at.add(r)
            elif ended:
                left.add(r)
        return at, left

    def ticket(self, counter: str) -> int:
        """The next number of ``counter`` (1, 2, ...): the store hands each out once, whichever rank asks,
        so the numbers order the moments they were asked for across the whole job."""
        return int(self.store.add(counter, 1))

    def count(self, counter: str) -> int:
        """How many numbers ``counter`` handed out so far (0: none), taking none."""
        return int(self.store.add(counter, 0))
