"""The debugger's rank half: ``breakpoint()``, ``pdb.set_trace()``, ``torch.distributed.breakpoint()`` and the
post-mortem of ``--pdb`` give a ``(Pdb rank N)`` prompt in the user's terminal.

The rank runs the standard library's own ``pdb.Pdb`` on a socket to the parent's relay
(``harness.parent.relay``), with the rank's fds 1 and 2 sent to it too while the prompt is open, so what
the rank prints is seen live. Nothing of pdb is rewritten: :class:`RankPdb` only opens the connection when
pdb first interacts and closes it when the user continues or quits. Whether there is a terminal comes
from the parent as data (``Task.debug``, the relay's address or None): with none a breakpoint fails its
test at once with its file and line. ``PYTHONBREAKPOINT=0`` skips ``breakpoint()`` as Python does. For an
IDE, ``HARNESS_DEBUGPY`` makes each rank wait for debugpy (:func:`wait_for_ide`).

Example (what the rank does around each test, ``harness.ranks.task``)::

    saved = install(task.test_id, rank, task.debug, task.post_mortem)
    ...  # the test: breakpoint() here opens the prompt, or raises NoTerminal when task.debug is None
    uninstall(saved)
"""
from __future__ import annotations

import json
import os
import pdb
import socket
import sys
from typing import Any

from harness.shared.errors import HarnessError, NoTerminal
from harness.shared.launcher import launched
from harness.shared.output import flush_std as _flush_std
from harness.shared.protocol import QUIT_MARK as _QUIT_MARK, read_line as _read_line

__all__ = ["RankPdb", "install", "uninstall", "post_mortem", "quit_message", "wait_for_ide",
           "QUIT_MESSAGE"]


#: what the rank's test error says when the user quit at the prompt (the BdbQuit pdb raises)
QUIT_MESSAGE = "quit in the debugger"


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
    from harness.ranks.capture import write_to_real_stderr

    debugpy.listen(("127.0.0.1", port))
    _LISTENING = port
    write_to_real_stderr(f"[harness] {test_id}, rank {rank}: waiting for a debugger on 127.0.0.1:{port} "
                         "(VS Code: Python Debugger: Attach, that port)\n")
    debugpy.wait_for_client()


_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # harness/, this file's grandparent


def _assert_helper(frame: Any) -> bool:
    return bool(frame.f_globals.get("__unittest")) or frame.f_code.co_filename.startswith(_HARNESS_DIR)


def quit_message() -> str:
    """The test's error when the user quit at the prompt (pdb's BdbQuit went up through the test)."""
    return f"{QUIT_MESSAGE} (q) on rank {_Where.rank}, at {_Where.quit_at or 'the prompt'}"
