"""In the parent: ask a pool's live ranks for their flight recorders' dumps (``harness.ranks.recorder`` answers)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable

from harness.shared.protocol import dump_paths

__all__ = ["request_dumps"]


def request_dumps(directory: str, ranks: Iterable[int], timeout: float = 2.0) -> dict[int, dict[str, Any]]:
    """In the parent: ask each of ``ranks`` (live ranks of the pool in ``directory``) for its dump; the
    dumps that came within ``timeout`` seconds, by rank."""
    token = f"{time.monotonic_ns()}"
    asked = []
    for r in ranks:
        fifo, _ = dump_paths(directory, r)
        for _ in range(20):  # the thread may be between two requests: it reopens the FIFO at once
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)
                continue
            try:
                os.write(fd, token.encode() + b"\n")
                asked.append(r)
            except OSError:
                pass
            finally:
                os.close(fd)
            break
    dumps: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while asked and time.monotonic() < deadline:
        for r in list(asked):
            try:
                with open(dump_paths(directory, r)[1]) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue
            if data.get("token") == token:
                asked.remove(r)
                if data.get("dump") is not None:
                    dumps[r] = data["dump"]
        if asked:
            time.sleep(0.01)
    return dumps
