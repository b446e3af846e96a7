"""``torch.testing._internal.common_fsdp`` as distributed test files use it: the harness's FSDP classes and
models, and FSDP2's communication interception (``patch_all_gather``, ``patch_reduce_scatter``, ...), with
which tests count and check the collectives FSDP2 issues."""
from __future__ import annotations

import contextlib
import types
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from harness.classes.case import FSDPTest, MultiProcessTestCase
from harness.classes.compat import FSDPTestContinuous, MultiProcContinuousTest, check_sharded_parity
from harness.classes.dynamo import (DistributedTestBase, DynamoDistributedMultiProcTestCase,
                                    DynamoDistributedSingleProcTestCase)
from harness.inprocess.threaded import spawn_threads_and_init_comms
from harness.inprocess.threaded_classes import FSDPTestMultiThread, MultiThreadedTestCase
from harness.models import (AlwaysWrapNestedWrappedModule, DEVICEInitMode, DoubleLinear, DummyDDP, FSDPInitMode,
                            FSDPTestModel, MLP, MLPStack, NestedWrappedModule,
                            NestedLinear, NonUniformReqGradNWM, SkipModel, SkipModule, TransformerWithSharedParams)
from harness.testing.requirements import (get_devtype, get_required_world_size, requires_accelerator_dist_backend,
                                          requires_gloo, requires_nccl, requires_world_size, skip_if_odd_worldsize,
                                          skip_if_rocm_multiprocess, skip_if_small_worldsize, skip_if_win32,
                                          with_dist_debug_levels)
from harness.testing.subtests import run_subtests

__all__ = ["FSDPTest", "FSDPTestMultiThread", "FSDPTestContinuous", "MultiProcessTestCase", "MultiThreadedTestCase",
           "MultiProcContinuousTest", "DistributedTestBase", "DynamoDistributedMultiProcTestCase",
           "DynamoDistributedSingleProcTestCase", "check_sharded_parity", "get_devtype", "run_subtests",
           "get_required_world_size", "requires_accelerator_dist_backend", "requires_gloo", "requires_nccl",
           "requires_world_size", "skip_if_odd_worldsize", "skip_if_rocm_multiprocess", "skip_if_small_worldsize",
           "skip_if_win32", "with_dist_debug_levels", "spawn_threads_and_init_comms",
           "MLP", "MLPStack", "DoubleLinear", "NestedWrappedModule", "TransformerWithSharedParams", "FSDPInitMode",
           "DEVICEInitMode", "patch_all_gather", "patch_reduce_scatter", "patch_all_reduce",
           "patch_foreach_all_gather", "patch_foreach_reduce", "patch_unshard", "patch_reshard",
           "patch_post_backward", "patch_register_post_backward_hook_backward", "reduce_scatter_with_assert",
           "_maybe_wrap_fsdp", "_move_to_device", "get_full_params", "_zero_model", "subtest_name",
           "_assert_module_states", "DummyProcessGroup", "NonUniformReqGradNWM", "SkipModel", "SkipModule",
           "NestedLinear", "_broadcast_state_dict", "_get_state_dict", "compiled_fsdp_test", "FSDPTestModel",
           "DummyDDP", "AlwaysWrapNestedWrappedModule", "DEVICE_TYPE", "DEVICE_COUNT", "DISTRIBUTED_BACKEND",
           "ModuleWithDelay", "NestedWrappedModuleWithDelay", "MixtureOfExperts",
           # older releases' names, with the meaning they had there
           "_maybe_cuda", "test_compiled_fsdp"]


def _collectives_module() -> types.ModuleType:
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as collectives

    return collectives


def _called(candidates: tuple[str, ...]) -> str:
    """Which of ``candidates`` (names of ``torch.distributed``) FSDP2's collectives call on this torch.

    torch 2.13 calls ``dist.all_gather_single``/``reduce_scatter_single``, earlier ones
    ``all_gather_into_tensor``/``reduce_scatter_tensor``: a patch must replace the one FSDP2 calls.
    """
    module = _collectives_module()
    names: set[str] = set()
    stack = [v.__code__ for v in vars(module).values() if isinstance(v, types.FunctionType)]
    stack += [f.__code__ for v in vars(module).values() if isinstance(v, type)
              for f in vars(v).values() if isinstance(f, types.FunctionType)]
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    for name in candidates:
        if name in names and hasattr(dist, name):
            return name
    raise RuntimeError(f"FSDP2's collectives on torch {torch.__version__} call none of {', '.join(candidates)}: "
                       "this harness does not know what to patch on this torch")


def _barrier() -> None:
    # Threaded ranks share the module being patched: every rank reads the original before any replaces it,
    # and every rank is done with the patched one before any restores it.
    if dist.is_initialized():
        dist.barrier()


@contextlib.contextmanager
def _patched(owner: Any, name: str, new: Callable[..., Any]) -> Iterator[None]:
    original = getattr(owner, name)
    _barrier()
    setattr(owner, name, new)
    try:
        yield
    finally:
        _barrier()
        setattr(owner, name, original)


def patch_all_gather(new_all_gather_into_tensor: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, FSDP2's all-gathers call ``new_all_gather_into_tensor`` with the arguments they would
    give torch's (``output_tensor, input_tensor, group=, async_op=``); every rank enters and leaves together.

    Example::

        orig = dist.all_gather_single   # all_gather_into_tensor before torch 2.13
        count = 0
        def counting(*args, **kwargs):
            nonlocal count; count += 1
            return orig(*args, **kwargs)
        with patch_all_gather(counting):
            model(inp).sum().backward()
    """
    return _patched(dist, _called(("all_gather_single", "all_gather_into_tensor")), new_all_gather_into_tensor)


def patch_reduce_scatter(new_reduce_scatter_tensor: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, FSDP2's reduce-scatters call ``new_reduce_scatter_tensor`` (``output, input, op=,
    group=, async_op=``); see :func:`patch_all_gather`."""
    return _patched(dist, _called(("reduce_scatter_single", "reduce_scatter_tensor")), new_reduce_scatter_tensor)


def patch_all_reduce(new_all_reduce: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``dist.all_reduce`` (HSDP's reduction across replicas) is ``new_all_reduce``."""
    return _patched(dist, "all_reduce", new_all_reduce)


def _param_group() -> Any:
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    return _fsdp_param_group


def patch_foreach_all_gather(new_foreach_all_gather: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, FSDP2's parameter groups gather with ``new_foreach_all_gather``."""
    return _patched(_param_group(), "foreach_all_gather", new_foreach_all_gather)


def patch_foreach_reduce(new_foreach_reduce: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, FSDP2's parameter groups reduce gradients with ``new_foreach_reduce``."""
    return _patched(_param_group(), "foreach_reduce", new_foreach_reduce)


def patch_unshard(new_unshard: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``FSDPParamGroup.unshard`` (a method: ``new_unshard(self, async_op=False)``) is
    ``new_unshard``."""
    return _patched(_param_group().FSDPParamGroup, "unshard", new_unshard)


def patch_reshard(new_reshard: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``FSDPParamGroup.reshard`` is ``new_reshard``."""
    return _patched(_param_group().FSDPParamGroup, "reshard", new_reshard)


def patch_post_backward(new_post_backward: Callable[..., Any]) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``FSDPParamGroup.post_backward`` is ``new_post_backward``."""
    return _patched(_param_group().FSDPParamGroup, "post_backward", new_post_backward)


def patch_register_post_backward_hook_backward(new_backward: Callable[..., Any]
                                               ) -> contextlib.AbstractContextManager[None]:
    """Within the block, the backward of FSDP2's post-backward autograd function is ``new_backward``
    (``new_backward(ctx, *grads)``)."""
    return _patched(_param_group().RegisterPostBackwardFunction, "backward", new_backward)


def reduce_scatter_with_assert(cls: Any, orig_reduce_scatter: Callable[..., Any],
                               assert_fn: Callable[[torch.Tensor], None], *args: Any, **kwargs: Any) -> Any:
    """Call ``assert_fn`` on the reduce-scatter's output tensor, then the original reduce-scatter: with
    ``functools.partial`` a replacement for :func:`patch_reduce_scatter` that checks, e.g., the dtype.

    Example::

        def assert_fn(output): self.assertEqual(output.dtype, torch.float32)
        rs = functools.partial(reduce_scatter_with_assert, self, dist.reduce_scatter_single, assert_fn)
        with patch_reduce_scatter(rs):
            loss.backward()
    """
    if args:
        output = args[0]
    elif "output" in kwargs:
        output = kwargs["output"]
    else:
        raise AssertionError(f"Cannot get reduce-scatter output from\nargs: {args}\nkwargs: {kwargs}")
    assert_fn(output)
    return orig_reduce_scatter(*args, **kwargs)


def _maybe_wrap_fsdp(model: nn.Module, wrap_fsdp: bool, *args: Any, **kwargs: Any) -> nn.Module:
    """``model`` wrapped in FSDP1 (``FullyShardedDataParallel(model, *args, **kwargs)``) when ``wrap_fsdp``, else
    ``model`` itself."""
    if not wrap_fsdp:
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel(model, *args, **kwargs)


def _move_to_device(model: nn.Module, move_to_device: bool) -> nn.Module:
    """``model`` on the ranks' device (``get_devtype()``) when ``move_to_device``."""
    return model.to(get_devtype()) if move_to_device else model


def _maybe_cuda(model: nn.Module, move_to_cuda: bool) -> nn.Module:
    """An older release's helper, as it was there: ``model.cuda()`` when ``move_to_cuda``, else ``model``
    unchanged. It asks for CUDA by name (``_move_to_device`` is its device-agnostic successor): on a machine
    without CUDA it raises, which the harness reports as a test that needs CUDA."""
    return model.cuda() if move_to_cuda else model


def get_full_params(model: nn.Module, recurse: bool = True) -> list[torch.Tensor]:
    """Deep copies of an FSDP1 model's full (unsharded) parameters."""
    import copy

    from torch.distributed.fsdp import FullyShardedDataParallel

    with FullyShardedDataParallel.summon_full_params(model, recurse=recurse):
        return copy.deepcopy(list(model.parameters()))


def _zero_model(model: nn.Module, zero_buffers: bool = False, summon_full: bool = True) -> None:
    """Zero an FSDP1 model's parameters (its full ones with ``summon_full``), and its buffers with ``zero_buffers``."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    ctx = FullyShardedDataParallel.summon_full_params(model) if summon_full else contextlib.nullcontext()
    with ctx:
        for param in model.parameters():
            with torch.no_grad():
                param.zero_()
        if zero_buffers:
            for buffer in model.buffers():
                with torch.no_grad():
                    buffer.zero_()


def subtest_name(test_name_mapping: dict[str, str], *args: Any) -> str:
    """A subtest's name from its arguments: each one's entry in ``test_name_mapping`` (by ``str(arg)``), "none" for
    None, joined by "_".

    Example::

        subtest_name({"True": "offload", "False": "no_offload"}, True, None)    # 'offload_none'
    """
    return "_".join("none" if arg is None else test_name_mapping[str(arg)] for arg in args)


def _assert_module_states(model: nn.Module, process_group: dist.ProcessGroup,
                          assert_fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> None:
    """Check every rank holds rank 0's parameters and buffers: each state (on CPU) gathered from every rank, and
    ``assert_fn(rank 0's, rank r's)`` called on each pair, in ``named_parameters()`` then ``named_buffers()``
    order.

    Example::

        _assert_module_states(model, dist.group.WORLD, self.assertEqual)
    """
    states = [(name, t.detach().cpu()) for name, t in (*model.named_parameters(), *model.named_buffers())]
    gathered: list[Any] = [None] * dist.get_world_size(process_group)
    dist.all_gather_object(gathered, states, group=process_group)
    first = gathered[0]
    if first is None:
        raise AssertionError("_assert_module_states: rank 0 sent no states")
    for other in gathered[1:]:
        if other is None:
            raise AssertionError("_assert_module_states: a rank sent no states")
        if len(other) != len(first):
            raise AssertionError(f"_assert_module_states: {len(first)} states on rank 0, {len(other)} on another")
        for (_, mine), (_, theirs) in zip(first, other):
            assert_fn(mine, theirs)


class _DoneWork:
    """What ``DummyProcessGroup.allreduce`` returns: a work whose future already holds 1."""

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(1)
        return future

    def wait(self) -> bool:
        return True


class DummyProcessGroup:
    """A stand-in group for code that asks only its rank and size and calls ``allreduce`` (FSDP's sharded grad
    scaler, for one): every ``allreduce`` returns a finished work.

    Example::

        pg = DummyProcessGroup(rank=0, size=2)
        pg.allreduce([torch.ones(1)]).get_future().wait()    # 1
    """

    def __init__(self, rank: int, size: int) -> None:
        self._rank = rank
        self._size = size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def allreduce(self, *args: Any, **kwargs: Any) -> _DoneWork:
        return _DoneWork()


def _get_state_dict(model: nn.Module, cpu_offload: bool = False, half: bool = False) -> dict[str, Any]:
    """``model``'s state dict, the model first moved to the ranks' device (left where it is with
    ``cpu_offload``) and cast to half precision with ``half``."""
    if not cpu_offload:
        model = model.to(get_devtype())
    if half:
        model.half()
    return model.state_dict()


def _broadcast_state_dict(rank: int, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rank 0's ``state_dict`` on every rank (sent through the CPU as objects), on the ranks' device."""
    sent = [{name: t.cpu() for name, t in state_dict.items()} if rank == 0 else None]
    dist.broadcast_object_list(sent)
    received: dict[str, torch.Tensor] = sent[0]  # type: ignore[assignment]
    return {name: t.to(get_devtype()) for name, t in received.items()}


def compiled_fsdp_test(compile_compute_on_module: type | None = None) -> Callable[[Any], Any]:
    """Run the test twice: with ``fully_shard`` as it is, then (where triton is installed) with the test module's
    global ``fully_shard`` replaced by one that also compiles each module it shards (only those of
    ``compile_compute_on_module``, when given). Every rank changes the global together (a barrier each side).

    Example::

        @compiled_fsdp_test(compile_compute_on_module=TransformerBlock)
        def test_train_parity(self):
            ...  # calls fully_shard(...) as the module's global
    """
    import functools as ft
    import warnings

    def sharding_and_compiling(*args: Any, **kwargs: Any) -> Any:
        from torch.distributed.fsdp import fully_shard

        result = fully_shard(*args, **kwargs)
        if compile_compute_on_module is None or isinstance(args[0], compile_compute_on_module):
            args[0].compile()
        return result

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @ft.wraps(func)
        def both(*args: Any, **kwargs: Any) -> None:
            from torch.distributed.fsdp import fully_shard
            from torch.utils._triton import has_triton

            import torch._inductor.config as inductor_config

            for compiled in (False, True):
                if compiled and not has_triton():
                    warnings.warn("Inductor on GPU needs Triton and recent GPU arch", stacklevel=2)
                    continue
                threads = inductor_config.compile_threads
                dist.barrier()  # every rank (thread ranks share the global) reads the same function
                if compiled:
                    inductor_config.compile_threads = 1
                func.__globals__[fully_shard.__name__] = sharding_and_compiling if compiled else fully_shard
                try:
                    func(*args, **kwargs)
                finally:
                    dist.barrier()
                    func.__globals__[fully_shard.__name__] = fully_shard
                    inductor_config.compile_threads = threads
        return both
    return decorator


def test_compiled_fsdp(compile_compute_on_module: type | None = None) -> Callable[[Any], Any]:
    """``compiled_fsdp_test`` under the name older releases gave it (the same two runs: eager, then compiled where
    triton is installed). Marked ``__test__ = False``: imported into a test module under a ``test_`` name, it
    is not collected as a test of its own."""
    return compiled_fsdp_test(compile_compute_on_module)


test_compiled_fsdp.__test__ = False  # type: ignore[attr-defined]


def _machine_device() -> tuple[str, str, int]:
    if torch.accelerator.is_available():
        found = torch.accelerator.current_accelerator()
        if found is not None and found.type != "mps":  # gloo carries no MPS tensors: Apple GPUs count as CPU here
            return found.type, dist.get_default_backend_for_device(found), torch.accelerator.device_count()
    return "cpu", "gloo", 1


#: this machine's device for FSDP's tests, its backend and count: the accelerator's, else "cpu", gloo and 1 (the
#: machine's, as upstream's; the device the harness put the ranks on is ``get_devtype()``)
DEVICE_TYPE, DISTRIBUTED_BACKEND, DEVICE_COUNT = _machine_device()


def _sleep_ms(ms: int) -> None:
    """Keep this rank's device busy ``ms`` milliseconds: a CUDA sleep kernel; on HPU and XPU the host sleeps; on
    CPU nothing (upstream's delays are for GPU streams)."""
    import time

    from harness.upstream_modules.common_utils import get_cycles_per_ms

    if ms <= 0:
        return
    if (hasattr(torch, "hpu") and torch.hpu.is_available()) or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        time.sleep(ms / 1000)
    elif torch.cuda.is_available():
        torch.cuda._sleep(int(ms * get_cycles_per_ms()))


class ModuleWithDelay(FSDPTestModel):
    """An FSDP1 test model (``module``) with delays: ``delay_after_loss_ms`` after the loss, and
    ``delay_before_reduction_ms`` before each gradient reduce-scatter of its backward (the reduce-scatter function
    the installed torch's FSDP1 calls, patched for the backward only)."""

    def __init__(self, module: nn.Module, delay_after_loss_ms: int, delay_before_reduction_ms: int) -> None:
        super().__init__()
        self.delay_after_loss_ms = delay_after_loss_ms
        self.delay_before_reduction_ms = delay_before_reduction_ms
        self.module = module

    def get_input(self, device: Any) -> Any:
        return self.module.get_input(device)  # type: ignore[operator]

    def forward(self, x: Any) -> Any:
        return self.module(x)

    def get_loss(self, input: Any, output: Any) -> torch.Tensor:
        loss = self.module.get_loss(input, output)  # type: ignore[operator]
        _sleep_ms(self.delay_after_loss_ms)
        return loss

    def run_backward(self, loss: torch.Tensor) -> None:
        from harness.upstream_modules.common_utils import torch_release

        name = "reduce_scatter_single" if torch_release() >= (2, 13) else "reduce_scatter_tensor"
        original = getattr(dist, name)

        def delayed(*args: Any, **kwargs: Any) -> Any:
            _sleep_ms(self.delay_before_reduction_ms)
            return original(*args, **kwargs)
        from unittest import mock

        with mock.patch.object(dist, name, delayed):  # this rank alone: no barrier, no collective of its own
            self.module.run_backward(loss)  # type: ignore[operator]

    @staticmethod
    def init(module_class: type, *model_args: Any, delay_after_loss_ms: int, delay_before_reduction_ms: int,
             **model_kwargs: Any) -> ModuleWithDelay:  # type: ignore[override]
        """``module_class.init(*model_args, **model_kwargs)`` with the delays."""
        return ModuleWithDelay(module_class.init(*model_args, **model_kwargs), delay_after_loss_ms,
                               delay_before_reduction_ms)


class NestedWrappedModuleWithDelay(ModuleWithDelay):
    """:class:`NestedWrappedModule` (built on the ranks' device after wrapping, by default) with the delays."""

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode,  # type: ignore[override]
             device_init_mode: DEVICEInitMode = DEVICEInitMode.DEVICE_AFTER, fsdp_kwargs: dict[str, Any] | None = None,
             deterministic: bool = False, delay_after_loss_ms: int = 0,
             delay_before_reduction_ms: int = 0) -> ModuleWithDelay:
        return ModuleWithDelay.init(NestedWrappedModule, group=group, fsdp_init_mode=fsdp_init_mode,
                                    device_init_mode=device_init_mode, fsdp_kwargs=fsdp_kwargs,
                                    deterministic=deterministic, delay_after_loss_ms=delay_after_loss_ms,
                                    delay_before_reduction_ms=delay_before_reduction_ms)


class MixtureOfExperts(NestedWrappedModule):
    """FSDP1's expert test model: ``module`` is Linear(8, 12), a shared Linear(12, 23), an expert Linear(23, 12)
    (its parameters marked ``expert``, seeded per rank so each rank's differs) and Linear(12, 8). With
    ``wrap_fsdp`` the expert is FSDP1 over a group of its own rank alone (never sharded) and the shared layer FSDP1
    over ``group``; without, ``run_backward`` averages the non-expert gradients over ``group`` itself.
    ``delay_before_free_ms`` delays the expert's reshard in the forward (a GPU sleep)."""

    def __init__(self, group: Any, wrap_fsdp: bool, device_init_mode: DEVICEInitMode, delay_before_free_ms: int,
                 deterministic: bool, **fsdp_kwargs: Any) -> None:
        from harness.models import _rank_device

        super().__init__(group=group, wrap_fsdp=wrap_fsdp, device_init_mode=device_init_mode,
                         deterministic=deterministic)
        self.group = group
        self.delay_before_free_ms = delay_before_free_ms
        self.wrap_fsdp = wrap_fsdp
        self.move_to_device = device_init_mode == DEVICEInitMode.DEVICE_BEFORE

        def placed(layer: nn.Module) -> nn.Module:
            return layer.to(_rank_device()) if self.move_to_device else layer

        if deterministic:
            torch.manual_seed(42 + self.rank)
        expert = placed(nn.Linear(23, 12))
        self.num_expert_params = sum(p.numel() for p in expert.parameters())
        for p in expert.parameters():
            p.expert = True  # type: ignore[attr-defined]
        if deterministic:
            torch.manual_seed(0)
        shared = placed(nn.Linear(12, 23))
        if wrap_fsdp:
            from torch.distributed.fsdp import FullyShardedDataParallel

            expert = FullyShardedDataParallel(expert, dist.new_group([group.rank()]), **fsdp_kwargs)
            shared = FullyShardedDataParallel(shared, group, **fsdp_kwargs)
        self.module = nn.Sequential(placed(nn.Linear(8, 12)), shared, expert, placed(nn.Linear(12, 8)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.fsdp import FullyShardedDataParallel

        if self.delay_before_free_ms > 0 and isinstance(self.module[2], FullyShardedDataParallel):
            import torch.distributed.fsdp._runtime_utils as runtime

            original = runtime._reshard

            def delayed(*args: Any, **kwargs: Any) -> Any:
                _sleep_ms(self.delay_before_free_ms)
                return original(*args, **kwargs)
            from unittest import mock

            with mock.patch.object(runtime, "_reshard", delayed):
                return self.module(x)
        return self.module(x)

    def run_backward(self, loss: torch.Tensor) -> None:
        loss.backward()
        if self.wrap_fsdp:
            return
        with torch.no_grad():
            for p in self.parameters():
                if not hasattr(p, "expert") and p.grad is not None:  # an expert's gradient stays its rank's
                    p.grad.div_(self.world_size)
                    dist.all_reduce(p.grad, group=self.group)

    @staticmethod
    def init(group: Any, fsdp_init_mode: FSDPInitMode, device_init_mode: DEVICEInitMode,  # type: ignore[override]
             fsdp_kwargs: dict[str, Any] | None = None, deterministic: bool = False,
             delay_before_free_ms: int = 0) -> nn.Module:
        """``NO_FSDP``: nothing wrapped; ``RECURSIVE``: the expert and shared layers wrapped, not the whole;
        ``DEVICE_AFTER`` moves it to the ranks' device once built."""
        from harness.models import _rank_device

        if fsdp_init_mode == FSDPInitMode.NO_FSDP:
            return MixtureOfExperts(group, wrap_fsdp=False, device_init_mode=device_init_mode,
                                    delay_before_free_ms=delay_before_free_ms, deterministic=deterministic)
        if fsdp_init_mode == FSDPInitMode.RECURSIVE:
            model = MixtureOfExperts(group, wrap_fsdp=True, device_init_mode=device_init_mode,
                                     delay_before_free_ms=delay_before_free_ms, deterministic=deterministic,
                                     **dict(fsdp_kwargs or {}))
            return model.to(_rank_device()) if device_init_mode == DEVICEInitMode.DEVICE_AFTER else model
        raise ValueError(f"MixtureOfExperts.init: unsupported FSDPInitMode {fsdp_init_mode!r}")
