"""Running under torchrun: each process is one rank (placeholder until the torchrun mode lands)."""
from __future__ import annotations

import os
from typing import Any

__all__ = ["launched", "run_as_launched_rank"]


def launched() -> bool:
    return False


def run_as_launched_rank(test: Any) -> None:
    raise NotImplementedError
