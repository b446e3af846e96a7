"""``run_subtests``: the cartesian product of a config, each combination one reported subtest."""
from __future__ import annotations

import itertools
import unittest
from typing import Any, Callable

from harness.shared.errors import UsageError
from harness.shared.outcome import PASSED, SubtestOutcome, shown_value

__all__ = ["run_subtests", "skip_subtest", "SubtestRecorder"]


def skip_subtest(reason: str) -> None:
    """Skip the current ``run_subtests`` combination (only that one) with ``reason``.

    Example::

        if offload_params and self.device_type == "cpu":
            skip_subtest("needs an accelerator: CPU offload")
    """
    raise unittest.SkipTest(reason)


def _validate(test_id: str, config: Any) -> list[tuple[str, list[Any]]]:
    if not isinstance(config, dict) or not config:
        raise UsageError(f"{test_id}: run_subtests needs a non-empty dict of name -> list of values; got {config!r}")
    items = []
    for key, values in config.items():
        if not isinstance(key, str):
            raise UsageError(f"{test_id}: run_subtests config keys must be argument names (str); got {key!r}")
        if not isinstance(values, (list, tuple)):
            raise UsageError(f"{test_id}: run_subtests config[{key!r}] must be a list of values; got {values!r}. "
                             f"Wrap a single value in a list: {{{key!r}: [{values!r}]}}")
        if len(values) == 0:
            raise UsageError(f"{test_id}: run_subtests config[{key!r}] is an empty list, so no combination would run; "
                             "give it at least one value or remove the key")
        items.append((key, list(values)))
    return items


class SubtestRecorder:
    """Collects the outcome of every combination of one test in a rank; the rank sends them to the parent.

    The rank gives each test instance its own (``test._harness_subtests``), with ``meet``: how the ranks
    meet between combinations (through the parent in a pool, through torchrun's store when launched;
    harness.shared.protocol.meeting_call), or None for a barrier on the test's process group.
    """

    def __init__(self, meet: Callable[[int, SubtestOutcome], None] | None = None) -> None:
        self.outcomes: list[SubtestOutcome] = []
        self.meet = meet
        self.meetings = 0  # combinations ended so far in this test (every rank counts the same)


def run_subtests(test: unittest.TestCase, subtest_config: dict[str, list[Any]], test_fn: Callable[..., Any],
                 *test_args: Any, **test_kwargs: Any) -> None:
    """Run ``test_fn(*test_args, **test_kwargs, **combination)`` for every combination of the config.

    Each combination is a subtest named by its parameters; a failing one is recorded and the rest still
    run. The ranks meet between combinations through the harness's own channel (not the test's process
    group): when a combination failed or was skipped on one rank while another is still inside one of its
    collectives, the test ends after HARNESS_PEER_GRACE and the report shows that combination's failure
    first, then where each stuck rank was.

    Example::

        self.run_subtests({"use_orig_params": [False, True], "lr": [1e-2, 1e-3]}, self._test_parity)
    """
    import torch.distributed as dist

    items = _validate(test.id(), subtest_config)
    keys = [k for k, _ in items]
    recorder: SubtestRecorder | None = getattr(test, "_harness_subtests", None)
    for values in itertools.product(*(v for _, v in items)):
        params = dict(zip(keys, values))
        shown = {k: shown_value(v) for k, v in params.items()}
        if recorder is None:
            # Outside a rank (a plain TestCase, a local-tensor test): behave like unittest's subTest. A local test's
            # guard turns a hard-coded-CUDA error on CPU into a "needs CUDA" skip of the combination (harness.inprocess.local).
            guard = getattr(test, "_harness_local_guard", None)
            with test.subTest(**params):
                if guard is None:
                    test_fn(*test_args, **test_kwargs, **params)
                else:
                    guard(test_fn, *test_args, **test_kwargs, **params)
            continue
        try:
            test_fn(*test_args, **test_kwargs, **params)
            outcome = SubtestOutcome(shown, PASSED)
        except BaseException as exc:  # noqa: B902 - results are data, whatever was raised
            outcome = SubtestOutcome.from_exception(shown, exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                recorder.outcomes.append(outcome)
                raise
        recorder.outcomes.append(outcome)
        if recorder.meet is not None:
            recorder.meetings += 1
            recorder.meet(recorder.meetings, outcome)
        elif dist.is_available() and dist.is_initialized():
            dist.barrier()
