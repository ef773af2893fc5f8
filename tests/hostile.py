"""Packages, channels and servers for the security tests, built here without TensorFlow.

A package archive needs no compiler to be set up: a manifest listing every file's sha256 and a
tool file of our form are what publish and setup read. The helpers make honest packages (which
set up fine, so that a refusal in a test is the hostile part's doing) and let a test add what an
attacker would.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from conftest import Cli
from httpserve import POLL

from tfaot_dist.channels.channel import ChannelPackage, index_line, render_index, verify_archive
from tfaot_dist.cxx import scram_tool

RUNTIME = "tfaot-xla-runtime"
RUNTIME_VERSION = "2.21.0+b0.p0"


def archive_bytes(
    name: str, version: str, files: dict[str, bytes], manifest_extra: dict[str, Any] | None = None
) -> bytes:
    """A package archive: NAME-VERSION/ with files and a manifest.json listing each one's digest."""
    manifest = {
        "package": name,
        "version": version,
        "kind": "runtime" if name == RUNTIME else "model",
        "files": {rel: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for rel, b in files.items()},
    }
    manifest.update(manifest_extra or {})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, data in sorted([*files.items(), ("manifest.json", json.dumps(manifest).encode())]):
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)  # the same bytes each time


def runtime_files(version: str = RUNTIME_VERSION) -> tuple[dict[str, bytes], dict[str, Any]]:
    tool = scram_tool.render_runtime_tool("2.21.0", ["libtf_xla_runtime.a"], ["-lpthread"])
    files = {
        "include/tfaot/Model.h": b"// the interface\n",
        "lib/libtf_xla_runtime.a": b"!<arch>\n",
        f"etc/scram.d/{RUNTIME}.xml": tool.encode(),
    }
    extra = {
        "tensorflow_version": "2.21.0",
        "libs": ["lib/libtf_xla_runtime.a"],
        "system_libs": ["-lpthread"],
        "cxxflags": ["-std=c++17"],
    }
    return files, extra


def model_files(
    model: str = "x", version: str = "1.0", url: str = ""
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """An honest model package tfaot-model-MODEL requiring the runtime above."""
    name = f"tfaot-model-{model}"
    files = {
        f"include/{name}/model.h": f"// {name} {version}\n".encode(),
        f"lib/lib{name}.a": b"!<arch>\n",
        f"lib/{model}_bs1.o": b"\x7fELF",
        f"share/{name}/reference/bs1/input_0.bin": b"\0\0\0\0",
        f"etc/scram.d/{name}.xml": scram_tool.render_model_tool(name, version, url).encode(),
    }
    extra = {
        "requires": [{"name": RUNTIME, "version": RUNTIME_VERSION}],
        "toolchain": {"tensorflow_version": "2.21.0"},
        "compilation": {"batch_sizes": [1]},
        "model": {"description": f"model {model}"},
        "source": {"url": url} if url else {},
    }
    return files, extra


class Channel:
    """A directory channel written row by row, as a hostile publisher may write one (no publish
    checks): add() takes any archive bytes and lists them (index rows from index_line)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rows: dict[tuple[str, str], ChannelPackage] = {}

    def add(
        self,
        name: str,
        version: str,
        files: dict[str, bytes],
        extra: dict[str, Any] | None = None,
        row_changes: dict[str, Any] | None = None,
        index: bool = True,
    ) -> None:
        """index=False: the index is written by a later add (a channel of hundreds is listed once)."""
        data = archive_bytes(name, version, files, extra)
        base = self.root / "packages" / name / version
        base.mkdir(parents=True, exist_ok=True)
        path = base / f"{name}-{version}.tar.gz"
        path.write_bytes(data)
        archive = verify_archive(path)
        (base / "manifest.json").write_bytes(archive.manifest_bytes)
        row = index_line(archive)
        if row_changes:
            import dataclasses

            row = dataclasses.replace(row, **row_changes)
        self.rows[row.key] = row
        if index:
            (self.root / "index.json").write_text(render_index(self.rows.values()))

    def runtime(self) -> Channel:
        files, extra = runtime_files()
        self.add(RUNTIME, RUNTIME_VERSION, files, extra)
        return self

    def model(
        self,
        model: str = "x",
        version: str = "1.0",
        add: dict[str, bytes] | None = None,
        replace: dict[str, bytes] | None = None,
        index: bool = True,
        **row_changes: Any,
    ) -> Channel:
        files, extra = model_files(model, version)
        files.update(replace or {})
        files.update(add or {})
        self.add(f"tfaot-model-{model}", version, files, extra, row_changes, index)
        return self


def refused(run: Cli, root: Path, *args: object, code: int) -> str:
    """Run a command that must fail with code: its one error line, everything below root unchanged."""
    from conftest import snapshot

    before = snapshot(root)
    _, err = run(*args, expect=code)
    line = one_error(err)
    assert snapshot(root) == before
    return line


def hand_built_dist(directory: Path, models: tuple[str, ...] = ("x",)) -> Path:
    """A --dist directory with the runtime and honest models (as `build` would leave them)."""
    directory.mkdir(parents=True, exist_ok=True)
    files, extra = runtime_files()
    (directory / f"{RUNTIME}-{RUNTIME_VERSION}.tar.gz").write_bytes(
        archive_bytes(RUNTIME, RUNTIME_VERSION, files, extra)
    )
    for model in models:
        files, extra = model_files(model)
        name = f"tfaot-model-{model}"
        (directory / f"{name}-1.0.tar.gz").write_bytes(archive_bytes(name, "1.0", files, extra))
    return directory


def one_error(err: str) -> str:
    """The single error line of a failed command (no traceback, nothing else said to be an error)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("tfaot-dist: error:")]
    assert len(lines) == 1, err
    return lines[0]


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 running handler (a BaseHTTPRequestHandler subclass) that
    records every request: (method, path, Authorization header)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        seen: list[tuple[str, str, str]] = []
        self.seen = seen

        class Recording(handler):  # type: ignore[valid-type, misc]
            def log_message(self, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                super().handle_one_request()

            def parse_request(self) -> bool:
                ok: bool = super().parse_request()
                if ok:
                    seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                return ok

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(
    handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict[str, str] | None = None
) -> None:
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)
