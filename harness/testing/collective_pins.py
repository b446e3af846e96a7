"""Which pinned text a recorded trace is compared with, and the words when it differs or is missing.

``assertCollectivesInline(record, \"\"\"...\"\"\")`` pins one text for every device. Where the communication truly
differs by device (FSDP1 gathers a CPU flat parameter with a list ``all_gather`` and a CUDA one with
``all_gather_into_tensor``), a test pins each device's text in the same call, keyed by the device type of the
placement the test's ranks run on: ``assertCollectivesInline(record, cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\")``.
``cuda`` covers both CUDA placements, one GPU per rank on NCCL and ranks sharing GPUs over gloo: a trace
records the collectives the code called, at the dispatcher, before any backend, so what differs between them
(the backend, the harness's staging of CUDA tensors through the CPU on shared GPUs) is not in it.

Pure functions: :func:`choose` picks the pin (or says none is there yet), :func:`accept_command` names the
command that writes one, :func:`differs` and :func:`missing` are the failures' words.
"""
from __future__ import annotations

import dataclasses
import os

from harness.shared.errors import UsageError

__all__ = ["DEVICES", "Pin", "choose", "accept_command", "differs", "missing", "device_of"]

#: the device types a pin may be keyed by (torch's device types that run collectives)
DEVICES = ("cpu", "cuda", "xpu", "hpu", "mtia", "mps")


@dataclasses.dataclass(frozen=True)
class Pin:
    """The pinned text a trace is compared with: ``text`` (None: none yet, or an empty literal), ``device`` (None: one
    pin for every device), ``others`` (the devices pinned besides it, kept by an accepting run)."""

    text: str | None
    device: str | None
    others: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        """``the cpu pin`` / ``the pinned trace (one for every device)``."""
        return f"the {self.device} pin" if self.device else "the pinned trace (one for every device)"


def choose(where: str, expect: object, pins: dict[str, object], device: str) -> Pin:
    """The pin a test on ``device`` compares with: ``expect`` (one for every device) or ``pins[device]``.

    Raises a UsageError naming ``where`` for both forms at once, a key that is not a device type, a pin that is
    not a string, and for neither form.

    Example::

        choose("t.T.test", None, {"cpu": "a\\n", "cuda": "b\\n"}, "cuda")  # Pin('b\\n', 'cuda', ('cpu',))
        choose("t.T.test", "a\\n", {}, "cuda")                             # Pin('a\\n', None)
    """
    unknown = sorted(set(pins) - set(DEVICES))
    if unknown:
        raise UsageError(f"{where}: assertCollectivesInline(record, {unknown[0]}=...): a pin is keyed by a device "
                         f"type, one of {', '.join(d + '=' for d in DEVICES)} (the device the test's ranks run on)")
    if expect is not None and pins:
        raise UsageError(f"{where}: assertCollectivesInline(record, \"\"\"...\"\"\", {next(iter(pins))}=...): give "
                         "one pin for every device, or one per device (cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\"), not "
                         "both; move the shared text into the device keyword it was recorded on")
    if expect is None and not pins:
        raise UsageError(f"{where}: assertCollectivesInline(record) without a pin: give the pinned text, empty at "
                         "first (assertCollectivesInline(record, \"\"\"\"\"\"); EXPECTTEST_ACCEPT=1 fills it)")
    for key, value in ([("expect", expect)] if expect is not None else list(pins.items())):
        if not isinstance(value, str):
            raise UsageError(f"{where}: assertCollectivesInline's {key} is a pinned text, a string literal "
                             f"(\"\"\"...\"\"\"; empty at first, EXPECTTEST_ACCEPT=1 fills it); got "
                             f"{type(value).__name__}")
    if expect is not None:
        return Pin(expect or None, None)  # type: ignore[arg-type]
    others = tuple(sorted(k for k in pins if k != device))
    text = pins.get(device)
    return Pin(text if text else None, device, others)  # type: ignore[arg-type]


def device_of(test: object) -> tuple[str, str]:
    """(the device type a test's pin is keyed by, where it ran in words): the placement of its ranks
    (``cuda`` for ``cuda-shared/gloo`` and ``cuda/nccl`` alike), else the device type its class gives, else cpu."""
    placement = getattr(test, "_harness_placement", None)
    device = getattr(test, "_harness_device_type", None)
    if not isinstance(device, str):
        try:
            device = getattr(test, "device_type", None)
        except Exception:
            device = None
    device = device if isinstance(device, str) and device else "cpu"
    device = device.split(":")[0]
    label = getattr(placement, "label", None)
    return device, (label if isinstance(label, str) else device)


def accept_command(path: str, test_id: str) -> str:
    """The command that accepts one test's trace on this machine: the runner on its file, ``-k Class.method``."""
    try:
        shown = os.path.relpath(path)
        if shown.startswith(".."):
            shown = path
    except ValueError:
        shown = path
    parts = test_id.split(".")
    selector = ".".join(parts[-2:]) if len(parts) >= 2 else test_id
    return f"EXPECTTEST_ACCEPT=1 python -m harness {shown} -k {selector}"


def differs(test_id: str, pin: Pin, ran_on: str, mismatch: str, command: str) -> str:
    """A recorded trace that is not its pin: which pin, where the test ran, the first difference and the diff, how
    to accept (keeping the other devices' pins)."""
    kept = f" (the {', '.join(pin.others)} pin{'s' if len(pin.others) > 1 else ''} kept as they are)" \
        if pin.others else ""
    head = f"{test_id}: the collectives differ from {pin.words}, compared on {ran_on}; {mismatch}\n"
    if pin.device:
        return head + f"To accept the recorded trace as the {pin.device} pin{kept}, run on this machine: {command}"
    return (head + f"To accept the recorded trace, re-run the test with EXPECTTEST_ACCEPT=1 (rank 0 rewrites the "
            f"literal): {command}. Where the communication truly differs by device, pin each device's trace in "
            "the same call: assertCollectivesInline(record, cpu=\"\"\"...\"\"\", cuda=\"\"\"...\"\"\").")


def missing(test_id: str, pin: Pin, ran_on: str, actual: str, command: str) -> str:
    """A device (or a plain literal) with no pin yet: the recorded trace, and the command that writes it."""
    if pin.device:
        have = f"; its pins: {', '.join(pin.others)}" if pin.others else ""
        what = f"no {pin.device} pin yet (it ran on {ran_on}{have})"
        how = (f"To pin it, run on this machine: {command} (rank 0 writes {pin.device}=\"\"\"...\"\"\" into the call"
               + (f" and keeps the {', '.join(pin.others)} pin" + ("s" if len(pin.others) > 1 else "")
                  if pin.others else "") + ")")
    else:
        what = f"the pinned trace is empty (it ran on {ran_on})"
        how = f"To pin it, run: {command} (rank 0 writes the literal)"
    return f"{test_id}: {what}; the recorded trace:\n{actual}{how}"
