"""``--serve``: a warm server that later runs of the same project and interpreter hand their tests to.

``python -m harness --serve`` starts it in the background and returns; it keeps a template (torch imported)
and, for each run that connects, forks a runner process from it (harness.runner.forked) with the run's
environment, directory and fds 0, 1 and 2 (passed over the socket), so that the lines and a rank's
``(Pdb rank N)`` prompt are on the run's own terminal. The run (the client) still writes the summary,
JUnit XML and HTML and returns the exit code; Ctrl-C is passed on; a client that goes away (SIGKILL too)
takes its runner process and ranks with it. The server ends after ``--idle`` seconds without a run.

Safe to leave running: its socket is in a folder only the user can open (checked: owned by the user, mode
0700), a connection from another user is refused (the peer's credentials), and a run uses a server only
when it was started for the same interpreter, torch build, harness code, project and relevant environment
(``HARNESS_*``, ``CUDA_VISIBLE_DEVICES``, ``PYTHONPATH``): the socket's name is a digest of them. CI (``CI``
set) never uses one; ``--no-server`` bypasses it. A stale socket (its server gone) is removed.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_IDLE", "key", "server_dir", "socket_path", "start", "try_run", "serve"]

#: seconds a server waits for the next run before it ends
DEFAULT_IDLE = 900.0

#: the environment a server must share with its runs (besides the interpreter, torch and the harness)
_RELEVANT_PREFIXES = ("HARNESS_",)
_RELEVANT = ("CUDA_VISIBLE_DEVICES", "PYTHONPATH", "HYPOTHESIS_PROFILE")


def _torch_build() -> str:
    """torch's version file as text (not imported: the client never imports torch)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "no torch"
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        return Path(path).read_text()
    except OSError:
        return path


def _harness_code() -> str:
    """The harness's files and their modification times: a server never serves other harness code."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # harness/
    parts = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                try:
                    parts.append(f"{p}:{os.stat(p).st_mtime_ns}")
                except OSError:
                    pass
    return "\n".join(parts)


def key(root: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """What a server and a run must share for the run to use it."""
    env = dict(os.environ if env is None else env)
    return {"python": os.path.realpath(sys.executable), "version": sys.version, "root": str(root),
            "torch": hashlib.sha256(_torch_build().encode()).hexdigest(),
            "harness": hashlib.sha256(_harness_code().encode()).hexdigest(),
            "env": json.dumps(sorted((k, v) for k, v in env.items()
                                     if k.startswith(_RELEVANT_PREFIXES) or k in _RELEVANT))}


def server_dir(create: bool = False) -> str:
    """The user's folder of servers, refused unless it is the user's own and no one else's. Only ``--serve``
    creates it (mode 0700): a run that merely looks for a server leaves nothing behind (FileNotFoundError when
    there is none)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    path = os.path.join(base, f"distharness-servers-{os.getuid()}")
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a folder only this user can open: no server is used")
    return path


def socket_path(k: dict[str, str], create: bool = False) -> str:
    """Where the server for ``k`` listens (``create``: make the servers' folder first, as ``--serve`` does)."""
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:20]
    return os.path.join(server_dir(create), f"{digest}.sock")


def _peer_uid(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def _send(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    head = _exactly(sock, 4)
    if head is None:
        raise EOFError
    body = _exactly(sock, struct.unpack("!I", head)[0])
    if body is None:
        raise EOFError
    return pickle.loads(body)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            return None
        data += more
    return data


# ---- the client (a run) ----


def try_run(options: Any) -> Any:
    """Hand ``options``' run to a server started for this project, interpreter and environment: its exit
    code, or None when there is none to use (the run then goes on without)."""
    if os.environ.get("CI") or options.server == "no" or options.watch or options.jobs > 1 or options.job_of:
        return None
    try:
        path = socket_path(key(options.root))
    except OSError:
        return None
    if not os.path.exists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:  # stale: its server is gone
        sock.close()
        for suffix in ("", ".json"):
            try:
                os.unlink(path[:-5] + ".json" if suffix else path)
            except OSError:
                pass
        return None
    try:
        _, uid = _peer_uid(sock)
        if uid != os.getuid():
            sock.close()
            return None
        fds = [fd for fd in (0, 1, 2) if _open(fd)]
        socket.send_fds(sock, [json.dumps({"fds": [fd in fds for fd in (0, 1, 2)]}).encode() + b"\n"], fds)
        _send(sock, {"options": options, "env": dict(os.environ), "cwd": os.getcwd(), "path": list(sys.path),
                     "argv0": sys.argv[0]})
        return _await(sock, options)
    finally:
        sock.close()


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _await(sock: socket.socket, options: Any) -> Any:
    from harness.runner.console import Console
    from harness.runner.session import report
    from harness.shared.errors import UsageError
    from harness.shared.status import ExitCode

    state = {"interrupted": ""}

    def on_signal(signum: int, frame: Any) -> None:
        what = "terminated" if signum == signal.SIGTERM else "interrupted"
        if state["interrupted"] != what:
            state["interrupted"] = what
            try:
                sock.sendall(b"T" if signum == signal.SIGTERM else b"I")
            except OSError:
                pass

    old = (signal.signal(signal.SIGINT, on_signal), signal.signal(signal.SIGTERM, on_signal))
    try:
        while True:
            try:
                message = _recv(sock)
                break
            except InterruptedError:
                continue
            except (EOFError, OSError):
                message = None
                break
    finally:
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])
    if message is None:
        if state["interrupted"]:
            return ExitCode.TERMINATED if state["interrupted"] == "terminated" else ExitCode.INTERRUPTED
        print("harness: the server's runner process ended without reporting", file=sys.stderr)
        print("0 passed, 0 failed, 0 skipped")
        return ExitCode.FAILED
    if message[0] == "usage":
        raise UsageError(message[1])
    if message[0] == "exit":
        return ExitCode(message[1])
    ran = message[1]
    return report(options, Console(sys.stdout, ran.selected, options.verbose), ran)


# ---- starting one ----


def start(root: Path, idle: float) -> int:
    """``--serve``: start a server for this project in the background (or say that one runs); exit code."""
    if os.environ.get("CI"):
        print("harness: --serve: CI is set, and runs under CI never use a server", file=sys.stderr)
        return 2
    path = socket_path(key(root), create=True)
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            probe.close()
            print(f"harness: a server for this project already runs ({path})")
            return 0
        except OSError:
            os.unlink(path)
    log = path[:-5] + ".log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "harness.runner.server", str(root), repr(idle)], cwd=str(root),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            print(f"harness: the server did not start:\n{Path(log).read_text()[-3000:]}", file=sys.stderr)
            return 1
        time.sleep(0.02)
    print(f"harness: server started (pid {proc.pid}, {path}); runs of this project hand it their tests until it "
          f"has had none for {idle:g} s (--no-server bypasses it)")
    return 0


# ---- the server ----


class _Server:
    def __init__(self, root: Path, idle: float) -> None:
        from harness.runner import forked

        self.root, self.idle = root, idle
        self.key = key(root)
        self.path = socket_path(self.key, create=True)
        self.active = 0
        self.last = time.monotonic()
        self.lock = threading.Lock()
        forked.sweep_temp_dirs()
        forked.own_temp_dir()
        self._template()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = self.path + f".{os.getpid()}.tmp"
        self.listener.bind(tmp)
        os.chmod(tmp, 0o600)
        self.listener.listen(16)
        Path(self.path[:-5] + ".json").write_text(json.dumps({"pid": os.getpid(), "idle": idle, **self.key}))
        os.replace(tmp, self.path)  # there, whole, once it listens

    def _template(self) -> None:
        """The template, started again when it died."""
        from harness.parent import template

        template.warm(True)
        template.tell([])

    def serve(self) -> None:
        self.listener.settimeout(1.0)
        while True:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                with self.lock:
                    if self.active == 0 and time.monotonic() - self.last > self.idle:
                        return
                continue
            except OSError:
                return
            try:
                pid, uid = _peer_uid(conn)
            except OSError:
                conn.close()
                continue
            if uid != os.getuid():
                print(f"refused a connection from uid {uid} (pid {pid})", flush=True)
                conn.close()
                continue
            with self.lock:
                self.active += 1
            threading.Thread(target=self._one, args=(conn, pid), daemon=True).start()

    def _one(self, conn: socket.socket, client_pid: int) -> None:
        from harness.runner import forked

        runner = None
        try:
            head, fds, _, _ = socket.recv_fds(conn, 4096, 3)
            present = json.loads(head.split(b"\n", 1)[0])["fds"]
            it = iter(fds)
            given = tuple(next(it) if yes else None for yes in present)
            request = _recv(conn)
            with self.lock:
                self._template()
            print(f"ran for pid {client_pid}", flush=True)
            runner = forked.start_runner(_Job(request["options"], request["path"]), client_pid, fds=given,
                                         env=request["env"], cwd=request["cwd"])
            for fd in fds:
                os.close(fd)
            self._relay(conn, runner)
        except (OSError, EOFError, ValueError, pickle.PickleError):
            pass
        finally:
            if runner is not None and runner.proc.exitcode is None:
                runner.signal(signal.SIGTERM)
                runner.proc.join(30)
            conn.close()
            with self.lock:
                self.active -= 1
                self.last = time.monotonic()

    def _relay(self, conn: socket.socket, runner: Any) -> None:
        import multiprocessing.connection

        while True:
            ready = multiprocessing.connection.wait([conn, runner.conn, runner.proc.sentinel])
            if conn in ready:
                data = conn.recv(1)
                if not data:  # the client is gone
                    runner.signal(signal.SIGTERM)
                    runner.proc.join(30)
                    return
                runner.signal(signal.SIGTERM if data == b"T" else forked_interrupt())
            if runner.conn in ready:
                try:
                    message = runner.conn.recv()
                except (EOFError, OSError):
                    return
                runner.proc.join(30)
                _send(conn, message)
                return
            if runner.proc.sentinel in ready and runner.conn not in ready:
                if not runner.conn.poll(0):
                    return

    def close(self) -> None:
        from harness.parent import template

        for p in (self.path, self.path[:-5] + ".json", self.path[:-5] + ".log"):
            try:
                os.unlink(p)
            except OSError:
                pass
        self.listener.close()
        template.stop()


def forked_interrupt() -> int:
    from harness.runner.forked import INTERRUPT

    return INTERRUPT


class _Job:
    """A client's run, in the runner process: the client's ``sys.path``, then its options, as a run of its own."""

    def __init__(self, options: Any, path: list[str]) -> None:
        self.options, self.path = options, path

    def run_in(self, conn: Any) -> Any:
        from harness.runner.forked import _run_options

        sys.path[:] = self.path
        return _run_options(self.options)


def serve(root: Path, idle: float) -> None:
    """The server process: serve runs until ``idle`` seconds pass without one, then end with nothing left."""
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *a: sys.exit(0))
    server = _Server(root, idle)
    try:
        server.serve()
    finally:
        server.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(sys.argv[2]))
