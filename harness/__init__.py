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
from harness.testing.collectives import record_collectives
from harness.classes.dynamo import (DistributedTestBase, DynamoDistributedMultiProcTestCase,
                                    DynamoDistributedSingleProcTestCase)
from harness.testing.parametrize import decorateIf, instantiate_parametrized_tests, parametrize, subtest
from harness.testing.requirements import (get_devtype, requires_accelerator_dist_backend, requires_gloo, requires_nccl,
                                          requires_world_size, get_required_world_size,
                                          retry_on_connect_failures, skip_if_odd_worldsize,
                                          skip_if_rocm_multiprocess, skip_if_small_worldsize, skip_if_win32,
                                          skip_unless_torch_gpu, with_dist_debug_levels)
from harness import faults
from harness.faults import restarts
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
    "faults",
    "restarts",
    "skip_if_lt_x_gpu",
    "run_subtests",
    "record_collectives",
    "skip_subtest",
    "check_sharded_parity",
    "run_tests",
    "HarnessError",
    "UsageError",
    "RankFailure",
    "RankError",
    "DistributedTestBase",
    "DynamoDistributedMultiProcTestCase",
    "DynamoDistributedSingleProcTestCase",
    "parametrize",
    "instantiate_parametrized_tests",
    "subtest",
    "decorateIf",
    "get_devtype",
    "skip_unless_torch_gpu",
    "skip_if_win32",
    "skip_if_rocm_multiprocess",
    "requires_nccl",
    "requires_gloo",
    "requires_accelerator_dist_backend",
    "requires_world_size",
    "get_required_world_size",
    "spawn_threads_and_init_comms",
    "skip_if_odd_worldsize",
    "skip_if_small_worldsize",
    "retry_on_connect_failures",
    "with_dist_debug_levels",
    "TEST_WITH_DEV_DBG_ASAN",
    "TEST_WITH_ASAN",
    "TEST_WITH_TSAN",
    "TEST_WITH_ROCM",
    "TEST_CUDA",
    "TEST_MULTIGPU",
    "FakeStore",
    "map_local_for_rank",
    "MLP",
    "MLPStack",
    "DoubleLinear",
    "NestedWrappedModule",
    "TransformerWithSharedParams",
    "FSDPInitMode",
    "DEVICEInitMode",
    "MLPModule",
    "MLPStacked",
    "ModelArgs",
    "Transformer",
    "TransformerBlock",
    "Attention",
    "FeedForward",
]

#: names computed when first read (the machine's flags, and what needs torch imported): ``import harness``
#: stays free of torch in the processes that only run the tests' parent side
_LAZY = {"FakeStore": "harness.testing.fake_store", "map_local_for_rank": "harness.testing.local_ranks",
         "spawn_threads_and_init_comms": "harness.inprocess.threaded",
         **{name: "harness.models" for name in ("MLP", "MLPStack", "DoubleLinear", "NestedWrappedModule",
                                                 "TransformerWithSharedParams", "FSDPInitMode", "DEVICEInitMode",
                                                 "MLPModule", "MLPStacked",
                                                 "ModelArgs", "Transformer", "TransformerBlock", "Attention",
                                                 "FeedForward")}}


def __getattr__(name: str) -> object:
    from harness.testing import requirements

    if name in requirements.FLAGS:
        return requirements.flag(name)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
