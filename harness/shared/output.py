"""A rank's output, bounded: what both sides keep of it, and how much.

The rank captures while a test runs (``harness.ranks.capture``); the parent reads what a rank that died or
hung printed so far from the same file (:func:`read_bounded`, ``harness.parent.pool``). Either way a test's
output comes back as one bounded block, never interleaved with another rank's.
"""
from __future__ import annotations

import os
import sys

__all__ = ["bounded_output", "read_bounded", "flush_std", "OUTPUT_LIMIT"]


#: bytes of one rank's output kept for one test: the first and the last half, the cut said between
OUTPUT_LIMIT = 64 * 1024


def bounded_output(data: bytes, limit: int = OUTPUT_LIMIT, total: int | None = None, tail: bytes = b"") -> str:
    """Output as text, at most about ``limit`` bytes: head and tail kept, what was cut said between them."""
    total = len(data) + len(tail) if total is None else total
    if not tail and len(data) <= limit:
        return data.decode("utf-8", "replace")
    if not tail:
        data, tail = data[:limit // 2], data[-(limit // 2):]
    head_text = data.decode("utf-8", "replace")
    tail_text = tail.decode("utf-8", "replace")
    # cut at line ends where there are any, so no line is shown half
    if "\n" in head_text[len(head_text) // 2:]:
        head_text = head_text[:head_text.rindex("\n") + 1]
    if "\n" in tail_text[: len(tail_text) // 2]:
        tail_text = tail_text[tail_text.index("\n") + 1:]
    cut = total - len(head_text.encode("utf-8", "replace")) - len(tail_text.encode("utf-8", "replace"))
    return (f"{head_text.rstrip(chr(10))}\n... {max(cut, 0)} bytes of output not shown "
            f"(the first and last {limit // 2048} KiB are kept) ...\n{tail_text}")


def read_bounded(path: str, offset: int = 0, limit: int = OUTPUT_LIMIT) -> str:
    """The file from ``offset`` as text, at most about ``limit`` bytes of it (see bounded_output)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size - offset
            f.seek(offset)
            if size <= limit:
                return f.read().decode("utf-8", "replace")
            head = f.read(limit // 2)
            f.seek(offset + size - limit // 2)
            return bounded_output(head, limit, total=size, tail=f.read())
    except OSError:
        return ""


def flush_std() -> None:
    """Flush Python's stdout and stderr before their fds are redirected (a capture, a debugger's prompt)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
