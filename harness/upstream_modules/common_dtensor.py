"""``torch.testing._internal.distributed._tensor.common_dtensor`` as distributed test files use it: the
harness's DTensor classes, ``with_comms``, and DTensor's test models."""
from __future__ import annotations

from harness.classes.case import DTensorTestBase, MultiProcessTestCase
from harness.classes.compat import DTensorContinuousTestBase, MultiProcContinuousTest
from harness.classes.dynamo import (DistributedTestBase, DynamoDistributedMultiProcTestCase,
                                    DynamoDistributedSingleProcTestCase)
from harness.inprocess.local import LocalDTensorTestBase, create_local_tensor_test_class
from harness.inprocess.threaded import spawn_threads_and_init_comms
from harness.inprocess.threaded_classes import DTensorOpTestBase, MultiThreadedTestCase
from harness.models import (Attention, FeedForward, MLPModule, MLPStacked, ModelArgs, Transformer,
                            TransformerBlock)
from harness.testing.decorators import skip_if_lt_x_gpu, with_comms
from harness.testing.local_ranks import map_local_for_rank
from harness.testing.requirements import (get_required_world_size, requires_accelerator_dist_backend, requires_gloo,
                                          requires_nccl, requires_world_size, skip_if_odd_worldsize,
                                          skip_if_rocm_multiprocess, skip_if_small_worldsize, skip_if_win32,
                                          skip_unless_torch_gpu, with_dist_debug_levels)
from harness.testing.subtests import run_subtests

__all__ = ["DTensorTestBase", "DTensorContinuousTestBase", "DTensorOpTestBase", "LocalDTensorTestBase",
           "create_local_tensor_test_class", "with_comms", "skip_unless_torch_gpu", "map_local_for_rank",
           "MultiProcessTestCase", "MultiProcContinuousTest", "MultiThreadedTestCase", "DistributedTestBase",
           "DynamoDistributedMultiProcTestCase", "DynamoDistributedSingleProcTestCase", "skip_if_lt_x_gpu",
           "run_subtests", "skip_if_win32", "skip_if_rocm_multiprocess", "requires_nccl", "requires_gloo",
           "requires_accelerator_dist_backend", "requires_world_size", "skip_if_odd_worldsize",
           "skip_if_small_worldsize", "with_dist_debug_levels", "get_required_world_size",
           "spawn_threads_and_init_comms", "MLPModule", "MLPStacked", "ModelArgs", "Transformer", "TransformerBlock",
           "Attention", "FeedForward"]
