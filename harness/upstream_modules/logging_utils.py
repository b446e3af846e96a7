"""``torch.testing._internal.logging_utils``: ``LoggingTestCase`` and ``make_logging_test``, a test of what
torch's structured logging (``TORCH_LOGS``, ``torch._logging.set_logs``) emits; the records are caught at the
handlers torch's logging set up, once with the settings given as the environment variable and once through
the API. Built on torch's own logging state (``torch._logging``), which has no public way to save and restore
it."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import unittest.mock
from typing import Any, Callable, Iterator

import torch
import torch._logging

from harness.testing.assertions import TestCase

__all__ = ["LoggingTestCase", "make_logging_test", "make_settings_test", "kwargs_to_settings", "log_settings",
           "log_api", "preserve_log_state", "logs_to_string", "multiple_logs_to_string"]


def _internal() -> Any:
    import torch._logging._internal as internal

    return internal


@contextlib.contextmanager
def preserve_log_state() -> Iterator[None]:
    """torch's logging state as it was before the block, put back after it."""
    internal = _internal()
    before = internal._get_log_state()
    internal._set_log_state(internal.LogState())
    try:
        yield
    finally:
        internal._set_log_state(before)
        internal._init_logs()


def log_settings(settings: str) -> contextlib.ExitStack:
    """torch's logging set up from ``TORCH_LOGS=settings`` until the returned stack is closed."""
    stack = contextlib.ExitStack()
    stack.enter_context(preserve_log_state())
    stack.enter_context(unittest.mock.patch.dict(os.environ, {"TORCH_LOGS": settings}))
    _internal()._init_logs()
    return stack


def log_api(**kwargs: Any) -> contextlib.ExitStack:
    """torch's logging set up with ``torch._logging.set_logs(**kwargs)`` until the returned stack is closed."""
    stack = contextlib.ExitStack()
    stack.enter_context(preserve_log_state())
    torch._logging.set_logs(**kwargs)
    return stack


_VERBOSITY = {logging.DEBUG: "+", logging.INFO: "", logging.ERROR: "-"}


def kwargs_to_settings(**kwargs: Any) -> str:
    """``set_logs`` keywords as a ``TORCH_LOGS`` string: ``dynamo=logging.DEBUG, graph=True`` -> ``"+dynamo,graph"``."""
    settings = []

    def add(name: Any, level: Any) -> None:
        if not (isinstance(name, str) and isinstance(level, int) and level in _VERBOSITY):
            raise ValueError("Invalid value for setting")
        settings.append(_VERBOSITY[level] + name)

    for name, value in kwargs.items():
        if isinstance(value, bool):
            settings.append(name)
        elif isinstance(value, int):
            add(name, value)
        elif isinstance(value, dict) and name == "modules":
            for module, level in value.items():
                add(module, level)
        else:
            raise ValueError("Invalid value for setting")
    return ",".join(settings)


def _reset_dynamo() -> None:
    import torch._dynamo

    torch._dynamo.reset()


def make_logging_test(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run the decorated ``test(self, records)`` twice: logging set by ``TORCH_LOGS`` from ``kwargs``, then by
    ``torch._logging.set_logs(**kwargs)``; ``records`` holds the log records emitted meanwhile.

    Example::

        class TestLogs(LoggingTestCase):
            @make_logging_test(dynamo=logging.DEBUG)
            def test_compile(self, records):
                torch.compile(fn, backend="eager")(x)
                self.assertGreater(len(records), 0)
    """
    def wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
        def test_fn(self: Any) -> None:
            from torch._inductor import config as inductor_config

            with inductor_config.patch({"fx_graph_cache": False}):
                _reset_dynamo()
                records: list[logging.LogRecord] = []
                settings = log_settings(kwargs_to_settings(**kwargs)) if kwargs else contextlib.ExitStack()
                with settings, self._handler_watcher(records):
                    fn(self, records)
                _reset_dynamo()
                records.clear()
                with log_api(**kwargs), self._handler_watcher(records):
                    fn(self, records)

        test_fn.__name__ = fn.__name__
        test_fn.__qualname__ = fn.__qualname__
        return test_fn
    return wrapper


def make_settings_test(settings: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run the decorated ``test(self, records)`` once with ``TORCH_LOGS=settings``."""
    def wrapper(fn: Callable[..., Any]) -> Callable[..., Any]:
        def test_fn(self: Any) -> None:
            _reset_dynamo()
            records: list[logging.LogRecord] = []
            with log_settings(settings), self._handler_watcher(records):
                fn(self, records)

        test_fn.__name__ = fn.__name__
        test_fn.__qualname__ = fn.__qualname__
        return test_fn
    return wrapper


class LoggingTestCase(TestCase):
    """A test case for torch's logging: for the class, dynamo's errors are suppressed and it is not verbose;
    dynamo is reset around each test; ``hasRecord``/``getRecord`` look for a message among the records
    :func:`make_logging_test` hands the test."""

    _exit_stack: contextlib.ExitStack

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls._exit_stack = contextlib.ExitStack()
        cls._exit_stack.enter_context(unittest.mock.patch.dict(os.environ, {"___LOG_TESTING": ""}))
        cls._exit_stack.enter_context(unittest.mock.patch("torch._dynamo.config.suppress_errors", True))
        cls._exit_stack.enter_context(unittest.mock.patch("torch._dynamo.config.verbose", False))

    @classmethod
    def tearDownClass(cls) -> None:
        cls._exit_stack.close()
        _internal().log_state.clear()
        torch._logging._init_logs()
        super().tearDownClass()

    def setUp(self) -> None:
        super().setUp()
        _reset_dynamo()

    def tearDown(self) -> None:
        _reset_dynamo()
        super().tearDown()

    def hasRecord(self, records: list[logging.LogRecord], m: str) -> bool:
        return any(m in r.getMessage() for r in records)

    def getRecord(self, records: list[logging.LogRecord], m: str) -> logging.LogRecord:
        found = [r for r in records if m in r.getMessage()]
        if len(found) > 1:
            self.fail(f"multiple matching records: {found[0]} and {found[1]} among {records}")
        if not found:
            self.fail(f"did not find record with {m} among {records}")
        return found[0]

    def _handler_watcher(self, record_list: list[logging.LogRecord]) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for qname in _internal().log_registry.get_log_qnames():
            logger = logging.getLogger(qname)
            self.assertLessEqual(len(logger.handlers), 2, "All pt2 loggers should only have at most two handlers "
                                 "(debug artifacts and messages above debug level).")
            self.assertGreater(len(logger.handlers), 0, "All pt2 loggers should have more than zero handlers")
            for handler in logger.handlers:
                stack.enter_context(unittest.mock.patch.object(handler, "emit", _recording(handler.emit,
                                                                                           record_list)))
        return stack


def _recording(emit: Callable[[logging.LogRecord], None],
               records: list[logging.LogRecord]) -> Callable[[logging.LogRecord], None]:
    def new_emit(record: logging.LogRecord) -> None:
        emit(record)
        records.append(record)
    return new_emit


def logs_to_string(module: str, log_option: str) -> tuple[io.StringIO, Callable[[], contextlib.ExitStack]]:
    """A stream and a context-manager factory: within it, ``TORCH_LOGS=log_option``'s artifact of ``module``
    is written to the stream.

    Example::

        stream, ctx = logs_to_string("torch._inductor.compile_fx", "post_grad_graphs")
        with ctx():
            compiled(x)
        stream.getvalue()
    """
    streams, ctx = multiple_logs_to_string(module, log_option)
    return streams[0], ctx


def multiple_logs_to_string(module: str, *log_options: str
                            ) -> tuple[list[io.StringIO], Callable[[], contextlib.ExitStack]]:
    """:func:`logs_to_string` for several artifacts at once, one stream each."""
    streams = [io.StringIO() for _ in log_options]
    handlers = [logging.StreamHandler(stream=s) for s in streams]

    @contextlib.contextmanager
    def redirect() -> Iterator[None]:
        loggers = [torch._logging.getArtifactLogger(module, option) for option in log_options]
        for logger, handler in zip(loggers, handlers):
            logger.addHandler(handler)
        try:
            yield
        finally:
            for logger, handler in zip(loggers, handlers):
                logger.removeHandler(handler)

    def ctx_manager() -> contextlib.ExitStack:
        stack = log_settings(", ".join(log_options))
        stack.enter_context(redirect())
        return stack

    return streams, ctx_manager
