"""The words of a verdict: a failed test's report and a failed subtest's, root cause first, and the notes under them.

harness.judging.verdict decides what happened and which rank is the root cause; this module only says it.
Every function here is pure: results (harness.shared.outcome) in, lines of text out.
"""
from __future__ import annotations

import os
import shlex
from typing import Any

from harness.shared.outcome import BAD, CRASHED, ERROR, FAILED, KILLED, SKIPPED, TIMEOUT, RankResult, describe_exit

__all__ = ["rank_tag", "prefixed", "detail", "failure", "blamed", "skipped_while_waiting", "partly_skipped", "xfailed",
           "subtest_failure", "example_note", "replay_text", "replay_command", "gpu_note", "altered_failure", "rank_outputs"]

#: how the report says what the root cause's rank did
_DID = {FAILED: "failed", ERROR: "raised", CRASHED: "died", TIMEOUT: "timed out", KILLED: "was killed"}


def rank_tag(test_id: str, rank: int, world_size: int) -> str:
    return f"{test_id} [rank {rank}/{world_size}]"


def prefixed(rank: int, text: str) -> str:
    """Each line of ``text`` behind ``[rank N]`` (the text is already bounded: see harness.shared.output)."""
    lines = text.rstrip("\n").splitlines()
    return "\n".join(f"[rank {rank}] {line}" for line in lines)


def rank_outputs(outputs: list[tuple[int, str]]) -> str:
    """Each rank's output as one block, so lines from different ranks never interleave ("" when none)."""
    blocks = [prefixed(rank, text) for rank, text in sorted(outputs) if text.strip()]
    return "\n".join(blocks) + "\n" if blocks else ""


def detail(r: RankResult, with_output: bool = True) -> str:
    """What a rank that went wrong left to read: its traceback, or its stack when it died or was stopped."""
    parts = []
    if r.status == CRASHED:
        parts.append(f"The process died: {describe_exit(r.exitcode)}.")
        if r.stack.strip():
            parts.append("Its last Python stack (faulthandler):\n" + r.stack.rstrip())
    elif r.status in (TIMEOUT, KILLED):
        if r.stack.strip():
            parts.append("Its Python stack at that moment (faulthandler):\n" + r.stack.rstrip())
    else:
        parts.append(r.traceback.rstrip() or f"{r.exc_type}: {r.message}")
    if with_output and r.output.strip():
        parts.append(prefixed(r.rank, r.output))
    return "\n".join(parts)


def failure(test_id: str, world_size: int, placement: str, root: RankResult, results: list[RankResult],
            ordered: list[RankResult], section: str, with_output: bool) -> list[str]:
    """The report of a test whose ``root`` rank went wrong first: its line, the collectives, its traceback,
    then one line for each other rank (``ordered``: the bad ranks, root cause first)."""
    head = f"{rank_tag(test_id, root.rank, world_size)} {_DID[root.status]} on {placement}: {root.one_line()}"
    lines = [head, ""] + ([section, ""] if section else []) + [detail(root, with_output)]
    others = [r for r in sorted(results, key=lambda r: r.rank) if r is not root]
    if others:
        lines += ["", "Other ranks:"]
        lines += [f"  rank {r.rank}: {r.one_line()}" + (" (after the root cause above)" if r.peer_effect else "")
                  for r in others]
        for r in ordered[1:]:
            # a hang's ranks, or a desync's (the root cause itself was stopped): where each one waited
            if (r.status == TIMEOUT or r.status == KILLED == root.status) and r.stack.strip():
                lines += ["", f"rank {r.rank} stack:", r.stack.rstrip()]
    return lines


def blamed(test_id: str, world_size: int, placement: str, results: list[RankResult], blame: tuple[int, int, str],
           section: str, with_output: bool) -> list[str]:
    """The report when rank q ended its test normally (passed or skipped) while rank p waited for it in a
    collective it never called: q first, then the collectives, then p (whose error only followed from it)."""
    q, p, sentence = blame
    by_rank = {r.rank: r for r in results}
    if by_rank[q].status == SKIPPED:  # the rule it broke, with what the recorder saw
        head = (f"{rank_tag(test_id, q, world_size)} skipped on {placement} ({by_rank[q].message}) while rank {p} "
                "still waited for it: a test must skip on every rank or on none (decide before the first "
                f"collective, the same way on every rank): {sentence}")
    else:
        head = (f"{rank_tag(test_id, q, world_size)} ended its test (passed) on {placement} without a collective "
                f"rank {p} waited in: {sentence}")
    lines = [head, "", section]
    if with_output and by_rank[q].output.strip():
        lines += ["", prefixed(q, by_rank[q].output)]
    waiter = by_rank[p]
    lines += ["", f"rank {p}, which waited in it: {waiter.one_line()}", detail(waiter, with_output=False)]
    others = [r for r in sorted(results, key=lambda r: r.rank) if r.rank not in (p, q)]
    if others:
        lines += ["", "Other ranks:"] + [f"  rank {r.rank}: {r.one_line()}" for r in others]
    return lines


def skipped_while_waiting(test_id: str, world_size: int, placement: str, skipped: RankResult,
                          bad: list[RankResult], section: str, with_output: bool) -> list[str]:
    """The report of one rank that skipped while the others waited for it inside a collective."""
    s = skipped
    head = (f"{rank_tag(test_id, s.rank, world_size)} skipped on {placement} ({s.message}) while rank "
            f"{', '.join(str(r.rank) for r in bad)} still waited for it: a test must skip on every rank or "
            "on none (decide before the first collective, the same way on every rank)")
    lines = [head] + (["", section] if section else [])
    if with_output and s.output.strip():
        lines += ["", prefixed(s.rank, s.output)]
    for r in bad:
        lines += ["", f"rank {r.rank}: {r.one_line()}"] + ([r.stack.rstrip()] if r.stack.strip() else [])
        if with_output and r.output.strip():
            lines.append(prefixed(r.rank, r.output))
    return lines


def partly_skipped(skipped: list[RankResult], passed: list[RankResult]) -> str:
    """The skip reason of a test that some ranks skipped and the others passed."""
    return (f"skipped on rank {', '.join(str(r.rank) for r in skipped)} ({skipped[0].message}) but ran and passed "
            f"on rank {', '.join(str(r.rank) for r in passed)}: only part of the world ran this test")


def xfailed(xfails: list[RankResult], skipped: list[RankResult], passed: list[RankResult], world_size: int) -> str:
    """The reason of a test that some ranks ended with ``pytest.xfail()`` (none failed): the one reason when every
    rank gave it, else which rank gave which, and what the others did."""
    reasons = sorted({r.message for r in xfails})
    if len(xfails) == world_size and len(reasons) == 1:
        return reasons[0]
    parts = [f"xfailed on rank {r.rank} ({r.message})" for r in xfails]
    parts += [f"skipped on rank {r.rank} ({r.message})" for r in skipped]
    if passed:
        parts.append(f"passed on rank {', '.join(str(r.rank) for r in passed)}")
    return "; ".join(parts)


def subtest_failure(test_id: str, world_size: int, placement: str, label: str, root: RankResult,
                    per_rank: list[RankResult], stuck: list[RankResult]) -> list[str]:
    """The report of one ``run_subtests`` combination (``label``) that went wrong: ``root`` (a rank whose
    combination failed, or was skipped while ``stuck`` ranks were still inside it) first, then the others."""
    if root.status in BAD:
        lines = [f"{rank_tag(test_id, root.rank, world_size)} subtest ({label}) failed on {placement}: "
                 f"{root.one_line()}", "", root.traceback.rstrip()]
    else:
        lines = [f"{rank_tag(test_id, root.rank, world_size)} skipped subtest ({label}) on {placement} "
                 f"({root.message}) while rank {', '.join(str(r.rank) for r in stuck)} was still inside it: a "
                 "combination must be skipped on every rank or on none (decide before its first collective, the "
                 "same way on every rank)"]
    others = [r for r in per_rank if r is not root]
    if others or stuck:
        lines += ["", "Other ranks:"] + [f"  rank {r.rank}: {r.one_line()}" for r in others]
        lines += [f"  rank {r.rank}: never finished this combination: {r.one_line()}" for r in stuck]
    for r in stuck:
        if r.stack.strip():
            lines += ["", f"rank {r.rank} stack (faulthandler):", r.stack.rstrip()]
    return lines


def replay_text(value: Any) -> str:
    """``value`` as Python that makes it again for an ``@example(...)`` line: its ``repr``, with torch's
    ``Partial(sum)`` written ``Partial('sum')`` (inside tuples and lists too)."""
    if type(value).__name__ == "Partial" and hasattr(value, "reduce_op"):
        return f"Partial({value.reduce_op!r})"
    if type(value) in (tuple, list):
        inner = ", ".join(replay_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if type(value) is tuple else f"[{inner}]"
    return repr(value)


def replay_command(test_id: str, module_file: str | None) -> str:
    """The command that runs this one test again: the runner on its file, ``-k`` its class and method."""
    where = test_id.rsplit(".", 2)
    pattern = ".".join(where[-2:]) if len(where) == 3 else test_id
    target = where[0] if len(where) == 3 else test_id
    if module_file:
        target = os.path.relpath(module_file) if not os.path.relpath(module_file).startswith("..") else module_file
    return f"python -m harness {shlex.quote(target)} -k {shlex.quote(pattern)}"


def example_note(example: dict[str, Any], test_id: str = "", module_file: str | None = None,
                 world_size: int | None = None, seed: int | None = None) -> str:
    """What a failure of one hypothesis example ends with: the example, and how to run it again.

    ``world_size``: the world the example drew (None: it drew none); ``seed``: the ranks' torch seed
    (HARNESS_SEED).
    """
    shown = ", ".join(f"{k}={replay_text(v)}" for k, v in example.items())
    lines = [f"Hypothesis example: {shown}"]
    if world_size is not None:
        lines.append(f"  drawn world: {world_size} rank{'s' if world_size != 1 else ''}"
                     + (f"; ranks seeded with HARNESS_SEED={seed}" if seed is not None else ""))
    how = f"Reproduce it: put @example({shown}) above @given (from hypothesis import example"
    names = [n for n in ("WorldSize", "Mesh", "Placements", "Sharding") if f"{n}(" in shown]
    if names:
        how += f"; from harness.strategies import {', '.join(names)}"
    torch_names = [n for n in ("Shard", "Replicate", "Partial") if f"{n}(" in shown]
    if torch_names:
        how += f"; from torch.distributed.tensor import {', '.join(torch_names)}"
    how += ")"
    if test_id:
        how += f" and run {replay_command(test_id, module_file)}"
    else:
        how += ", or run with the same HYPOTHESIS_PROFILE (ci is derandomized)"
    lines.append(how + ".")
    return "\n".join(lines)


def gpu_note(wanted: int, gpus_asked: int, shared: bool, found: int) -> str:
    """The note under a failure of a test written for ``wanted`` GPUs that ran on CPU, or on the ``found``
    GPUs its ranks shared, for want of them (``gpus_asked``: its skip_if_lt_x_gpu number, 0: none)."""
    why = f"skip_if_lt_x_gpu({gpus_asked})" if gpus_asked else "its world size follows the device count"
    s = "s" if found != 1 else ""
    if shared:
        where = f"on {found} GPU{s} its ranks shared over gloo (rank r on cuda:r % {found})"
        have = f"cuda:{found} and above do not exist here, and NCCL needs one GPU per rank"
    else:
        where = "on CPU/gloo"
        have = ("this machine has no GPU" if not found else
                f"this machine has {found} GPU{s}, which the ranks still see: cuda:{found} and above do not exist "
                "there")
    return (f"Note: this test asks for {wanted} GPUs ({why}) and ran {where} for want of them ({have}). A test "
            f"written for GPUs can fail there where its run on {wanted} GPUs passes (a dtype the CPU kernel refuses, "
            f"a device named by index); run it where there are {wanted} GPUs, or set HARNESS_DEVICE=nccl to skip it "
            "here.")


def altered_failure(changes: list[str], then: str) -> tuple[str, str]:
    """HARNESS_ENV_CHANGED=fail: the message and traceback of a rank that passed but left the process altered
    (``changes``; ``then``: what became of the ranks)."""
    message = f"the test left the process altered: {'; '.join(changes)}; {then}"
    return message, (f"EnvChanged: {message}\n\nPut back what the test changes (try/finally, self.addCleanup "
                     "or unittest.mock.patch), stop the threads and wait for the processes it starts. "
                     "HARNESS_ENV_CHANGED=fail makes this a failure; warn only names the test at the end of "
                     "the run.")
