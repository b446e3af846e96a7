"""``torch.testing._internal.common_distributed`` as distributed test files use it: the harness's classes and
decorators, upstream's ``TEST_SKIPS`` table, and ``_dynamo_dist_per_rank_init`` on the harness's ranks."""
from __future__ import annotations

import contextlib
import datetime
import io
import logging
import os
import shutil
import subprocess
import sys
import functools
import unittest
from typing import Any, Callable, Iterator, NamedTuple

import torch
import torch.distributed as dist

from harness.classes.case import MultiProcessTestCase, bound_test
from harness.classes.compat import MultiProcContinuousTest
from harness.shared.errors import UsageError
from harness.classes.dynamo import (DistributedTestBase, DynamoDistributedMultiProcTestCase,
                                    DynamoDistributedSingleProcTestCase)
from harness.inprocess.threaded import spawn_threads_and_init_comms
from harness.inprocess.threaded_classes import MultiThreadedTestCase
from harness.testing.decorators import skip_if_lt_x_gpu
from harness.testing.fake_store import FakeStore
from harness.testing.requirements import (flag, get_required_world_size, requires_accelerator_dist_backend,
                                          requires_gloo, requires_nccl, requires_world_size, skip_if_odd_worldsize,
                                          skip_if_rocm_multiprocess, skip_if_small_worldsize, skip_if_win32,
                                          with_dist_debug_levels)
from harness.testing.subtests import run_subtests
from harness.models import SaveForwardInputsModel, SaveForwardInputsModule
from harness.upstream_modules.common_utils import (FILE_SCHEMA, IS_SANDCASTLE, TEST_CUDA, TEST_HPU, TEST_WITH_TSAN,
                                                   TEST_XPU, LazyVal, TestCase, find_free_port, getRocmVersion,
                                                   isRocmArchAnyOf, retry_on_connect_failures,
                                                   skip_but_pass_in_sandcastle, skip_but_pass_in_sandcastle_if,
                                                   torch_release)

__all__ = ["MultiProcessTestCase", "MultiProcContinuousTest", "MultiProcContinousTest", "MultiThreadedTestCase",
           "DistributedTestBase", "DynamoDistributedMultiProcTestCase", "DynamoDistributedSingleProcTestCase",
           "skip_if_lt_x_gpu", "run_subtests", "skip_if_win32", "skip_if_rocm_multiprocess", "requires_nccl",
           "requires_gloo", "requires_accelerator_dist_backend", "requires_world_size", "skip_if_odd_worldsize",
           "skip_if_small_worldsize", "with_dist_debug_levels", "get_required_world_size",
           "spawn_threads_and_init_comms", "TEST_WITH_DEV_DBG_ASAN", "TEST_WITH_ROCM", "TEST_SKIPS", "TestSkip",
           "_dynamo_dist_per_rank_init", "at_least_x_gpu", "captured_output", "tp_transports", "create_tcp_store",
           "init_multigpu_helper", "with_nccl_blocking_wait", "skip_if_no_gpu", "requires_nccl_version",
           "requires_nccl_shrink", "create_device", "sm_is_or_higher_than", "requires_multicast_support",
           "PLATFORM_SUPPORTS_SYMM_MEM", "skip_if_rocm_ver_lessthan_multiprocess", "skip_if_rocm_arch_multiprocess",
           "get_timeout", "TIMEOUT_DEFAULT", "TIMEOUT_OVERRIDE", "SaveForwardInputsModel", "SaveForwardInputsModule",
           "simple_sparse_reduce_tests", "verify_ddp_error_logged", "import_transformers_or_skip",
           "setup_torchcomms_pg", "TORCHCOMM_HAS_GLOO", "TORCHCOMM_HAS_XCCL", "TORCHCOMM_HAS_NCCL",
           "TORCHCOMM_HAS_RCCL", "TORCHCOMM_HAS_NCCLX", "TORCHCOMM_HAS_RCCLX", "logger", "requires_ddp_rank",
           "DDP_RANK_DEVICES", "ACCELERATOR_DIST_BACKENDS", "HAS_ACCELERATOR", "requires_mpi", "requires_ucc",
           "requires_xccl", "skip_if_rocm_ver_atleast_multiprocess", "nccl_skip_if_lt_x_gpu",
           "require_n_gpus_for_nccl_backend", "has_efa", "core_dumps_disabled", "DistTestCases",
           "C10dTorchCommsTestBase", "initialize_temp_directories", "cleanup_temp_dir", "tmp_dir",
           # common_utils's names upstream's module imports, which test files take from it too
           "FILE_SCHEMA", "find_free_port", "IS_SANDCASTLE", "LazyVal", "retry_on_connect_failures",
           "skip_but_pass_in_sandcastle", "skip_but_pass_in_sandcastle_if", "TEST_CUDA", "TEST_HPU", "TEST_WITH_TSAN",
           "TEST_XPU", "TestCase",
           # older releases' names, with the meaning they had there
           "skip_if_rocm"]

MultiProcContinousTest = MultiProcContinuousTest  # upstream's older spelling
#: upstream's name for ``skip_if_rocm_multiprocess`` before the rename: the same skip (on a ROCm build, "Test
#: skipped for ROCm"; ``skip_if_rocm_single_process`` was its one-process twin), under its old name
skip_if_rocm = skip_if_rocm_multiprocess
TEST_WITH_DEV_DBG_ASAN: bool = flag("TEST_WITH_DEV_DBG_ASAN")
TEST_WITH_ROCM: bool = flag("TEST_WITH_ROCM")


class TestSkip(NamedTuple):
    """One row of upstream's skip table: the exit code its ranks leave with, and the skip's message."""

    exit_code: int
    message: str


#: the key and words of the "too few devices" skips: torch 2.15 speaks of accelerators (``multi-device-2``, "Need
#: at least 2 accelerator devices"), earlier releases of CUDA (``multi-gpu-2``, "Need at least 2 CUDA devices")
_MULTI, _DEVICES = ("multi-device", "accelerator device") if torch_release() >= (2, 15) else ("multi-gpu", "CUDA device")

#: upstream's table of skips (key -> exit code, message), with its codes and the installed release's words. Ported
#: tests read it for the messages (``TEST_SKIPS["multi-gpu-2"].message``, ``multi-device-2`` from torch 2.15); a rank
#: here never needs to exit with a code to skip: ``raise unittest.SkipTest(...)`` in the test body is reported as
#: that rank's skip.
TEST_SKIPS: dict[str, TestSkip] = {
    "backend_unavailable": TestSkip(72, "Skipped because distributed backend is not available."),
    "small_worldsize": TestSkip(73, "Skipped due to small world size."),
    "odd_worldsize": TestSkip(87, "Skipped due to odd world size."),
    "no_cuda": TestSkip(74, "CUDA is not available."),
    **{f"{_MULTI}-{n}": TestSkip(code, f"Need at least {n} {_DEVICES}{'s' if n > 1 else ''}")
       for n, code in ((1, 75), (2, 77), (3, 80), (4, 81), (5, 82), (6, 83), (7, 84), (8, 85))},
    "nccl": TestSkip(76, "c10d not compiled with NCCL support"),
    "skipIfRocm": TestSkip(78, "Test skipped for ROCm"),
    "no_peer_access": TestSkip(79, "Test skipped because no GPU peer access"),
    "generic": TestSkip(86, "Test skipped at subprocess level, look at subprocess log for skip reason"),
    "importerror": TestSkip(88, "Test skipped due to missing import"),
    "no_accelerator": TestSkip(89, "accelerator is not available."),
}


def at_least_x_gpu(x: int) -> bool:
    """Whether this machine has ``x`` or more GPUs (CUDA, HPU or XPU) of one kind."""
    for kind in ("cuda", "hpu", "xpu"):
        module = getattr(torch, kind, None)
        if module is not None and module.is_available() and module.device_count() >= x:
            return True
    return False


@contextlib.contextmanager
def captured_output() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """``sys.stdout`` and ``sys.stderr`` replaced by two ``StringIO`` for the block (Python-level writes only)."""
    out, err = io.StringIO(), io.StringIO()
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = before


def tp_transports() -> list[str] | None:
    """TensorPipe's transports for RPC: ``["shm", "uv"]`` on a machine with an EFA interface (where the
    InfiniBand transport fails), else None (TensorPipe's own choice)."""
    fi_info = shutil.which("fi_info")
    if fi_info is None:
        return None
    try:
        found = subprocess.run([fi_info, "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ["shm", "uv"] if found.returncode == 0 else None


def create_tcp_store(addr: str = "localhost", world_size: int = 1, is_master: bool = True,
                     timeout: datetime.timedelta = datetime.timedelta(minutes=5), wait_for_workers: bool = True,
                     jit_class: bool = False, use_libuv: bool = True) -> dist.TCPStore:
    """A ``TCPStore`` on a free port of ``addr``: the master when ``is_master``. A port another process takes
    between the choice and the bind is chosen again (up to 10 times); ``jit_class=True`` makes TorchScript's
    store class, with ``timeout``. As upstream's, ``timeout`` is not given to the plain store.

    Example::

        store = create_tcp_store()
        store.set("key", "value")
    """
    from harness.upstream_modules.common_utils import ADDRESS_IN_USE, find_free_port

    for attempt in range(10):
        port = find_free_port()
        try:
            if jit_class:
                millis = int(timeout / datetime.timedelta(milliseconds=1))
                return torch.classes.dist_c10d.TCPStore(addr, port, world_size, is_master, millis)
            return dist.TCPStore(addr, port, world_size, is_master, wait_for_workers=wait_for_workers,
                                 use_libuv=use_libuv)
        except (RuntimeError, dist.DistNetworkError) as exc:
            if ADDRESS_IN_USE.lower() not in str(exc).lower() or attempt == 9:  # its case changed in 2.14
                raise
    raise AssertionError("unreachable")


def _gpu_count() -> int:
    for kind in ("hpu", "xpu", "cuda"):
        module = getattr(torch, kind, None)
        if module is not None and module.is_available():
            return module.device_count()
    return 0


def init_multigpu_helper(world_size: int, backend: str) -> dict[int, list[int]]:
    """Each rank's GPUs, the visible ones split evenly: rank ``i`` gets ``[i]`` where there are as many GPUs as
    ranks (the list may name a GPU past the count, as upstream's does), an equal share where there are fewer."""
    count = _gpu_count()
    per_rank = count // world_size if world_size > count else 1
    visible = range(count)
    return {i: list(visible[i * per_rank:(i + 1) * per_rank]) for i in range(world_size)}


def with_nccl_blocking_wait(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run the test with ``TORCH_NCCL_BLOCKING_WAIT=1`` and ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` unset; both are put
    back after it (unset ones unset again: upstream's leaves ``TORCH_NCCL_BLOCKING_WAIT=1`` behind)."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = {k: os.environ.get(k) for k in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT")}
        os.environ.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
        os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"
        try:
            return func(*args, **kwargs)
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return wrapper


def skip_if_no_gpu(func: Callable[..., Any]) -> Callable[..., Any]:
    """Skip the test, in its ranks, without a GPU, or with fewer GPUs than ranks (each rank its own GPU), with
    upstream's messages (``TEST_SKIPS``). Upstream's ranks exit with a code for it; here each rank raises
    ``unittest.SkipTest``, which the harness reports as the test's skip."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        world_size = getattr(args[0], "world_size", None) if args else None
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", "1"))
        count = _gpu_count()
        if count == 0:
            raise unittest.SkipTest(TEST_SKIPS["no_cuda"].message)
        if count < world_size:
            raise unittest.SkipTest(TEST_SKIPS[f"{_MULTI}-{world_size}"].message)
        return func(*args, **kwargs)
    return wrapper


def _reset_dynamo() -> None:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()


@contextlib.contextmanager
def _dynamo_dist_per_rank_init(rank: int, world_size: int, backend: str | None = None, init_pg: bool = True,
                               fake_pg: bool = False) -> Iterator[None]:
    """What upstream's dynamo multi-process tests wrap their body in: this rank's default group for the block,
    dynamo's caches and counters reset before and after it.

    In a harness rank the group meets on the test's own rendezvous file (upstream's uses a fixed TCP port,
    6789, which two runs at once would share), on the ranks' device: the accelerator the harness put the rank
    on, else CPU over gloo. ``fake_pg=True``: torch's ``fake`` group (no peers). Elsewhere (a launcher's
    process) the group meets through ``MASTER_ADDR``/``MASTER_PORT`` as the launcher set them (one rank
    alone takes a free port; upstream's fixed 6789 is never used).

    Example::

        class TestCompiledDDP(DynamoDistributedMultiProcTestCase):
            def test_ddp(self):
                with _dynamo_dist_per_rank_init(self.rank, self.world_size):
                    ...
    """
    test = bound_test()
    on_cpu = test is not None and test._harness_placement is not None and test._harness_placement.device_type == "cpu"
    accelerator = None if on_cpu else torch.accelerator.current_accelerator()
    device_type = accelerator.type if accelerator is not None else "cpu"
    if not fake_pg and accelerator is not None and (test is None or test._harness_placement is None):
        torch.accelerator.set_device_index(rank)  # in a harness rank the harness already put it on its GPU
    if backend is None:
        backend = dist.get_default_backend_for_device(device_type)
    if init_pg:
        if fake_pg:
            dist.init_process_group(backend="fake", world_size=world_size, rank=rank, store=FakeStore())
        elif test is not None and test.file_name is not None:
            store = dist.FileStore(test.file_name, world_size)
            dist.init_process_group(backend=backend, rank=rank, world_size=world_size, store=store)
        elif world_size == 1 or "MASTER_PORT" in os.environ:
            # one rank alone takes a free port; more meet where the launcher said (a fixed port, upstream's 6789,
            # would join two runs on one machine into one group)
            if "MASTER_PORT" not in os.environ:
                from harness.upstream_modules.common_utils import find_free_port

                os.environ["MASTER_PORT"] = str(find_free_port())
            os.environ.setdefault("MASTER_ADDR", "localhost")
            dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
        else:
            raise RuntimeError(f"_dynamo_dist_per_rank_init(rank={rank}, world_size={world_size}) outside a harness "
                               "rank needs MASTER_ADDR and MASTER_PORT, as torchrun sets them: launch it with "
                               "torchrun, or run the test as a harness test (python -m harness)")
    _reset_dynamo()
    try:
        yield
    finally:
        _reset_dynamo()
        if init_pg and dist.is_initialized():
            dist.destroy_process_group()



def requires_nccl_version(version: tuple[int, ...], msg: str) -> Callable[[Any], Any]:
    """Skip unless torch's NCCL is ``version`` or newer (``msg`` says why the test needs it). Without CUDA the test
    is left as it is (its other skips decide), as upstream's; without NCCL it skips."""
    if not torch.cuda.is_available():
        return lambda fn: fn
    if not dist.is_nccl_available():
        return skip_but_pass_in_sandcastle_if(True, "c10d was not compiled with the NCCL backend")
    found = torch.cuda.nccl.version()
    return skip_but_pass_in_sandcastle_if(
        found < tuple(version),
        f"Requires NCCL version greater than or equal to: {version}, found: {found}, reason: {msg}")


def requires_nccl_shrink() -> Callable[[Any], Any]:
    """Skip unless NCCL can shrink a group (2.27 or newer)."""
    return requires_nccl_version((2, 27), "Need NCCL 2.27+ for shrink_group")


def create_device(interface: str | None = None, lazy_init: bool = False) -> Any:
    """A gloo device on the loopback address (or on the network ``interface``), for ``ProcessGroupGloo.Options``."""
    if sys.platform == "win32" or interface is None:
        return dist.ProcessGroupGloo.create_device(hostname="127.0.0.1", lazy_init=lazy_init)
    return dist.ProcessGroupGloo.create_device(interface=interface, lazy_init=lazy_init)


def sm_is_or_higher_than(device: torch.device, major: int, minor: int) -> bool:
    """Whether the CUDA ``device`` has compute capability ``(major, minor)`` or more: False on a ROCm GPU (its
    numbers are not NVIDIA's), True on a device that is not CUDA."""
    if device.type != "cuda":
        return True
    if torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device) >= (major, minor)


def _no_multicast() -> bool:
    if not torch.cuda.is_available():
        return True
    from torch._C._autograd import DeviceType
    from torch._C._distributed_c10d import _SymmetricMemory

    return not _SymmetricMemory.has_multicast_support(DeviceType.CUDA, 0)


def requires_multicast_support() -> Callable[[Any], Any]:
    """Skip unless GPU 0 supports multicast for symmetric memory: asked when the test runs, in its rank (a test
    class: when decorated), so importing the file in the parent leaves CUDA untouched for the ranks it forks."""
    from harness.upstream_modules.common_utils import lazy_skip_if

    return lazy_skip_if(_no_multicast, "multicast support is not available")


def _symmetric_memory() -> bool:
    if not torch.cuda.is_available():
        return False
    return isRocmArchAnyOf(("gfx942", "gfx950")) if torch.version.hip else True


#: symmetric memory works here: CUDA (ROCm only on MI300 and MI350); computed when first read
PLATFORM_SUPPORTS_SYMM_MEM = LazyVal(_symmetric_memory)


def skip_if_rocm_ver_lessthan_multiprocess(version: tuple[int, ...] | None = None) -> Callable[[Any], Any]:
    """Skip on a ROCm build older than ``version`` (on any ROCm build when ``version`` is None), decided at
    decoration time; every other build runs the test."""
    def decorator(fn: Any) -> Any:
        reason = None
        if flag("TEST_WITH_ROCM"):
            found = getRocmVersion()
            if version is None or found < tuple(version):
                reason = (f"skip_if_rocm_ver_lessthan_multiprocess: ROCm {found} is available but {version} "
                          "required")
        return unittest.skipIf(reason is not None, reason)(fn)
    return decorator


def skip_if_rocm_arch_multiprocess(arch: tuple[str, ...]) -> Callable[[Any], Any]:
    """Skip on ROCm GPUs of the architectures ``arch``, decided at decoration time."""
    def decorator(fn: Any) -> Any:
        on_arch = flag("TEST_WITH_ROCM") and torch.cuda.is_available() and \
            torch.cuda.get_device_properties(0).gcnArchName.split(":")[0] in arch
        return unittest.skipIf(on_arch, f"skip_if_rocm_arch_multiprocess: test skipped on {arch}")(fn)
    return decorator


#: upstream's time limit for one distributed test, in seconds (500 under TSAN), and the tests it gives more (the harness's own
#: limit is HARNESS_TIMEOUT; these are for files that read them)
TIMEOUT_DEFAULT: int = 500 if flag("TEST_WITH_TSAN") else int(os.getenv("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT",
                                                                                  "300"))
TIMEOUT_OVERRIDE: dict[str, int] = {"test_ddp_uneven_inputs": 400, "test_DistributedDataParallel": 500}


def get_timeout(test_id: str) -> int:
    """Upstream's time limit for the test ``test_id`` (``module.Class.test_name``), in seconds."""
    return TIMEOUT_OVERRIDE.get(test_id.split(".")[-1], TIMEOUT_DEFAULT)


def _sparse_case(rank: int, world_size: int, sparse_dims: int = 1, dense_dims: int = 0) -> torch.Tensor:
    """Rank ``rank``'s sparse tensor: ones at rows ``0..rank`` of its first sparse dim (index 0 in the others), so
    any two ranks' tensors overlap; ``dense_dims`` dense dims of size 2."""
    first = torch.arange(rank + 1).reshape(1, rank + 1)
    indices = torch.cat([first, torch.zeros(sparse_dims - 1, rank + 1, dtype=first.dtype)])
    shape = [world_size] + [2] * dense_dims + [world_size] * (sparse_dims - 1)
    return torch.sparse_coo_tensor(indices, torch.ones([rank + 1] + [2] * dense_dims), shape)


def simple_sparse_reduce_tests(rank: int, world_size: int,
                               num_inputs: int = 1) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """Sparse all-reduce (sum) cases for one rank: ``(its inputs, the expected sums)`` for 1 to 3 sparse dims and
    1 to 3 dense dims; with ``num_inputs`` inputs a rank holds that many of a world ``num_inputs`` times larger.

    Example::

        for inputs, outputs in simple_sparse_reduce_tests(self.rank, self.world_size):
            pg.allreduce(inputs).wait()
    """
    import functools as ft
    import operator

    makers = [ft.partial(_sparse_case, sparse_dims=n) for n in (1, 2, 3)]
    makers += [ft.partial(_sparse_case, dense_dims=n) for n in (1, 2, 3)]
    wide = num_inputs * world_size
    cases = []
    for make in makers:
        total = ft.reduce(operator.add, [make(r, wide) for r in range(wide)])
        cases.append(([make(num_inputs * rank + i, wide) for i in range(num_inputs)], [total] * num_inputs))
    return cases


def verify_ddp_error_logged(model_DDP: Any, err_substr: str) -> None:
    """Check DDP logged the error ``err_substr`` (its C++ stack trace left out) in its logging data."""
    data = model_DDP._get_ddp_logging_data()
    for key in ("iteration", "has_error", "error"):
        if key not in data:
            raise AssertionError(f"Expected {key!r} in ddp_logging_data")
    expected = err_substr.split("\nException raised from ")[0]
    if expected not in data["error"]:
        raise AssertionError(f"Did not find expected {expected} in ddp logging data error: {data['error']}")


def import_transformers_or_skip() -> Callable[[Any], Any]:
    """Skip the test, in its ranks, where Hugging Face's ``transformers`` cannot be imported (upstream's words:
    ``TEST_SKIPS["importerror"]``); upstream's ranks exit with its code, here each rank raises the skip."""
    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                import transformers  # noqa: F401
            except ImportError:
                raise unittest.SkipTest(TEST_SKIPS["importerror"].message) from None
            return fn(*args, **kwargs)
        return checked
    return decorator


def _torchcomms() -> Any:
    try:
        import torchcomms
    except ImportError:
        return None
    return torchcomms


def _torchcomms_built(backend: str) -> bool:
    module = _torchcomms()
    return bool(module is not None and module.is_backend_built(backend))


#: which backends the installed torchcomms package was built with (all False without the package)
TORCHCOMM_HAS_GLOO: bool = _torchcomms_built("gloo")
TORCHCOMM_HAS_XCCL: bool = _torchcomms_built("xccl")
TORCHCOMM_HAS_NCCL: bool = _torchcomms_built("nccl")
TORCHCOMM_HAS_RCCL: bool = _torchcomms_built("rccl")
TORCHCOMM_HAS_NCCLX: bool = _torchcomms_built("ncclx")
TORCHCOMM_HAS_RCCLX: bool = _torchcomms_built("rcclx")


def setup_torchcomms_pg(backend: str, rank: int, world_size: int, device: torch.device, store_path: str,
                        group_name: str) -> dist.ProcessGroup:
    """A process group named ``group_name`` whose NCCL backend is a torchcomms communicator of ``backend``
    (``nccl``, ``ncclx``, ...), met through the file ``store_path``, and registered with torch.distributed so that
    name lookups (``symm_mem.rendezvous(..., group=group_name)``) find it. Each call needs its own ``group_name``
    and ``store_path``.

    Example::

        pg = setup_torchcomms_pg("ncclx", self.rank, self.world_size, self.device, self.file_name + "_tc", "tc0")
    """
    torchcomms = _torchcomms()
    if torchcomms is None:
        raise RuntimeError(f"setup_torchcomms_pg({backend!r}, rank={rank}) needs the torchcomms package: install it "
                           "(pip install torchcomms), or skip the test where it is missing")
    from torch.distributed.distributed_c10d import _BackendWrapper, _register_pg_in_world

    store = dist.FileStore(store_path, world_size)
    os.environ["TORCHCOMM_RANK"] = str(rank)
    os.environ["TORCHCOMM_SIZE"] = str(world_size)
    comm = torchcomms.new_comm(backend, device, name=f"{group_name}_comm",
                               store=dist.PrefixStore(f"{group_name}_tc/", store),
                               hints={"persistent_store": "true"})
    group = dist.ProcessGroup(dist.PrefixStore(f"{group_name}_pg/", store), comm.get_rank(), comm.get_size())
    nccl = dist.ProcessGroup.BackendType.NCCL
    group._register_backend(comm.get_device(), nccl, _BackendWrapper(comm))
    group._set_default_backend(nccl)  # registering a backend leaves the group's default one undefined
    group._set_group_name(group_name)
    _register_pg_in_world(group, backend_name=backend, store=store, group_name=group_name, backend_config=backend,
                          rank_mapping={r: r for r in range(world_size)})
    return group


#: the logger upstream's distributed tests write to (its name is this module's; INFO and above)
logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

#: the backends of accelerators, and the device types DDP places one rank per device on
ACCELERATOR_DIST_BACKENDS = ["nccl", "xccl", "hccl"]
DDP_RANK_DEVICES = ["cuda", "xpu"]
#: a CUDA, HPU or XPU device is here
HAS_ACCELERATOR: bool = bool(flag("TEST_CUDA") or (hasattr(torch, "hpu") and torch.hpu.is_available())
                             or (hasattr(torch, "xpu") and torch.xpu.is_available()))


def requires_ddp_rank(device: str) -> bool:
    """Whether DDP gives each rank its own ``device`` (``device_ids=[rank]``): CUDA and XPU."""
    return device in DDP_RANK_DEVICES


def _backend_skip(name: str, available: Callable[[], bool]) -> Callable[[Any], Any]:
    return skip_but_pass_in_sandcastle_if(not available(), f"c10d was not compiled with the {name} backend")


def requires_mpi() -> Callable[[Any], Any]:
    """Skip unless torch was built with the MPI backend."""
    return _backend_skip("MPI", dist.is_mpi_available)


def requires_ucc() -> Callable[[Any], Any]:
    """Skip unless torch was built with the UCC backend."""
    return _backend_skip("UCC", dist.is_ucc_available)


def requires_xccl() -> Callable[[Any], Any]:
    """Skip unless torch was built with the XCCL backend (Intel GPUs)."""
    return _backend_skip("XCCL", lambda: bool(getattr(dist, "is_xccl_available", lambda: False)()))


def skip_if_rocm_ver_atleast_multiprocess(version: tuple[int, ...] | None = None) -> Callable[[Any], Any]:
    """Skip on a ROCm build of ``version`` or newer (a failure known from that release), decided at decoration."""
    def decorator(fn: Any) -> Any:
        found = getRocmVersion() if flag("TEST_WITH_ROCM") else None
        reason = (f"skip_if_rocm_ver_atleast_multiprocess: known failure on ROCm {found} (>= {version})"
                  if found is not None and version is not None and found >= tuple(version) else None)
        return unittest.skipIf(reason is not None, reason)(fn)
    return decorator


def _too_few(count: int) -> str:
    """The "too few devices" words for ``count`` (``TEST_SKIPS``'s for 1 to 8, the same words past them)."""
    known = TEST_SKIPS.get(f"{_MULTI}-{count}")
    return known.message if known else f"Need at least {count} {_DEVICES}{'s' if count > 1 else ''}"


def _nccl_needs_gpus(backend: str, count: int, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if backend == "nccl" and torch.cuda.device_count() < count:
            raise unittest.SkipTest(_too_few(count))
        return fn(*args, **kwargs)
    if backend == "nccl":
        checked._min_gpus_required = count  # type: ignore[attr-defined]  # upstream's mark, read by launchers
    return checked


def nccl_skip_if_lt_x_gpu(backend: str, x: int) -> Callable[[Any], Any]:
    """With the NCCL ``backend``, skip (in the ranks) unless there are ``x`` CUDA GPUs; other backends run."""
    return lambda fn: _nccl_needs_gpus(backend, x, fn)


def require_n_gpus_for_nccl_backend(n: int, backend: str) -> Callable[[Any], Any]:
    """The same rule as :func:`nccl_skip_if_lt_x_gpu`, its arguments the other way round."""
    return lambda fn: _nccl_needs_gpus(backend, n, fn)


def has_efa() -> bool:
    """Whether the machine has AWS EFA interfaces (``fi_info -p efa -t FI_EP_RDM`` succeeds)."""
    fi_info = shutil.which("fi_info")
    if fi_info is None:
        return False
    try:
        return subprocess.run([fi_info, "-p", "efa", "-t", "FI_EP_RDM"], capture_output=True, timeout=30,
                              check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def core_dumps_disabled() -> Iterator[None]:
    """Core dumps off for the block (``RLIMIT_CORE`` 0, put back after): a GPU fault then surfaces as an exception
    at the next synchronisation on ROCm too, as on CUDA, instead of aborting the process. Nothing on Windows."""
    if sys.platform == "win32":
        yield
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


#: the folder :func:`initialize_temp_directories` made (None before)
tmp_dir: Any = None


def initialize_temp_directories(init_method: str | None = None) -> None:
    """The folders ``DistributedTest``'s ranks meet in, as upstream's: a new temporary folder in ``TEMP_DIR`` with
    ``barrier``, ``test_dir`` and ``init_dir`` in it, and ``INIT_METHOD`` (``init_method``, else a file in
    ``init_dir``). :func:`cleanup_temp_dir` removes it."""
    import tempfile

    global tmp_dir
    tmp_dir = tempfile.TemporaryDirectory()
    os.environ["TEMP_DIR"] = tmp_dir.name
    for sub in ("barrier", "test_dir", "init_dir"):
        os.mkdir(os.path.join(tmp_dir.name, sub))
    os.environ["INIT_METHOD"] = init_method if init_method is not None else \
        ("file:///" if sys.platform == "win32" else "file://") + os.path.join(tmp_dir.name, "init_dir", "shared_init_file")


def cleanup_temp_dir() -> None:
    """Remove the folder :func:`initialize_temp_directories` made, if any."""
    if tmp_dir is not None:
        tmp_dir.cleanup()


class DistTestCases:
    """Which backends lack a collective (``skip_collective``) and which have a feature (``backend_feature``): the
    installed release's table (torch 2.15 counts XCCL among the GPU, DDP and subgroup backends)."""

    skip_collective: dict[str, set[str]] = {
        "allgather_coalesced": {"nccl", "mpi", "ucc", "xccl"},
        "reduce": set(),
        "sendrecv anysource": {"nccl", "ucc", "xccl"},
        "cpu barrier": {"nccl", "ucc", "xccl"},
    }
    backend_feature: dict[str, set[str]] = {
        "gpu": {"nccl", "gloo", "ucc"},
        "cuda": {"nccl", "gloo", "ucc"},
        "ddp": {"nccl", "gloo", "ucc"},
        "subgroup": {"nccl", "gloo", "ucc"},
        "plugin": set(),
    }
    if torch_release() >= (2, 15):
        for _feature in ("gpu", "ddp", "subgroup"):
            backend_feature[_feature] = backend_feature[_feature] | {"xccl"}
        del _feature
    if TEST_HPU:
        backend_feature["hpu"] = {"hccl"}
    if TEST_XPU:
        backend_feature["xpu"] = {"xccl"}


def _torchcomms_backend(device: Any) -> str:
    device = str(device)
    for kind, backend in (("cuda", "nccl"), ("hpu", "hccl"), ("xpu", "xccl")):
        if kind in device:
            return backend
    return "gloo"


class _BackendName(str):
    """A backend's name that is also upstream's ``backend(device)``: the name for ``device``."""

    def __call__(self, device: Any) -> str:
        return _torchcomms_backend(device)


class _TorchCommsBackend:
    """``C10dTorchCommsTestBase.backend``: upstream's static ``backend(device)`` on the class; on a test, the
    class's backend's name (which the harness makes the group with), callable as upstream's too."""

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return staticmethod(_torchcomms_backend).__get__(None, owner)
        return _BackendName(owner.backend_str())


class C10dTorchCommsTestBase(MultiProcContinuousTest):
    """Upstream's base for c10d tests over the torchcomms package: the class's ``device_type`` (an attribute, or a
    function that gives it) picks the backend (``nccl`` on CUDA, ``hccl``, ``xccl``, else ``gloo``), and a test
    skips when the installed torchcomms was not built with that backend, in upstream's words ("torchcomms gloo
    backend is not available"; without torchcomms every test skips so). Where torchcomms has the backend, a
    test stops with an error: the harness does not make its process groups over torchcomms yet."""

    world_size: int = 4  # type: ignore[assignment]
    backend = _TorchCommsBackend()  # type: ignore[assignment]

    @classmethod
    def _device_type(cls) -> str:
        """The class's ``device_type`` (a string, or a function that gives one); by default the machine's
        accelerator's, else ``cpu``."""
        kind = cls.device_type
        if isinstance(kind, property):  # not overridden: upstream's default
            accelerator = torch.accelerator.current_accelerator()
            return "cpu" if accelerator is None else accelerator.type
        return str(kind() if callable(kind) else kind)

    @classmethod
    def backend_str(cls) -> str:
        return _torchcomms_backend(cls._device_type())

    def _skip_if_backend_unavailable(self, device: str) -> None:
        name = _torchcomms_backend(device)
        if TEST_WITH_ROCM and name == "nccl" and torch_release() >= (2, 15):
            name = "rccl"
        built = {"gloo": TORCHCOMM_HAS_GLOO, "xccl": TORCHCOMM_HAS_XCCL, "nccl": TORCHCOMM_HAS_NCCL,
                 "rccl": TORCHCOMM_HAS_RCCL, "ncclx": TORCHCOMM_HAS_NCCLX, "rcclx": TORCHCOMM_HAS_RCCLX}
        if not built.get(name, True):
            self.skipTest(f"torchcomms {name} backend is not available")

    def setUp(self) -> None:
        device = type(self)._device_type()
        self._skip_if_backend_unavailable(device)
        raise UsageError(f"{self.id()} [rank {self.rank}]: C10dTorchCommsTestBase needs its process group made over "
                         f"torchcomms (torch.distributed.config.use_torchcomms), which the harness does not do; run "
                         "this class with upstream's torch.testing._internal.common_distributed instead")

    def rank_to_device(self, device: str) -> dict[int, list[int]]:
        visible = torch.get_device_module(device).device_count()
        return {rank: [rank % visible] for rank in range(self.world_size)}
