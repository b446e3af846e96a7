"""Collectives pinned inline: an accepting run writes fx_pinned's literals, later runs pass without touching
the file, a change of communication fails with a diff that names the collective, and a device without a pin fails
naming the command that writes it.

The fixture is copied to a temporary folder with every ``assertCollectivesInline`` literal this machine writes
emptied (one for every device, or this device's); one run with ``EXPECTTEST_ACCEPT=1`` must write them back exactly
as the committed fixture has them (so the traces are deterministic: a fresh pool, other processes than the ones
that first accepted them), and leave the other device's pin byte for byte.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import unittest

from tests._support import FIXTURES, REPO, base_env, nightly, run_fixture

FIXTURE = os.path.join(FIXTURES, "fx_pinned.py")
#: an assertCollectivesInline call's pinned literal: one for every device, or a device's (``cpu=``, ``cuda=``)
LITERAL = re.compile(r'((?:assertCollectivesInline\(record, |(?<=""", ))(?:[a-z]+=)?)("""(?:\\\n)?.*?""")', re.S)
#: the device this machine's ranks run on (CI: no GPU) and a device whose pin it must keep byte for byte
HERE, FOREIGN = "cpu=", "cuda="


def literals(text: str) -> list[str]:
    return [m.group(2) for m in LITERAL.finditer(text)]


def emptied(text: str) -> str:
    """Every literal this machine writes emptied: the ones for every device and this device's; a foreign device's
    pin kept."""
    return LITERAL.sub(lambda m: m.group(0) if m.group(1).endswith(FOREIGN) else m.group(1) + '""""""', text)


def without_here_pin(text: str) -> str:
    """The device-pinned call with this device's pin taken out: only the foreign device's is left."""
    match = re.search(r'assertCollectivesInline\(record, cpu=("""(?:\\\n)?.*?"""), cuda=', text, re.S)
    assert match, "fx_pinned has no call pinned per device"
    return text[:match.start()] + "assertCollectivesInline(record, cuda=" + text[match.end():]


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _Copies(unittest.TestCase):
    """A temporary folder with the fixture under two names: ``fx_pinned_copy`` (the literals this machine writes
    emptied, then accepted) and ``fx_pinned_flipped`` (the committed literals, reshard_after_forward flipped, the
    per-device call's cpu pin taken out)."""

    maxDiff = None

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        with open(FIXTURE) as f:
            cls.original = f.read()
        cls.folder = tempfile.mkdtemp(prefix="pinned-")
        cls.copy = os.path.join(cls.folder, "fx_pinned_copy.py")
        cls.flipped = os.path.join(cls.folder, "fx_pinned_flipped.py")
        with open(cls.copy, "w") as f:
            f.write(emptied(cls.original))
        flipped = cls.original.replace("RESHARD_AFTER_FORWARD = True", "RESHARD_AFTER_FORWARD = False")
        assert flipped != cls.original
        flipped = without_here_pin(flipped)
        with open(cls.flipped, "w") as f:
            f.write(flipped)
        cls.env = base_env(PYTHONPATH=os.pathsep.join([cls.folder, REPO]))
        cls.accepted = run_fixture([cls.copy], {**cls.env, "EXPECTTEST_ACCEPT": "1"}, runner="harness")

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.folder, ignore_errors=True)
        super().tearDownClass()


class TestAcceptThenPin(_Copies):
    """Accept once (the runner), then the runner: the pinned copy passes untouched, the flipped one fails."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.before = digest(cls.copy)
        # one runner process, one pool: both modules (world size 2) share its ranks
        cls.checked = run_fixture([cls.copy, cls.flipped, "-v", "--no-triage"], cls.env, runner="harness")

    def test_accept_writes_every_literal_as_committed(self) -> None:
        self.assertEqual(self.accepted.returncode, 0, self.accepted.describe())
        with open(self.copy) as f:
            written = literals(f.read())
        self.assertEqual(written, literals(self.original))
        self.assertEqual(len(written), 7)
        fsdp2, fsdp1_cpu, fsdp1_cuda, groups, differ = written[:5]
        self.assertIn("all_gather_into_tensor(", fsdp2)
        self.assertIn("reduce_scatter_tensor(", fsdp2)
        self.assertIn("all_gather(float32[13]) -> 2 x float32[13] on world", fsdp1_cpu)
        self.assertIn("all_gather_into_tensor(float32[13]) -> float32[26] on world", fsdp1_cuda)
        # a group over every rank reads `world` however torch made it; a mesh dimension over fewer ranks its name
        self.assertEqual(groups.count(" on world\n"), 4)
        self.assertIn("all_reduce(float32[2], sum) on dp\n", groups)
        self.assertRegex(differ, r"\nrank 0:\n  send\(float32\[4\], to=1\) on world\nrank 1:\n  recv\(from=0\)")

    def test_accept_keeps_the_foreign_device_pin_byte_for_byte(self) -> None:
        with open(self.copy) as f:
            written = f.read()
        foreign = [m.group(0) for m in LITERAL.finditer(self.original) if m.group(1).endswith(FOREIGN)]
        self.assertEqual(len(foreign), 1)
        self.assertIn(foreign[0], written)

    def test_pinned_copy_passes_without_touching_the_file(self) -> None:
        self.assertEqual(digest(self.copy), self.before)
        for test in ("TestPinned.test_fsdp2_step", "TestPinned.test_fsdp1_step_by_device",
                     "TestPinned.test_groups_named_by_their_members", "TestPinned.test_ranks_differ",
                     "TestPinnedThreads.test_threads", "TestPinnedLocal.test_local"):
            self.assertRegex(self.checked.output, rf"\] PASS +fx_pinned_copy\.{test} ")
        self.assertNotIn("FAIL: test_fsdp2_step (fx_pinned_copy", self.checked.output)
        self.assertNotIn("Accepting new output", self.checked.output)

    def test_flipped_reshard_after_forward_fails_naming_an_all_gather(self) -> None:
        self.assertEqual(self.checked.returncode, 1, self.checked.describe())
        out = self.checked.output
        self.assertIn("fx_pinned_flipped.TestPinned.test_fsdp2_step: the collectives differ from the pinned trace "
                      "(one for every device), compared on cpu/gloo; first difference: #4 on ranks 0-1: recorded "
                      "`reduce_scatter_tensor(", out)
        self.assertIn("pinned `all_gather_into_tensor(float32[18]) -> float32[36] on world`", out)
        self.assertRegex(out, r"\n\s*-all_gather_into_tensor\(float32\[\d+\]\) -> float32\[\d+\] on world\n")
        self.assertIn("re-run the test with EXPECTTEST_ACCEPT=1", out)
        self.assertIn(f"EXPECTTEST_ACCEPT=1 python -m harness {self.flipped} -k TestPinned.test_fsdp2_step", out)
        # the other tests of the flipped module pass: only the FSDP2 step's communication changed, and the FSDP1
        # step has no pin for this device
        self.assertRegex(out, r"2 failed")

    def test_a_device_without_a_pin_fails_naming_the_accept_command(self) -> None:
        out = self.checked.output
        self.assertIn("fx_pinned_flipped.TestPinned.test_fsdp1_step_by_device: no cpu pin yet (it ran on cpu/gloo; "
                      "its pins: cuda); the recorded trace:\n"
                      "all_gather(float32[13]) -> 2 x float32[13] on world\n", out)
        self.assertIn(f"To pin it, run on this machine: EXPECTTEST_ACCEPT=1 python -m harness {self.flipped} "
                      "-k TestPinned.test_fsdp1_step_by_device (rank 0 writes cpu=\"\"\"...\"\"\" into the call and "
                      "keeps the cuda pin)", out)

    def test_nothing_left_behind(self) -> None:
        for run in (self.accepted, self.checked):
            self.assertEqual(run.leftover_processes, {}, "processes of the run still alive after it ended")
            self.assertEqual(run.leftover_temp, [], "harness temp dirs left in the run's TMPDIR")


@nightly("the runner's run of the pinned copy checks the same literals in CI")
class TestPinnedUnderPytestAndUnittest(_Copies):
    """The accepted copy passes under pytest and plain unittest too, run after run, the file untouched."""

    def test_pytest_and_unittest_pass_without_touching_the_file(self) -> None:
        self.assertEqual(self.accepted.returncode, 0, self.accepted.describe())
        before = digest(self.copy)
        for args, runner in (([self.copy, "-q", "-p", "no:cacheprovider"], "pytest"),
                             (["fx_pinned_copy", "-v"], "unittest"), (["fx_pinned_copy", "-v"], "unittest")):
            run = run_fixture(args, self.env, runner=runner)
            self.assertEqual(run.returncode, 0, run.describe())
            self.assertEqual(digest(self.copy), before, f"{runner} rewrote the pinned file")
            self.assertEqual(run.leftover_processes, {})


if __name__ == "__main__":
    unittest.main()
