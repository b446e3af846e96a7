"""Inside a rank: its output for one test, fds 1 and 2 sent to a file (C++ output too), read back bounded."""
from __future__ import annotations

import os
import sys
from typing import Any

from harness.shared.output import read_bounded

__all__ = ["Capture", "write_to_real_stderr"]


def write_to_real_stderr(text: str) -> None:
    """Write past a test's capture (used by torchrun's watchdog while the test's thread is stuck)."""
    fd = Capture.active_stderr if Capture.active_stderr is not None else 2
    os.write(fd, text.encode("utf-8", "replace"))


class Capture:
    """Send fds 1 and 2 to a file for one test, so C++ output (gloo, NCCL) is caught as well."""

    active_stderr: int | None = None  # the real stderr while a capture is on

    def __init__(self, path: str, limit: int):
        self.path = path
        self.limit = limit

    def __enter__(self) -> "Capture":
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        self.file = open(self.path, "w+b")
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        Capture.active_stderr = self.saved[1]
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        Capture.active_stderr = None
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.file.close()
        self.text = read_bounded(self.path, limit=self.limit)
