"""What the parent and its ranks say to each other, as typed messages, whoever carries them.

Two transports carry this protocol: the spawned pool (``harness.parent.pool``: a pipe per rank, the parent in
the middle) and torchrun's launched ranks (``harness.torchrun.job``: torchrun's store, no parent). Both
run one :class:`Task` on every rank and meet between ``run_subtests`` combinations by the same rule,
:func:`meeting_call`.

The flow of one test on a pool::

    parent -> every rank   Task
    rank -> parent         Failing(result)        the test failed here; tearDown still runs (optional)
    rank -> parent         Meet(index, outcome)   a run_subtests combination ended here
    parent -> rank         Go() | Stop(why)       every rank got there: go on; or: leave the test
    rank -> parent         BodyEnded(status)      the body ended here; tearDown and the cleanups wait
    parent -> rank         Go()                   every rank ended the body (or a peer's trouble started the grace)
    rank -> parent         Done(result)           the test is over on this rank

and, around the rank's life, ``Ready(pid)`` or ``StartFailed(error)`` once, ``Shutdown()`` at the end.

Beside the pipe, two side channels that work while a rank's main thread is blocked: the flight recorder's
files (:func:`dump_paths`: ``harness.parent.recorders`` asks, ``harness.ranks.recorder`` answers) and the
debugger's socket (``harness.ranks.debugger`` connects to ``harness.parent.relay``; :func:`read_line`,
:data:`QUIT_MARK`).
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import socket
from typing import Any, Collection, Mapping, Union

from harness.shared.outcome import RankResult, SubtestOutcome

__all__ = ["Task", "Ready", "StartFailed", "Failing", "Meet", "BodyEnded", "Done", "Go", "Stop", "Shutdown",
           "FromRank", "ToRank", "send", "meeting_call", "teardown_call", "group_timeout", "dump_paths", "read_line",
           "QUIT_MARK"]


def send(conn: Any, message: Any) -> None:
    """Send ``message`` over a pipe between the parent and a rank, pickled as data (``conn.recv()`` reads it).

    multiprocessing's own ``send`` pickles a tensor by moving its storage into shared memory (torch registers that
    with multiprocessing's pickler): the receiver would share the sender's memory (a hypothesis example drawn as a
    tensor was then one tensor on every rank, and an in-place op on one rank changed the others'), the sender
    would start multiprocessing's resource-sharer thread, and a CUDA tensor would go by CUDA IPC. Plain pickle
    copies the values, as a message between fresh processes would."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


@dataclasses.dataclass
class Task:
    """One test, as every rank runs it: the same object goes to each rank.

    Where the ranks run (their placement: device, shared GPUs) is not here: a rank was given it once, when
    it started (harness.ranks.task.RankContext), and every test it runs runs there.
    """

    module: str
    module_file: str | None
    qualname: str
    method: str
    seed: int
    kwargs: dict[str, Any] | None = None  # a hypothesis example; None for a plain test
    temp_dir: str | None = None
    file_name: str | None = None
    fresh_pg: bool = False  # the last test went wrong: rebuild the process group first
    isolate: bool = True  # record the process state before the test and restore it after (harness.ranks.isolation)
    world_size: int = 0  # the parent's world size for this test; the ranks' self.world_size says it (0: unset)
    timeout: float = 0.0  # the test's time limit in seconds; the process group's own timeout stays above it
    test_id: str = ""  # the test as reports name it (module as the user named it: __main__ -> the file's stem)
    #: the parent's debugger relay (harness.parent.relay): where a rank that stops opens its prompt; None: the
    #: run has no terminal, and a breakpoint fails the test at once
    debug: str | None = None
    post_mortem: bool = False  # --pdb / HARNESS_PDB: a post-mortem prompt in the first rank to fail
    debugpy: int | None = None  # HARNESS_DEBUGPY: each rank waits for an IDE's debugger on this port + its rank
    #: the test's faults on purpose (harness.shared.faults), each rank firing its own of this attempt; None: none
    faults: list[Any] | None = None
    attempt: int = 0  # which run of the test this is (0: the first; @restarts starts the world again)
    fault_log: str | None = None  # where a rank notes a fault it fired, before it acts (the same file on every rank)
    count_calls: bool = False  # a sweep's run: every rank counts its collectives (RankResult.faults), faults or not


# ---- from a rank --------------------------------------------------------------------------------


@dataclasses.dataclass
class Ready:
    """The rank has started, imported torch and is waiting for tasks."""

    pid: int


@dataclasses.dataclass
class StartFailed:
    """The rank could not start: ``error`` is ``(type, message, traceback)`` (outcome.capture_exception)."""

    error: tuple[str, str, str]


@dataclasses.dataclass
class Failing:
    """The test failed on this rank; its tearDown and cleanups still run. The peers' grace starts now."""

    result: RankResult


@dataclasses.dataclass
class Meet:
    """This rank ended ``run_subtests`` combination number ``index`` (from 1) with ``outcome``, and waits."""

    index: int
    outcome: SubtestOutcome


@dataclasses.dataclass
class BodyEnded:
    """The test body ended on this rank with ``status`` (passed, failed, error or skipped); its tearDown and
    cleanups wait for Go: upstream runs tearDown in the parent, once every rank ended, and a test whose tearDown
    removes what its peers still use (the FileStore file of its own group) relies on that."""

    status: str


@dataclasses.dataclass
class Done:
    """The test is over on this rank (``test_id``: which test, where ranks could be at different ones: torchrun's)."""

    result: RankResult
    test_id: str = ""


# ---- to a rank ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Go:
    """Every rank ended the same combination: go on to the next."""


@dataclasses.dataclass
class Stop:
    """Leave the test now (the rank raises a HarnessError with ``why``)."""

    why: str


@dataclasses.dataclass
class Shutdown:
    """The rank process ends (the pool is closing)."""


FromRank = Union[Ready, StartFailed, Failing, Meet, BodyEnded, Done]
ToRank = Union[Task, Go, Stop, Shutdown]


# ---- the rules both transports follow -------------------------------------------------------------


def meeting_call(world_size: int, at: Mapping[int, int], left: Collection[int]) -> Go | Stop | None:
    """Between two ``run_subtests`` combinations: what the ranks waiting at a meeting are told, or None
    (wait: a rank is still running).

    ``at``: rank -> the meeting it waits at; ``left``: ranks whose test has ended (it finished, failed
    or died). Every rank at the same meeting: go on. A rank gone while the others wait for it: stop,
    and say why (it ended normally only if the ranks ran different combinations).

    Example::

        meeting_call(2, {0: 3, 1: 3}, ())     # Go()
        meeting_call(2, {0: 3}, {1})          # Stop("rank 1 left the test ...")
        meeting_call(2, {0: 3}, ())           # None: rank 1 is still inside combination 3
    """
    waiting = set(range(world_size)) - set(left)
    if not at or set(at) != waiting:
        return None
    if not left and len(set(at.values())) == 1:
        return Go()
    if not left:
        where = ", ".join(f"rank {r} after combination {at[r]}" for r in sorted(at))
        return Stop(f"the ranks wait at different run_subtests meetings ({where}): they ran different "
                    "combinations; give run_subtests the same config on every rank")
    return Stop(f"rank {', '.join(map(str, sorted(left)))} left the test (it ended, failed or died) while this rank "
                "waited for it after a run_subtests combination; if it ended normally, the ranks ran different "
                "combinations: give run_subtests the same config on every rank")


def teardown_call(world_size: int, ended: Collection[int], left: Collection[int], trouble: bool) -> Go | None:
    """What the ranks waiting to start their tearDown (``ended``: their body ended) are told, or None (wait).

    ``left``: ranks whose test has ended (it finished, failed or died). Every rank ended its body, or left:
    go. A peer's trouble (it failed, was skipped or died, or waits for what a returned rank never does: the
    peer grace started) lets them go at once: their tearDown and their group's closing then wake a peer
    stuck on them instead of the grace ending, and none is held longer than the grace.

    Example::

        teardown_call(2, {0}, (), trouble=False)     # None: rank 1 is still in the body
        teardown_call(2, {0, 1}, (), trouble=False)  # Go()
        teardown_call(2, {0}, {1}, trouble=False)    # Go(): rank 1 left
        teardown_call(2, {0}, (), trouble=True)      # Go(): rank 1's trouble started the grace
    """
    if not ended:
        return None
    if trouble or set(range(world_size)) <= set(ended) | set(left):
        return Go()
    return None


#: seconds a process group waits in a collective beyond the test's own time limit: the harness's limit,
#: which dumps the stacks, always comes first
GROUP_TIMEOUT_MARGIN = 60.0
#: the least a process group waits (what a pool's group had before the limit was per test)
GROUP_TIMEOUT_FLOOR = 1800.0


def group_timeout(test_timeout: float) -> float:
    """The process group's timeout for a test limited to ``test_timeout`` seconds: above that limit.

    Example::

        group_timeout(300)    # 1800.0
        group_timeout(3600)   # 3660.0
    """
    return max(GROUP_TIMEOUT_FLOOR, test_timeout + GROUP_TIMEOUT_MARGIN)


def dump_paths(directory: str, rank: int) -> tuple[str, str]:
    """The FIFO a rank's recorder is asked through and the file it answers in, in the pool's ``directory``."""
    return os.path.join(directory, f"rank{rank}.fr.req"), os.path.join(directory, f"rank{rank}.fr.json")


#: what a rank sends its relay, last, when the user quit at its prompt (bytes no pdb session prints)
QUIT_MARK = b"\x00harness:quit\x00"


def read_line(conn: socket.socket) -> str:
    """One line from the debugger's socket (the header a rank sends, the relay's answer)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")
