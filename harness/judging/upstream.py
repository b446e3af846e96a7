"""Test classes that still derive from upstream's multi-process bases: they run on upstream's harness, not this one.

A ported file whose class keeps an upstream base (a name ``harness.port`` could not map, or a file not
ported at all) runs on ``torch.testing._internal``'s own harness: upstream spawns the ranks and, on a
machine without enough GPUs, they exit with its skip code, so nothing would say distharness never ran
those tests. The runner, the pytest plugin and ``harness.run_tests`` name such classes at the end of
the run (``harness.judging.notes.Notes.upstream_lines``).

The bases are recognised by module and name in the class's MRO; this module never imports
``torch.testing._internal``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["UPSTREAM_PREFIX", "HARNESS_NAMES", "UpstreamBase", "upstream_base"]

UPSTREAM_PREFIX = "torch.testing._internal"

#: upstream's multi-process (and multi-threaded) base classes, by name, and the harness class that
#: mirrors each. The spellings upstream used across releases are here too (``MultiProcContinousTest``,
#: with the typo, before it was renamed).
HARNESS_NAMES: dict[str, str] = {
    "MultiProcessTestCase": "MultiProcessTestCase",
    "MultiProcContinuousTest": "MultiProcContinuousTest",
    "MultiProcContinousTest": "MultiProcContinuousTest",
    "MultiThreadedTestCase": "MultiThreadedTestCase",
    "FSDPTest": "FSDPTest",
    "FSDPTestMultiThread": "FSDPTestMultiThread",
    "FSDPTestContinuous": "FSDPTestContinuous",
    "DTensorTestBase": "DTensorTestBase",
    "DTensorContinuousTestBase": "DTensorContinuousTestBase",
    "DTensorOpTestBase": "DTensorOpTestBase",
    "ShardedTensorTestBase": "ShardedTensorTestBase",
    "LocalDTensorTestBase": "LocalDTensorTestBase",
}
# Upstream classes built on these (DistributedTestBase, LocalDTensorOpTestBase, ...) are named with the
# base they are built on: the harness class to start from is that base's.


#: upstream names whose harness counterpart is made another way than by deriving from it
_HOW: dict[str, str] = {
    "LocalDTensorTestBase": ("make the twin with harness.create_local_tensor_test_class, or derive it from "
                             "harness.LocalDTensorTestBase alone (`python -m harness.port FILE` maps both)"),
}


@dataclasses.dataclass(frozen=True)
class UpstreamBase:
    """How a test class reaches upstream's harness: the upstream class in its MRO and what to use instead.

    ``runs_on`` is the harness class whose ``run()`` is in the MRO too ("" when none): a class that mixes
    upstream's bases with the harness's is run by the harness's ``run()`` (upstream's ``TestCase.run``
    hands over to the next ``run()`` in the MRO), with upstream's set-up and test wrappers around the body.
    """

    cls: str  # "module.Class" of the test class
    base: str  # "torch.testing._internal.common_fsdp.FSDPTestContinuous": the nearest upstream class in the MRO
    harness: str  # "harness.FSDPTestContinuous", or "" when the harness has no counterpart
    via: str = ""  # the known upstream base ``base`` derives from, when ``base`` itself is not one
    runs_on: str = ""  # "harness.classes.case.MultiProcessTestCase": the harness's run() in the MRO, "" when none

    def _fix(self) -> str:
        short = self.base.rsplit(".", 1)[-1]
        if self.harness and not self.via:
            how = _HOW.get(short)
            if how:
                return how
            return f"derive it from {self.harness} instead (`python -m harness.port FILE` rewrites the import)"
        if self.harness:
            return f"the harness has no {short}; derive it from {self.harness}, which mirrors {self.via}"
        return "the harness has no counterpart"

    def line(self, tests: int = 0, ran_by: str | None = None) -> str:
        """One line for the end of the run (``tests``: how many of the class's tests ran, 0: not said;
        ``ran_by``: "harness" or "upstream", whose ``run()`` ran them, None: as the MRO says).

        Example::

            found.line(28, ran_by="harness")
            # 'm.TWithLocalTensor mixes upstream's ...LocalDTensorTestBase with harness.DTensorTestBase: its 28 tests
            #  ran on distharness's rank processes (harness.classes.case.MultiProcessTestCase's run() comes first ...); ...'
        """
        kind = f"{self.base}" + (f" (built on upstream's {self.via})" if self.via else "")
        its = f"its {tests} {'tests' if tests != 1 else 'test'}" if tests else "its tests"
        if ran_by is None:
            ran_by = "harness" if self.runs_on else "upstream"
        if ran_by == "upstream":
            return f"{self.cls} derives from upstream's {kind}: {its} ran on upstream's harness, not distharness; " \
                   f"{self._fix()}"
        local = self.runs_on.startswith("harness.inprocess.local.")
        where = ("in one process, every rank simulated, as harness.LocalDTensorTestBase runs them" if local
                 else "on distharness's rank processes")
        runner = self.runs_on or "the harness's"
        return (f"{self.cls} mixes upstream's {kind} with the harness's classes: {its} ran {where} ({runner}.run() "
                f"ran them; upstream's TestCase.run hands over to it), with upstream's set-up and test wrappers "
                f"inside, which is neither how upstream runs them nor how the harness does; {self._fix()}")


def _is_upstream(c: type) -> bool:
    return (getattr(c, "__module__", "") or "").startswith(UPSTREAM_PREFIX)


def upstream_base(cls: Any) -> UpstreamBase | None:
    """The upstream multi-process base a test class still derives from, or None (also for the harness's own).

    Example::

        upstream_base(TestGradAcc)
        # UpstreamBase(cls='test_fsdp_grad_acc.TestGradAcc',
        #              base='torch.testing._internal.common_fsdp.FSDPTestContinuous',
        #              harness='harness.FSDPTestContinuous')
    """
    if not isinstance(cls, type):
        return None
    mro = getattr(cls, "__mro__", ())
    known = [c for c in mro if _is_upstream(c) and c.__name__ in HARNESS_NAMES]
    if not known:
        return None
    # The first upstream class in the MRO that is, or derives from, a known base: what the test names.
    nearest = next(c for c in mro if _is_upstream(c) and issubclass(c, known[0]))
    first_known = known[0]
    via = "" if nearest is first_known else first_known.__name__
    harness = HARNESS_NAMES[first_known.__name__]
    return UpstreamBase(f"{cls.__module__}.{cls.__qualname__}", f"{nearest.__module__}.{nearest.__qualname__}",
                        f"harness.{harness}", via, _harness_run(mro))


def _harness_run(mro: tuple[type, ...]) -> str:
    """The harness class whose ``run()`` a mixed MRO reaches ("" when no harness class is in it).

    Upstream's own ``run()`` (``common_utils.TestCase.run``) calls ``super().run``, so the first harness class
    that defines ``run`` is the one that decides where the test runs."""
    for c in mro:
        if (getattr(c, "__module__", "") or "").startswith("harness.") and "run" in c.__dict__:
            return f"{c.__module__}.{c.__qualname__}"
    return ""
