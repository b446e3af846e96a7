"""Test objects for the runner's unit tests: unittest cases of made-up modules, and entries as a run leaves them."""
from __future__ import annotations

import unittest

from harness.runner.results import Entry, Problem
from harness.shared.status import Status


def make_tests(spec: dict[str, dict[str, list[str]]]) -> list[unittest.TestCase]:
    """``{"pkg.test_a": {"TestX": ["test_1", "test_2"]}}`` -> those tests, their ids ``pkg.test_a.TestX.test_1``..."""
    tests = []
    for module, classes in spec.items():
        for name, methods in classes.items():
            attrs = {m: (lambda self: None) for m in methods}
            attrs["__module__"] = module
            attrs["__qualname__"] = name
            cls = type(name, (unittest.TestCase,), attrs)
            tests += [cls(m) for m in methods]
    return tests


def entry(test_id: str, status: Status = Status.PASSED, seconds: float = 1.0, **kw) -> Entry:
    """An entry for ``module.Class.method``; a failing status gets the problem a run would record."""
    module, cls, method = test_id.rsplit(".", 2)
    e = Entry(test_id, module, f"{module}.{cls}", method, status=status, seconds=seconds, **kw)
    if status in (Status.FAILED, Status.ERROR) and not e.problems and not e.sub_failed:
        e.problems.append(Problem(status, test_id, f"Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                                   f"AssertionError: {method} went wrong"))
    return e


def load_failure(module: str) -> unittest.TestCase:
    """What unittest makes of a module that cannot be imported (``module`` must not exist): one failing test."""
    (failed,) = list(unittest.TestLoader().loadTestsFromName(module))
    return failed


class InFakeGroup(unittest.TestCase):
    """A class whose tests run as rank ``FAKE_RANK`` of a world of ``FAKE_WORLD`` in torch's ``fake`` process group
    (layouts, local shards and the collectives' calls, no peer needed); skipped where a group is up already."""

    FAKE_RANK, FAKE_WORLD = 0, 2

    @classmethod
    def setUpClass(cls) -> None:
        import torch.distributed as dist

        from harness.testing.fake_store import FakeStore

        if dist.is_initialized():
            raise unittest.SkipTest("a process group is up in this process already")
        dist.init_process_group("fake", store=FakeStore(), rank=cls.FAKE_RANK, world_size=cls.FAKE_WORLD)

    @classmethod
    def tearDownClass(cls) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
