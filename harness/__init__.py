"""distharness: a public, fast, unittest-based harness for PyTorch distributed tests."""
from __future__ import annotations

from harness.testing.assertions import TestCase
from harness.classes.case import DTensorTestBase, FSDPTest, MultiProcessTestCase
from harness.classes.compat import (DTensorContinuousTestBase, DTensorOpTestBase, FSDPTestContinuous, FSDPTestMultiThread,
                            MultiProcContinuousTest, MultiThreadedTestCase, ShardedTensorTestBase,
                            check_sharded_parity)
from harness.testing.decorators import skip_if_lt_x_gpu, with_comms, with_temp_dir
from harness.errors import HarnessError, RankError, RankFailure, UsageError
from harness.inprocess.local import LocalDTensorTestBase, create_local_tensor_test_class
from harness.main import run_tests
from harness.testing.subtests import run_subtests, skip_subtest

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
