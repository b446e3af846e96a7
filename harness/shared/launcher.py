"""Whether this process is one rank of a torchrun job (or another env:// launcher), read from its environment.

Every side asks it: the parent's run chooses its worlds by it, the template is not started under it, a
rank's debugger says why there is no prompt, the runner reports on rank 0 alone.
"""
from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["launched", "launched_rank", "report_stream"]

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def launched() -> bool:
    """True in a process that torchrun (or another env:// launcher) started as one rank."""
    return all(k in os.environ for k in _ENV) and ("MASTER_ADDR" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ)


def launched_rank() -> int:
    """This process's rank in its launched job; 0 when it was not launched."""
    return int(os.environ.get("RANK", "0")) if launched() else 0


def report_stream() -> Any:
    """Where a runner writes its report: stderr on rank 0, nowhere on the other ranks."""
    if launched_rank() == 0:
        return sys.stderr
    return open(os.devnull, "w")
