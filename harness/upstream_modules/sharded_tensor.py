"""``torch.testing._internal.distributed._shard.sharded_tensor`` as distributed test files use it: the
sharded-tensor base class and ``with_comms``."""
from __future__ import annotations

from harness.classes.case import MultiProcessTestCase
from harness.classes.compat import ShardedTensorTestBase
from harness.testing.decorators import with_comms

__all__ = ["ShardedTensorTestBase", "with_comms", "MultiProcessTestCase", "TEST_GPU_NUM"]

#: upstream's world size for sharded-tensor tests (``ShardedTensorTestBase.world_size``)
TEST_GPU_NUM = 4
