"""``torch.testing._internal.distributed._tensor.common_dtensor`` as distributed test files use it: the
harness's DTensor classes, ``with_comms``, DTensor's test models, the machine's device for DTensor tests
(``DEVICE_TYPE``, ``NUM_DEVICES``), and the shard-order helpers of the redistribution tests."""
from __future__ import annotations

import contextlib
import copy
import itertools
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from harness.classes.case import DTensorTestBase, MultiProcessTestCase
from harness.classes.compat import DTensorContinuousTestBase, MultiProcContinuousTest
from harness.classes.dynamo import (DistributedTestBase, DynamoDistributedMultiProcTestCase,
                                    DynamoDistributedSingleProcTestCase)
from harness.inprocess.local import LocalDTensorTestBase, create_local_tensor_test_class
from harness.inprocess.threaded import spawn_threads_and_init_comms
from harness.inprocess.threaded_classes import DTensorOpTestBase, MultiThreadedTestCase
from harness.models import (Attention, ExpertLayer, Experts, FeedForward, MLPModule, MLPStacked, ModelArgs, RMSNormPython, Transformer,
                            TransformerBlock)
from harness.testing.decorators import skip_if_lt_x_gpu, with_comms
from harness.testing.local_ranks import map_local_for_rank, map_local_tensor_for_rank
from harness.testing.requirements import (get_required_world_size, requires_accelerator_dist_backend, requires_gloo,
                                          requires_nccl, requires_world_size, skip_if_odd_worldsize,
                                          skip_if_rocm_multiprocess, skip_if_small_worldsize, skip_if_win32,
                                          flag, skip_unless_torch_gpu, with_dist_debug_levels)
from harness.upstream_modules.common_utils import torch_release
from harness.testing.subtests import run_subtests

__all__ = ["DTensorTestBase", "DTensorContinuousTestBase", "DTensorOpTestBase", "LocalDTensorTestBase",
           "create_local_tensor_test_class", "with_comms", "skip_unless_torch_gpu", "map_local_for_rank",
           "MultiProcessTestCase", "MultiProcContinuousTest", "MultiThreadedTestCase", "DistributedTestBase",
           "DynamoDistributedMultiProcTestCase", "DynamoDistributedSingleProcTestCase", "skip_if_lt_x_gpu",
           "run_subtests", "skip_if_win32", "skip_if_rocm_multiprocess", "requires_nccl", "requires_gloo",
           "requires_accelerator_dist_backend", "requires_world_size", "skip_if_odd_worldsize",
           "skip_if_small_worldsize", "with_dist_debug_levels", "get_required_world_size",
           "spawn_threads_and_init_comms", "MLPModule", "MLPStacked", "ModelArgs", "Transformer", "TransformerBlock",
           "Attention", "FeedForward", "RMSNormPython", "DEVICE_TYPE", "DEVICE_COUNT", "PG_BACKEND", "NUM_DEVICES",
           "map_local_tensor_for_rank", "LocalDTensorOpTestBase", "generate_shard_orders", "shard_order_to_placement",
           "patched_distribute_tensor", "redistribute", "make_full_tensor", "reduce_local_int",
           "op_strategy_context", "validate_sharding_rule_sample", "validate_sharding_rule_sample_backward",
           "Experts", "ExpertLayer", "TensorParallelForExpert", "ExpertParallel", "ExpertParallelWithTP",
           "LocalDTensorContinuousTestBase", "make_wrapped", "DTensorConverter", "_get_device_type"]


def _accelerator() -> Any:
    """The accelerator DTensor tests use (CUDA, XPU, HPU or a PrivateUse1 device; not Apple's MPS), None
    without one."""
    found = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return found if found is not None and found.type != "mps" else None


_FOUND = _accelerator()
#: the device DTensor tests build meshes on, its count and its backend: the accelerator's, else "cpu" and gloo
DEVICE_TYPE: str = _FOUND.type if _FOUND is not None else "cpu"
DEVICE_COUNT: int = torch.accelerator.device_count() if _FOUND is not None else 0
PG_BACKEND: str = dist.Backend.default_device_backend_map.get(DEVICE_TYPE, "gloo") if _FOUND is not None else "gloo"
#: the world of DTensor's op tests: 4 ranks, fewer where fewer GPUs exist (2 at least on ROCm)
NUM_DEVICES: int = min(4, max(2, torch.cuda.device_count())) if flag("TEST_WITH_ROCM") else 4
if DEVICE_COUNT > 1:
    NUM_DEVICES = min(NUM_DEVICES, DEVICE_COUNT)


def _get_device_type(world_size: int) -> str:
    """The device a ``world_size``-rank DTensor test runs on (torch 2.15's helper): the accelerator's type where it
    has a device for every rank, else ``"cpu"``."""
    return DEVICE_TYPE if _FOUND is not None and DEVICE_COUNT >= world_size else "cpu"


class LocalDTensorOpTestBase(LocalDTensorTestBase):
    """``DTensorOpTestBase``'s tests with every rank simulated in one process: ``NUM_DEVICES`` ranks on
    ``DEVICE_TYPE`` (CPU where there is not a GPU per rank), the ``fake`` default group up for each test as the
    threaded class has it, ``@with_comms`` or not. The twin of a ``DTensorOpTestBase`` class is made on it:
    ``create_local_tensor_test_class(TestOps, base_class=LocalDTensorOpTestBase)``.

    Example::

        class TestOps(LocalDTensorOpTestBase):
            def test_add(self):
                mesh = self.build_device_mesh()
                with self._get_local_tensor_mode():
                    d = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
    """

    #: the group around every test, as ``@with_comms`` makes it (one group, also where a test has the decorator)
    _harness_auto_comms = True

    @property
    def world_size(self) -> int:
        return NUM_DEVICES


class LocalDTensorContinuousTestBase(LocalDTensorOpTestBase):
    """``DTensorContinuousTestBase``'s tests with every rank simulated in one process: ``NUM_DEVICES`` ranks (a
    class may set ``world_size``), the ``fake`` default group up for each test, no ``@with_comms`` needed."""

    world_size = NUM_DEVICES  # type: ignore[assignment]


def make_wrapped(fn: Callable[..., Any], ctxs: list[Any]) -> Callable[..., Any]:
    """``fn(self)`` run inside the context managers ``ctxs`` (each one, or ``ctx(self)`` for a callable), dynamo's
    caches reset first: how ``create_local_tensor_test_class`` wraps a test."""
    import functools

    @functools.wraps(fn)
    def wrapped(self: Any) -> Any:
        import torch._dynamo

        torch._dynamo.reset()
        with contextlib.ExitStack() as stack:
            for ctx in ctxs:
                stack.enter_context(ctx(self) if callable(ctx) else ctx)
            return fn(self)
    return wrapped


def _shard_order(assignment: dict[int, tuple[int, ...]]) -> tuple[Any, ...]:
    from torch.distributed.tensor._dtensor_spec import ShardOrderEntry

    return tuple(ShardOrderEntry(tensor_dim=dim, mesh_dims=tuple(mesh_dims)) for dim, mesh_dims in assignment.items())


def _segments(items: tuple[int, ...], count: int) -> Iterator[list[tuple[int, ...]]]:
    """``items`` cut into ``count`` non-empty runs, the cuts in ``itertools.combinations`` order."""
    for cuts in itertools.combinations(range(1, len(items)), count - 1):
        bounds = (0, *cuts, len(items))
        yield [items[a:b] for a, b in zip(bounds, bounds[1:])]


def generate_shard_orders(mesh: Any, tensor_rank: int) -> Iterator[tuple[Any, ...]]:
    """Every way to shard a tensor of ``tensor_rank`` dims over ``mesh``, as shard orders: for each order of the
    mesh's dims, each cut of it into runs, and each choice of as many tensor dims (in increasing order), the
    i-th run shards the i-th chosen dim (``ShardOrderEntry(tensor_dim, mesh_dims)``, mesh dims in the order they
    shard it). The order and repeats are upstream's, so tests parametrized by it name the same cases.

    Example::

        for order in generate_shard_orders(mesh_2d, 2):
            d = patched_distribute_tensor(t, mesh_2d, None, order)
    """
    for device_order in itertools.permutations(range(mesh.ndim)):
        for count in range(1, mesh.ndim + 1):
            for runs in _segments(tuple(range(mesh.ndim)), count):
                for dims in itertools.combinations(range(tensor_rank), count):
                    yield _shard_order({dim: device_order[run[0]:run[-1] + 1] for dim, run in zip(dims, runs)})


def shard_order_to_placement(shard_order: Any, mesh: Any) -> tuple[Any, ...]:
    """The placements a shard order gives each mesh dim: ``Shard(tensor_dim)`` where a dim shards, ``Replicate()``
    elsewhere."""
    from torch.distributed.tensor import Replicate, Shard

    placements: list[Any] = [Replicate()] * mesh.ndim
    for entry in shard_order or ():
        for mesh_dim in entry.mesh_dims:
            placements[mesh_dim] = Shard(entry.tensor_dim)
    return tuple(placements)


def redistribute(dtensor_input: Any, device_mesh: Any, placements: Any, shard_order: Any,
                 use_graph_based_transform: bool = True) -> Any:
    """Redistribute a DTensor to ``placements`` in the given shard order (the placements from the order when
    None): DTensor's own local redistribution with the order set on the target spec."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._redistribute import redistribute_local_tensor

    placements = tuple(placements if placements is not None else shard_order_to_placement(shard_order, device_mesh))
    old = dtensor_input._spec
    new = copy.deepcopy(old)
    new.placements = placements
    new.shard_order = shard_order if shard_order is not None else ()
    if new == old:
        return dtensor_input
    local = redistribute_local_tensor(dtensor_input.to_local(), old, new,
                                      use_graph_based_transform=use_graph_based_transform)
    result = DTensor.from_local(local, device_mesh)
    result._spec = copy.deepcopy(new)
    return result


def patched_distribute_tensor(input_tensor: torch.Tensor, device_mesh: Any, placements: Any, shard_order: Any,
                              use_graph_based_transform: bool = True, src_data_rank: int | None = 0) -> Any:
    """``distribute_tensor`` that also takes a shard order (``distribute_tensor`` itself takes none yet): the
    tensor distributed to the order's placements, then put in that order."""
    from torch.distributed.tensor import distribute_tensor

    placements = tuple(placements if placements is not None else shard_order_to_placement(shard_order, device_mesh))
    tensor = distribute_tensor(input_tensor, device_mesh, placements, src_data_rank=src_data_rank)
    tensor._spec.use_strided_shard_as_shard_order = False  # a strided shard is not an order here
    tensor._spec.__post_init__()
    return redistribute(tensor, device_mesh, placements, shard_order, use_graph_based_transform)


def make_full_tensor(dtensor_input: Any) -> torch.Tensor:
    """The full tensor of a DTensor in any shard order (``full_tensor`` for ordered shards)."""
    return redistribute(dtensor_input, dtensor_input.device_mesh, None, ()).to_local()


def reduce_local_int(val: Any, func: Callable[[Any], Any]) -> Any:
    """``func`` of the per-rank values of a local-tensor symbolic int (``{rank: value}``), to one value."""
    return func(val.node._local_ints)


@contextlib.contextmanager
def op_strategy_context(op_overload: Any, strategy_func: Callable[..., Any], schema_info: Any = None) -> Iterator[None]:
    """DTensor's sharding strategy of ``op_overload`` replaced by ``strategy_func`` for the block (registered as
    ``register_op_strategy`` would, with ``schema_info``), the one it had put back after it, and the sharding
    propagation cache cleared so no decision of the block outlives it."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._ops.utils import register_op_strategy
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    propagator = DTensor._op_dispatcher.sharding_propagator
    tables = (propagator.op_strategy_funcs, propagator.op_to_schema_info)
    saved = [table.pop(op_overload, None) for table in tables]
    try:
        register_op_strategy(op_overload, schema_info=schema_info)(strategy_func)
        yield
    finally:
        for table, before in zip(tables, saved):
            table.pop(op_overload, None)
            if before is not None:
                table[op_overload] = before
        _clear_sharding_prop_cache()


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    from torch.utils import _pytree as pytree

    return [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]


def _with_tensors(args: Any, kwargs: Any, tensors: list[Any]) -> tuple[Any, Any]:
    """``(args, kwargs)`` with their tensors, in order, replaced by ``tensors``."""
    from torch.utils import _pytree as pytree

    replacements = iter(tensors)
    return pytree.tree_map(lambda a: next(replacements) if isinstance(a, torch.Tensor) else a, (args, kwargs))


def validate_sharding_rule_sample(op: Callable[..., Any], full_args: Any, full_kwargs: Any, input_placements: Any,
                                  output_placements: Any, device_mesh: Any) -> bool:
    """Whether a sharding rule is right for one sample on a 1-D mesh: ``op`` run on each rank's shards of the inputs
    (``input_placements``, one per input tensor), its outputs read as DTensors of ``output_placements`` and
    gathered, equal ``op`` on the full inputs (shape, and values within 1e-5). From torch 2.12 each output tensor
    has its own placement; before, ``output_placements`` are the one output's, as the installed release reads them."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    shards = [distribute_tensor(t, device_mesh, (p,)).to_local()
              for t, p in zip(_tensors(full_args, full_kwargs), input_placements)]
    local_args, local_kwargs = _with_tensors(full_args, full_kwargs, shards)
    reference = op(*full_args, **full_kwargs)
    local = op(*local_args, **local_kwargs)
    if torch_release() < (2, 12):
        pairs = [(reference, local, tuple(output_placements))]
    else:
        pairs = [(r, l, (p,)) for r, l, p in zip(_tensors(reference, {}), _tensors(local, {}), output_placements)]
    for full, piece, placements in pairs:
        gathered = DTensor.from_local(piece, device_mesh, placements).redistribute(
            device_mesh, (Replicate(),) * len(placements)).to_local()
        if full.shape != gathered.shape or not torch.allclose(full, gathered, atol=1e-5, rtol=1e-5,
                                                              equal_nan=torch_release() >= (2, 12)):
            return False
    return True


def validate_sharding_rule_sample_backward(op: Callable[..., Any], full_args: Any, full_kwargs: Any,
                                           input_placements: Any, device_mesh: Any) -> bool | None:
    """Whether the gradients through a sharding rule are right for one sample: the sum of ``op``'s floating outputs
    back-propagated on the full inputs and on DTensors of ``input_placements``, each input's gradient compared
    (gathered; shape, and values within ``atol=1e-5, rtol=1.3e-6``). None where there is nothing to compare: no
    floating input or output, ``op`` fails on the full inputs, or DTensor has no strategy for it."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    inputs = _tensors(full_args, full_kwargs)
    if not any(t.is_floating_point() for t in inputs):
        return None

    def fresh() -> list[torch.Tensor]:
        return [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]

    def backward(output: Any) -> bool:
        floating = [t for t in _tensors(output, {}) if t.is_floating_point() and t.requires_grad]
        if floating:
            sum(t.sum() for t in floating).backward()
        return bool(floating)

    reference = fresh()
    try:
        args, kwargs = _with_tensors(full_args, full_kwargs, reference)
        if not backward(op(*args, **kwargs)):
            return None
    except RuntimeError:
        return None
    if len(input_placements) != len(inputs):
        raise AssertionError(f"placement/tensor count mismatch: {len(input_placements)} vs {len(inputs)}")
    distributed = [distribute_tensor(t, device_mesh, (p,)) for t, p in zip(fresh(), input_placements)]
    try:
        args, kwargs = _with_tensors(full_args, full_kwargs, distributed)
        if not backward(op(*args, **kwargs)):
            return None
    except Exception as exc:  # noqa: BLE001 - DTensor's "no strategy" errors mean there is nothing to compare
        if "does not have a sharding strategy registered" in str(exc) or "got mixed torch.Tensor and DTensor" in str(exc):
            return None
        raise
    for full, dt in zip(reference, distributed):
        if not full.is_floating_point() or full.grad is None:
            continue
        if dt.grad is None:
            return False
        grad = dt.grad.full_tensor() if isinstance(dt.grad, DTensor) else dt.grad
        if full.grad.shape != grad.shape or not torch.allclose(full.grad, grad, atol=1e-5, rtol=1.3e-6,
                                                               equal_nan=True):
            return False
    return True


try:  # the parallel styles of the expert tests derive torch's ParallelStyle
    from torch.distributed.tensor.parallel import ParallelStyle as _ParallelStyle
except ImportError:  # pragma: no cover - a torch without tensor parallelism
    _ParallelStyle = object  # type: ignore[assignment,misc]


def _experts_sharded(module: torch.nn.Module, mesh: Any, placement_of: dict[str, list[Any]]) -> None:
    from torch.distributed.tensor import distribute_tensor

    for name, param in list(module.named_parameters(recurse=False)):
        if name in placement_of:
            module.register_parameter(name, torch.nn.Parameter(distribute_tensor(param, mesh, placement_of[name])))


class TensorParallelForExpert(_ParallelStyle):
    """Tensor parallelism for :class:`Experts`: ``w1`` sharded on its hidden dim (``Shard(1)``), ``w2`` on its
    (``Shard(2)``), the partial outputs reduced to ``output_layouts`` (``Replicate()`` by default). Sequence
    parallel: ``input_layouts=Shard(0)`` gathers the tokens first, ``output_layouts=Shard(0)`` scatters them after."""

    def __init__(self, *, input_layouts: Any = None, output_layouts: Any = None) -> None:
        from torch.distributed.tensor import Replicate

        super().__init__()
        self.input_layouts = input_layouts
        self.output_layouts = output_layouts or Replicate()

    def _apply(self, module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module

        def partition(name: str, mod: torch.nn.Module, mesh: Any) -> None:
            _experts_sharded(mod, mesh, {"w1": [Shard(1)], "w2": [Shard(2)]})

        def gather_tokens(mod: torch.nn.Module, inputs: tuple[Any, ...], mesh: Any) -> tuple[Any, ...]:
            if self.input_layouts is None:
                return inputs
            return (DTensor.from_local(inputs[0], mesh, [self.input_layouts]).redistribute(mesh, [Replicate()])
                    .to_local(),)

        def reduce_outputs(mod: torch.nn.Module, outputs: torch.Tensor, mesh: Any) -> torch.Tensor:
            return DTensor.from_local(outputs, mesh, [Partial()]).redistribute(mesh, [self.output_layouts]).to_local()

        return distribute_module(module, device_mesh, partition_fn=partition, input_fn=gather_tokens,
                                 output_fn=reduce_outputs)


def _gather_tokens(x: torch.Tensor, group: Any) -> torch.Tensor:
    from torch.distributed._functional_collectives import all_gather_single_autograd

    return torch.ops._c10d_functional.wait_tensor(all_gather_single_autograd(x, gather_dim=0, group=group))


def _scatter_sums(x: torch.Tensor, group: Any) -> torch.Tensor:
    from torch.distributed._functional_collectives import reduce_scatter_single_autograd

    return torch.ops._c10d_functional.wait_tensor(reduce_scatter_single_autograd(x, "sum", scatter_dim=0,
                                                                                 group=group))


class ExpertParallel(_ParallelStyle):
    """Expert parallelism: every parameter sharded on the expert dim (``Shard(0)``); each rank's tokens gathered to
    every rank before the experts (an all-gather) and the expert outputs summed back to their owners after (a
    reduce-scatter)."""

    def _apply(self, module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        from torch.distributed.tensor import Shard, distribute_module

        def partition(name: str, mod: torch.nn.Module, mesh: Any) -> None:
            _experts_sharded(mod, mesh, {n: [Shard(0)] for n, _ in mod.named_parameters(recurse=False)})

        return distribute_module(module, device_mesh, partition_fn=partition,
                                 input_fn=lambda mod, inputs, mesh: (_gather_tokens(inputs[0], mesh.get_group()),),
                                 output_fn=lambda mod, output, mesh: _scatter_sums(output, mesh.get_group()))


class ExpertParallelWithTP(_ParallelStyle):
    """Expert and tensor parallelism together, on an :class:`ExpertLayer`: ``w1``/``w2`` on the (ep, tp) mesh as
    ``[Shard(0), Shard(1)]``/``[Shard(0), Shard(2)]``; the layer gathers tokens over ``ep_mesh`` and scatters the
    sums back, its experts reduce their partial outputs over ``tp_mesh`` (and the input's gradient, backward)."""

    def __init__(self, ep_mesh: Any, tp_mesh: Any) -> None:
        from torch.distributed.device_mesh import DeviceMesh

        super().__init__()
        self.ep_mesh = ep_mesh
        self.tp_mesh = tp_mesh
        self.ep_tp_mesh = DeviceMesh._concatenate([ep_mesh, tp_mesh])

    def _apply(self, module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

        experts = module.experts  # type: ignore[attr-defined]
        _experts_sharded(experts, self.ep_tp_mesh, {"w1": [Shard(0), Shard(1)], "w2": [Shard(0), Shard(2)]})
        ep_group, tp_mesh = self.ep_mesh.get_group(), self.tp_mesh
        module.register_forward_pre_hook(lambda mod, inputs: (_gather_tokens(inputs[0], ep_group),))
        module.register_forward_hook(lambda mod, inputs, output: _scatter_sums(output, ep_group))
        experts.register_forward_pre_hook(lambda mod, inputs: (
            DTensor.from_local(inputs[0], tp_mesh, [Replicate()]).to_local(grad_placements=[Partial()]),))
        experts.register_forward_hook(lambda mod, inputs, output: (
            DTensor.from_local(output, tp_mesh, [Partial()]).redistribute(tp_mesh, [Replicate()]).to_local()))
        return module


class DTensorConverter:
    """An op's arguments as DTensors on ``mesh``, once per sharding choice: iterating yields ``(args, kwargs)`` with
    each tensor (plain tensors and parameters, ``args`` and ``kwargs`` flattened as pytrees) distributed as one of
    its choices, every combination in turn: ``Replicate()``, and ``Shard(d)`` for each dim ``d`` longer than 1 that
    the mesh's size divides (a bool tensor, and every tensor under ``replicate_only``, only replicated; a 0-dim one
    always replicated). Tensors it cannot distribute (sparse, quantized, nested, conjugate or negative views, on
    meta, subclasses) pass through as they are and count in ``miss``; the converted ones in ``hit``:
    ``successful()`` is true when some were and none failed. Anything else raises.

    Example::

        for sample in op.sample_inputs(device, dtype):
            converter = DTensorConverter(mesh, (sample.input, *sample.args), sample.kwargs)
            for d_args, d_kwargs in converter:
                out = op(*d_args, **d_kwargs)
            ...
    """

    def __init__(self, mesh: Any, args: tuple[object, ...], kwargs: dict[str, object],
                 replicate_only: bool = False) -> None:
        from torch.utils._pytree import tree_flatten

        self.hit = 0
        self.miss = 0
        self.mesh, self.args, self.kwargs, self.replicate_only = mesh, args, kwargs, replicate_only
        self.flatten_args, self.flatten_args_spec = tree_flatten(args)
        self.flatten_kwargs, self.flatten_kwargs_spec = tree_flatten(kwargs)
        tensors = [a for a in (*self.flatten_args, *self.flatten_kwargs) if isinstance(a, torch.Tensor)]
        self.sharding_combs: Iterator[tuple[Any, ...]] = itertools.product(
            *(self.gen_sharding_choices_for_arg(t) for t in tensors))

    def successful(self) -> bool:
        return self.hit > 0 and self.miss == 0

    def is_supported_tensor(self, t: torch.Tensor) -> bool:
        """Whether DTensor can hold ``t``: not sparse, quantized, nested, MKL-DNN, functional, a conjugate or
        negative view, nor on lazy or meta."""
        unsupported = (t.is_sparse or t.is_sparse_csr or t.is_mkldnn or t.is_quantized or t.is_nested
                       or torch._is_functional_tensor(t) or t.is_neg() or t.is_conj()
                       or t.device.type in ("lazy", "meta"))
        return not unsupported

    def gen_sharding_choices_for_arg(self, arg: torch.Tensor) -> list[Any]:
        from torch.distributed.tensor import Replicate, Shard

        choices: list[Any] = [Replicate()]
        if self.replicate_only or arg.dtype == torch.bool:  # c10d's collectives take no bool tensors
            return choices
        size = self.mesh.size()
        return choices + [Shard(dim) for dim, n in enumerate(arg.shape) if n > 1 and n % size == 0]

    def __iter__(self) -> "DTensorConverter":
        return self

    def __next__(self) -> tuple[tuple[object, ...], dict[str, object]]:
        from torch.utils._pytree import tree_unflatten

        choice = iter(next(self.sharding_combs))  # StopIteration ends the iteration

        def convert(values: list[object]) -> list[object]:
            return [self.to_dist_tensor(v, self.mesh, [next(choice)]) if isinstance(v, torch.Tensor) else v
                    for v in values]

        new_args = convert(self.flatten_args)
        new_kwargs = convert(self.flatten_kwargs)
        return (tree_unflatten(new_args, self.flatten_args_spec),  # type: ignore[return-value]
                tree_unflatten(new_kwargs, self.flatten_kwargs_spec))

    def to_dist_tensor(self, t: torch.Tensor, mesh: Any, placements: list[Any]) -> torch.Tensor:
        """``t`` distributed on ``mesh`` with ``placements`` (replicated when 0-dim; a parameter stays one);
        returned as it is, counted as a miss, when DTensor cannot hold it."""
        from torch.distributed._local_tensor import LocalTensor
        from torch.distributed.tensor import Replicate, distribute_tensor

        if type(t) in (torch.Tensor, torch.nn.Parameter, LocalTensor):
            if not self.is_supported_tensor(t):
                self.miss += 1
                return t
            self.hit += 1
            out = distribute_tensor(t, mesh, [Replicate()] * mesh.ndim if t.ndim == 0 else placements)
            if isinstance(t, torch.nn.Parameter):
                out = torch.nn.Parameter(out, requires_grad=out.requires_grad)
            return out
        if torch.overrides.is_tensor_like(t):  # a tensor subclass: DTensor does not hold one
            self.miss += 1
            return t
        raise RuntimeError(f"Trying to convert to DTensor, but got {type(t)}")
