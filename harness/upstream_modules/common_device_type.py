"""``torch.testing._internal.common_device_type`` as distributed test files use it: one class per device type
the machine has, made from a device-generic test class (``TestFoo`` -> ``TestFooCPU``, ``TestFooCUDA``, tests
``test_x_cpu``, ``test_x_cuda_float32``), on any of the harness's classes, composing with ``parametrize``; and
the decorators that read the device type (``onlyCPU``, ``onlyCUDA``, ``dtypes``, ``skipCUDAIf``, ...); ``ops``,
which makes one test per OpInfo and dtype (OpInfos from upstream's ``op_db``, which stays an upstream import)."""
from __future__ import annotations

import copy
import functools
import inspect
import os
import enum
import unittest
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import torch

from harness.classes.case import MultiProcessTestCase
from harness.testing.parametrize import PARAMS_ATTR, _compose
from harness.upstream_modules.common_utils import torch_release

__all__ = ["instantiate_device_type_tests", "DeviceTypeTestBase", "CPUTestBase", "CUDATestBase", "XPUTestBase",
           "HPUTestBase", "MPSTestBase", "get_device_type_test_bases", "get_desired_device_type_test_bases",
           "onlyOn", "onlyCPU", "onlyCUDA", "onlyXPU", "onlyHPU", "onlyMPS", "onlyAccelerator",
           "onlyNativeDeviceTypes", "skipIf", "skipCPUIf", "skipCUDAIf", "skipXPUIf", "skipHPUIf", "skipMPSIf",
           "skipGPUIf", "skipMeta", "dtypes", "dtypesIfCPU", "dtypesIfCUDA", "dtypesIfXPU", "dtypesIfHPU",
           "dtypesIfMPS", "deviceCountAtLeast", "ops", "OpDTypes", "ANY_DTYPE_ORDER",
           "precisionOverride", "toleranceOverride", "tol", "e4m3_type", "e5m2_type", "E4M3_MAX_POS", "E5M2_MAX_POS",
           "Capability", "requires_capabilities"]

#: upstream's environment variables that narrow the device types (comma-separated device types)
ONLY_FOR_VAR = "PYTORCH_TESTING_DEVICE_ONLY_FOR"
EXCEPT_FOR_VAR = "PYTORCH_TESTING_DEVICE_EXCEPT_FOR"
_NATIVE = ("cpu", "cuda", "meta", torch._C._get_privateuse1_backend_name())


class DeviceTypeTestBase:
    """The device half of a generated class (``TestFooCPU`` derives from ``CPUTestBase`` and ``TestFoo``):
    ``device_type`` as a class attribute, and the device a test gets as its ``device`` argument."""

    device_type: str = "generic_device_type"
    #: set per device type with :meth:`set_test_configs` (a backend's own configuration, as upstream's): decorations
    #: for ``@ops`` by OpInfo full name, the OpInfos ``@ops`` keeps, the tests not made (``"*"``: no class) by class
    op_overrides: Any = None
    op_allowlist: Any = None
    test_exclusions: Any = None

    @classmethod
    def set_test_configs(cls, *, op_overrides: Any = None, op_allowlist: Any = None,
                         test_exclusions: Any = None) -> None:
        """Replace this device type's configuration whole (no argument: none)."""
        cls.op_overrides, cls.op_allowlist, cls.test_exclusions = op_overrides, op_allowlist, test_exclusions

    @classmethod
    def _get_test_exclusions(cls, test_class_name: str) -> Any:
        table = cls.test_exclusions
        return table[test_class_name] if table is not None and test_class_name in table else None

    @classmethod
    def _should_exclude(cls, test_class_name: str, *, test_name: str | None = None, dtype_variant: Any = None) -> bool:
        """Whether ``test_exclusions`` leaves out the class (no ``test_name``), a test, or one of its ``@dtypes``
        variants, read as the installed release reads it: to torch 2.14 a list of test names (``"*"`` in it: the
        class); from 2.15 ``"*"`` (the class), a list of test names, or ``{test: "*"}`` and
        ``{test: {"dtypes": [...]}}``."""
        rule = cls._get_test_exclusions(test_class_name)
        if rule is None:
            return False
        if torch_release() < (2, 15):
            if test_name is None:
                return "*" in rule
            return dtype_variant is None and test_name in rule
        if test_name is None:
            return rule == "*"
        if dtype_variant is None:
            return rule.get(test_name) == "*" if isinstance(rule, dict) else isinstance(rule, list) and test_name in rule
        method = rule.get(test_name) if isinstance(rule, dict) else None
        dropped = set(method.get("dtypes", ())) if isinstance(method, dict) else set()
        variants = dtype_variant if isinstance(dtype_variant, (list, tuple)) else (dtype_variant,)
        return any(d in dropped for d in variants)

    @classmethod
    def get_primary_device(cls) -> str:
        return cls.device_type

    @classmethod
    def get_all_devices(cls) -> list[str]:
        return [cls.get_primary_device()]

    @classmethod
    def distributed_backend(cls) -> str:
        import torch.distributed as dist

        return dist.get_default_backend_for_device(cls.device_type)

    @classmethod
    def _get_dtypes(cls, test: Any) -> Any:
        table = getattr(test, "dtypes", None)
        if table is None:
            return None
        if "all" not in table:
            raise AssertionError(f"@dtypes is mandatory when using @dtypesIf however '{test.__name__}' didn't "
                                 "specify it")
        return table.get(cls.device_type, table["all"])


class _AcceleratorTestBase(DeviceTypeTestBase):
    @classmethod
    def get_primary_device(cls) -> str:
        # called in the process that runs the test: a rank of the harness is already on its own device
        module = torch.get_device_module(cls.device_type)
        return f"{cls.device_type}:{module.current_device()}"

    @classmethod
    def get_all_devices(cls) -> list[str]:
        primary = cls.get_primary_device()
        count = torch.get_device_module(cls.device_type).device_count()
        return [primary] + [f"{cls.device_type}:{i}" for i in range(count) if f"{cls.device_type}:{i}" != primary]


class Capability:
    """What a device can do, as ``"<category>.<name>"`` strings (torch 2.15 on): ``@requires_capabilities`` names
    them, and each device base says which it supports (``_capabilities()``).

    Example::

        @requires_capabilities(Capability.dtype.fp8)
        def test_scaled_mm(self, device): ...
    """

    class dtype:
        fp8 = "dtype.fp8"
        bf16 = "dtype.bf16"

    class attention:
        flash_attention = "attention.flash_attention"
        mem_efficient_attention = "attention.mem_efficient_attention"


def _cuda_capabilities() -> dict[str, Callable[[], bool]]:
    from harness.upstream_modules import common_cuda as cc

    return {Capability.dtype.fp8: lambda: bool(cc.PLATFORM_SUPPORTS_FP8),
            Capability.dtype.bf16: lambda: bool(cc.SM80OrLater),
            Capability.attention.flash_attention: lambda: bool(cc.PLATFORM_SUPPORTS_FLASH_ATTENTION),
            Capability.attention.mem_efficient_attention: lambda: bool(cc.PLATFORM_SUPPORTS_MEM_EFF_ATTENTION)}


def _xpu_flash_attention() -> bool:
    """Whether the XPU runs scaled-dot-product attention on its flash kernel (upstream's answer: Xe2 or later, not on
    Windows): asked of torch itself, one tiny attention with only that kernel allowed. Only on an XPU machine."""
    if not (hasattr(torch, "xpu") and torch.xpu.is_available()) or os.name == "nt":
        return False
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.rand(1, 1, 8, 16, device="xpu", dtype=torch.float16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return True
    except RuntimeError:  # "No available kernel": this device has no flash attention
        return False


def _xpu_capabilities() -> dict[str, Callable[[], bool]]:
    return {Capability.dtype.fp8: lambda: True, Capability.dtype.bf16: lambda: True,
            Capability.attention.flash_attention: _xpu_flash_attention,
            Capability.attention.mem_efficient_attention: lambda: True}


#: each device type's answers, as torch 2.15's device bases give them (a device type not here declares none)
_CAPABILITIES: dict[str, Callable[[], dict[str, Callable[[], bool]]]] = {
    "cpu": lambda: {Capability.dtype.fp8: lambda: True, Capability.dtype.bf16: lambda: True,
                    Capability.attention.flash_attention: lambda: True,
                    Capability.attention.mem_efficient_attention: lambda: False},
    "mps": lambda: {Capability.dtype.fp8: lambda: False, Capability.dtype.bf16: lambda: True,
                    Capability.attention.flash_attention: lambda: False,
                    Capability.attention.mem_efficient_attention: lambda: False},
    "cuda": _cuda_capabilities,
    "xpu": _xpu_capabilities,
}


def _device_capabilities(cls: type) -> dict[str, bool]:
    table = getattr(cls, "_capabilities", None)
    found = table() if callable(table) else _CAPABILITIES.get(getattr(cls, "device_type", ""), dict)()
    return {name: bool(supported()) for name, supported in found.items()}


def requires_capabilities(*caps: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Skip the test where its device type lacks one of ``caps`` (checked when it runs); a capability the device
    type does not declare is an error naming it, as upstream's."""
    wanted = set(caps)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
            have = _device_capabilities(type(self))
            device = getattr(type(self), "device_type", "?")
            missing = sorted(wanted - set(have))
            if missing:
                raise AssertionError(f"Device '{device}' has not declared capabilities: {', '.join(missing)}. "
                                     f"Add them to {type(self).__name__}._capabilities().")
            unsupported = sorted(c for c in wanted if not have[c])
            if unsupported:
                raise unittest.SkipTest(f"Device '{device}' has unsupported capabilities: {', '.join(unsupported)}")
            return fn(self, *args, **kwargs)
        return checked
    return decorator


class CPUTestBase(DeviceTypeTestBase):
    device_type = "cpu"


class CUDATestBase(_AcceleratorTestBase):
    device_type = "cuda"


class XPUTestBase(_AcceleratorTestBase):
    device_type = "xpu"


class HPUTestBase(_AcceleratorTestBase):
    device_type = "hpu"


class MPSTestBase(DeviceTypeTestBase):
    device_type = "mps"


def _available(base: type[DeviceTypeTestBase]) -> bool:
    kind = base.device_type
    if kind == "cpu":
        return True
    if os.environ.get("HARNESS_DEVICE") == "cpu":
        return False  # the run keeps to the CPU: no accelerator class
    if kind == "mps":
        return bool(torch.backends.mps.is_available())
    module = getattr(torch, kind, None)
    return bool(module is not None and module.is_available())


def get_device_type_test_bases() -> list[type[DeviceTypeTestBase]]:
    """The device types this machine has, among CPU, CUDA and HPU (XPU and MPS are asked for by name)."""
    return [b for b in (CPUTestBase, CUDATestBase, HPUTestBase) if _available(b)]


def _names(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _filter(bases: list[type[DeviceTypeTestBase]], except_for: Any, only_for: Any) -> list[type[DeviceTypeTestBase]]:
    excluded, only = _names(except_for), _names(only_for)
    both = set(excluded) & set(only)
    if both:
        raise AssertionError(f"device ({both}) appeared in both except_for and only_for")
    return [b for b in bases if b.device_type not in excluded and (not only or b.device_type in only)]


def get_desired_device_type_test_bases(except_for: Any = None, only_for: Any = None, include_lazy: bool = False,
                                       allow_mps: bool = False, allow_xpu: bool = False
                                       ) -> list[type[DeviceTypeTestBase]]:
    """The device types to make classes for: the machine's, narrowed by the arguments and by upstream's
    ``PYTORCH_TESTING_DEVICE_ONLY_FOR`` / ``PYTORCH_TESTING_DEVICE_EXCEPT_FOR``."""
    bases = get_device_type_test_bases()
    if allow_mps and _available(MPSTestBase):
        bases.append(MPSTestBase)
    if allow_xpu and _available(XPUTestBase):
        bases.append(XPUTestBase)
    bases = _filter(bases, except_for, only_for)
    env = [[n for n in os.environ.get(var, "").split(",") if n] for var in (EXCEPT_FOR_VAR, ONLY_FOR_VAR)]
    return _filter(bases, env[0], env[1])


def _name_part(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "" if not value else "_" + "_".join(str(d).split(".")[1] for d in value)
    return f"_{str(value).split('.')[1]}" if value else ""


def _instantiate(device_cls: type, name: str, test: Callable[..., Any], generic_cls: type) -> None:
    make = getattr(test, "parametrize_fn", None)

    def plain(t: Callable[..., Any], g: Any, d: Any) -> Iterator[Any]:
        yield t, "", {}, lambda _: []

    make = make or plain
    dtypes = device_cls._get_dtypes(test)  # type: ignore[attr-defined]
    if dtypes is not None:
        dtypes = tuple(d for d in dtypes if not device_cls._should_exclude(  # type: ignore[attr-defined]
            generic_cls.__name__, test_name=name, dtype_variant=d))
        if not dtypes:
            return
        def by_dtype(t: Callable[..., Any], g: Any, d: Any, dtypes: Any = dtypes) -> Iterator[Any]:
            for dtype in dtypes:
                yield t, "", ({"dtypes": dtype} if isinstance(dtype, (list, tuple)) else {"dtype": dtype}), \
                    (lambda _: [])
        make = _compose(by_dtype, make)
    for gen_test, suffix, params, decorators in make(test, generic_cls, device_cls):
        dtype = params.get("dtypes", params.get("dtype"))
        full = f"{name}{'_' + suffix if suffix else ''}_{device_cls.device_type}{_name_part(dtype)}"
        for decorator in decorators(params):
            gen_test = decorator(gen_test)
        if full in device_cls.__dict__:
            raise AssertionError(f"Redefinition of test {full}")
        setattr(device_cls, full, _device_test(gen_test, dict(params), full))


def _device_test(test: Callable[..., Any], params: dict[str, Any], name: str) -> Callable[..., Any]:
    wants = inspect.signature(test).parameters
    multi = hasattr(test, "num_required_devices")

    @functools.wraps(test)
    def instantiated(self: Any) -> Any:
        kwargs = dict(params)
        _tolerances_for(self, test, params.get("dtypes", params.get("dtype")))
        if "device" in wants or "devices" in wants:
            # where the test runs (the rank, on the rank's own GPU), not where the class was made
            if multi:
                kwargs["devices"] = type(self).get_all_devices()
            else:
                kwargs["device"] = type(self).get_primary_device()
        return test(self, **kwargs)

    instantiated.__dict__.pop("parametrize_fn", None)
    instantiated.__name__ = name
    instantiated.__qualname__ = name
    setattr(instantiated, PARAMS_ATTR, dict(params))
    return instantiated


def _tolerances_for(test_case: Any, test: Callable[..., Any], dtype: Any) -> None:
    """Upstream's per-dtype tolerances: ``precisionOverride``/``toleranceOverride`` (an OpInfo's decorations among
    them) leave tables on the test; the test's ``precision`` and ``rel_tol`` (the floors of its ``assertEqual``)
    take the dtype's entry."""
    if not dtype or not hasattr(test_case, "precision"):
        return
    precisions = getattr(test, "precision_overrides", None)
    if precisions is not None:
        test_case.precision = precisions.get(dtype, test_case.precision)
    tolerances = getattr(test, "tolerance_overrides", None)
    if tolerances is not None and dtype in tolerances:
        test_case.precision, test_case.rel_tol = tolerances[dtype]


def _cpu_backend_for(generic_cls: type) -> dict[str, Any]:
    """On a harness multi-process class, the CPU class's ranks meet over gloo even where the run put them on
    GPUs (upstream's classes pick the backend from ``device_type`` the same way)."""
    if not issubclass(generic_cls, MultiProcessTestCase):
        return {}
    if generic_cls.backend is not MultiProcessTestCase.__dict__["backend"]:
        return {}  # the class picks its own backend (a property or DistributedTestBase's method)
    return {"backend": property(lambda self: "gloo")}


def instantiate_device_type_tests(generic_test_class: type, scope: dict[str, Any], except_for: Any = None,
                                  only_for: Any = None, include_lazy: bool = False, allow_mps: bool = False,
                                  allow_xpu: bool = False) -> None:
    """Replace ``generic_test_class`` in ``scope`` (the module's ``globals()``) by one class per device type the
    machine has (``TestFooCPU``; ``TestFooCUDA`` where CUDA is there; ``only_for``/``except_for`` narrow it),
    with upstream's test names: ``test_x`` -> ``test_x_cpu``, with ``@parametrize`` ``test_x_n_1_cpu``, with
    ``@dtypes`` ``test_x_cpu_float32``. A test that takes ``device`` gets the device it runs on (a rank's own
    GPU: ``cuda:2``); the class's ``device_type`` is the device type. The generic class may be any of the
    harness's classes (``DTensorTestBase``, ``FSDPTest``, ``TestCase``, ...).

    Example::

        class TestAllReduce(DTensorTestBase):
            @with_comms
            def test_sum(self, device):
                t = torch.ones(2, device=device)
                ...
        instantiate_device_type_tests(TestAllReduce, globals(), only_for=("cpu", "cuda"))
    """
    if not isinstance(generic_test_class, type) or not isinstance(scope, dict):
        raise TypeError(f"instantiate_device_type_tests({generic_test_class!r}, ...): give the test class and the "
                        "module's globals()")
    if generic_test_class.__name__ not in scope:
        raise KeyError(f"instantiate_device_type_tests: {generic_test_class.__name__} is not in the scope given; "
                       "pass the globals() of the module that defines it")
    del scope[generic_test_class.__name__]
    members = dict(generic_test_class.__dict__)
    tests = [name for name in members if name.startswith("test")]
    for base in get_desired_device_type_test_bases(except_for, only_for, include_lazy, allow_mps, allow_xpu):
        if base._should_exclude(generic_test_class.__name__):
            continue
        extra = _cpu_backend_for(generic_test_class) if base.device_type == "cpu" else {}
        name = generic_test_class.__name__ + base.device_type.upper()
        device_cls: Any = type(name, (base, generic_test_class), {"__module__": generic_test_class.__module__,
                                                                  "__qualname__": name, **extra})
        for member in tests:
            if not base._should_exclude(generic_test_class.__name__, test_name=member):
                _instantiate(device_cls, member, copy.deepcopy(members[member]), generic_test_class)
        scope[name] = device_cls
    for member in tests:
        delattr(generic_test_class, member)


# ---- the decorators that read the device type -----------------------------------------------------------

class onlyOn:
    """Skip the test on the device types other than ``device_type`` (a name or a list)."""

    def __init__(self, device_type: str | list[str]) -> None:
        self.device_type = device_type

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        kinds = [self.device_type] if isinstance(self.device_type, str) else list(self.device_type)

        @functools.wraps(fn)
        def only_fn(slf: Any, *args: Any, **kwargs: Any) -> Any:
            if slf.device_type not in kinds and not getattr(slf, "bypass_device_restrictions", False):
                raise unittest.SkipTest(f"Only runs on {self.device_type}")
            return fn(slf, *args, **kwargs)

        return only_fn


def onlyCPU(fn: Callable[..., Any]) -> Callable[..., Any]:
    return onlyOn("cpu")(fn)


def onlyCUDA(fn: Callable[..., Any]) -> Callable[..., Any]:
    return onlyOn("cuda")(fn)


def onlyXPU(fn: Callable[..., Any]) -> Callable[..., Any]:
    return onlyOn("xpu")(fn)


def onlyHPU(fn: Callable[..., Any]) -> Callable[..., Any]:
    return onlyOn("hpu")(fn)


def onlyMPS(fn: Callable[..., Any]) -> Callable[..., Any]:
    return onlyOn("mps")(fn)


def onlyAccelerator(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Skip the test on CPU and meta."""
    @functools.wraps(fn)
    def only_fn(slf: Any, *args: Any, **kwargs: Any) -> Any:
        if slf.device_type in ("cpu", "meta"):
            raise unittest.SkipTest("Only runs on accelerator devices")
        return fn(slf, *args, **kwargs)

    return only_fn


def onlyNativeDeviceTypes(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Skip the test on device types other than CPU, CUDA, meta and the registered private one."""
    @functools.wraps(fn)
    def only_fn(slf: Any, *args: Any, **kwargs: Any) -> Any:
        if slf.device_type not in _NATIVE:
            raise unittest.SkipTest(f"onlyNativeDeviceTypes: doesn't run on {slf.device_type}")
        return fn(slf, *args, **kwargs)

    return only_fn


class skipIf:
    """Skip the test where ``dep`` holds (a bool, or the name of an attribute of the test that is true; an
    attribute missing counts as true, as upstream's), on ``device_type`` only when given."""

    def __init__(self, dep: bool | str, reason: str, device_type: str | Iterable[str] | None = None) -> None:
        self.dep, self.reason, self.device_type = dep, reason, device_type

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def dep_fn(slf: Any, *args: Any, **kwargs: Any) -> Any:
            kinds = self.device_type
            here = kinds is None or kinds == slf.device_type or (
                not isinstance(kinds, str) and slf.device_type in kinds)
            if here and ((isinstance(self.dep, str) and getattr(slf, self.dep, True))
                         or (isinstance(self.dep, bool) and self.dep)):
                raise unittest.SkipTest(self.reason)
            return fn(slf, *args, **kwargs)

        return dep_fn


class skipCPUIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type="cpu")


class skipCUDAIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type="cuda")


class skipXPUIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type="xpu")


class skipHPUIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type="hpu")


class skipMPSIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type="mps")


class skipGPUIf(skipIf):
    def __init__(self, dep: bool | str, reason: str) -> None:
        super().__init__(dep, reason, device_type=("cuda", "xpu", "hpu", "mps"))


def skipMeta(fn: Callable[..., Any]) -> Callable[..., Any]:
    return skipIf(True, "test doesn't work with meta tensors", device_type="meta")(fn)


class dtypes:
    """Run the test once per dtype (or per tuple of dtypes, passed as ``dtypes``), named ``..._cpu_float32``;
    ``device_type=`` gives the dtypes for one device type (``dtypesIfCUDA``), ``"all"`` the others."""

    def __init__(self, *args: Any, device_type: str = "all") -> None:
        if args and isinstance(args[0], (list, tuple)):
            for arg in args:
                if not isinstance(arg, (list, tuple)):
                    raise AssertionError("When one dtype variant is a tuple or list, all dtype variants must be. "
                                         f"Received non-list non-tuple dtype {arg}")
                if not all(isinstance(d, torch.dtype) for d in arg):
                    raise AssertionError(f"Unknown dtype in {arg}")
        elif not all(isinstance(d, torch.dtype) for d in args):
            raise AssertionError(f"Unknown dtype in {args}")
        self.args, self.device_type = args, device_type

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        table = getattr(fn, "dtypes", {})
        if self.device_type in table:
            raise AssertionError(f"dtypes redefinition for {self.device_type}")
        table[self.device_type] = self.args
        fn.dtypes = table  # type: ignore[attr-defined]
        return fn


class dtypesIfCPU(dtypes):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args, device_type="cpu")


class dtypesIfCUDA(dtypes):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args, device_type="cuda")


class dtypesIfXPU(dtypes):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args, device_type="xpu")


class dtypesIfHPU(dtypes):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args, device_type="hpu")


class dtypesIfMPS(dtypes):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args, device_type="mps")


class tol(NamedTuple):
    """An absolute and a relative tolerance, for :class:`toleranceOverride`."""

    atol: float
    rtol: float


class precisionOverride:
    """Per-dtype ``precision`` (the floor under ``assertEqual``'s ``atol``) for a test made per dtype:
    ``@precisionOverride({torch.half: 1e-2})``."""

    def __init__(self, d: dict[torch.dtype, float]) -> None:
        if not isinstance(d, dict):
            raise AssertionError("precisionOverride not given a dtype : precision dict!")
        for dtype in d:
            if not isinstance(dtype, torch.dtype):
                raise AssertionError(f"precisionOverride given unknown dtype {dtype}")
        self.d = d

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.precision_overrides = self.d  # type: ignore[attr-defined]
        return fn


class toleranceOverride:
    """Per-dtype ``precision`` and ``rel_tol`` (``assertEqual``'s floors) for a test made per dtype, over
    :class:`precisionOverride`: ``@toleranceOverride({torch.float: tol(atol=1e-2, rtol=1e-3)})``."""

    def __init__(self, d: dict[torch.dtype, Any]) -> None:
        if not isinstance(d, dict):
            raise AssertionError("toleranceOverride not given a dtype : tol dict!")
        for dtype, given in d.items():
            if not isinstance(dtype, torch.dtype):
                raise AssertionError(f"toleranceOverride given unknown dtype {dtype}")
            if not (isinstance(given, tuple) and hasattr(given, "atol") and hasattr(given, "rtol")):
                raise AssertionError("toleranceOverride not given a dtype : tol dict!")
        self.d = d

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.tolerance_overrides = self.d  # type: ignore[attr-defined]
        return fn


class deviceCountAtLeast:
    """Give the test every device of its type (``devices``, the one it runs on first); skip it on fewer than
    ``num_required_devices``."""

    def __init__(self, num_required_devices: int) -> None:
        self.num_required_devices = num_required_devices

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if hasattr(fn, "num_required_devices"):
            raise AssertionError(f"deviceCountAtLeast redefinition for {fn.__name__}")
        fn.num_required_devices = self.num_required_devices  # type: ignore[attr-defined]

        @functools.wraps(fn)
        def multi_fn(slf: Any, devices: list[str], *args: Any, **kwargs: Any) -> Any:
            if len(devices) < self.num_required_devices:
                raise unittest.SkipTest(f"fewer than {self.num_required_devices} devices detected")
            return fn(slf, devices, *args, **kwargs)

        return multi_fn


def _fnuz() -> bool:
    """MI300's GPUs (gfx94x) speak the "fnuz" float8 variants; everything else the OCP ones."""
    return bool(torch.version.hip) and torch.cuda.is_available() and torch.cuda.device_count() > 0 and \
        "gfx94" in torch.cuda.get_device_properties(0).gcnArchName


#: the float8 dtypes of this machine's GPU (the "fnuz" ones on MI300) and their largest finite values
e4m3_type, e5m2_type = ((torch.float8_e4m3fnuz, torch.float8_e5m2fnuz) if _fnuz()
                        else (torch.float8_e4m3fn, torch.float8_e5m2))
E4M3_MAX_POS: float = torch.finfo(e4m3_type).max
E5M2_MAX_POS: float = torch.finfo(e5m2_type).max


# ---- OpInfo tests: one test per op and dtype ---------------------------------------------------------------

class OpDTypes(enum.Enum):
    """Which dtypes ``@ops`` makes tests for, per op and device type (upstream's values)."""

    supported = 0  # every dtype the op supports (the default)
    unsupported = 1  # every dtype it does not
    supported_backward = 2  # every dtype its backward supports
    unsupported_backward = 3  # every dtype its backward does not
    any_one = 4  # one supported dtype, forward and backward where one is (the first of ANY_DTYPE_ORDER)
    none = 5  # no dtype: one test per op, with no ``dtype`` argument
    any_common_cpu_cuda_one = 6  # one dtype the op supports on both CPU and CUDA


#: the order ``OpDTypes.any_one`` picks its one dtype in
ANY_DTYPE_ORDER = (torch.float32, torch.float64, torch.complex64, torch.complex128, torch.float16, torch.bfloat16,
                   torch.long, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn,
                   torch.float8_e5m2)
#: the dtypes ``unsupported`` counts from: the integer, floating, bool and complex ones (no complex32, no qint)
_ALL_DTYPES = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32,
                         torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.complex64, torch.complex128})


def _first(order: Iterable[Any], among: set[Any]) -> set[Any]:
    return next(({d} for d in order if d in among), set())


class ops:
    """Make one test per OpInfo of ``op_list`` and per dtype, under :func:`instantiate_device_type_tests`: the test
    gets ``op`` and ``dtype`` and is named as upstream's, ``test_x_<op>_<device>_<dtype>`` (``test_add_cpu_float32``;
    the op's name with its variant, ``nn_functional_relu``). ``dtypes`` picks the dtypes per op and device type (an
    :class:`OpDTypes`, or a list of dtypes for every op); ``allowed_dtypes`` narrows them. Each test takes the
    decorations the OpInfo lists for it (its skips and expected failures for this class, test, device and dtype).
    The device type's ``op_allowlist`` (OpInfo full names; ``CPUTestBase.set_test_configs``) keeps only those ops;
    its ``op_overrides`` and the test's ``_op_overrides`` (upstream's ``skipOps``) add decorations by full name.

    Example::

        op_db = ...   # upstream's OpInfo data (common_methods_invocations.op_db), left an upstream import

        class TestOps(DTensorTestBase):
            @with_comms
            @ops([op for op in op_db if op.name in ("add", "mul")], allowed_dtypes=(torch.float32,))
            def test_op(self, device, dtype, op):
                for sample in op.sample_inputs(device, dtype):
                    ...
        instantiate_device_type_tests(TestOps, globals(), only_for="cpu")   # test_op_add_cpu_float32, ...
    """

    def __init__(self, op_list: Iterable[Any], *, dtypes: OpDTypes | Iterable[torch.dtype] = OpDTypes.supported,
                 allowed_dtypes: Iterable[torch.dtype] | None = None, skip_if_dynamo: bool = True) -> None:
        self.op_list = list(op_list)
        if not isinstance(dtypes, OpDTypes):
            dtypes = list(dtypes)
            if not all(isinstance(d, torch.dtype) for d in dtypes):
                raise TypeError(f"@ops(dtypes={dtypes!r}): give an OpDTypes or a list of torch dtypes")
        self.opinfo_dtypes = dtypes
        self.allowed_dtypes = None if allowed_dtypes is None else set(allowed_dtypes)
        self.skip_if_dynamo = skip_if_dynamo

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        previous = getattr(fn, "parametrize_fn", None)
        fn.parametrize_fn = (self._parametrize_test if previous is None  # type: ignore[attr-defined]
                             else _compose(previous, self._parametrize_test))
        return fn

    def _dtypes(self, op: Any, device_type: str) -> set[Any]:
        how = self.opinfo_dtypes
        if isinstance(how, list):
            return set(how)
        if how is OpDTypes.supported:
            return set(op.supported_dtypes(device_type))
        if how is OpDTypes.unsupported:
            return set(_ALL_DTYPES) - set(op.supported_dtypes(device_type))
        if how is OpDTypes.supported_backward:
            return set(op.supported_backward_dtypes(device_type))
        if how is OpDTypes.unsupported_backward:
            return set(_ALL_DTYPES) - set(op.supported_backward_dtypes(device_type))
        if how is OpDTypes.any_one:
            forward = set(op.supported_dtypes(device_type))
            both = forward & set(op.supported_backward_dtypes(device_type))
            return _first(ANY_DTYPE_ORDER, both or forward)
        if how is OpDTypes.any_common_cpu_cuda_one:
            return _first(ANY_DTYPE_ORDER, set(op.dtypes) & set(op.dtypesIfCUDA))
        return {None}  # OpDTypes.none

    def _parametrize_test(self, test: Callable[..., Any], generic_cls: Any = None,
                          device_cls: Any = None) -> Iterator[Any]:
        if device_cls is None:
            raise RuntimeError("The @ops decorator is only intended to be used in a device-specific context; use it "
                               "with instantiate_device_type_tests() instead of instantiate_parametrized_tests()")
        op_list = self.op_list
        allow = getattr(device_cls, "op_allowlist", None)  # the device type's (set_test_configs), as upstream's
        if allow is not None:
            op_list = [op for op in op_list if op.full_name in set(allow)]
        op_list = self._overridden(op_list, device_cls, test)
        if not op_list:
            raise ValueError(f"@ops on {test.__name__}: an empty list of OpInfos (every op filtered out?)")
        kind = device_cls.device_type
        for op in op_list:
            dtypes = self._dtypes(op, kind)
            if self.allowed_dtypes is not None:
                dtypes &= self.allowed_dtypes
            for dtype in dtypes:
                params: dict[str, Any] = {"op": op}
                if isinstance(dtype, (list, tuple)):
                    params["dtypes"] = dtype
                elif dtype is not None:
                    params["dtype"] = dtype
                yield self._wrapped(test), op.formatted_name, params, functools.partial(
                    op.get_decorators, generic_cls.__name__, test.__name__, kind, dtype)

    @staticmethod
    def _overridden(op_list: list[Any], device_cls: Any, test: Callable[..., Any]) -> list[Any]:
        """The ops with the decorations the class's ``op_overrides`` (for its device type) and the test's
        ``_op_overrides`` (upstream's ``skipOps``) add, by OpInfo full name, on copies: the OpInfos stay as given."""
        by_class = getattr(device_cls, "op_overrides", None) or {}
        by_test = getattr(test, "_op_overrides", None) or {}
        if not by_class and not by_test:
            return op_list
        kind = device_cls.device_type
        if kind == "privateuse1":
            kind = torch._C._get_privateuse1_backend_name()
        out = []
        for op in op_list:
            extra = []
            for decoration in by_class.get(op.full_name, ()):
                decoration = copy.copy(decoration)
                decoration.device_type = kind  # a class's overrides hold on its own device type
                extra.append(decoration)
            extra.extend(by_test.get(op.full_name, ()))
            if extra:
                op = copy.copy(op)
                op.decorators = tuple(op.decorators) + tuple(extra)
            out.append(op)
        return out

    def _wrapped(self, test: Callable[..., Any]) -> Callable[..., Any]:
        """The test for one op and dtype: the op's own decorators go on this copy, not on the test."""
        @functools.wraps(test)
        def one_op(*args: Any, **kwargs: Any) -> Any:
            return test(*args, **kwargs)

        one_op.__dict__.pop("parametrize_fn", None)
        if self.skip_if_dynamo:
            from harness.upstream_modules.common_utils import TEST_WITH_TORCHINDUCTOR, skipIfTorchDynamo

            if not TEST_WITH_TORCHINDUCTOR:
                one_op = skipIfTorchDynamo("Policy: we don't run OpInfo tests w/ Dynamo")(one_op)
        return one_op
