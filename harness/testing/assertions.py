"""The assertions of upstream's ``common_utils.TestCase`` that ported tests call, built on public torch."""
from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterator

import expecttest

__all__ = ["DistributedAssertions", "TestCase", "compare"]

#: (file, line) -> the value accepted there in this process, under EXPECTTEST_ACCEPT
_ACCEPTED: dict[tuple[str, int], str] = {}

# Python floats compare with float32's default tolerances, as upstream's relaxed number comparison does.
_FLOAT_RTOL, _FLOAT_ATOL = 1.3e-6, 1e-5


def _is_tensor_like(value: Any) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.ndarray)


def _is_number(value: Any) -> bool:
    import enum

    return isinstance(value, (bool, int, float, complex, enum.IntEnum)) and not isinstance(value, enum.Flag)


def _is_sequence(value: Any) -> bool:
    import torch

    if isinstance(value, (str, bytes, bytearray)):
        return False
    return isinstance(value, (Sequence, torch.nn.ModuleList, torch.nn.ParameterList, torch.nn.Sequential))


def _is_mapping(value: Any) -> bool:
    import torch

    return isinstance(value, (Mapping, torch.nn.ModuleDict, torch.nn.ParameterDict))


def _unwrap_dtensors(x: Any, y: Any) -> tuple[Any, Any]:
    """Two DTensors compare by layout, then by their local shards; a DTensor against a plain tensor is ambiguous."""
    module = sys.modules.get("torch.distributed.tensor")  # no DTensor exists before it is imported (0.7 s)
    DTensor = getattr(module, "DTensor", None)  # noqa: N806 - the class's own name
    if DTensor is None:
        return x, y
    x_dt, y_dt = isinstance(x, DTensor), isinstance(y, DTensor)
    if x_dt and y_dt:
        if x.placements != y.placements:
            raise AssertionError(f"DTensor placements differ: {x.placements} != {y.placements}")
        if x.device_mesh != y.device_mesh:
            raise AssertionError(f"DTensor device meshes differ: {x.device_mesh} != {y.device_mesh}")
        return x.to_local(), y.to_local()
    if x_dt or y_dt:
        raise TypeError("comparing a DTensor with a plain tensor is ambiguous: call .full_tensor() (the whole "
                        "tensor) or .to_local() (this rank's shard) on the DTensor first")
    return x, y


def _tensor_pair(x: Any, y: Any) -> tuple[Any, Any]:
    """Both as tensors: a number or a sequence of numbers takes the dtype and device of the tensor beside it
    (a number against a tensor of several elements is compared with each of them)."""
    import torch

    if not _is_tensor_like(x):
        ty, tx = _tensor_pair(y, x)
        return tx, ty
    tx = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if _is_tensor_like(y):
        return tx, (y if isinstance(y, torch.Tensor) else torch.as_tensor(y))
    ty = torch.as_tensor(y, dtype=tx.dtype, device=tx.device)
    if ty.dim() == 0 and tx.dim() > 0:
        ty = ty.expand_as(tx)
    return tx, ty


def _default_tolerances(a: Any, b: Any) -> tuple[float, float]:
    """(rtol, atol) assert_close uses for these dtypes (its documented table), so a floor can be put under them."""
    import torch

    table = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1.3e-6, 1e-5),
             torch.float64: (1e-7, 1e-7), torch.complex32: (1e-3, 1e-5), torch.complex64: (1.3e-6, 1e-5),
             torch.complex128: (1e-7, 1e-7)}
    pairs = [table.get(t.dtype, (0.0, 0.0)) for t in (a, b)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _where(path: str) -> str:
    return f" at {path}" if path else ""


def compare(x: Any, y: Any, *, atol: float | None = None, rtol: float | None = None, equal_nan: bool = True,
            exact_dtype: bool = True, exact_device: bool = False, exact_layout: bool = False,
            exact_stride: bool = False, atol_floor: float = 0.0, rtol_floor: float = 0.0, path: str = "") -> str:
    """Why ``x`` and ``y`` differ under upstream's ``assertEqual`` rules, or "" when they are equal.

    Containers compare element by element whatever their type (a tuple equals a list with the same
    items), mappings by key, tensors with ``torch.testing.assert_close`` tolerances, numbers against
    tensors and numbers of another type (``1 == 1.0 == True``) as numbers, anything else with ``==``.

    Example::

        compare((Shard(0),), [Shard(0)])   # ""
    """
    import torch

    if (atol is None) != (rtol is None):
        raise ValueError(f"give both atol and rtol or neither; got atol={atol!r}, rtol={rtol!r}")
    x, y = _unwrap_dtensors(x, y)
    if _is_tensor_like(x) or _is_tensor_like(y):
        if (_is_tensor_like(x) or _is_number(x) or _is_sequence(x)) and \
                (_is_tensor_like(y) or _is_number(y) or _is_sequence(y)):
            try:
                tx, ty = _tensor_pair(x, y)
            except (TypeError, ValueError, RuntimeError) as exc:
                return f"cannot compare {type(x).__name__} with {type(y).__name__}{_where(path)}: {exc}"
            r, a = rtol, atol
            if atol_floor or rtol_floor:
                d_rtol, d_atol = _default_tolerances(tx, ty)
                r = max(rtol if rtol is not None else d_rtol, rtol_floor)
                a = max(atol if atol is not None else d_atol, atol_floor)
            try:
                torch.testing.assert_close(tx, ty, rtol=r, atol=a, equal_nan=equal_nan, check_dtype=exact_dtype,
                                           check_device=exact_device, check_layout=exact_layout,
                                           check_stride=exact_stride)
            except AssertionError as exc:
                return f"{exc}{_where(path)}"
            return ""
        return f"a tensor cannot equal a {type(y if _is_tensor_like(x) else x).__name__}{_where(path)}"
    if x is None or y is None:
        return "" if x is None and y is None else f"{x!r} != {y!r}{_where(path)}"
    if _is_number(x) and _is_number(y):
        return _compare_numbers(x, y, atol, rtol, equal_nan, atol_floor, rtol_floor, path)
    if isinstance(x, str) or isinstance(y, str):
        return "" if x == y else f"{x!r} != {y!r}{_where(path)}"
    if _is_mapping(x) and _is_mapping(y):
        xk, yk = list(x.keys()), list(y.keys())
        if set(xk) != set(yk):
            only_x = [k for k in xk if k not in y]
            only_y = [k for k in yk if k not in x]
            return f"the keys differ{_where(path)}: only in the first {only_x!r}, only in the second {only_y!r}"
        for k in xk:
            why = compare(x[k], y[k], atol=atol, rtol=rtol, equal_nan=equal_nan, exact_dtype=exact_dtype,
                          exact_device=exact_device, exact_layout=exact_layout, exact_stride=exact_stride,
                          atol_floor=atol_floor, rtol_floor=rtol_floor, path=f"{path}[{k!r}]")
            if why:
                return why
        return ""
    if _is_sequence(x) and _is_sequence(y):
        if len(x) != len(y):
            return f"the lengths differ{_where(path)}: {len(x)} != {len(y)}"
        for i, (a, b) in enumerate(zip(x, y)):
            why = compare(a, b, atol=atol, rtol=rtol, equal_nan=equal_nan, exact_dtype=exact_dtype,
                          exact_device=exact_device, exact_layout=exact_layout, exact_stride=exact_stride,
                          atol_floor=atol_floor, rtol_floor=rtol_floor, path=f"{path}[{i}]")
            if why:
                return why
        return ""
    try:
        equal = x == y
        if not isinstance(equal, bool):
            equal = bool(equal)
    except Exception as exc:
        return f"comparing {type(x).__name__} with {type(y).__name__}{_where(path)} raised {type(exc).__name__}: {exc}"
    return "" if equal else f"{x!r} != {y!r}{_where(path)}"


def _compare_numbers(x: Any, y: Any, atol: float | None, rtol: float | None, equal_nan: bool,
                     atol_floor: float, rtol_floor: float, path: str) -> str:
    x = int(x) if isinstance(x, bool) else x
    y = int(y) if isinstance(y, bool) else y
    if isinstance(x, int) and isinstance(y, int) and atol is None and not atol_floor:
        return "" if x == y else f"{x} != {y}{_where(path)}"
    r = max(_FLOAT_RTOL if rtol is None else rtol, rtol_floor)
    a = max(_FLOAT_ATOL if atol is None else atol, atol_floor)
    xs, ys = complex(x), complex(y)
    for p, q in ((xs.real, ys.real), (xs.imag, ys.imag)):
        if math.isnan(p) or math.isnan(q):
            if math.isnan(p) and math.isnan(q) and equal_nan:
                continue
            return f"{x!r} != {y!r}{_where(path)}"
        if p == q:
            continue
        if math.isinf(p) or math.isinf(q) or abs(p - q) > a + r * abs(q):
            detail = ""
            if abs(p - q) <= 1e-3 * max(1.0, abs(q)):  # close, but not close enough: say by how much
                detail = f" (absolute difference {abs(p - q):.3g} > atol {a:.3g} + rtol {r:.3g} * {abs(q):.3g})"
            return f"{x!r} != {y!r}{_where(path)}{detail}"
    return ""


class TestCase(expecttest.TestCase):
    """Upstream's ``common_utils.TestCase`` surface for single-process tests, built on public torch.

    ``assertEqual`` with upstream's rules (``atol``, ``rtol``, ``exact_dtype``, ``exact_device``, ...,
    and the class's ``precision`` / ``rel_tol`` floors), ``assertNotEqual``, ``assertNotWarn``,
    ``assertWarnsOnceRegex``, ``assertExpected`` / ``assertExpectedRaises`` (files under ``expect/``),
    ``_attempt_load_from_subprocess`` and ``assertExpectedInline``.

    Example::

        class TestPlacements(TestCase):
            def test_tuple_equals_list(self):
                self.assertEqual((Shard(0),), [Shard(0)])
    """

    _precision: float = 0.0
    _rel_tol: float = 0.0
    maxDiff = None

    @property
    def precision(self) -> float:
        """A floor under ``atol`` for every tensor and float comparison of this test."""
        return self._precision

    @precision.setter
    def precision(self, value: float) -> None:
        self._precision = value

    @property
    def rel_tol(self) -> float:
        """A floor under ``rtol`` for every tensor and float comparison of this test."""
        return self._rel_tol

    @rel_tol.setter
    def rel_tol(self, value: float) -> None:
        self._rel_tol = value

    def assertEqual(self, first: Any, second: Any, msg: Any = None, *, atol: float | None = None,  # type: ignore[override]
                    rtol: float | None = None, equal_nan: bool = True, exact_dtype: bool = True,
                    exact_device: bool = False, exact_layout: bool = False, exact_stride: bool = False,
                    exact_is_coalesced: bool = False) -> None:
        __tracebackhide__ = True
        if isinstance(first, str) and isinstance(second, str):
            self.assertMultiLineEqual(first, second, msg) if "\n" in first + second else \
                super().assertEqual(first, second, msg)
            return
        why = compare(first, second, atol=atol, rtol=rtol, equal_nan=equal_nan, exact_dtype=exact_dtype,
                      exact_device=exact_device, exact_layout=exact_layout, exact_stride=exact_stride,
                      atol_floor=self.precision, rtol_floor=self.rel_tol)
        if why:
            if callable(msg):
                raise self.failureException(msg(why))
            if msg:
                # unittest's "first != second : msg" where the reason is one line, upstream's next line otherwise
                why = f"{why}\n{msg}" if "\n" in why else f"{why} : {msg}"
            raise self.failureException(why)

    def assertNotEqual(self, first: Any, second: Any, msg: Any = None, *, atol: float | None = None,  # type: ignore[override]
                       rtol: float | None = None, **kwargs: Any) -> None:
        __tracebackhide__ = True
        why = compare(first, second, atol=atol, rtol=rtol, atol_floor=self.precision, rtol_floor=self.rel_tol,
                      **kwargs)
        if not why:
            raise self.failureException(msg or f"{first!r} == {second!r}, expected them to differ")

    def assertNotWarn(self, callable: Callable[[], Any], msg: str = "") -> None:
        """Fail when ``callable()`` warns (every warning counts, torch's warn-once ones included)."""
        with warnings.catch_warnings(record=True) as caught, _warn_always():
            warnings.simplefilter("always")
            callable()
        if caught:
            shown = "; ".join(f"{w.category.__name__}: {w.message}" for w in caught)
            self.fail(f"{msg + ': ' if msg else ''}expected no warning, got {len(caught)}: {shown}")

    @contextlib.contextmanager
    def assertWarnsOnceRegex(self, category: type[Warning], regex: str = "") -> Iterator[None]:
        """The block must warn ``category`` with a message matching ``regex`` (``re.match``), even a warn-once one."""
        pattern = re.compile(regex)
        with warnings.catch_warnings(record=True) as caught, _warn_always():
            warnings.simplefilter("always")
            yield
        if not caught:
            self.fail("no warning caught")
        of_kind = [w for w in caught if type(w.message) is category]
        if not of_kind:
            self.fail(f"no {category.__name__} caught; got {[f'{w.category.__name__}: {w.message}' for w in caught]}")
        if not any(pattern.match(str(w.message)) for w in caught):
            self.fail(f"no warning matches {regex!r}; {category.__name__}s caught: {[str(w.message) for w in of_kind]}")

    def assertExpected(self, s: str, subname: str | None = None) -> None:
        """``s`` must equal the file ``expect/<Class.test>[-subname].expect`` next to the test module.

        ``EXPECTTEST_ACCEPT=1`` writes it (rank 0 alone in a distributed test).
        """
        if not isinstance(s, str):
            raise TypeError(f"assertExpected compares strings; got {type(s).__name__}")
        module = type(self).__module__
        test_file = os.path.realpath(getattr(sys.modules[module], "__file__", "") or "")
        name = self.id()[len(module) + 1:] if self.id().startswith(module + ".") else self.id()
        path = os.path.join(os.path.dirname(test_file), "expect", name + (f"-{subname}" if subname else "") + ".expect")
        accept = bool(os.environ.get("EXPECTTEST_ACCEPT"))
        if not os.path.exists(path):
            if accept:
                if getattr(self, "rank", 0) <= 0:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "w") as f:
                        f.write(s)
                return
            raise AssertionError(f"{self.id()}: no expect file {path}; got:\n\n{s}\n\nrun with EXPECTTEST_ACCEPT=1 "
                                 "to write it")
        with open(path) as f:
            expected = f.read()
        if accept and expected != s:
            if getattr(self, "rank", 0) <= 0:
                with open(path, "w") as f:
                    f.write(s)
            return
        self.assertMultiLineEqual(expected, s)

    def assertExpectedRaises(self, exc_type: type[BaseException], callable: Callable[..., Any], *args: Any,
                             **kwargs: Any) -> None:
        """``callable(*args, **kwargs)`` must raise ``exc_type`` whose message matches the expect file."""
        subname = kwargs.pop("subname", None)
        try:
            callable(*args, **kwargs)
        except exc_type as e:
            self.assertExpected(str(e), subname)
            return
        self.fail("Did not raise when expected to")

    def _attempt_load_from_subprocess(self, file: Any, import_string: str,
                                      expected_failure_message: str | None = None) -> None:
        """``torch.load(file, weights_only=True)`` in a fresh interpreter after ``import_string``.

        With ``expected_failure_message`` the load must fail with a message containing it.
        """
        script = f"import torch;{import_string}torch.load(r'{file}', weights_only=True)"
        proc = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              cwd=os.path.dirname(os.path.realpath(str(file))) or None)
        output = proc.stdout.decode("utf-8", "replace")
        if expected_failure_message is None:
            if proc.returncode != 0:
                raise RuntimeError(output)
            return
        if proc.returncode == 0:
            self.fail(f"loading {file} in a subprocess succeeded; expected it to fail with "
                      f"{expected_failure_message!r}")
        self.assertIn(expected_failure_message, output)

    def assertExpectedInline(self, actual: str, expect: str, skip: int = 0) -> None:
        if os.environ.get("EXPECTTEST_ACCEPT"):
            if getattr(self, "rank", 0) > 0:
                return  # rank 0 alone edits the file; the ranks compute the same value
            # expecttest files an accepted literal under its shifted line number but looks it up under the
            # caller's (unshifted) one, so a second call from the same line -- a loop, the next hypothesis
            # example, the next test in a reused rank -- would rewrite it again and fail.
            caller = traceback.extract_stack(limit=2 + skip)[0]
            where = (caller.filename, caller.lineno)
            if where in _ACCEPTED:
                self.assertMultiLineEqual(actual, _ACCEPTED[where], "one assertExpectedInline, different values")
                return
            _ACCEPTED[where] = actual
        super().assertExpectedInline(actual, expect, skip=skip + 1)

    def assertCollectivesInline(self, record: Any, expect: str | None = None, skip: int = 0, **pins: str) -> None:
        """Every rank's collectives in ``record`` (``with harness.record_collectives() as record:``) must read as the
        pinned text: the lines all ranks share once, a ``rank N:`` / ``ranks A-B:`` block where they differ. Call it
        on every rank, after the record's block. ``EXPECTTEST_ACCEPT=1`` writes the literal (rank 0 alone); a
        mismatch fails on every rank with the pin it compared, the first collective that differs, its ranks, and a
        unified diff.

        ``expect`` is one pin for every device. Where the communication truly differs by device, pin each device's
        instead, keyed by the device type the test's ranks run on: ``cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\"``
        (``cuda``: one GPU per rank on NCCL and shared GPUs alike). An accepting run writes only its own device's
        pin, adding the keyword where it is missing, and leaves the others as they are; a device with no pin yet
        fails, naming the command that writes it.

        Example::

            with record_collectives() as record:
                dist.all_reduce(torch.ones(4))
            self.assertCollectivesInline(record, \"\"\"\\
            all_reduce(float32[4], sum) on world
            \"\"\")
        """
        __tracebackhide__ = True
        from harness.shared.errors import UsageError
        from harness.testing import collective_pins, collective_trace, literals
        from harness.testing.collectives import CollectiveRecord

        rank = self.__dict__.get("rank", getattr(type(self), "rank", -1))
        where = f"{self.id()}" + (f" [rank {rank}]" if isinstance(rank, int) and rank >= 0 else "")
        if not isinstance(record, CollectiveRecord):
            raise UsageError(f"{where}: assertCollectivesInline(record, expect) takes the record that `with "
                             f"harness.record_collectives() as record:` gives; got {type(record).__name__} "
                             f"{str(record)[:80]!r}")
        device, ran_on = collective_pins.device_of(self)
        pin = collective_pins.choose(where, expect, pins, device)
        record._usable_in(self)
        traces = record._traces(self)
        actual = collective_trace.render(traces)
        frame = sys._getframe(1 + skip)
        if os.environ.get("EXPECTTEST_ACCEPT"):
            if record._rank == 0:  # one writer; every rank computed the same text
                line = literals.accept(frame, "assertCollectivesInline", actual, pin.text or "", self.fail,
                                       keyword=pin.device)
                if line is not None and pin.device is None and pin.text:
                    print(f"  (one pin for every device, accepted on {ran_on}: where the communication truly "
                          "differs by device, pin each device's: cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\")",
                          flush=True)
            return
        if actual == pin.text:
            return
        command = collective_pins.accept_command(frame.f_code.co_filename, self.id())
        if pin.text is None:
            raise self.failureException(collective_pins.missing(self.id(), pin, ran_on, actual, command))
        raise self.failureException(collective_pins.differs(
            self.id(), pin, ran_on, collective_trace.mismatch(pin.text, actual, traces), command))


@contextlib.contextmanager
def _warn_always() -> Iterator[None]:
    """torch's TORCH_WARN_ONCE warnings fire every time inside the block."""
    import torch

    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        yield
    finally:
        torch.set_warn_always(before)


class DistributedAssertions(TestCase):
    """The assertions every harness test case has: upstream's ``TestCase`` surface, safe on every rank."""
