"""A rank you can debug from the terminal: ``breakpoint()``, ``pdb.set_trace()``, ``torch.distributed.breakpoint()``
and the post-mortem of ``--pdb`` give a ``(Pdb rank N)`` prompt in the user's terminal.

Two halves, one socket between them:

- **the parent** (the process that owns the terminal, in the foreground) keeps one :class:`Relay` for the
  process: a Unix socket and a thread. A rank that stops connects, says which test and rank it is, and
  the relay copies the terminal's lines to it and its output to the terminal, one rank at a time (a
  second rank waits in ``accept``'s queue). While a rank is at a prompt the pool's deadline and peer grace
  are suspended (:func:`in_session`, :func:`paused_seconds`, read by harness.parent.pool).
- **the rank** runs the standard library's own ``pdb.Pdb`` on that socket (its ``stdin``/``stdout``), with
  the rank's fds 1 and 2 sent to it too while the prompt is open, so what the rank prints is seen live.
  Nothing of pdb is rewritten: :class:`RankPdb` only opens the connection when pdb first interacts and
  closes it when the user continues or quits.

Whether there is a terminal is decided once, in the parent (:func:`relay_address`), and goes to the ranks
as data (``protocol.Task.debug``): with none (CI, stdin redirected, a ``-j`` worker) a breakpoint fails its
test at once with its file and line, never waiting for the timeout. ``PYTHONBREAKPOINT=0`` skips
``breakpoint()`` as Python does. For an IDE, ``HARNESS_DEBUGPY`` makes each rank wait for debugpy
(:func:`wait_for_ide`).

Example (what the rank does around each test, harness.ranks.task)::

    saved = install(task.test_id, rank, task.debug, task.post_mortem)
    ...  # the test: breakpoint() here opens the prompt, or raises NoTerminal when task.debug is None
    uninstall(saved)
"""
from __future__ import annotations

import atexit
import json
import os
import pdb
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
from typing import Any

from harness.shared.errors import HarnessError

__all__ = ["Relay", "relay_address", "in_session", "paused_seconds", "RankPdb", "NoTerminal", "install",
           "uninstall", "post_mortem", "quit_message", "started_on_terminal", "user_stopped", "wait_for_ide",
           "was_debugged"]

#: what the rank's test error says when the user quit at the prompt (the BdbQuit pdb raises)
QUIT_MESSAGE = "quit in the debugger"
#: what a rank sends its relay, last, when the user quit at its prompt (bytes no pdb session prints)
_QUIT_MARK = b"\x00harness:quit\x00"


class NoTerminal(HarnessError):
    """A breakpoint in a rank of a run that has no terminal to open a prompt in: the test fails at once."""


# ---- the parent: the terminal's only reader and writer --------------------------------------------


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


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


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


# ---- the rank: the standard library's pdb, on the relay's socket -----------------------------------


class _Link:
    """One connection to the parent's relay, with the rank's fds 1 and 2 sent to it while it is open."""

    def __init__(self, address: str, header: dict[str, Any]):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address)
        self.sock.sendall(json.dumps(header).encode() + b"\n")
        self.granted = _read_line(self.sock).strip() == "go"
        self.reader = self.sock.makefile("r", encoding="utf-8", errors="replace")
        self.writer = self.sock.makefile("w", encoding="utf-8", errors="replace")
        self.saved: tuple[int, int] | None = None
        if self.granted:
            _flush_std()
            self.saved = (os.dup(1), os.dup(2))
            os.dup2(self.sock.fileno(), 1)
            os.dup2(self.sock.fileno(), 2)

    def close(self) -> None:
        try:
            self.writer.flush()
        except OSError:
            pass
        if self.saved is not None:
            _flush_std()
            os.dup2(self.saved[0], 1)
            os.dup2(self.saved[1], 2)
            os.close(self.saved[0])
            os.close(self.saved[1])
            self.saved = None
        for f in (self.reader, self.writer, self.sock):
            try:
                f.close()
            except OSError:
                pass


class _Where:
    """Which test and rank this process runs now, and where its parent's relay is (set per test)."""

    test = ""
    rank = -1
    address: str | None = None
    post_mortem = False
    active: "RankPdb | None" = None
    quit_at = ""  # where the user quit at the prompt, for the test's error


class RankPdb(pdb.Pdb):
    """``pdb.Pdb`` whose terminal is the parent's, reached through the relay; the prompt names the rank.

    The connection opens when pdb first interacts (the user then sees the prompt) and closes when the user
    continues or quits (the parent's time limits then run again); a later breakpoint opens it again.
    """

    def __init__(self, what: str, where: str, kind: str = "breakpoint") -> None:
        super().__init__(stdin=sys.stdin, stdout=sys.stdout, nosigint=True)
        self.use_rawinput = False
        self.prompt = f"(Pdb rank {_Where.rank}) "
        self.what, self.where, self.kind = what, where, kind
        self.link: _Link | None = None
        self.start_frame: Any = None  # a post-mortem: the frame the prompt starts at (the test's, not an assert's)
        _Where.active = self

    def setup(self, frame: Any, traceback: Any) -> Any:
        done = super().setup(frame, traceback)
        for index, (each, _) in enumerate(self.stack):
            if each is self.start_frame:
                self.curindex, self.curframe = index, each
                self.curframe_locals = each.f_locals
        return done

    def connect(self) -> bool:
        """Open the prompt in the parent's terminal (waits for another rank's to close); False: refused."""
        if self.link is None:
            assert _Where.address is not None
            self.link = _Link(_Where.address, {"test": _Where.test, "rank": _Where.rank, "what": self.what,
                                                "where": self.where, "kind": self.kind})
            if not self.link.granted:
                self.hang_up()
                return False
            self.stdin, self.stdout = self.link.reader, self.link.writer
        return True

    def hang_up(self) -> None:
        if self.link is not None:
            self.link.close()
            self.link = None

    def interaction(self, frame: Any, traceback: Any) -> None:
        if self.connect():
            super().interaction(frame, traceback)

    def set_continue(self) -> None:
        super().set_continue()
        self.hang_up()

    def set_quit(self) -> None:
        frame = getattr(self, "curframe", None)
        _Where.quit_at = _place(frame) if frame is not None else self.where
        super().set_quit()
        if self.link is not None:
            try:  # the relay learns it from the link itself: no second connection, no race with a peer's
                self.link.writer.flush()
                self.link.sock.sendall(_QUIT_MARK)
            except OSError:
                pass
        self.hang_up()


def _place(frame: Any) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _no_terminal(what: str, where: str) -> NoTerminal:
    from harness.torchrun.job import launched

    if launched():
        why = ("under torchrun there is no parent to hold a prompt for the ranks; run the test with "
               "`python -m harness` from a terminal to debug it there")
    else:
        why = ("this run has no terminal to open a (Pdb) prompt in (its stdin is not a terminal, or CI is set); "
               "run the test from a terminal to debug it there")
    return NoTerminal(f"{what} at {where} on rank {_Where.rank} of {_Where.test}: {why}, or set PYTHONBREAKPOINT=0 "
                      "to skip breakpoint() calls")


def _debugger(what: str, frame: Any) -> RankPdb:
    where = _place(frame)
    if _Where.address is None:
        raise _no_terminal(what, where)
    return RankPdb(what, where)


def _breakpointhook(*args: Any, **kwargs: Any) -> Any:
    """``sys.breakpointhook`` in a rank during a test: PYTHONBREAKPOINT as Python reads it, else the relay's pdb."""
    chosen = os.environ.get("PYTHONBREAKPOINT", "")
    if chosen == "0":
        return None
    if chosen not in ("", "pdb.set_trace"):  # another debugger the user named: theirs
        return sys.__breakpointhook__(*args, **kwargs)
    frame = sys._getframe(1)
    _debugger("breakpoint()", frame).set_trace(frame)
    return None


def _pdb_set_trace(*, header: str | None = None) -> None:
    """``pdb.set_trace`` in a rank during a test."""
    frame = sys._getframe(1)
    debugger = _debugger("pdb.set_trace()", frame)
    if header is not None:
        debugger.message(header)
    debugger.set_trace(frame)


def _torch_pdb() -> RankPdb:
    """What ``torch.distributed.breakpoint`` makes its debugger with (it would open /dev/stdin, which in a
    rank is not the terminal); the frame named is the one that called it."""
    return _debugger("torch.distributed.breakpoint()", sys._getframe(2))


_TORCH_MAKERS = ("_make_distributed_pdb", "_DistributedPdb")


class Installed:
    """What :func:`install` replaced, for :func:`uninstall` to put back."""

    def __init__(self) -> None:
        self.hook = sys.breakpointhook
        self.set_trace = pdb.set_trace
        self.torch_maker: Any = None


def install(test_id: str, rank: int, address: str | None, post_mortem_on: bool = False) -> Installed:
    """Before a test in a rank: breakpoints in it reach the parent's terminal (or fail at once with none)."""
    _Where.test, _Where.rank, _Where.address, _Where.post_mortem = test_id, rank, address, post_mortem_on
    _Where.quit_at = ""
    saved = Installed()
    sys.breakpointhook = _breakpointhook
    pdb.set_trace = _pdb_set_trace
    dist = sys.modules.get("torch.distributed")
    # torch.distributed.breakpoint looks its debugger's maker up when it is called (its source is left as it
    # is): _make_distributed_pdb in recent torch, the module-level _DistributedPdb class in older ones
    for name in _TORCH_MAKERS:
        if dist is not None and hasattr(dist, name):
            saved.torch_maker = (name, getattr(dist, name))
            setattr(dist, name, _torch_pdb)
            break
    return saved


def uninstall(saved: Installed) -> None:
    """After the test: a prompt still open is closed (the user stepped off the test's end) and the hooks go."""
    active, _Where.active = _Where.active, None
    if active is not None and active.link is not None:
        sys.settrace(None)
        active.hang_up()
    sys.breakpointhook = saved.hook
    pdb.set_trace = saved.set_trace
    dist = sys.modules.get("torch.distributed")
    if saved.torch_maker is not None and dist is not None:
        setattr(dist, *saved.torch_maker)


def post_mortem(exc: BaseException) -> None:
    """``--pdb``: a post-mortem prompt at the frame that raised ``exc``, if this rank is the test's first to fail
    (the relay refuses the later ones) and there is a terminal."""
    if not _Where.post_mortem or _Where.address is None or exc.__traceback__ is None:
        return
    # the innermost frame outside unittest's and the harness's own assert methods (unittest hides the
    # modules that say ``__unittest``): the test's line that raised; ``down`` still reaches the others
    tb, start = exc.__traceback__, None
    while tb is not None:
        if start is None or not _assert_helper(tb.tb_frame):
            start = tb
        tb = tb.tb_next
    debugger = RankPdb(f"post-mortem of {type(exc).__name__}: {exc}".splitlines()[0][:200],
                       f"{start.tb_frame.f_code.co_filename}:{start.tb_lineno}", kind="post-mortem")
    debugger.start_frame = start.tb_frame
    try:
        debugger.reset()
        debugger.interaction(None, exc.__traceback__)
    finally:
        debugger.hang_up()
        _Where.active = None


# ---- an IDE's debugger (debugpy) ---------------------------------------------------------------------

_LISTENING: int | None = None  # the port this rank process listens on for debugpy (once a process)


def wait_for_ide(port: int, test_id: str, rank: int) -> None:
    """HARNESS_DEBUGPY: listen for an IDE's debugger on ``port`` and wait until one attaches (once a rank
    process; a reused rank keeps its debugger from test to test). The parent stops nothing meanwhile."""
    global _LISTENING
    if _LISTENING is not None:
        return
    try:
        import debugpy
    except ImportError:
        raise HarnessError("HARNESS_DEBUGPY is set but debugpy is not installed: pip install distharness[debug] "
                           "(or pip install debugpy), or unset HARNESS_DEBUGPY") from None
    from harness.capture import write_to_real_stderr

    debugpy.listen(("127.0.0.1", port))
    _LISTENING = port
    write_to_real_stderr(f"[harness] {test_id}, rank {rank}: waiting for a debugger on 127.0.0.1:{port} "
                         "(VS Code: Python Debugger: Attach, that port)\n")
    debugpy.wait_for_client()


def user_stopped(exc_type: str) -> bool:
    """A rank's error (its ``exc_type``, as outcome.capture_exception names it) that came from the debugger:
    the user quit, or there was no terminal. Running the test again (triage) would only stop there again."""
    return exc_type.rsplit(".", 1)[-1] in ("BdbQuit", "NoTerminal")


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _assert_helper(frame: Any) -> bool:
    return bool(frame.f_globals.get("__unittest")) or frame.f_code.co_filename.startswith(_HARNESS_DIR)


def quit_message() -> str:
    """The test's error when the user quit at the prompt (pdb's BdbQuit went up through the test)."""
    return f"{QUIT_MESSAGE} (q) on rank {_Where.rank}, at {_Where.quit_at or 'the prompt'}"
