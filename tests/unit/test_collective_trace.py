"""The pure parts of pinned collectives: the names table, the ranks' traces as one text and back, the first
difference, the literal found in a file another process already edited (a device's pin written alone), which pin
a trace is compared with, and a group's name in a trace. No process is started."""
from __future__ import annotations

import os
import tempfile
import textwrap
import unittest

from harness.shared import collective_names
from harness.shared.errors import UsageError
from harness.testing import collective_pins, literals
from harness.testing.collective_trace import NOTHING, first_difference, mismatch, parse, rank_ranges, render
from harness.testing.collectives import group_label

SEND = "send(float32[4], to=1) on world"
RECV = "recv(from=0) -> float32[4] on world"
BLOCK = "coalesced on world:\n  all_gather_into_tensor(float32[4]) -> float32[8]\n  all_reduce(float32[2], sum)"


class TestNames(unittest.TestCase):
    def test_the_user_name_whatever_the_op(self) -> None:
        self.assertEqual(collective_names.user_name("c10d._allgather_base_.default"), "all_gather_into_tensor")
        self.assertEqual(collective_names.user_name("_c10d_functional::all_gather_into_tensor"),
                         "all_gather_into_tensor")
        self.assertEqual(collective_names.user_name("c10d::_reduce_scatter_base_"), "reduce_scatter_tensor")
        self.assertEqual(collective_names.user_name("c10d::recv_any_source_"), "recv")
        self.assertIsNone(collective_names.user_name("aten.add.Tensor"))
        self.assertTrue(collective_names.is_coalesced("c10d::allgather_into_tensor_coalesced_"))
        self.assertFalse(collective_names.is_coalesced("c10d::allreduce_"))

    def test_every_process_group_method_maps_to_a_name_a_dispatched_op_has(self) -> None:
        self.assertLessEqual(set(collective_names.PROCESS_GROUP_METHODS.values()) - {"monitored_barrier"},
                             set(collective_names.OPS.values()))


class TestRender(unittest.TestCase):
    def test_ranks_that_agree_share_every_line(self) -> None:
        self.assertEqual(render({0: ["a", BLOCK], 1: ["a", BLOCK]}), f"a\n{BLOCK}\n")

    def test_nothing_recorded_is_said(self) -> None:
        self.assertEqual(render({0: [], 1: []}), NOTHING + "\n")

    def test_where_ranks_differ_each_gets_a_block_equal_ranks_together(self) -> None:
        text = render({0: ["a", SEND, "b"], 1: ["a", RECV, "b"], 2: ["a", RECV, "b"], 3: ["a", "b", "c"]})
        self.assertEqual(text, textwrap.dedent(f"""\
            a
            rank 0:
              {SEND}
            ranks 1-2:
              {RECV}
            b
            rank 3:
              c
            """))

    def test_parse_reads_back_what_render_wrote(self) -> None:
        traces = {0: ["a", SEND, BLOCK], 1: ["a", RECV, BLOCK], 2: ["a", BLOCK, "z"], 3: [BLOCK]}
        self.assertEqual(parse(render(traces), [0, 1, 2, 3]), traces)

    def test_rank_ranges(self) -> None:
        self.assertEqual(rank_ranges([3]), "rank 3")
        self.assertEqual(rank_ranges([0, 1, 2, 5, 7, 8]), "ranks 0-2, 5, 7-8")


class TestMismatch(unittest.TestCase):
    def test_the_first_collective_that_differs_and_its_ranks(self) -> None:
        pinned = {0: ["a", SEND], 1: ["a", RECV]}
        recorded = {0: ["a", SEND], 1: ["a", "b"]}
        self.assertEqual(first_difference(pinned, recorded), f"#2 on rank 1: recorded `b`, pinned `{RECV}`")
        self.assertEqual(first_difference(pinned, pinned), "")

    def test_an_empty_literal_differs_at_the_first_collective_of_every_rank(self) -> None:
        recorded = {0: ["a"], 1: ["a"]}
        message = mismatch("", render(recorded), recorded)
        self.assertIn("first difference: #1 on ranks 0-1: recorded `a`, pinned nothing", message)
        self.assertIn("--- pinned\n+++ recorded\n", message)
        self.assertIn("\n+a", message)

    def test_a_collective_gone_is_a_minus_line(self) -> None:
        before = {0: ["ag", "ag", "rs"], 1: ["ag", "ag", "rs"]}
        after = {0: ["ag", "rs"], 1: ["ag", "rs"]}
        message = mismatch(render(before), render(after), after)
        self.assertIn("#2 on ranks 0-1: recorded `rs`, pinned `ag`", message)
        self.assertIn("\n-ag\n", message)


SOURCE = '''\
class TestX:
    def test_a(self):
        self.assertCollectivesInline(record, """""")
        self.assertCollectivesInline(record, """""")

    def test_b(self):
        self.assertCollectivesInline(record, ""\"""\")
'''


class TestLiteralFoundByItsPlace(unittest.TestCase):
    def test_a_literal_is_found_after_another_process_edited_lines_above_it(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.py")
            with open(path, "w") as f:
                f.write(SOURCE.replace('""\\"""\\"', '""""""'))
            # "another process" wrote the first literal of test_a: test_b's call moved down two lines
            self.assertEqual(literals._rewrite(path, "TestX.test_a", 0, "assertCollectivesInline", "x\ny\n"), 3)
            self.assertEqual(literals._rewrite(path, "TestX.test_b", 0, "assertCollectivesInline", "z\n"), 10)
            self.assertEqual(literals._rewrite(path, "TestX.test_a", 1, "assertCollectivesInline", "w\n"), 7)
            with open(path) as f:
                text = f.read()
            compile(text, path, "exec")
            self.assertIn('self.assertCollectivesInline(record, """\\\nx\ny\n""")', text)
            self.assertIn('self.assertCollectivesInline(record, """\\\nw\n""")', text)
            self.assertTrue(text.rstrip().endswith('self.assertCollectivesInline(record, """\\\nz\n""")'))
            self.assertIsNone(literals._rewrite(path, "TestX.test_c", 0, "assertCollectivesInline", "q"))

    def test_a_device_pin_is_written_alone_and_added_where_missing(self) -> None:
        """Accepting one device's pin rewrites (or adds) that keyword's literal only: every other device's pin is
        kept byte for byte, however it is written."""
        source = (
            'class TestX:\n'
            '    def test_a(self):\n'
            '        self.assertCollectivesInline(record, cpu="""""", cuda="""\\\n'
            'kept   exactly\n'
            '""")\n'
            '\n'
            '    def test_b(self):\n'
            '        self.assertCollectivesInline(\n'
            '            record,\n'
            '            cuda=\'foreign\\n\',  # a comment kept too\n'
            '        )\n')
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.py")
            with open(path, "w") as f:
                f.write(source)
            self.assertEqual(literals._rewrite(path, "TestX.test_a", 0, "assertCollectivesInline", "x\n", "cpu"),
                             3)
            self.assertEqual(literals._rewrite(path, "TestX.test_b", 0, "assertCollectivesInline", "y\n", "cpu"),
                             12)
            with open(path) as f:
                text = f.read()
            compile(text, path, "exec")
            self.assertIn('self.assertCollectivesInline(record, cpu="""\\\nx\n""", cuda="""\\\nkept   exactly\n""")',
                          text)
            self.assertIn("            cuda='foreign\\n', cpu=\"\"\"\\\ny\n\"\"\",  # a comment kept too\n        )\n",
                          text)
            # the pin of test_b's call now there is rewritten in place, the foreign one still untouched
            self.assertEqual(literals._rewrite(path, "TestX.test_b", 0, "assertCollectivesInline", "z\n", "cpu"),
                             12)
            with open(path) as f:
                self.assertIn("cuda='foreign\\n', cpu=\"\"\"\\\nz\n\"\"\",", f.read())


class TestPins(unittest.TestCase):
    """Which pin a trace is compared with, and the words of a pin missing or different."""

    def test_the_device_pin_and_the_one_for_every_device(self) -> None:
        pin = collective_pins.choose("t.T.test", None, {"cpu": "a\n", "cuda": "b\n"}, "cuda")
        self.assertEqual((pin.text, pin.device, pin.others), ("b\n", "cuda", ("cpu",)))
        self.assertEqual(collective_pins.choose("t.T.test", "a\n", {}, "cuda").device, None)
        self.assertIsNone(collective_pins.choose("t.T.test", None, {"cuda": "b\n"}, "cpu").text)
        self.assertIsNone(collective_pins.choose("t.T.test", None, {"cpu": "", "cuda": "b\n"}, "cpu").text)

    def test_mistakes_name_the_test_and_the_fix(self) -> None:
        for expect, pins, words in (("a", {"cuda": "b"}, "not both"), (None, {"gpu": "b"}, "gpu=...): a pin is keyed "
                                                                         "by a device type, one of cpu=, cuda="),
                                    (None, {}, "without a pin"), (None, {"cpu": 3}, "cpu is a pinned text")):
            with self.assertRaises(UsageError) as caught:
                collective_pins.choose("t.T.test_x [rank 0]", expect, pins, "cpu")
            self.assertIn("t.T.test_x [rank 0]: assertCollectivesInline", str(caught.exception))
            self.assertIn(words, str(caught.exception))

    def test_a_missing_pin_names_the_accept_command(self) -> None:
        command = collective_pins.accept_command(os.path.join(os.getcwd(), "tests", "t.py"), "t.TestX.test_y")
        self.assertEqual(command, f"EXPECTTEST_ACCEPT=1 python -m harness {os.path.join('tests', 't.py')} "
                                  "-k TestX.test_y")
        pin = collective_pins.Pin(None, "cpu", ("cuda",))
        text = collective_pins.missing("t.TestX.test_y", pin, "cpu/gloo", "a\n", command)
        self.assertEqual(text, "t.TestX.test_y: no cpu pin yet (it ran on cpu/gloo; its pins: cuda); the recorded "
                               f"trace:\na\nTo pin it, run on this machine: {command} (rank 0 writes "
                               "cpu=\"\"\"...\"\"\" into the call and keeps the cuda pin)")

    def test_a_mismatch_says_which_pin_it_compared(self) -> None:
        pin = collective_pins.Pin("a\n", "cuda", ("cpu",))
        text = collective_pins.differs("t.TestX.test_y", pin, "cuda-shared/gloo", "first difference: ...", "CMD")
        self.assertTrue(text.startswith("t.TestX.test_y: the collectives differ from the cuda pin, compared on "
                                        "cuda-shared/gloo; first difference: ...\n"), text)
        self.assertIn("as the cuda pin (the cpu pin kept as they are), run on this machine: CMD", text)


class TestGroupLabel(unittest.TestCase):
    """A group's name in a trace: its members and a mesh dimension's name, never how torch built it."""

    def test_every_rank_of_the_world_reads_world_however_the_group_was_made(self) -> None:
        # the default group; a 1-D mesh's own group over the world (CUDA beside gloo); a mesh dimension over it
        for description in ("default_pg", "mesh_default", "mesh_dp", "", "undescribed"):
            self.assertEqual(group_label((0, 1, 2, 3), 4, description), "world", description)

    def test_a_proper_subset_keeps_its_mesh_dimension_name_else_its_ranks(self) -> None:
        self.assertEqual(group_label((0, 2), 4, "mesh_dp"), "dp")
        self.assertEqual(group_label((1,), 2, "mesh_dim_0"), "dim_0")
        self.assertEqual(group_label((0, 2), 4, ""), "ranks [0, 2]")

    def test_a_mesh_given_to_the_record_names_every_group_with_its_members(self) -> None:
        named = {(0, 1): "tp", (0,): "dp"}
        self.assertEqual(group_label((0, 1), 2, "default_pg", named), "tp")
        self.assertEqual(group_label((0,), 2, "mesh_dp", named), "dp")


if __name__ == "__main__":
    unittest.main()
