"""The debugger's parent half: the terminal's only reader and writer, relaying a stopped rank's ``(Pdb rank N)``.

The parent (the process that owns the terminal, in the foreground) keeps one :class:`Relay` for the
process: a Unix socket and a thread. A rank that stops (``harness.ranks.debugger``) connects, says which test
and rank it is, and the relay copies the terminal's lines to it and its output to the terminal, one rank at
a time (a second rank waits in ``accept``'s queue). While a rank is at a prompt the pool's deadline and peer
grace are suspended (:func:`in_session`, :func:`paused_seconds`, read by ``harness.parent.pool``).

Whether there is a terminal is decided once, here (:func:`relay_address`), and goes to the ranks as data
(``protocol.Task.debug``): with none (CI, stdin redirected, a ``-j`` worker) a breakpoint fails its test at
once with its file and line, never waiting for the timeout.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import socket
import tempfile
import threading
import time

from harness.shared.output import flush_std as _flush_std
from harness.shared.protocol import QUIT_MARK as _QUIT_MARK, read_line as _read_line

__all__ = ["Relay", "relay_address", "in_session", "paused_seconds", "started_on_terminal", "user_stopped",
           "was_debugged"]


#: the longest directory a relay's socket may be in (sun_path holds 108 bytes on Linux, 104 on macOS)
_SOCKET_PATH_ROOM = 90


class Relay:
    """The parent's side: a Unix socket the ranks of this process's runs connect to when they stop.

    One per process (the terminal is the process's, whichever run asks); sessions are served one at a
    time, in the order the ranks connected.
    """

    def __init__(self, in_fd: int = 0, out_fd: int = 1) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self.dir = tempfile.mkdtemp(prefix="harness-debug-")
        if len(self.dir) > _SOCKET_PATH_ROOM:  # a long TMPDIR: a Unix socket's path has about 100 bytes
            os.rmdir(self.dir)
            self.dir = tempfile.mkdtemp(prefix="harness-debug-", dir="/tmp")
        self.address = os.path.join(self.dir, "relay")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.address)
        self.server.listen(64)
        self._lock = threading.Lock()
        self._paused = 0.0  # seconds spent at prompts so far (sessions that ended)
        self._since: float | None = None  # when the session now open began
        self._post_mortem_for: str | None = None  # the test whose post-mortem was given (one a test: its root cause)
        self.debugged: set[str] = set()  # the tests a rank of which was at a prompt
        threading.Thread(target=self._serve, daemon=True, name="harness-debug-relay").start()
        atexit.register(self.close)

    def close(self) -> None:
        """At exit: the socket and its directory go (the thread, a daemon, ends with the process)."""
        try:
            self.server.close()
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def paused(self) -> float:
        """Seconds spent at prompts since the relay started, the open session's included."""
        with self._lock:
            return self._paused + (time.monotonic() - self._since if self._since is not None else 0.0)

    @property
    def open(self) -> bool:
        return self._since is not None

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                self._session(conn)
            except OSError:
                pass
            finally:
                conn.close()
                with self._lock:
                    if self._since is not None:
                        self._paused += time.monotonic() - self._since
                        self._since = None

    def _session(self, conn: socket.socket) -> None:
        header = _read_line(conn)
        if not header:
            return
        info = json.loads(header)
        if info.get("kind") == "post-mortem":
            # The first rank of a test to fail is its root cause; the peers that fail after it (their
            # group closed under them) would only show consequences.
            if self._post_mortem_for == info["test"]:
                conn.sendall(b"no\n")
                return
            self._post_mortem_for = info["test"]
        with self._lock:
            self._since = time.monotonic()
        self.debugged.add(info["test"])
        _flush_std()
        self._write(f"\n[harness] {info['test']}, rank {info['rank']}: {info['what']} at {info['where']}; the "
                    "other ranks wait and the time limits are suspended (c: go on, q: fail the test)\n")
        conn.sendall(b"go\n")
        if self._relay(conn):
            # the user quit: the test ends there; its peers' failures (their group closed under them) are
            # consequences, so --pdb opens no further post-mortem for it
            self._post_mortem_for = info["test"]
        self._write(f"[harness] {info['test']}, rank {info['rank']}: left the debugger\n")

    def _relay(self, conn: socket.socket) -> bool:
        """Copy the terminal's input to the rank and the rank's output to the terminal until it hangs up;
        True when the user quit (the rank's :data:`_QUIT_MARK`, taken out of what is shown)."""
        held = b""  # the start of what may be the mark, cut between two reads: shown once it is not
        quit = False
        while True:
            ready, _, _ = select.select([conn, self.in_fd], [], [])
            if conn in ready:
                data = conn.recv(65536)
                if not data:
                    self._write_bytes(held)
                    return quit
                data = held + data
                if _QUIT_MARK in data:
                    quit = True
                    data = data.replace(_QUIT_MARK, b"")
                held = b""
                for cut in range(min(len(_QUIT_MARK) - 1, len(data)), 0, -1):
                    if _QUIT_MARK.startswith(data[-cut:]):
                        data, held = data[:-cut], data[-cut:]
                        break
                self._write_bytes(data)
            if self.in_fd in ready:
                data = os.read(self.in_fd, 65536)
                if not data:  # Ctrl-D at the prompt: pdb reads end-of-file and quits, as in a terminal
                    conn.shutdown(socket.SHUT_WR)
                    return self._drain(conn, held) or quit
                conn.sendall(data)

    def _drain(self, conn: socket.socket, held: bytes = b"") -> bool:
        data = held
        while True:
            more = conn.recv(65536)
            if not more:
                break
            data += more
        self._write_bytes(data.replace(_QUIT_MARK, b""))
        return _QUIT_MARK in data

    def _write(self, text: str) -> None:
        self._write_bytes(text.encode("utf-8", "replace"))

    def _write_bytes(self, data: bytes) -> None:
        while data:
            data = data[os.write(self.out_fd, data):]


#: the process's relay, made the first time a test asks for one with a terminal there (the terminal is the
#: process's, not a run's, like harness.parent.pool's set of live pools)
_RELAY: Relay | None = None


#: pytest's capture replaces fd 0 with /dev/null for the whole session; its plugin (harness.pytest_plugin)
#: says here, before that, whether the session was started from a terminal
_STARTED_ON_TERMINAL = False


def started_on_terminal(yes: bool) -> None:
    """Called before a capturing front end (pytest) takes fd 0: whether the process was given a terminal.
    Prompts then go through the controlling terminal (/dev/tty), past the capture."""
    global _STARTED_ON_TERMINAL
    _STARTED_ON_TERMINAL = yes


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def relay_address() -> str | None:
    """The socket a rank that stops connects to (``protocol.Task.debug``); None: no terminal here (stdin is
    not one, or CI is set), and a breakpoint fails its test at once."""
    global _RELAY
    if _RELAY is None:
        if os.environ.get("CI"):
            return None
        if _isatty(0):
            _RELAY = Relay(0, 1 if _isatty(1) else 2)
        elif _STARTED_ON_TERMINAL:
            try:
                tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
            except OSError:
                return None
            _RELAY = Relay(tty, tty)
        else:
            return None
    return _RELAY.address


def in_session() -> bool:
    """A rank of this process is at a prompt now: nothing may stop it (harness.parent.pool)."""
    return _RELAY is not None and _RELAY.open


def was_debugged(test_id: str) -> bool:
    """A rank of ``test_id`` was at a prompt in this process: its failure is not run again by triage, where
    the same breakpoints would stop it a second time."""
    return _RELAY is not None and test_id in _RELAY.debugged


def paused_seconds() -> float:
    """Seconds this process's ranks spent at prompts so far: the pool moves its limits by as much."""
    return 0.0 if _RELAY is None else _RELAY.paused()


def user_stopped(exc_type: str) -> bool:
    """A rank's error (its ``exc_type``, as outcome.capture_exception names it) that came from the debugger:
    the user quit, or there was no terminal. Running the test again (triage) would only stop there again."""
    return exc_type.rsplit(".", 1)[-1] in ("BdbQuit", "NoTerminal")
