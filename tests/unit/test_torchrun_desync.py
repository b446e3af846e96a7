"""The launched ranks' desync protocol (harness.torchrun.desync) over a real in-process store: four watches, one
per rank, each handed its main thread's state (CPU time, where torch's code holds it, its dump) by the test
instead of read from a thread, looking in turns as the ranks' watchdogs do; never_meet decides."""
from __future__ import annotations

import unittest
from typing import Any

from harness.torchrun.desync import DesyncWatch
from harness.shared.protocol import Done
from harness.torchrun.job_store import JobStore, Keys
from harness.shared.outcome import PASSED, RankResult
from tests.unit.test_collectives import blocked, call


class CountingStore(JobStore):
    """torchrun's store as the job wraps it, counting what the ranks ask of it."""

    def __init__(self) -> None:
        import torch.distributed as dist

        super().__init__(dist.PrefixStore("harness", dist.HashStore()))
        self.calls = 0

    def post(self, key: str, message: Any) -> None:
        self.calls += 1
        super().post(key, message)

    def read(self, key: str) -> Any:
        self.calls += 1
        return super().read(key)

    def has(self, *keys: str) -> bool:
        self.calls += 1
        return super().has(*keys)

    def ticket(self, counter: str) -> int:
        self.calls += 1
        return super().ticket(counter)

    def count(self, counter: str) -> int:
        self.calls += 1
        return super().count(counter)


class Rank:
    """One rank's main thread as its watchdog sees it: ``cpu`` ns used, where torch's code holds it, its dump."""

    def __init__(self, rank: int, dump: dict[str, Any], cpu: int = 7, waits: str = "all_reduce") -> None:
        self.rank, self.dump, self.cpu, self.waits = rank, dump, cpu, waits

    def watch(self, store: JobStore, keys: Keys, world_size: int) -> DesyncWatch:
        return DesyncWatch(store, keys, self.rank, world_size, cpu_ns=lambda: self.cpu, waits=lambda: self.waits,
                           dump=lambda rank: {**self.dump, "cpu_ns": self.cpu, "waits": self.waits})


class TestDesyncWatch(unittest.TestCase):
    def setUp(self) -> None:
        self.store = CountingStore()
        self.keys = Keys(3)

    def watches(self, ranks: list[Rank]) -> list[DesyncWatch]:
        return [r.watch(self.store, self.keys, len(ranks)) for r in ranks]

    def ticks(self, watches: list[DesyncWatch], n: int, order: list[int] | None = None) -> list[dict[int, Any]]:
        """``n`` ticks, each rank looking once per tick (in ``order``): what each look returned."""
        seen = []
        for _ in range(n):
            seen.append({r: watches[r].look() for r in (order or range(len(watches)))})
        return seen

    def desync(self) -> list[Rank]:
        return [Rank(r, blocked(r, call(1, "all_reduce"), call(2, "broadcast" if r == 2 else "all_reduce",
                                                                done=False))) for r in range(4)]

    def test_every_rank_blocked_for_good_ends_on_every_rank(self):
        for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
            with self.subTest(order=order):
                self.setUp()
                seen = self.ticks(self.watches(self.desync()), 6, order)
                found = (2, "#2 on the default group, different ops: broadcast(float32[4]) on rank 2; "
                            "all_reduce(float32[4]) on ranks 0, 1, 3")
                self.assertEqual(seen[-1], {r: found for r in range(4)})
                self.assertEqual(seen[0], {r: None for r in range(4)}, "one look proves nothing")

    def test_ranks_in_a_matching_collective_are_never_stopped_and_post_once(self):
        ranks = [Rank(r, blocked(r, call(1, "all_reduce", done=False))) for r in range(4)]
        seen = self.ticks(self.watches(ranks), 20)
        self.assertTrue(all(found is None for tick in seen for found in tick.values()))
        self.assertEqual(self.store.count(self.keys.blocked_posts), 4, "one dump per rank while nothing moves")

    def test_a_passing_test_costs_no_store_traffic(self):
        # the main threads compute (their CPU time moves), or sleep in the test's code (torch's code does not hold
        # them): no rank asks anything of the store
        ranks = [Rank(r, blocked(r, call(1, "all_reduce")), waits="" if r % 2 else "all_reduce") for r in range(4)]
        watches = self.watches(ranks)
        for tick in range(20):
            for r in ranks:
                r.cpu += 1000 if r.rank % 2 == 0 else 0
            self.ticks(watches, 1)
        self.assertEqual(self.store.calls, 0)

    def test_a_rank_that_moves_on_after_its_dump_is_not_judged_on_it(self):
        # every dump of the first round shows a desync; then rank 1 runs (its CPU time moves) and stays busy: it
        # never answers rank 0's second round, so nothing is decided, however long the others wait
        ranks = self.desync()
        watches = self.watches(ranks)
        self.ticks(watches, 2)
        ranks[1].cpu += 1000
        for _ in range(20):
            ranks[1].cpu += 1000
            seen = self.ticks(watches, 1)[0]
            self.assertEqual(seen, {r: None for r in range(4)})

    def test_a_rank_that_moved_between_the_rounds_is_not_still(self):
        # rank 3 answers the second round from another wait with more CPU used: never_meet's second look fails;
        # once it stays there, the next rounds decide
        ranks = self.desync()
        watches = self.watches(ranks)
        self.ticks(watches, 2, [1, 2, 3, 0])  # rank 0 asked for round 1
        ranks[3].cpu += 5
        ranks[3].dump = blocked(3, call(1, "all_reduce"), call(2, "all_reduce"), call(3, "all_reduce", done=False))
        seen = self.ticks(watches, 1, [3])  # its CPU moved: not idle at this look
        self.assertEqual(seen, [{3: None}])
        found = None
        for _ in range(8):
            found = self.ticks(watches, 1, [1, 2, 3, 0])[0][0] or found
        self.assertIsNotNone(found)
        self.assertEqual(found[0], 2)

    def test_no_decision_once_a_rank_ended_its_test(self):
        ranks = self.desync()
        self.store.post(self.keys.result(1), Done(RankResult(rank=1, status=PASSED)))
        seen = self.ticks(self.watches(ranks), 10)
        self.assertTrue(all(found is None for tick in seen for found in tick.values()))


if __name__ == "__main__":
    unittest.main()
