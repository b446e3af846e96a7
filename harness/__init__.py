"""distharness: a public, fast, unittest-based harness for PyTorch distributed tests."""
from __future__ import annotations

from harness.testing.assertions import TestCase
from harness.classes.case import DTensorTestBase, FSDPTest, MultiProcessTestCase
from harness.classes.compat import (DTensorContinuousTestBase, FSDPTestContinuous, MultiProcContinuousTest,
                                    ShardedTensorTestBase, check_sharded_parity)
from harness.inprocess.threaded_classes import DTensorOpTestBase, FSDPTestMultiThread, MultiThreadedTestCase
from harness.testing.decorators import skip_if_lt_x_gpu, with_comms, with_temp_dir
from harness.errors import HarnessError, RankError, RankFailure, UsageError
from harness.inprocess.local import LocalDTensorTestBase, create_local_tensor_test_class
from harness.main import run_tests
from harness.testing.subtests import run_subtests, skip_subtest
from harness import moved as _moved

_moved.install()  # distharness 0.1's module paths, with a DeprecationWarning (harness.moved)

__all__ = [
    "MultiProcessTestCase",
    "FSDPTest",
    "DTensorTestBase",
    "MultiProcContinuousTest",
    "DTensorContinuousTestBase",
    "FSDPTestContinuous",
    "DTensorOpTestBase",
    "MultiThreadedTestCase",
    "FSDPTestMultiThread",
    "ShardedTensorTestBase",
    "LocalDTensorTestBase",
    "create_local_tensor_test_class",
    "TestCase",
    "with_comms",
    "with_temp_dir",
    "skip_if_lt_x_gpu",
    "run_subtests",
    "skip_subtest",
    "check_sharded_parity",
    "run_tests",
    "HarnessError",
    "UsageError",
    "RankFailure",
    "RankError",
]
