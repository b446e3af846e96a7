"""Whether a process has ended, as every side that watches another process by pid asks it (a rank its run,
a runner process its client)."""
from __future__ import annotations

import os

__all__ = ["gone"]


def gone(pid: int) -> bool:
    """Process ``pid`` has ended (a zombie counts: it will never ask for anything again).

    Example::

        if gone(client_pid):
            stop_the_ranks()
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it is there, another user's
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return False  # no /proc (not Linux): the pid is there
