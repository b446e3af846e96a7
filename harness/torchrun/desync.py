"""Under torchrun: a desync (every rank blocked in collectives that can never meet) ends the test at once.

A launched rank is its own parent, so what a pool's parent does for its ranks (harness.parent.pool's
``_look_for_desync``) is done here by each rank's watchdog (harness.torchrun.job), through torchrun's store
(the keys are harness.torchrun.job_store's), and decided by rank 0 with the one rule,
``harness.judging.analysis.never_meet``:

* each watchdog looks at its own main thread every tick: its CPU time (``recorder.main_cpu_ns``) and whether
  torch's code holds it (``recorder.main_waits``). Only when the CPU time did not move since the last tick
  and torch's code holds the thread does it touch the store: it reads rank 0's :class:`~job_store.Look`
  and, if its state or the round changed since its last post, posts a fresh dump (:class:`~job_store.Blocked`)
  and counts it (``Keys.blocked_posts``). A test that passes posts nothing unless a collective keeps a rank
  waiting for more than a tick;
* rank 0's watchdog, itself idle the same way, reads the dumps when the count moved and every rank of the
  world posted one. When they alone show a desync, it keeps them and posts the next round; every rank then
  posts a dump taken after it read that round. When every rank's dump of the new round shows the same wait and
  CPU time as its dump of the last (``never_meet(..., before=...)``), every rank was blocked at the moment
  rank 0 posted the round, in waits that can never complete (the pool's two looks, made across processes);
  rank 0 posts ``Look(round, found)`` and every watchdog ends its rank's test the way a timeout does.

A rank whose body ended (its BodyEnded or its result is in the store) calls nothing more, so it is no part of a
desync. It posts what it called (:class:`~job_store.Ended`, counted in ``Keys.ended_posts``) as its body ends, and
:meth:`DesyncWatch.left_behind` (each watchdog's, while torch's code holds its main thread and that count or its
own CPU time moved) finds a wait that rank can never join by the pool's rule, ``harness.judging.analysis.stuck``:
the rank's watchdog then gives it HARNESS_PEER_GRACE (harness.shared.grace) and ends its test, as a pool's parent
stops such a rank. Slow ranks (computing, sleeping, not yet in their collective) and ranks in matching collectives
are never a desync, and a rank whose peer is only slow is never left behind: ``never_meet`` and ``stuck`` say so.
"""
from __future__ import annotations

from typing import Any, Callable

from harness.judging.analysis import never_meet, stuck
from harness.ranks import recorder
from harness.shared.outcome import ERROR, FAILED, PASSED, SKIPPED
from harness.torchrun.job_store import Blocked, JobStore, Keys, Look

#: a body's end (protocol.BodyEnded's status), in the words the report takes after "rank N"
_BODY = {PASSED: "passed", FAILED: "failed", ERROR: "raised", SKIPPED: "was skipped"}

__all__ = ["DesyncWatch"]


class DesyncWatch:
    """One rank's looks at one test (made by the watchdog when the test starts, :meth:`look` at each tick).

    ``cpu_ns``, ``waits`` and ``dump`` are this rank's main thread's CPU time, where torch's code holds it, and
    its dump (harness.ranks.recorder's, by default); a test of the protocol hands in its own.

    Example (each launched rank's watchdog)::

        watch = DesyncWatch(store, keys, rank, world_size)
        while test_runs:
            time.sleep(0.2)
            found = watch.look()      # None, or never_meet's (root rank, why): stop the test now
    """

    def __init__(self, store: JobStore, keys: Keys, rank: int, world_size: int,
                 cpu_ns: Callable[[], int] = recorder.main_cpu_ns,
                 waits: Callable[[], str] = recorder.main_waits,
                 dump: Callable[[int], dict[str, Any] | None] = recorder.own_dump) -> None:
        self.store, self.keys, self.rank, self.world_size = store, keys, rank, world_size
        self._cpu_ns, self._waits, self._dump = cpu_ns, waits, dump
        self._last_cpu: int | None = None
        self._posted: tuple[int, int] | None = None  # (CPU time, round) of this rank's last Blocked
        # rank 0's: the round asked for, the dumps that showed a desync before it was asked, the count read last
        self._round = 0
        self._before: dict[int, Any] | None = None
        self._seen = 0
        self._found: tuple[int, str] | None = None
        self._left_seen: tuple[int, int] | None = None  # (Ended posts, CPU time) at the last left_behind() look

    def look(self) -> tuple[int, str] | None:
        """One look (a watchdog's tick): never_meet's ``(root cause rank, why)`` once rank 0 found a desync,
        else None. Touches the store only while this rank's main thread is idle inside torch's code."""
        if self._found is not None:
            return self._found
        cpu = self._cpu_ns()
        idle = cpu != -1 and cpu == self._last_cpu and bool(self._waits())
        self._last_cpu = cpu
        if not idle:
            return None
        if self.rank == 0:
            current = self._round
        else:
            said = self.store.read_posted(self.keys.look)
            if said is not None and said.found is not None:
                self._found = said.found
                return said.found
            current = said.round if said is not None else 0
        if self._posted != (cpu, current):
            self.store.post(self.keys.blocked(self.rank), Blocked(self._dump(self.rank), current))
            self.store.ticket(self.keys.blocked_posts)
            self._posted = (cpu, current)
        return self._judge() if self.rank == 0 else None

    def left_behind(self) -> tuple[int, str] | None:
        """This rank waits in a collective (or a group's creation) that a peer whose body ended never called:
        ``(that peer, why)``, the words after "after" in the report (``"rank 1 passed without calling #2
        all_reduce(float32[2]) on the default group"``), else None. Reads the store only while torch's code
        holds the main thread, and the peers' dumps only when a peer's body ended or this rank moved since."""
        if self.world_size == 1 or not self._waits():
            return None
        seen = (self.store.count(self.keys.ended_posts), self._cpu_ns())
        if seen[0] == 0 or seen == self._left_seen:
            return None
        self._left_seen = seen
        ended = {}
        for r in range(self.world_size):
            if r != self.rank:
                posted = self.store.read_posted(self.keys.ended(r))
                if posted is not None:
                    ended[r] = posted
        if not ended:
            return None
        dumps = {r: e.dump for r, e in ended.items()}
        dumps[self.rank] = self._dump(self.rank)
        found = stuck(dumps, {r: _BODY.get(e.status, "failed") for r, e in ended.items()}, [self.rank],
                      self.world_size)
        if self.rank not in found:
            return None
        why = found[self.rank]
        peer = next((r for r in sorted(ended) if why.startswith(f"rank {r} ")), min(ended))
        return peer, why

    def _judge(self) -> tuple[int, str] | None:
        """Rank 0: with every rank's dump of the current round, decide (never_meet), or ask for the next round."""
        count = self.store.count(self.keys.blocked_posts)
        if count == self._seen:
            return None  # no rank posted since the last reading: the same dumps say the same
        self._seen = count
        wanted = [self.keys.blocked(r) for r in range(self.world_size)]
        ended = [key for r in range(self.world_size) for key in (self.keys.body_ended(r), self.keys.result(r))]
        if not self.store.has(*wanted) or any(self.store.has(key) for key in ended):
            return None  # a rank has not posted, or its body ended (it calls nothing more): not judged here
        posts = {r: self.store.read(key) for r, key in enumerate(wanted)}
        if any(p.round != self._round for p in posts.values()):
            return None  # some rank has not answered this round (it moved, or has not looked yet)
        dumps = {r: p.dump for r, p in posts.items()}
        ranks = range(self.world_size)
        if self._before is not None:
            found = never_meet(dumps, ranks, self.world_size, before=self._before)
            if found is not None:
                self.store.post(self.keys.look, Look(self._round, found))
                self._found = found
                return found
        # these dumps alone show a desync: keep them, and ask every rank for one taken after this moment
        if never_meet(dumps, ranks, self.world_size, before=dumps) is not None:
            self._before = dumps
            self._round += 1
            self.store.post(self.keys.look, Look(self._round))
        else:
            self._before = None
        return None
