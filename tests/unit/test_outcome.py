"""A rank's result as data: bounded output, a result that always pickles, tracebacks that start at the test."""
from __future__ import annotations

import os
import pickle
import tempfile
import unittest

from harness.shared.output import bounded_output, read_bounded
from harness.shared.outcome import (ERROR, FAILED, PASSED, RankResult, Shown, SubtestOutcome, capture_exception,
                                    sendable, shown_value)


class _Unpicklable(str):
    """A str subclass that refuses to pickle, as some libraries' message types do."""

    def __reduce__(self):
        raise TypeError("not picklable")


class TestBoundedOutput(unittest.TestCase):
    def test_short_output_is_kept_whole(self):
        self.assertEqual(bounded_output(b"a\nb\n", limit=1024), "a\nb\n")

    def test_long_output_keeps_whole_lines_of_head_and_tail_and_says_what_was_cut(self):
        data = b"".join(b"line %04d\n" % i for i in range(1000))  # 10,000 bytes
        text = bounded_output(data, limit=2048)
        head, _, rest = text.partition("\n... ")
        said, _, tail = rest.partition("\n")
        self.assertTrue(head.startswith("line 0000\nline 0001"))
        self.assertRegex(said, r"^\d+ bytes of output not shown \(the first and last 1 KiB are kept\) \.\.\.$")
        self.assertTrue(tail.endswith("line 0999\n"))
        self.assertTrue(all(len(line) == 9 for line in (head + "\n" + tail).splitlines()), "a line cut in half")
        self.assertEqual(int(said.split()[0]), len(data) - len(head) - 1 - len(tail))

    def test_broken_utf8_does_not_raise(self):
        self.assertEqual(bounded_output(b"\xff ok", limit=1024), "\ufffd ok")

    def test_read_bounded_reads_from_an_offset_and_bounds_what_it_reads(self):
        with tempfile.NamedTemporaryFile("wb", delete=False) as f:
            f.write(b"old test's output\n" + b"x" * 5000 + b"\nend\n")
        self.addCleanup(os.remove, f.name)
        offset = len(b"old test's output\n")
        text = read_bounded(f.name, offset=offset, limit=1024)
        self.assertNotIn("old test", text)
        self.assertIn("bytes of output not shown", text)
        self.assertTrue(text.endswith("end\n"))
        self.assertEqual(read_bounded(f.name, offset=offset + 5001, limit=1024), "end\n")

    def test_read_bounded_of_a_missing_file_is_empty(self):
        self.assertEqual(read_bounded("/nonexistent/rank0.out"), "")


class TestSendable(unittest.TestCase):
    def test_a_picklable_result_is_sent_as_it_is(self):
        result = RankResult(rank=0, status=FAILED, message="plain")
        self.assertIs(sendable(result), result)

    def test_an_unpicklable_str_subclass_becomes_a_plain_str(self):
        odd = _Unpicklable("FIXTURE message")
        result = RankResult(rank=1, status=FAILED, exc_type="AssertionError", message=odd, altered=[odd],
                            subtests=[SubtestOutcome({"k": odd}, FAILED, message=odd)])
        with self.assertRaises(TypeError):
            pickle.dumps(result)
        sent = pickle.loads(pickle.dumps(sendable(result)))
        self.assertEqual((sent.rank, sent.status, sent.message, sent.altered), (1, FAILED, "FIXTURE message",
                                                                                ["FIXTURE message"]))
        self.assertIs(type(sent.message), str)
        self.assertEqual(sent.subtests[0].params, {"k": "FIXTURE message"})

    def test_what_cannot_be_made_plain_is_an_error_that_says_why(self):
        result = RankResult(rank=0, status=FAILED)
        result.duration = _Unpicklable("x")  # float() of it fails: nothing plain can be made
        sent = sendable(result)
        self.assertEqual(sent.status, ERROR)
        self.assertIn("this rank's result could not be sent to the parent (TypeError: not picklable)", sent.message)


class TestShownValue(unittest.TestCase):
    """A subtest's parameters travel to the parent as plain data: it only shows them."""

    def test_plain_data_is_kept_as_it_is(self):
        for value in (None, True, 3, 2.5, 1j, "x", b"y", (1, "a"), [1, [2.0]], {"k": (None, 1)}, frozenset({1})):
            self.assertIs(shown_value(value), value)

    def test_a_tensor_travels_as_its_repr_and_reads_as_the_tensor_did(self):
        import torch
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401 - registers torch's shared-memory pickling of tensors

        t = torch.arange(3)
        for value in (t, [t], {"mesh": t}):
            shown = shown_value(value)
            self.assertIsInstance(shown, Shown)
            self.assertEqual(repr(shown), repr(value))
        outcome = SubtestOutcome({"t": shown_value(t)}, PASSED)
        self.assertEqual(outcome.label, f"t={t!r}")
        # what the pipe to the parent does: a tensor would go through shared memory, its repr does not
        self.assertEqual(pickle.loads(ForkingPickler.dumps(outcome)).params, {"t": repr(t)})

    def test_an_enum_or_a_dtype_reads_as_it_did(self):
        import enum

        import torch

        class Mode(enum.Enum):
            FULL = 1

        for value in (Mode.FULL, torch.float16):
            self.assertEqual(repr(shown_value(value)), repr(value))

    def test_a_value_whose_repr_raises_says_so(self):
        class Odd:
            def __repr__(self):
                raise RuntimeError("no")

        self.assertEqual(shown_value(Odd()), "<unprintable Odd>")


class TestCaptureException(unittest.TestCase):
    def test_type_message_and_a_traceback_that_starts_at_the_raiser(self):
        try:
            raise KeyError("missing")
        except KeyError as exc:
            name, message, text = capture_exception(exc)
        self.assertEqual((name, message), ("KeyError", "'missing'"))
        self.assertIn("test_outcome.py", text)
        self.assertTrue(text.rstrip().endswith("KeyError: 'missing'"))

    def test_a_harness_exception_is_named_with_its_module(self):
        from harness.errors import UsageError

        self.assertEqual(capture_exception(UsageError("x"))[0], "harness.errors.UsageError")


if __name__ == "__main__":
    unittest.main()
