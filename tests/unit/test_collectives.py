"""The analysis of the ranks' collectives (harness.judging.analysis) over dumps made by hand, and the report
that merge() makes of them: no process, no process group.

A dump is what a rank's flight recorder held of one test, as ``harness.ranks.recorder.own_dump`` writes it.
"""
from __future__ import annotations

import unittest
from typing import Any

from harness.judging import analysis as collectives
from harness.shared.outcome import ERROR, KILLED, PASSED, TIMEOUT, RankResult
from harness.judging.verdict import merge

DEFAULT = {"0": {"ranks": [0, 1], "desc": "default_pg", "default": True}}


def call(seq: int, op: str, size: list[int] | None = None, dtype: str = "Float", group: str = "0", done: bool = True,
         out: list[int] | None = None, desc: str = "default_pg") -> dict[str, Any]:
    size = [4] if size is None else size
    return {"group": group, "desc": desc, "seq": seq, "op": op, "backend": "gloo", "state": "scheduled", "done": done,
            "input_sizes": [size], "output_sizes": [out if out is not None else size], "input_dtypes": [dtype],
            "output_dtypes": [dtype]}


def dump(rank: int, *calls: dict[str, Any], groups: dict[str, Any] | None = None, creating: bool = False,
         creating_ranks: list[int] | None = None) -> dict[str, Any]:
    """``creating_ranks``: the ranks of the group the rank makes (None: every rank's, or not known)."""
    return {"rank": rank, "calls": list(calls), "groups": DEFAULT if groups is None else groups, "creating": creating,
            "creating_ranks": creating_ranks}


class TestAnalysis(unittest.TestCase):
    def test_ranks_in_step(self):
        dumps = {r: dump(r, call(1, "all_reduce"), call(2, "broadcast")) for r in (0, 1)}
        (view,) = collectives.analyse(dumps, 2)
        self.assertEqual(view.label, "the default group")
        self.assertIsNone(view.difference)
        self.assertIn("ranks 0, 1: last called #2 broadcast(float32[4]) on the default group, ended",
                      collectives.section(dumps, 2))
        self.assertIn("the ranks agree", collectives.section(dumps, 2))

    def test_ops_differ(self):
        dumps = {0: dump(0, call(1, "all_reduce"), call(2, "all_gather", out=[2, 4], done=False)),
                 1: dump(1, call(1, "all_reduce"), call(2, "all_reduce", [5], done=False))}
        (view,) = collectives.analyse(dumps, 2)
        self.assertEqual(view.difference[:2], ("op", 2))
        self.assertIn("first difference: #2, different ops: all_gather(float32[4]) on rank 0; all_reduce(float32[5]) "
                      "on rank 1", collectives.section(dumps, 2))

    def test_sizes_differ(self):
        dumps = {0: dump(0, call(1, "all_reduce", [4], done=False)), 1: dump(1, call(1, "all_reduce", [5], done=False))}
        self.assertEqual(collectives.analyse(dumps, 2)[0].difference[:2], ("size", 1))
        self.assertIn("#1, different sizes: all_reduce(float32[4]) on rank 0; all_reduce(float32[5]) on rank 1",
                      collectives.section(dumps, 2))

    def test_dtypes_differ(self):
        dumps = {0: dump(0, call(1, "all_reduce", dtype="Float")), 1: dump(1, call(1, "all_reduce", dtype="Long"))}
        self.assertEqual(collectives.analyse(dumps, 2)[0].difference[:2], ("dtype", 1))
        self.assertIn("all_reduce(int64[4]) on rank 1", collectives.section(dumps, 2))

    def test_legitimate_differences_are_torchs_to_judge(self):
        # all_gather: every rank's output is the world's inputs, whatever the list form; the same call on both
        dumps = {r: dump(r, call(1, "all_gather", [3], out=[2, 3])) for r in (0, 1)}
        (view,) = collectives.analyse(dumps, 2)
        self.assertIsNone(view.difference)
        text = collectives.section(dumps, 2)
        self.assertIn("ranks 0, 1: last called #1 all_gather(float32[3]) on the default group, ended", text)
        self.assertIn("the ranks agree", text)

    def test_a_rank_missing(self):
        dumps = {0: dump(0, call(1, "all_reduce"), call(2, "all_reduce", [3], done=False)),
                 1: dump(1, call(1, "all_reduce"))}
        (view,) = collectives.analyse(dumps, 2)
        self.assertEqual(view.difference[0], "missing")
        self.assertIn("first difference: rank 1 never called #2 all_reduce(float32[3]) on the default group: its last "
                      "was #1", collectives.section(dumps, 2))

    def test_a_rank_that_called_none(self):
        dumps = {0: dump(0, call(1, "all_reduce", [1], done=False)), 1: dump(1)}
        text = collectives.section(dumps, 2)
        self.assertIn("rank 1: called none in this test", text)
        self.assertIn("rank 1 never called #1 all_reduce(float32[1]) on the default group: it called none on it in "
                      "this test", text)

    def test_a_rank_without_a_record(self):
        dumps = {0: dump(0, call(1, "all_reduce", done=False))}  # rank 1 died: no dump
        text = collectives.section(dumps, 2)
        self.assertIn("rank 1: no record", text)
        self.assertIn("the ranks agree", text)  # nothing to compare it with

    def test_a_subgroup(self):
        groups = {**DEFAULT, "1": {"ranks": [0, 1], "desc": "undefined", "default": False}}
        dumps = {0: dump(0, call(1, "all_reduce", group="1", desc="undefined"), groups=groups),
                 1: dump(1, call(1, "all_reduce", group="1", desc="undefined"),
                         call(2, "broadcast", group="1", desc="undefined"), groups=groups)}
        (view,) = collectives.analyse(dumps, 2)
        self.assertEqual(view.label, 'group [0, 1] (name "1")')
        self.assertIn('rank 0 never called #2 broadcast(float32[4]) on group [0, 1] (name "1"): its last was #1',
                      collectives.section(dumps, 2))
        self.assertEqual(collectives.culprit(dumps, [0], 2)[:2], (0, 1))

    def test_several_groups_those_that_differ_first(self):
        groups = {"0": {"ranks": [0, 1, 2, 3], "desc": "default_pg", "default": True},
                  "1": {"ranks": [0, 1], "desc": "mesh_dp", "default": False},
                  "2": {"ranks": [2, 3], "desc": "mesh_dp", "default": False}}
        dumps = {r: dump(r, call(1, "all_reduce"), call(1, "all_reduce", group=str(1 + r // 2), desc="mesh_dp"),
                         groups=groups) for r in range(4)}
        dumps[3]["calls"].append(call(2, "reduce_scatter", [8], out=[4], group="2", desc="mesh_dp", done=False))
        views = collectives.analyse(dumps, 4)
        self.assertEqual([v.label for v in views], ['group [2, 3] (name "2", mesh_dp)', "the default group",
                                                    'group [0, 1] (name "1", mesh_dp)'])
        self.assertEqual(views[0].members, [2, 3])
        self.assertEqual(views[0].difference[3], {2: 1})
        text = collectives.section(dumps, 4)
        self.assertIn("ranks 0, 1, 2, 3: last called #1 all_reduce(float32[4]) on the default group, ended", text)
        self.assertIn('rank 2 never called #2 reduce_scatter(float32[8]) on group [2, 3] (name "2", mesh_dp)', text)

    def test_no_collective_no_section(self):
        self.assertEqual(collectives.section({0: dump(0), 1: dump(1)}, 2), "")
        self.assertEqual(collectives.section({}, 2), "")

    def test_describe_call(self):
        self.assertEqual(collectives.describe_call(call(3, "all_gather", [4], out=[2, 4])), "all_gather(float32[4])")
        self.assertEqual(collectives.describe_call({"op": "barrier", "input_sizes": [], "output_sizes": []}),
                         "barrier()")
        self.assertEqual(collectives.describe_call(call(1, "all_reduce", [2, 3], dtype="BFloat16")),
                         "all_reduce(bfloat16[2, 3])")


class TestStuck(unittest.TestCase):
    """Which waits can never end: the pool stops those within the peer grace, not at the timeout."""

    def test_waiting_in_a_collective_a_returned_rank_never_called(self):
        dumps = {0: dump(0, call(1, "all_reduce"), call(2, "all_reduce", [3], done=False)),
                 1: dump(1, call(1, "all_reduce"))}
        self.assertEqual(collectives.stuck(dumps, {1: "passed"}, [0], 2),
                         {0: "rank 1 passed without calling #2 all_reduce(float32[3]) on the default group"})

    def test_a_collective_the_returned_rank_did_call_can_still_finish(self):
        # rank 1 took its part in #2 and returned; rank 0 is finishing its side of it
        dumps = {0: dump(0, call(1, "all_reduce"), call(2, "all_reduce", done=False)),
                 1: dump(1, call(1, "all_reduce"), call(2, "all_reduce"))}
        self.assertEqual(collectives.stuck(dumps, {1: "passed"}, [0], 2), {})

    def test_a_group_the_returned_rank_is_not_in(self):
        groups = {"0": {"ranks": [0, 1, 2], "desc": "default_pg", "default": True},
                  "1": {"ranks": [0, 1], "desc": "undefined", "default": False}}
        dumps = {0: dump(0, call(1, "all_reduce", group="1", desc="undefined", done=False), groups=groups),
                 1: dump(1, groups=groups), 2: dump(2, groups=groups)}
        self.assertEqual(collectives.stuck(dumps, {2: "passed"}, [0, 1], 3), {})
        self.assertIn(0, collectives.stuck(dumps, {1: "passed"}, [0, 2], 3))

    def test_not_in_a_collective(self):
        dumps = {0: dump(0, call(1, "all_reduce")), 1: dump(1, call(1, "all_reduce"))}
        self.assertEqual(collectives.stuck(dumps, {1: "passed"}, [0], 2), {})

    def test_creating_a_group(self):
        dumps = {0: dump(0, call(1, "all_reduce"), creating=True), 1: dump(1, call(1, "all_reduce"))}
        self.assertEqual(collectives.stuck(dumps, {1: "was skipped"}, [0], 2),
                         {0: "rank 1 was skipped while rank 0 was creating a process group, which every rank of the "
                             "world joins"})

    def test_still_creating_the_group_a_returned_rank_made_its_side_of_is_on_its_way(self):
        # rank 0's body ended at once, on the group the harness made for the test; rank 1, slowed by a loaded
        # machine, is still inside init_process_group: its dump has no group yet; that is no hang
        dumps = {0: dump(0), 1: dump(1, creating=True, groups={})}
        self.assertEqual(collectives.stuck(dumps, {0: "passed"}, [1], 2), {})
        # the same rank creating a group the returned rank never makes (it has them all) waits for ever
        dumps[1] = dump(1, creating=True)
        self.assertIn(1, collectives.stuck(dumps, {0: "passed"}, [1], 2))
        subgroup = {**DEFAULT, "1": {"ranks": [0, 1], "desc": "undefined", "default": False}}
        dumps = {0: dump(0, groups=subgroup), 1: dump(1, creating=True)}  # rank 1 makes the subgroup rank 0 has
        self.assertEqual(collectives.stuck(dumps, {0: "passed"}, [1], 2), {})

    def test_creating_a_group_without_the_returned_rank_is_no_wait_for_it(self):
        # new_group([1]) (a 2-D mesh's dimension of one rank) or new_group([1, 2]): rank 0 is not a member
        for ranks in ([1], [1, 2]):
            dumps = {0: dump(0), 1: dump(1, creating=True, creating_ranks=ranks), 2: dump(2)}
            self.assertEqual(collectives.stuck(dumps, {0: "passed"}, [1, 2], 3), {}, ranks)
        # a group the returned rank is a member of: named, with the rank that never comes to join it
        dumps = {0: dump(0), 1: dump(1, creating=True, creating_ranks=[0, 1])}
        self.assertEqual(collectives.stuck(dumps, {0: "failed"}, [1], 2),
                         {1: "rank 0 failed while rank 1 was creating process group [0, 1], which rank 0 joins"})


FOUR = {"0": {"ranks": [0, 1, 2, 3], "desc": "default_pg", "default": True},
        "1": {"ranks": [0, 1], "desc": "undefined", "default": False}}


def blocked(rank: int, *calls: dict[str, Any], waits: str = "all_reduce", cpu: int = 7, creating: bool = False,
            groups: dict[str, Any] | None = None, creating_ranks: list[int] | None = None) -> dict[str, Any]:
    """A dump whose main thread is inside torch's code (``waits``) and used ``cpu`` ns so far; calls in order."""
    d = dump(rank, *[{**c, "t": i} for i, c in enumerate(calls)], groups=FOUR if groups is None else groups,
             creating=creating, creating_ranks=creating_ranks)
    return {**d, "waits": waits, "cpu_ns": cpu}


class TestNeverMeet(unittest.TestCase):
    """never_meet: every rank still in the test blocked for good in collectives that can never complete."""

    def decide(self, dumps, pending=None, world_size=4, before=None):
        pending = sorted(dumps) if pending is None else pending
        return collectives.never_meet(dumps, pending, world_size, before=dumps if before is None else before)

    def test_different_ops(self):
        dumps = {r: blocked(r, call(1, "all_reduce"), call(2, "broadcast" if r == 2 else "all_reduce", done=False))
                 for r in range(4)}
        self.assertEqual(self.decide(dumps), (2, "#2 on the default group, different ops: broadcast(float32[4]) on "
                                                 "rank 2; all_reduce(float32[4]) on ranks 0, 1, 3"))

    def test_different_sizes_with_ranks_that_got_out(self):
        # gloo lets ranks 0 and 3 out of the mismatched all_reduce; 1 and 2 wait for good
        dumps = {r: blocked(r, call(1, "all_reduce", [5 if r == 1 else 4], done=r in (0, 3)),
                            waits="" if r in (0, 3) else "all_reduce") for r in range(4)}
        root, why = self.decide(dumps, pending=[1, 2])
        self.assertEqual(root, 1)
        self.assertEqual(why, "#1 on the default group, different sizes: all_reduce(float32[5]) on rank 1; "
                              "all_reduce(float32[4]) on ranks 0, 2, 3")

    def test_different_dtypes(self):
        dumps = {r: blocked(r, call(1, "all_reduce", dtype="Double" if r == 3 else "Float", done=False))
                 for r in range(4)}
        self.assertEqual(self.decide(dumps)[0], 3)
        self.assertIn("different dtypes: all_reduce(float64[4]) on rank 3", self.decide(dumps)[1])

    def test_a_group_one_member_never_joined(self):
        dumps = {0: blocked(0, call(1, "all_reduce", group="1", desc="undefined", done=False))}
        dumps.update({r: blocked(r, call(1, "all_reduce", done=False)) for r in (1, 2, 3)})
        self.assertEqual(self.decide(dumps), (0, 'rank 0 waits in #1 all_reduce(float32[4]) on group [0, 1] (name '
                                                 '"1"), which rank 1 never called (it waits in #1 '
                                                 'all_reduce(float32[4]) on the default group)'))

    def test_creating_a_group_while_the_others_wait_in_a_collective(self):
        dumps = {0: blocked(0, waits="new_group", creating=True)}
        dumps.update({r: blocked(r, call(1, "all_reduce", done=False)) for r in (1, 2, 3)})
        self.assertEqual(self.decide(dumps)[0], 0)
        self.assertEqual(self.decide(dumps)[1], "rank 0 is creating a process group alone, which no other rank comes "
                                                "to join; rank 1: it waits in #1 all_reduce(float32[4]) on the default "
                                                "group")

    def test_a_rank_still_creating_the_group_the_others_wait_in_is_not_a_desync(self):
        # init_process_group: rank 0, slowed by a loaded machine, still makes the default group that rank 1 made
        # already and waits in (its first barrier)
        dumps = {0: blocked(0, waits="_new_process_group_helper", creating=True, groups={}),
                 1: blocked(1, call(1, "barrier", done=False), groups=DEFAULT)}
        self.assertIsNone(self.decide(dumps, world_size=2))
        # once rank 0 has that group, a creation of another is one no peer joins: a desync
        dumps[0] = blocked(0, waits="new_group", creating=True, groups=DEFAULT)
        self.assertIsNotNone(self.decide(dumps, world_size=2))

    def test_creating_a_group_no_peer_is_in_is_not_a_desync(self):
        # a 2-D mesh of shape (1, 2): each rank makes new_group([0]) then new_group([1]); rank 1, slowed by a loaded
        # machine (its main thread idle in the group's creation for two looks), makes its group of one while rank 0
        # is past both, in the default group's all_reduce: rank 1 waits for nobody, and comes
        dumps = {0: blocked(0, call(1, "all_reduce", done=False), groups=DEFAULT),
                 1: blocked(1, waits="_new_process_group_helper", creating=True, creating_ranks=[1], groups=DEFAULT)}
        self.assertIsNone(self.decide(dumps, world_size=2))
        dumps[1] = blocked(1, waits="_new_process_group_helper", creating=True, creating_ranks=[0], groups=DEFAULT)
        self.assertIsNone(self.decide(dumps, world_size=2), "not a member: torch makes nothing there")
        # a group with rank 0 in it, which rank 0 (waiting in the default group) never comes to make: a desync
        dumps[1] = blocked(1, waits="_new_process_group_helper", creating=True, creating_ranks=[0, 1],
                           groups=DEFAULT)
        self.assertEqual(self.decide(dumps, world_size=2),
                         (1, "rank 1 is creating process group [0, 1] alone, which no other rank comes to join; rank "
                             "0: it waits in #1 all_reduce(float32[4]) on the default group"))

    def test_ranks_creating_a_subgroup_while_the_others_wait_for_them_are_not_a_desync(self):
        # new_group([0, 1]): ranks 2 and 3 are past it, in the default group's all_reduce that 0 and 1 call once
        # their pair's group is made (slow under load: gloo connects them)
        dumps = {r: blocked(r, waits="new_group", creating=True) for r in (0, 1)}
        dumps.update({r: blocked(r, call(1, "all_reduce", done=False)) for r in (2, 3)})
        self.assertIsNone(self.decide(dumps))

    def test_matching_collectives_are_never_a_desync(self):
        # a long all_reduce: every rank waits in it; or some ranks already out of it, their records ahead
        waiting = {r: blocked(r, call(1, "all_reduce", done=False)) for r in range(4)}
        self.assertIsNone(self.decide(waiting))
        ahead = {r: blocked(r, call(1, "all_reduce", done=r < 2), *([call(2, "all_reduce", done=False)] if r < 2
                                                                    else [])) for r in range(4)}
        self.assertIsNone(self.decide(ahead))

    def test_a_rank_not_yet_in_its_collective(self):
        # rank 3 computes (or sleeps) in the test's code: its latest collective ended, or its main thread is its own
        dumps = {r: blocked(r, call(1, "all_reduce"), call(2, "all_reduce", done=False)) for r in range(3)}
        dumps[3] = blocked(3, call(1, "all_reduce"), waits="")
        self.assertIsNone(self.decide(dumps))
        dumps[3] = blocked(3, call(1, "all_reduce"))
        self.assertIsNone(self.decide(dumps))

    def test_an_async_collective_then_the_tests_own_code(self):
        # rank 0 issued an async all_reduce on the pair and sleeps: not blocked, although its collective is open
        dumps = {0: blocked(0, call(1, "all_reduce", group="1", desc="undefined", done=False), waits="")}
        dumps.update({r: blocked(r, call(1, "all_reduce", [2], done=False)) for r in (1, 2, 3)})
        self.assertIsNone(self.decide(dumps))

    def test_a_rank_that_moved_between_two_looks(self):
        dumps = {r: blocked(r, call(1, "broadcast" if r == 2 else "all_reduce", done=False)) for r in range(4)}
        self.assertIsNotNone(self.decide(dumps))
        self.assertIsNone(collectives.never_meet(dumps, range(4), 4, before=None), "one look proves nothing")
        moved = {**dumps, 1: blocked(1, call(1, "all_reduce", done=False), cpu=8)}
        self.assertIsNone(self.decide(dumps, before=moved), "its main thread ran in between")
        unknown = {r: {**d, "cpu_ns": -1} for r, d in dumps.items()}
        self.assertIsNone(self.decide(unknown), "no CPU time: never proven")

    def test_a_member_without_a_dump_is_not_proof(self):
        # ranks 0-2 wait in the same all_reduce; rank 3's record is missing: whether it comes is not known
        dumps = {r: blocked(r, call(1, "all_reduce", done=False)) for r in range(3)}
        self.assertIsNone(self.decide(dumps, pending=[0, 1, 2]))

    def test_no_recorder_no_decision(self):
        dumps = {r: blocked(r) for r in range(4)}
        self.assertIsNone(self.decide(dumps))


class TestReport(unittest.TestCase):
    """merge() puts the section before the stacks, and blames a rank that left a peer waiting for it."""

    def test_section_before_the_stacks(self):
        results = [RankResult(rank=r, status=TIMEOUT, message="timed out after 20 s", arrived=float(r),
                              stack='  File "t.py", line 3 in test_x',
                              collectives=dump(r, call(1, "all_reduce", [4 + r], done=False))) for r in (0, 1)]
        text = merge("m.T.test_x", results, 2, "cpu/gloo").text
        self.assertLess(text.index("Collectives, per process group"), text.index("Its Python stack"))
        self.assertIn("different sizes", text)

    def test_a_rank_that_passed_without_the_collective_is_the_root_cause(self):
        groups = {**DEFAULT, "1": {"ranks": [0, 1], "desc": "undefined", "default": False}}
        results = [RankResult(rank=0, status=PASSED, collectives=dump(0, call(1, "all_reduce", group="1"),
                                                                         groups=groups)),
                   RankResult(rank=1, status=ERROR, exc_type="RuntimeError",
                              message="[pair.cc:553] Connection closed by peer [127.0.0.1]:1234",
                              traceback="Traceback ...\nRuntimeError: Connection closed by peer",
                              collectives=dump(1, call(1, "all_reduce", group="1"), call(2, "broadcast", group="1"),
                                               groups=groups))]
        verdict = merge("m.T.test_x", results, 2, "cpu/gloo")
        self.assertEqual((verdict.status, verdict.root_rank), (ERROR, 0))
        first = verdict.text.splitlines()[0]
        self.assertEqual(first, 'm.T.test_x [rank 0/2] ended its test (passed) on cpu/gloo without a collective rank 1 '
                                'waited in: rank 0 never called #2 broadcast(float32[4]) on group [0, 1] (name "1"): '
                                "its last was #1")
        self.assertIn("rank 1, which waited in it: RuntimeError: [pair.cc:553] Connection closed by peer", verdict.text)

    def test_a_rank_that_failed_by_itself_stays_the_root_cause(self):
        results = [RankResult(rank=0, status=ERROR, exc_type="RuntimeError", message="Connection closed by peer",
                              collectives=dump(0, call(1, "all_reduce"))),
                   RankResult(rank=1, status="failed", exc_type="AssertionError", message="1 != 2",
                              traceback="AssertionError: 1 != 2", collectives=dump(1))]
        verdict = merge("m.T.test_x", results, 2, "cpu/gloo")
        self.assertEqual(verdict.root_rank, 1)
        self.assertIn("rank 1 never called #1 all_reduce(float32[4]) on the default group", verdict.text)
        self.assertTrue(verdict.text.rstrip().endswith("(after the root cause above)"), verdict.text)

    def test_killed_waiter_and_a_passed_rank(self):
        results = [RankResult(rank=0, status=KILLED, message="still running 5.0 s after rank 1 passed",
                              collectives=dump(0, call(1, "all_reduce"), call(2, "all_reduce", [3], done=False))),
                   RankResult(rank=1, status=PASSED, collectives=dump(1, call(1, "all_reduce")))]
        verdict = merge("m.T.test_x", results, 2, "cpu/gloo")
        self.assertEqual(verdict.root_rank, 1)
        self.assertIn("rank 1 never called #2 all_reduce(float32[3]) on the default group: its last was #1",
                      verdict.text.splitlines()[0])

    def test_without_dumps_nothing_changes(self):
        results = [RankResult(rank=0, status=TIMEOUT, message="timed out after 20 s"),
                   RankResult(rank=1, status=PASSED)]
        verdict = merge("m.T.test_x", results, 2, "cpu/gloo")
        # the report as ever: the rank that timed out first, then the others; no section on collectives
        self.assertEqual(verdict.root_rank, 0)
        self.assertTrue(verdict.text.startswith("m.T.test_x [rank 0/2] timed out on cpu/gloo: timed out after 20 s"),
                        verdict.text)
        self.assertIn("Other ranks:\n  rank 1: passed", verdict.text)
        self.assertNotIn("Collectives", verdict.text)


if __name__ == "__main__":
    unittest.main()
