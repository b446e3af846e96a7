"""Faults on purpose: kill, delay, fail, hang a rank at its nth collective, or fail its writes; ``@restarts``.

``from harness import faults`` and ``from harness import restarts``::

    @faults.inject(faults.kill(1, op="all_reduce", nth=3))
    @restarts(1)
    @with_comms
    @with_temp_dir
    def test_resume(self):
        start = load_progress(self.temp_dir)      # attempt 1 (self.restart_count == 1) sees attempt 0's files
        ...

A fault fires once, in its attempt, as its rank enters its ``nth`` call of ``op`` (the name the user calls:
``all_reduce``, ``all_gather_into_tensor``, ``barrier``, ...; None: any collective); ``nth`` counts from the test's
start on that rank. What it does to a rank is not a failure, nor the errors its peers meet because of it; a fault
that never fires fails the test, saying so. ``@faults.sweep(faults.kill, rank=1)`` runs the test once per
collective rank 1 makes, killed at each in turn. docs/faults.md has the rules.
"""
from __future__ import annotations

from harness.shared.faults import Fault, delay, every_rank, hang, io_error, kill, raise_
from harness.testing.fault_marks import inject, restarts, sweep

__all__ = ["Fault", "inject", "sweep", "every_rank", "restarts", "kill", "delay", "raise_", "hang", "io_error"]
