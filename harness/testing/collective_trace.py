"""Every rank's collectives as one text, and back: shared lines once, ``rank N:`` blocks where ranks differ.

Pure functions over the ranks' traces (rank -> the items it recorded, each one collective or one coalesced
block, as ``harness.testing.collectives`` renders them): :func:`render` writes the text a test pins,
:func:`parse` reads a pinned text back into per-rank traces, :func:`mismatch` says how a recorded trace
differs from a pinned one (the first collective that differs and its ranks, then a unified diff).
"""
from __future__ import annotations

import difflib
import re

__all__ = ["render", "parse", "mismatch", "rank_ranges", "NOTHING"]

#: the text of a trace without a collective: never an empty string, which an empty literal would equal
NOTHING = "(no collectives)"

_HEADER = re.compile(r"^ranks? ([0-9][0-9, \-]*):$")


def rank_ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``'ranks 0-2, 5'``; ``[3]`` -> ``'rank 3'``."""
    ranks = sorted(ranks)
    parts: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ("ranks " if len(ranks) > 1 else "rank ") + ", ".join(parts)


def _ranks_of(header: str) -> list[int]:
    ranks: list[int] = []
    for part in header.split(","):
        low, _, high = part.strip().partition("-")
        ranks += list(range(int(low), int(high or low) + 1))
    return ranks


def _indent(item: str, by: str = "  ") -> str:
    return "\n".join(by + line for line in item.split("\n"))


def _common(seqs: list[list[str]]) -> list[str]:
    """A subsequence common to every rank's trace (pairwise longest matches, the same on every run)."""
    common = list(seqs[0])
    for seq in seqs[1:]:
        matcher = difflib.SequenceMatcher(None, common, seq, autojunk=False)
        common = [common[i + k] for i, _, n in matcher.get_matching_blocks() for k in range(n)]
    return common


def render(traces: dict[int, list[str]]) -> str:
    """The ranks' traces as one text: an item every rank recorded at that point once, at the left margin; where
    ranks differ, one block per distinct run of items, headed by its ranks (``rank 1:``, ``ranks 0, 2-3:``) and
    indented; a rank with nothing there has no block. Ends with a newline.

    Example::

        render({0: ["send(float32[4], to=1) on world"], 1: ["recv(from=0) -> float32[4] on world"]})
        # 'rank 0:\\n  send(float32[4], to=1) on world\\nrank 1:\\n  recv(from=0) -> float32[4] on world\\n'
    """
    ranks = sorted(traces)
    seqs = [list(traces[r]) for r in ranks]
    if not any(seqs):
        return NOTHING + "\n"
    if all(s == seqs[0] for s in seqs):
        return "\n".join(seqs[0]) + "\n"
    out: list[str] = []
    at = [0] * len(ranks)

    def segments(until: list[int]) -> None:
        groups: dict[tuple[str, ...], list[int]] = {}
        for k, r in enumerate(ranks):
            part = tuple(seqs[k][at[k]:until[k]])
            if part:
                groups.setdefault(part, []).append(r)
        for part, members in sorted(groups.items(), key=lambda kv: kv[1][0]):
            out.append(rank_ranges(members) + ":")
            out.extend(_indent(item) for item in part)

    for anchor in _common(seqs):
        found = [seqs[k].index(anchor, at[k]) for k in range(len(ranks))]
        segments(found)
        out.append(anchor)
        at = [i + 1 for i in found]
    segments([len(s) for s in seqs])
    return "\n".join(out) + "\n"


def parse(text: str, ranks: list[int]) -> dict[int, list[str]]:
    """The per-rank traces a text of :func:`render` says (a line it cannot place counts for every rank)."""
    traces: dict[int, list[str]] = {r: [] for r in ranks}
    block: list[int] | None = None
    last: list[list[str]] = []  # the item lists the previous item went to, for its continuation lines
    for line in text.split("\n"):
        if not line.strip() or line.strip() == NOTHING:
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            match = _HEADER.match(line)
            if match:
                block = [r for r in _ranks_of(match.group(1)) if r in traces]
                last = []
                continue
            block = None
            last = [traces[r] for r in ranks]
            for trace in last:
                trace.append(line)
        elif block is not None and indent == 2:
            last = [traces[r] for r in block]
            for trace in last:
                trace.append(line[2:])
        else:  # a coalesced block's member: part of the item above it
            cut = line[2:] if block is not None else line
            for trace in last:
                trace[-1] += "\n" + cut
    return traces


def _one_line(item: str | None) -> str:
    if item is None:
        return "nothing"
    return "`" + item.replace("\n", "; ").replace(":;", ":") + "`"


def first_difference(pinned: dict[int, list[str]], recorded: dict[int, list[str]]) -> str:
    """``#N on ranks A: recorded `X`, pinned `Y` ``: the first collective (counted from 1 on each rank) at which a
    rank's recorded trace leaves its pinned one, and every rank that leaves it there the same way; "" when none."""
    firsts: dict[int, int] = {}
    for r, got in recorded.items():
        want = pinned.get(r, [])
        for i in range(max(len(got), len(want))):
            if i >= len(got) or i >= len(want) or got[i] != want[i]:
                firsts[r] = i
                break
    if not firsts:
        return ""
    index = min(firsts.values())
    pairs: dict[tuple[str | None, str | None], list[int]] = {}
    for r in sorted(firsts):
        if firsts[r] != index:
            continue
        got, want = recorded[r], pinned.get(r, [])
        key = (got[index] if index < len(got) else None, want[index] if index < len(want) else None)
        pairs.setdefault(key, []).append(r)
    words = []
    for (got, want), members in pairs.items():
        words.append(f"#{index + 1} on {rank_ranges(members)}: recorded {_one_line(got)}, pinned {_one_line(want)}")
    return "; ".join(words)


def mismatch(pinned_text: str, recorded_text: str, recorded: dict[int, list[str]]) -> str:
    """Why the recorded trace is not the pinned one: the first difference in words, then a unified diff of the two
    texts (``--- pinned``, ``+++ recorded``)."""
    pinned = parse(pinned_text, sorted(recorded))
    where = first_difference(pinned, recorded) or "the texts differ in layout only"
    diff = "\n".join(difflib.unified_diff(pinned_text.splitlines(), recorded_text.splitlines(), "pinned",
                                          "recorded", lineterm=""))
    return f"first difference: {where}\n{diff}"
