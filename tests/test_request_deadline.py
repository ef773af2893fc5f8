"""TFAOT_DIST_HTTP_DEADLINE bounds a whole request (issue 38): every attempt, every body read (error
bodies and the token service's answers included), for directory channels over HTTP and OCI
registries alike. A server that answers 500 with Content-Length 65536 and then trickles one byte every
0.5 s held `setup --list` on an OCI channel past 30 s with a deadline of 3 s.

The commands run in a subprocess with a timeout, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hostile import Server, one_error

DEADLINE = 1.5  # the tool's default is 120 s; a regression held a command past 30 s
MARGIN = 3  # seconds: one last byte's wait, and slack; starting the command is measured (startup())


class Trickling(BaseHTTPRequestHandler):
    """500 and a body of 65536 bytes announced, one byte every 0.5 s, until the client goes away or
    the server stops; the registry namespace `auth` answers 401 with a Bearer challenge instead, whose
    token service (/token) trickles so."""

    stop = threading.Event()

    def do_GET(self) -> None:
        if self.path.startswith("/v2/auth/"):
            realm = f"http://{self.headers['Host']}/token"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="x"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "65536")
        self.end_headers()
        for _ in range(65536):
            if self.stop.wait(0.5):
                return
            try:
                self.wfile.write(b" ")
                self.wfile.flush()
            except OSError:
                return

    do_HEAD = do_GET


@pytest.fixture
def trickling() -> Iterator[Server]:
    server = Server(Trickling)
    Trickling.stop.clear()
    yield server
    Trickling.stop.set()
    server.close()


def startup(env: dict[str, str]) -> float:
    """Seconds that starting the command takes here and now (`--version`): on a loaded machine it is
    several times its usual 0.4 s, and it is not what the deadline bounds."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "--version"], env=env, capture_output=True, check=True
    )
    return time.monotonic() - start


def setup_list(tmp_path: Path, channel: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The command's result and its seconds, less those of starting it."""
    (tmp_path / "registry" / "models").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TFAOT_DIST_CACHE": str(tmp_path / "cache"),
        "TFAOT_DIST_HTTP_DEADLINE": str(DEADLINE),
        "TFAOT_DIST_HTTP_TIMEOUT": "2",
        "TFAOT_DIST_HTTP_RETRIES": "3",
    }
    command = ["setup", "--list", "--channel", channel]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "--registry", str(tmp_path / "registry"), *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    return proc, time.monotonic() - start - startup(env)


def test_a_trickling_oci_error_body_ends_within_the_deadline(trickling: Server, tmp_path: Path) -> None:
    """Every request of the registry is answered 401, the token service 500 with a trickling body."""
    proc, took = setup_list(tmp_path, f"oci://127.0.0.1:{trickling.port}/auth")
    assert proc.returncode == 4, proc.stderr
    line = one_error(proc.stderr)
    assert f"deadline of {DEADLINE:g} s (TFAOT_DIST_HTTP_DEADLINE, all attempts)" in line, line
    assert took < DEADLINE + MARGIN, (took, proc.stderr)


def test_a_trickling_registry_error_ends_within_the_deadline(trickling: Server, tmp_path: Path) -> None:
    """The registry itself answers 500 with a trickling body (no token service involved)."""
    proc, took = setup_list(tmp_path, f"oci://127.0.0.1:{trickling.port}/plain")
    assert proc.returncode == 4, proc.stderr
    line = one_error(proc.stderr)
    assert f"deadline of {DEADLINE:g} s (TFAOT_DIST_HTTP_DEADLINE, all attempts)" in line, line
    assert took < DEADLINE + MARGIN, (took, proc.stderr)


def test_a_trickling_http_error_ends_within_the_deadline(trickling: Server, tmp_path: Path) -> None:
    proc, took = setup_list(tmp_path, f"{trickling.url}/channel/")
    assert proc.returncode == 4, proc.stderr
    one_error(proc.stderr)
    assert took < DEADLINE + MARGIN, (took, proc.stderr)
