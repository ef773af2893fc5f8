"""TensorFlow workers forked from a process that has imported TensorFlow once.

Importing TensorFlow costs a worker 3-6 CPU-seconds before its request
begins. A fork server (`tf_worker.py --serve`) pays it once per toolchain and
environment for as long as this process runs: a build of many models, or a
check and then a compile, forks each request's worker from it. Each worker
starts from the state the import left, as a worker started for the request
does, in its own directory, environment (HOME, TMPDIR) and log file, so its
answer and files are the same.

A server serves one request at a time (parallel builds start more); at most
MAX_IDLE idle ones are kept, the least recently used stopped first. A server
ends when this process closes its stdin, at the latest when this process
ends. Where a server cannot start (no TensorFlow, a broken toolchain, threads
after the import), or TFAOT_DIST_FORK_WORKERS=0, each request starts a worker
of its own, which reports what is wrong as it always did.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfaot_dist import process

MAX_IDLE = 2  # about 0.5 GB each (TensorFlow 2.21, imported)
PER_REQUEST = ("HOME", "TMPDIR")  # set in the forked worker; the rest of the environment is the server's
READY_TIMEOUT = 600.0  # the import, from a cold disk
GRACE = 60.0  # beyond a request's timeout, for the server to kill, reap and answer


class ServerGone(Exception):
    """The server ended, or stopped answering, with a request under way."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status  # for the request: the server's exit status, or TIMED_OUT


class Server:
    """One `tf_worker.py --serve` process and the pipes to it."""

    def __init__(self, key: tuple[object, ...], python: Path, worker: Path, env: Mapping[str, str]) -> None:
        self.key = key
        self.home = Path(tempfile.mkdtemp(prefix="tfaot-dist-tf-server-"))
        self.stderr = self.home / "server.log"
        with open(self.stderr, "wb") as log:
            self.proc = subprocess.Popen(
                [str(python), "-I", str(worker), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.home,
                env={**env, "HOME": str(self.home), "TMPDIR": str(self.home)},
            )
        self.buffer = b""
        self.last_used = time.monotonic()

    def ready(self) -> bool:
        try:
            return bool(self._receive(time.monotonic() + READY_TIMEOUT).get("ready"))
        except ServerGone:
            return False

    def serve(
        self, request: Path, log: Path, cwd: Path, environ: Mapping[str, str], timeout: float
    ) -> tuple[int, bool]:
        """Have the request done; (exit status, whether it timed out)."""
        order = {"request": str(request), "cwd": str(cwd), "log": str(log), "environ": dict(environ)}
        self._send({**order, "timeout": timeout})
        self._receive(time.monotonic() + GRACE)  # {"pid": N}: the worker runs
        ended = self._receive(time.monotonic() + timeout + GRACE)
        return int(ended["status"]), bool(ended["timed_out"])

    def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the server's loop ends
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise ServerGone(self.proc.wait()) from None

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The server's next message; ServerGone if it ended or said nothing by the deadline."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self.proc.kill()
                    raise ServerGone(process.TIMED_OUT)
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise ServerGone(self.proc.wait())
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message


_lock = threading.Lock()
_idle: list[Server] = []
_refused: set[tuple[object, ...]] = set()  # keys whose server could not start: a worker per request


def run(
    python: Path,
    worker: Path,
    request: Path,
    log: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    sources: Sequence[Path] = (),
) -> process.Finished:
    """Run `python -I worker request` with its output in log, as process.stream does, forked from a
    server for python, worker (and its sources) and env where one can serve."""
    argv = (str(python), "-I", str(worker), str(request))
    server = None
    if os.environ.get("TFAOT_DIST_FORK_WORKERS") != "0":
        # The venv by its real directory: a cache that links to another's toolchains shares their servers.
        real_python = Path(os.path.realpath(python.parent)) / python.name
        server = _take(_key(real_python, worker, sources, env), real_python, worker, env)
    if server is None:
        return process.stream(argv, log, cwd=cwd, env=env, timeout=timeout)
    environ = {name: env[name] for name in PER_REQUEST if name in env}
    try:
        open(log, "wb").close()  # as process.stream: a log that cannot be written fails here
        status, timed_out = server.serve(request, log, cwd, environ, timeout)
    except ServerGone as gone:  # killed with its worker (^C, the OOM killer): the request failed
        server.stop()
        return process.Finished(argv, cwd, gone.status, "", "", timeout)
    except BaseException:
        server.stop()
        raise
    _give_back(server)
    return process.Finished(argv, cwd, process.TIMED_OUT if timed_out else status, "", "", timeout)


def _key(python: Path, worker: Path, sources: Sequence[Path], env: Mapping[str, str]) -> tuple[object, ...]:
    """What a server is for: the interpreter and the worker's files as they are now (a venv made
    again has another bin/python link, a new tfaot-dist other files), and the environment but what
    each request sets."""
    stamps: list[tuple[object, ...]] = []
    for path in (python, worker, *sources):
        stamps.append((str(path), _stamp(os.lstat, path), _stamp(os.stat, path)))
    return (tuple(stamps), tuple(sorted((k, v) for k, v in env.items() if k not in PER_REQUEST)))


def _stamp(stat: Callable[[Path], os.stat_result], path: Path) -> tuple[int, ...] | None:
    try:
        st = stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _take(key: tuple[object, ...], python: Path, worker: Path, env: Mapping[str, str]) -> Server | None:
    with _lock:
        if key in _refused:
            return None
        for server in reversed(_idle):
            if server.key == key:
                _idle.remove(server)
                if server.proc.poll() is None:
                    return server
                server.stop()
                break
    server = Server(key, python, worker, env)
    if server.ready():
        return server
    server.stop()
    with _lock:
        _refused.add(key)
    return None


def _give_back(server: Server) -> None:
    server.last_used = time.monotonic()
    with _lock:
        _idle.append(server)
        _idle.sort(key=lambda s: s.last_used)
        surplus = _idle[: max(0, len(_idle) - MAX_IDLE)]
        del _idle[: len(surplus)]
    for old in surplus:
        old.stop()


@atexit.register
def stop_all() -> None:
    """Stop every idle server (a busy one ends with its request's thread, or with this process)."""
    with _lock:
        servers = list(_idle)
        _idle.clear()
    for server in servers:
        server.stop()
