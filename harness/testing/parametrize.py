"""``parametrize``, ``subtest`` and ``instantiate_parametrized_tests``: one test method made into several, named by their values."""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator, TypeVar

from harness.shared.errors import UsageError

__all__ = ["parametrize", "subtest", "instantiate_parametrized_tests", "decorateIf"]

T = TypeVar("T")

# One parametrization yields (test, name suffix, the parameters' values by name, decorators for them): the
# protocol of upstream's ``parametrize_fn`` attribute, kept so a test parametrized here is also instantiated by
# upstream's ``instantiate_device_type_tests`` (a file that keeps that one upstream import) and the reverse.
Generated = tuple[Callable[..., Any], str, dict[str, Any], Callable[[dict[str, Any]], list[Callable[..., Any]]]]
_ATTR = "parametrize_fn"
#: on a generated test method: the parameters it passes (read by the hypothesis support: not an example's)
PARAMS_ATTR = "_harness_params"


class subtest:
    """One case of a ``@parametrize`` with its own name and decorators.

    Example::

        @parametrize("x, y", [subtest((1, 2), name="double"),
                              subtest((1, 3), name="triple", decorators=[unittest.expectedFailure])])
        def test_ratio(self, x, y): ...      # test_ratio_double, test_ratio_triple
    """

    __slots__ = ("arg_values", "name", "decorators")

    def __init__(self, arg_values: Any, name: str | None = None,
                 decorators: Iterable[Callable[..., Any]] | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name.isidentifier() and not name.replace("_", "a").isalnum()):
            raise UsageError(f"subtest(name={name!r}): a name is a string of letters, digits and underscores "
                             "(it becomes part of the test method's name)")
        self.arg_values = arg_values
        self.name = name
        self.decorators = list(decorators or [])

    def __repr__(self) -> str:
        return f"subtest({self.arg_values!r}, name={self.name!r})"


def _value_name(index: int, arg: str, value: Any) -> str:
    """How one value appears in a generated name, as upstream names it: ``float32`` for a dtype, the device as
    written, ``x_1``/``lr_0_5``/``mode_max`` for a number or string, else ``x0`` (the argument and the index)."""
    import sys

    torch = sys.modules.get("torch")  # a dtype or device exists only where torch was imported
    if torch is not None and isinstance(value, torch.dtype):
        return str(value).rpartition(".")[2]
    if torch is not None and isinstance(value, torch.device):
        return str(value)
    if type(value).__name__ in ("OpInfo", "ModuleInfo"):
        return value.formatted_name
    if isinstance(value, (int, float, str)):
        return f"{arg}_{str(value).replace('.', '_')}"
    return f"{arg}{index}"


class parametrize:
    """Make one test per value (or tuple of values) of its arguments, as pytest's ``parametrize``; the
    class's :func:`instantiate_parametrized_tests` makes them. Names: the test's, then each argument
    and value (``test_step_lr_0_1_fused_True``), ``name_fn(*values)``, or a :class:`subtest`'s name.
    Stacked, the top decorator's part of the name comes first. Works on every class of the harness, with
    ``with_comms``, ``with_temp_dir``, ``skip_if_lt_x_gpu`` and ``@given`` in any order.

    Example::

        @instantiate_parametrized_tests
        class TestOptim(FSDPTest):
            @parametrize("lr", [0.1, 1.0])
            @parametrize("fused", [False, True], name_fn=lambda fused: "fused" if fused else "plain")
            def test_step(self, lr, fused): ...   # test_step_lr_0_1_plain, test_step_lr_0_1_fused, ...
    """

    def __init__(self, arg_str: str, arg_values: Iterable[Any], name_fn: Callable[..., str] | None = None) -> None:
        if not isinstance(arg_str, str):
            raise UsageError(f"parametrize({arg_str!r}, ...): the first argument names the test's arguments, "
                             "comma-separated, in one string: parametrize(\"x, y\", [(1, 2), (3, 4)])")
        if name_fn is not None and not callable(name_fn):
            raise UsageError(f"parametrize({arg_str!r}, ..., name_fn={name_fn!r}): name_fn is a function of the "
                             "values that returns the name")
        self.arg_names = [s.strip() for s in arg_str.split(",") if s.strip()]
        self.arg_values = arg_values
        self.name_fn = name_fn

    def __call__(self, fn: T) -> T:
        if isinstance(fn, type) or not callable(fn):
            raise UsageError(f"@parametrize({', '.join(self.arg_names)!r}, ...) decorates a test method; got {fn!r}")
        previous = getattr(fn, _ATTR, None)
        setattr(fn, _ATTR, self._parametrize_test if previous is None else _compose(previous, self._parametrize_test))
        return fn

    def _name(self, index: int, values: list[Any], explicit: str | None) -> str:
        if explicit:
            return explicit
        if self.name_fn is not None:
            return str(self.name_fn(*values))
        return "_".join(_value_name(index, a, v) for a, v in zip(self.arg_names, values))

    def _parametrize_test(self, test: Callable[..., Any], generic_cls: Any = None,
                          device_cls: Any = None) -> Iterator[Generated]:
        if not self.arg_names:
            yield test, "", {}, lambda _: []
            return
        count = 0
        for index, case in enumerate(self.arg_values):
            count += 1
            explicit, decorators, gen_test = None, [], test
            if isinstance(case, subtest):
                explicit, decorators, case = case.name, case.decorators, case.arg_values
                # a function of its own, so that this case's decorators mark it and not its siblings
                gen_test = functools.wraps(test)(_forward(test))
            values = list(case) if len(self.arg_names) > 1 else [case]
            if len(values) != len(self.arg_names):
                raise UsageError(f"@parametrize({', '.join(self.arg_names)!r}) on {_name_of(test)}: case {index} "
                                 f"is {case!r}, {len(values)} values for {len(self.arg_names)} names; give a tuple "
                                 "of one value per name")
            params = dict(zip(self.arg_names, values))
            yield gen_test, self._name(index, values, explicit), params, (lambda _, d=decorators: list(d))
        if count == 0:
            raise UsageError(f"@parametrize({', '.join(self.arg_names)!r}) on {_name_of(test)}: no values "
                             "(an empty list, or a generator already used by another test)")


def _forward(test: Callable[..., Any]) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return test(*args, **kwargs)

    return forward


def _name_of(test: Any) -> str:
    return getattr(test, "__qualname__", None) or getattr(test, "__name__", repr(test))


def _compose(old: Callable[..., Iterator[Generated]],
             new: Callable[..., Iterator[Generated]]) -> Callable[..., Iterator[Generated]]:
    """Two stacked parametrizations: every combination, the upper decorator's name part first."""

    def composite(test: Callable[..., Any], generic_cls: Any = None, device_cls: Any = None) -> Iterator[Generated]:
        for old_test, old_name, old_params, old_decorators in list(old(test, generic_cls, device_cls)):
            for new_test, new_name, new_params, new_decorators in new(old_test, generic_cls, device_cls):
                twice = set(old_params) & set(new_params)
                if twice:
                    raise UsageError(f"{_name_of(test)}: parameter(s) {', '.join(sorted(twice))} parametrized by "
                                     "two @parametrize decorators; name each parameter once")
                name = "_".join(n for n in (new_name, old_name) if n)

                def decorators(params: dict[str, Any], a: Any = old_decorators, b: Any = new_decorators) -> list[Any]:
                    return list(a(params)) + list(b(params))

                yield new_test, name, {**old_params, **new_params}, decorators

    return composite


class decorateIf:
    """Apply ``decorator`` to the generated tests whose parameters make ``predicate`` true.

    Example::

        @decorateIf(unittest.expectedFailure, lambda params: params["fused"])
        @parametrize("fused", [False, True])
        def test_step(self, fused): ...
    """

    def __init__(self, decorator: Callable[..., Any], predicate: Callable[[dict[str, Any]], bool]) -> None:
        self.decorator = decorator
        self.predicate = predicate

    def __call__(self, fn: T) -> T:
        previous = getattr(fn, _ATTR, None)
        setattr(fn, _ATTR, self._parametrize_test if previous is None else _compose(previous, self._parametrize_test))
        return fn

    def _parametrize_test(self, test: Callable[..., Any], generic_cls: Any = None,
                          device_cls: Any = None) -> Iterator[Generated]:
        yield test, "", {}, lambda params: [self.decorator] if self.predicate(params) else []


def instantiate_parametrized_tests(generic_cls: type) -> type:
    """Replace each ``@parametrize``d test of ``generic_cls`` by its generated tests (also a class decorator).

    Each generated method is ``<test name>_<suffix>``; it calls the test with the case's values by name.
    A name made twice is an error that names it. Call it once per class, after the class is defined (or
    decorate the class); subclasses inherit the generated tests.

    Example::

        class TestSum(DTensorTestBase):
            @with_comms
            @parametrize("n", [1, 4])
            def test_sum(self, n): ...
        instantiate_parametrized_tests(TestSum)        # TestSum.test_sum_n_1, TestSum.test_sum_n_4
    """
    if not isinstance(generic_cls, type):
        wrapped = getattr(generic_cls, "__wrapped__", None)
        if isinstance(wrapped, type):
            raise UsageError(f"instantiate_parametrized_tests({wrapped.__name__}): a decorator of the class replaced "
                             f"it with a function ({generic_cls!r}), whose tests would never run: decorate the "
                             "class with one that returns the class")
        raise UsageError(f"instantiate_parametrized_tests({generic_cls!r}): give the test class")
    for attr in list(dir(generic_cls)):
        generic = getattr(generic_cls, attr, None)
        make = getattr(generic, _ATTR, None)
        if make is None or not callable(generic):
            continue
        if attr in generic_cls.__dict__:
            delattr(generic_cls, attr)  # the generic test is no test: its parameters have no values
        else:
            # inherited, not yet instantiated: hide it here (a base class that is itself a test class runs its own)
            setattr(generic_cls, attr, None)
        for test, suffix, params, decorators in make(generic, generic_cls, None):
            name = f"{test.__name__}_{suffix}"
            for decorator in decorators(params):
                test = decorator(test)
            if name in generic_cls.__dict__ and generic_cls.__dict__[name] is not None:
                raise UsageError(f"{generic_cls.__qualname__}: @parametrize made the test name {name!r} twice "
                                 "(two cases with the same values or name); give them different names with "
                                 "subtest(..., name=...) or name_fn")
            setattr(generic_cls, name, _generated(test, params, name))
    return generic_cls


def _generated(test: Callable[..., Any], params: dict[str, Any], name: str) -> Callable[..., Any]:
    """The method unittest runs: the test with the case's values, marked with them."""

    @functools.wraps(test)
    def generated(self: Any, **kwargs: Any) -> Any:
        return test(self, **params, **kwargs)

    generated.__dict__.pop(_ATTR, None)  # instantiated once: not a generic test any more
    generated.__name__ = name
    generated.__qualname__ = f"{getattr(test, '__qualname__', name).rpartition('.')[0] or ''}.{name}".lstrip(".")
    setattr(generated, PARAMS_ATTR, dict(params))
    return generated
