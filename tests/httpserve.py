"""A real HTTP server on 127.0.0.1 for the tests: static files, plus paths that misbehave on purpose.

    server = Server(root)            serves root/ like any static server (python -m http.server)
    server.fail(path, 2)             the next 2 GETs of path answer 500, then it is served
    server.truncate(path)            announces the full length, sends half, closes
    server.reset(path)               announces the full length, sends half, resets the connection (RST)
    server.replace(path, data)       serves other bytes than the file holds
    server.url(path)                 http://127.0.0.1:PORT/path
    server.hits[path]                GETs seen per path

refused_url() is a port nobody listens on; SilentServer accepts connections
(the kernel completes the handshake) and never answers.
"""

import collections
import socket
import struct
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

# Seconds between serve_forever's checks for shutdown(): close() waits up to one (the default 0.5 s
# was paid by every test that stops a server).
POLL = 0.05


class Server:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hits: collections.Counter[str] = collections.Counter()
        self.failures: dict[str, int] = {}
        self.truncated: set[str] = set()
        self.resets: set[str] = set()
        self.replaced: dict[str, bytes] = {}
        owner = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(owner.root), **kwargs)

            def log_message(self, *args: object) -> None:  # keep test output readable
                pass

            def do_GET(self) -> None:
                path = unquote(urlsplit(self.path).path)
                owner.hits[path] += 1
                if owner.failures.get(path, 0) > 0:
                    owner.failures[path] -= 1
                    self.send_error(500, "failing on purpose")
                    return
                if path in owner.replaced:
                    self._send(owner.replaced[path], len(owner.replaced[path]))
                    return
                if path in owner.resets:
                    data = (owner.root / path.lstrip("/")).read_bytes()
                    self._send(data[: len(data) // 2], len(data))
                    # Linger on, timeout 0: close() sends RST instead of FIN.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                if path in owner.truncated:
                    data = (owner.root / path.lstrip("/")).read_bytes()
                    self._send(data[: len(data) // 2], len(data))
                    self.close_connection = True
                    return
                super().do_GET()

            def _send(self, data: bytes, length: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def url(self, path: str = "") -> str:
        return self.base + path.lstrip("/")

    def fail(self, path: str, times: int) -> None:
        self.failures["/" + path.lstrip("/")] = times

    def truncate(self, path: str) -> None:
        self.truncated.add("/" + path.lstrip("/"))

    def reset(self, path: str) -> None:
        self.resets.add("/" + path.lstrip("/"))

    def replace(self, path: str, data: bytes) -> None:
        self.replaced["/" + path.lstrip("/")] = data

    def count(self, path: str) -> int:
        return self.hits["/" + path.lstrip("/")]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SilentServer:
    """Listens, lets the kernel accept connections, never reads or answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/{path}"

    def close(self) -> None:
        self.sock.close()


def refused_url(path: str = "") -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/{path}"
