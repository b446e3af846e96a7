"""``torch.testing._internal.distributed.checkpoint_utils`` as distributed test files use it: ``with_temp_dir``;
``with_checkpoint_logging``; and the example stream extension DCP's extension tests save through
(``Rot13Example``, ``get_test_extension_registry``), writing the same bytes as upstream's."""
from __future__ import annotations

import functools
import io
import logging
import os
from typing import IO, Any, Callable

from harness.testing.decorators import with_temp_dir

__all__ = ["with_temp_dir", "with_checkpoint_logging", "Rot13Example", "get_test_extension_registry"]


def with_checkpoint_logging(func: Callable[..., Any] | None = None, logger_name: str = "torch.distributed.checkpoint",
                            level: int = logging.INFO) -> Callable[..., Any]:
    """Run the test with the logger ``logger_name`` at ``level`` (DCP's, at INFO, by default), its level put back
    afterwards.

    Example::

        @with_comms
        @with_temp_dir
        @with_checkpoint_logging
        def test_save(self):
            ...
    """
    if func is None:
        raise AssertionError("Expected func to not be None")

    @functools.wraps(func)
    def logged(self: Any, *args: Any, **kwargs: Any) -> None:
        target = logging.getLogger(logger_name)
        before = target.level
        target.setLevel(level)
        try:
            func(self, *args, **kwargs)
        finally:
            target.setLevel(before)

    return logged


# the letters' case swapped, every other byte kept: what upstream's example writes (despite its name)
_SWAP = bytes(b ^ 0x20 if (65 <= b <= 90 or 97 <= b <= 122) else b for b in range(256))


def _extension_base() -> type:
    from torch.distributed.checkpoint._extension import StreamTransformExtension

    return StreamTransformExtension


class _SwapWriter(io.RawIOBase):
    def __init__(self, output: IO[bytes]) -> None:
        self.output = output

    def writeable(self) -> bool:  # upstream's spelling, kept for code that asks
        return True

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int | None:
        return self.output.write(bytes(b).translate(_SWAP))

    def flush(self) -> None:
        self.output.flush()


class _SwapReader(io.RawIOBase):
    def __init__(self, source: IO[bytes]) -> None:
        self.source = source

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        view = memoryview(b).cast("B")
        if hasattr(self.source, "readinto"):
            count = self.source.readinto(view)
        else:
            data = self.source.read(len(view))
            count = None if data is None else len(data)
            if data:
                view[:count] = data
        if count:
            view[:count] = view[:count].tobytes().translate(_SWAP)
        return count

    def seekable(self) -> bool:
        return self.source.seekable()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.source.seek(offset, whence)

    def tell(self) -> int:
        return self.source.tell()


def __getattr__(name: str) -> Any:
    # the extension class derives from DCP's base: made on first use, so importing this module imports no DCP
    if name == "Rot13Example":
        cls = _make_rot13()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_rot13() -> type:
    base = _extension_base()

    class Rot13Example(base):  # type: ignore[misc, valid-type]
        """DCP's example stream extension (registered as ``stream.rot13``, descriptor ``stream.rot13/1``): it
        swaps the case of every ASCII letter of the stream, both ways, byte for byte as upstream's, so a
        checkpoint either one wrote reads back with the other."""

        def __init__(self, chunk_size: int = io.DEFAULT_BUFFER_SIZE) -> None:
            super().__init__()
            self._chunk_size = chunk_size

        @staticmethod
        def from_descriptor(version: str) -> "Rot13Example":
            if version.partition(".")[0] != "1":
                raise ValueError(f"Unknown extension {version=}")
            return Rot13Example()

        @staticmethod
        def registry_name() -> str:
            return "stream.rot13"

        def get_descriptor(self) -> str:
            return f"{self.registry_name()}/1"

        def transform_to(self, output: IO[bytes]) -> IO[bytes]:
            return _SwapWriter(output)  # type: ignore[return-value]

        def transform_from(self, input: IO[bytes]) -> IO[bytes]:  # noqa: A002 (upstream's parameter name)
            return _SwapReader(input)  # type: ignore[return-value]

    Rot13Example.__module__ = __name__
    Rot13Example.__qualname__ = "Rot13Example"
    return Rot13Example


def get_test_extension_registry() -> Any:
    """DCP's ``ExtensionRegistry`` with :class:`Rot13Example` registered (what DCP's extension tests read with)."""
    from torch.distributed.checkpoint._extension import ExtensionRegistry

    registry = ExtensionRegistry()
    registry.register(__getattr__("Rot13Example"))
    return registry
