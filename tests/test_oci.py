"""Channels on OCI registries (tfaot_dist/channels/oci.py) against a real registry: Debian's docker-registry
(the CNCF distribution registry), started here on a free 127.0.0.1 port with its storage in the
test's temporary directory; with an htpasswd file (bcrypt, apache2-utils' htpasswd) for the auth tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from conftest import Cli, snapshot
from httpserve import POLL
from test_distribution import N_MODELS, RUNTIME, Fleet, repacked, tool

from tfaot_dist.channels.oci import TOKEN_ENV, USERNAME_ENV
from tfaot_dist.util import download
from tfaot_dist.util.fs import sha256_file

NAMESPACE = "tfaot/models"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Registry:
    """docker-registry serving root/data on 127.0.0.1:PORT (optionally behind htpasswd)."""

    def __init__(self, root: Path, users: dict[str, str] | None = None, auth: str = "") -> None:
        if not shutil.which("docker-registry"):
            pytest.fail("docker-registry is needed (.ci/run installs it: apt-get install docker-registry)")
        self.root, self.port = root, free_port()
        self.proc: subprocess.Popen[bytes] | None = None  # start() sets it
        root.mkdir(parents=True, exist_ok=True)
        if users:
            lines = [
                subprocess.run(
                    ["htpasswd", "-Bbn", user, password], check=True, capture_output=True, text=True
                ).stdout.strip()
                for user, password in users.items()
            ]
            (root / "htpasswd").write_text("\n".join(lines) + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: tfaot-test\n    path: {root / 'htpasswd'}\n"
        (root / "config.yml").write_text(
            f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n{auth}"
        )
        self.start()

    def start(self) -> None:
        with open(self.root / "log", "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                ["docker-registry", "serve", str(self.root / "config.yml")],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{self.port}/v2/", timeout=1).status_code in (200, 401):
                    return
            except requests.ConnectionError:
                time.sleep(0.05)
        raise AssertionError(f"docker-registry did not start: {(self.root / 'log').read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def channel(self, namespace: str = NAMESPACE) -> str:
        return f"oci://127.0.0.1:{self.port}/{namespace}"

    def blob(self, sha256: str) -> Path:
        return (
            self.root
            / "data"
            / "docker"
            / "registry"
            / "v2"
            / "blobs"
            / "sha256"
            / sha256[:2]
            / sha256
            / "data"
        )

    def repositories(self, namespace: str = NAMESPACE) -> Path:
        return self.root / "data" / "docker" / "registry" / "v2" / "repositories" / namespace


@pytest.fixture(scope="module")
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("oci-registry"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oci_channel(registry_server: Registry, built: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """built/dist published once into the module's registry (namespace tfaot/models)."""
    cache = tmp_path_factory.mktemp("oci-cache")
    tool("publish", "--channel", registry_server.channel(), "--dist", built / "dist", cache=cache)
    return registry_server.channel()


def listed(run: Cli, channel: str) -> dict[tuple[str, str], str]:
    out, _ = run("setup", "--list", "--channel", channel, "--json")
    return {(p["name"], p["version"]): p["sha256"] for p in json.loads(out)["packages"]}


def test_publish_lists_the_same_index_as_a_directory_channel(
    run: Cli, built: Path, oci_channel: str, tmp_path: Path
) -> None:
    run("publish", "--channel", tmp_path / "channel", "--dist", built / "dist")
    directory, _ = run("setup", "--list", "--channel", tmp_path / "channel", "--json")
    registry, _ = run("setup", "--list", "--channel", oci_channel, "--json")
    # The same index document, row for row (paths, digests, signatures, requires).
    assert json.loads(registry)["packages"] == json.loads(directory)["packages"]
    rows = {p["name"]: p for p in json.loads(registry)["packages"]}
    assert set(rows) == {"tfaot-model-test-simple", "tfaot-model-test-multi", RUNTIME}
    for name, row in rows.items():  # the index's sha256 is the registry's blob digest
        assert sha256_file(built / "dist" / f"{name}-{row['version']}.tar.gz") == row["sha256"]


def test_publish_again_and_other_bytes(
    run: Cli, built: Path, oci_channel: str, registry_server: Registry, tmp_path: Path
) -> None:
    before_index = listed(run, oci_channel)
    out, _ = run("publish", "--channel", oci_channel, "--dist", built / "dist", "--json")
    assert {p["status"] for p in json.loads(out)["packages"]} == {"unchanged"}
    tags = sorted(
        p.name for p in (registry_server.repositories() / "tfaot-index" / "_manifests" / "tags").iterdir()
    )
    storage = snapshot(registry_server.root / "data")
    other = repacked(
        built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz",
        tmp_path / "other",
        "share/tfaot-model-test-simple/reference/bs1/output_0.bin",
    )
    line = run.error("publish", "--channel", oci_channel, "--dist", other.parent, expect=7)
    assert "1 package version already in" in line and "nothing published" in line
    assert (
        "(tfaot-model-test-simple 1.0.0: published sha256 " in line
        and "a published version never changes" in line
    ), line
    assert snapshot(registry_server.root / "data") == storage  # refused before anything was pushed
    assert listed(run, oci_channel) == before_index
    assert tags == sorted(
        p.name for p in (registry_server.repositories() / "tfaot-index" / "_manifests" / "tags").iterdir()
    )


def test_setup_from_oci_pulls_by_digest_into_the_download_cache(
    run: Cli, oci_channel: str, built: Path, tmp_path: Path, cache: Path
) -> None:
    area = tmp_path / "area"
    out, _ = run("setup", "test-simple", "--channel", oci_channel, "--area", area, "--json")
    assert [(r["name"], r["status"]) for r in json.loads(out)["results"]] == [
        (RUNTIME, "installed"),
        ("tfaot-model-test-simple", "installed"),
    ]
    archive = built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz"
    sha = sha256_file(archive)
    assert sha256_file(cache / "archives" / sha) == sha  # the same content-addressed cache as HTTP channels
    lib = area / "tfaot" / "tfaot-model-test-simple" / "1.0.0" / "lib" / "libtfaot-model-test-simple.a"
    manifest = json.loads(
        (area / "tfaot" / "tfaot-model-test-simple" / "1.0.0" / "manifest.json").read_text()
    )
    assert sha256_file(lib) == manifest["files"]["lib/libtfaot-model-test-simple.a"]["sha256"]
    # Offline: the index and archives this setup kept are enough.
    out, _ = run(
        "setup",
        "test-simple",
        "--offline",
        "--channel",
        oci_channel,
        "--area",
        tmp_path / "offline",
        "--json",
    )
    assert [r["status"] for r in json.loads(out)["results"]] == ["installed", "installed"]
    line = run.error(
        "setup", "test-multi", "--offline", "--channel", oci_channel, "--area", tmp_path / "offline", expect=4
    )
    assert "offline: tfaot-model-test-multi 1.0.0" in line and "is not in the cache" in line


def test_a_tampered_blob_is_a_digest_mismatch(
    run: Cli, built: Path, registry_server: Registry, tmp_path: Path, cache: Path
) -> None:
    channel = registry_server.channel("tfaot/tampered")
    run("publish", "--channel", channel, "--dist", built / "dist")
    sha = sha256_file(built / "dist" / "tfaot-model-test-multi-1.0.0.tar.gz")
    blob = registry_server.blob(sha)
    original = blob.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF  # the registry serves what its storage holds
    blob.write_bytes(bytes(data))
    area = tmp_path / "area"
    area.mkdir()
    before = snapshot(area, cache)
    try:
        line = run.error("setup", "test-multi", "--channel", channel, "--area", area, expect=7)
    finally:
        blob.write_bytes(original)  # blobs are shared by every namespace of the module's registry
    assert f"expected {sha}" in line and "sha256 is" in line, line
    assert snapshot(area, cache) == before


def test_concurrent_publishes_both_land(
    built: Path, registry_server: Registry, tmp_path: Path, cache: Path
) -> None:
    dists = {}
    for name in ("test-simple", "test-multi"):
        dists[name] = tmp_path / name
        dists[name].mkdir()
        for archive in (
            f"tfaot-model-{name}-1.0.0.tar.gz",
            *(p.name for p in (built / "dist").glob(f"{RUNTIME}-*.tar.gz")),
        ):
            shutil.copyfile(built / "dist" / archive, dists[name] / archive)
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    for round_ in range(3):
        channel = registry_server.channel(f"tfaot/race{round_}")
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tfaot_dist", "publish", "--channel", channel, "--dist", str(d)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for d in dists.values()
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
        out = tool("setup", "--list", "--channel", channel, "--json", cache=cache).stdout
        assert {p["name"] for p in json.loads(out)["packages"]} == {
            "tfaot-model-test-simple",
            "tfaot-model-test-multi",
            RUNTIME,
        }, round_


def test_a_registry_that_dies_mid_push_leaves_nothing_half_listed(
    built: Path, registry_server: Registry, tmp_path: Path, cache: Path
) -> None:
    channel = registry_server.channel("tfaot/dies")
    first = tmp_path / "first"
    first.mkdir()
    (runtime,) = (built / "dist").glob(f"{RUNTIME}-*.tar.gz")
    shutil.copyfile(runtime, first / runtime.name)
    tool("publish", "--channel", channel, "--dist", first, cache=cache)
    index_before = json.loads(tool("setup", "--list", "--channel", channel, "--json", cache=cache).stdout)
    assert [p["name"] for p in index_before["packages"]] == [RUNTIME]
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfaot_dist", "publish", "--channel", channel, "--dist", str(built / "dist")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The models are pushed in name order: die once the second one's upload has started.
    started = registry_server.repositories("tfaot/dies") / "tfaot-model-test-simple"
    deadline = time.monotonic() + 120
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    registry_server.kill()
    _, err = proc.communicate(timeout=120)
    registry_server.start()
    assert proc.returncode == 4, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("tfaot-dist: error:")]
    assert "127.0.0.1" in line and "Traceback" not in err, err
    # Whatever was pushed before the registry died, the index lists only what it listed before.
    after = json.loads(tool("setup", "--list", "--channel", channel, "--json", cache=cache).stdout)
    assert after == index_before
    # The next publish completes it (tags pushed but never listed are listed now).
    out = tool("publish", "--channel", channel, "--dist", built / "dist", "--json", cache=cache).stdout
    assert {(p["name"], p["status"]) for p in json.loads(out)["packages"]} == {
        ("tfaot-model-test-multi", "published"),
        ("tfaot-model-test-simple", "published"),
        (RUNTIME, "unchanged"),
    }
    area = tmp_path / "area"
    tool("setup", "test-simple", "test-multi", "--channel", channel, "--area", area, cache=cache)
    assert (area / "tfaot" / "tfaot-model-test-multi" / "1.0.0" / "manifest.json").is_file()


def test_auth_required_missing_wrong_and_given(built: Path, tmp_path: Path, cache: Path) -> None:
    token = "tok-" + os.urandom(12).hex()
    server = Registry(tmp_path / "auth-registry", {"ci": token})
    channel = server.channel()
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, USERNAME_ENV)}
    area = tmp_path / "area"
    try:

        def cli(*args: object, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "tfaot_dist", *map(str, args)],
                capture_output=True,
                text=True,
                check=False,
                env={**env, "TFAOT_DIST_CACHE": str(cache), **(extra or {})},
            )

        missing = cli("publish", "--channel", channel, "--dist", built / "dist")
        assert missing.returncode == 4 and "Traceback" not in missing.stderr, missing.stderr
        assert f"requires authentication: set {TOKEN_ENV}" in missing.stderr, missing.stderr
        wrong = cli(
            "publish",
            "--channel",
            channel,
            "--dist",
            built / "dist",
            extra={TOKEN_ENV: "not-it", USERNAME_ENV: "ci"},
        )
        assert wrong.returncode == 4 and f"refused the credentials in {TOKEN_ENV}" in wrong.stderr, (
            wrong.stderr
        )
        given = {TOKEN_ENV: token, USERNAME_ENV: "ci"}
        outputs = [
            cli("publish", "--channel", channel, "--dist", built / "dist", extra=given),
            cli("setup", "test-simple", "--channel", channel, "--area", area, extra=given),
            cli("setup", "--list", "--channel", channel, extra=given),
        ]
        for proc in outputs:
            assert proc.returncode == 0, proc.stderr
        assert "tfaot-model-test-multi" in outputs[2].stdout
        anonymous = cli("setup", "--list", "--channel", channel)
        assert anonymous.returncode == 4 and f"set {TOKEN_ENV}" in anonymous.stderr, anonymous.stderr
        # The token is never printed, nor written to the area or the cache.
        for proc in [missing, wrong, anonymous, *outputs]:
            assert token not in proc.stdout + proc.stderr
        for root in (area, cache):
            for path in root.rglob("*"):
                if path.is_file() and not path.is_symlink() and path.stat().st_size < (256 << 20):
                    assert token.encode() not in path.read_bytes(), path
    finally:
        server.stop()


@pytest.mark.parametrize(
    "location, code, message",
    [
        ("oci://127.0.0.1:1/Upper", 3, "invalid OCI channel"),
        ("oci://127.0.0.1:1", 3, "invalid OCI channel"),
        ("oci://127.0.0.1:1/tfaot/ns", 4, "Connection refused"),
    ],
)
def test_bad_oci_locations(run: Cli, location: str, code: int, message: str) -> None:
    line = run.error("setup", "--list", "--channel", location, expect=code)
    assert message in line, line


@pytest.mark.xdist_group("fleet")
def test_fleet_on_both_channel_forms(
    fleet: Fleet, registry_server: Registry, tmp_path: Path, shared_cache: Path
) -> None:
    """The distribution tests' registry of N_MODELS models (TFAOT_DIST_TEST_MODELS) published and set up
    through a directory served over HTTP and through the registry; the times are printed."""
    from conftest import fresh_cache
    from httpserve import Server

    names = sorted(
        p.name.removeprefix("tfaot-model-").removesuffix("-1.0.0.tar.gz")
        for p in fleet.dist.glob("tfaot-model-*.tar.gz")
    )
    assert len(names) == N_MODELS
    times = {}
    cache = fresh_cache(tmp_path / "cache", shared_cache)
    t0 = time.monotonic()
    tool("publish", "--channel", tmp_path / "channel", "--dist", fleet.dist, cache=cache)
    times["publish directory"] = time.monotonic() - t0
    oci = registry_server.channel("tfaot/fleet")
    t0 = time.monotonic()
    tool("publish", "--channel", oci, "--dist", fleet.dist, cache=cache)
    times["publish oci"] = time.monotonic() - t0
    server = Server(tmp_path / "channel")
    try:
        for form, channel in (("http", server.url()), ("oci", oci)):
            own = fresh_cache(tmp_path / f"cache-{form}", shared_cache)  # every archive downloaded
            t0 = time.monotonic()
            tool("setup", *names, "--channel", channel, "--area", tmp_path / f"area-{form}", cache=own)
            times[f"setup {form}"] = time.monotonic() - t0
    finally:
        server.close()
    lists = [
        json.loads(tool("setup", "--list", "--channel", ch, "--json", cache=cache).stdout)["packages"]
        for ch in (tmp_path / "channel", oci)
    ]
    assert lists[0] == lists[1] and len(lists[0]) == N_MODELS + 1
    installed = [
        json.loads((tmp_path / f"area-{f}" / "tfaot" / "installed.json").read_text())["packages"]
        for f in ("http", "oci")
    ]
    assert {k: v["sha256"] for k, v in installed[0].items()} == {
        k: v["sha256"] for k, v in installed[1].items()
    }
    print(f"\n{N_MODELS} models: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()), file=sys.stderr)


class TokenService:
    """A Docker token service (the protocol of ghcr.io's): Basic credentials in, a JWT (RS256, signed by
    openssl with a key whose self-signed certificate the registry trusts) granting the asked scope out.
    Anonymous requests get a token granting nothing. As on ghcr.io, it shares the registry's origin:
    it answers /token itself and passes /v2/ on to the registry (upstream), so clients talk to one
    host and port (tfaot-dist sends TFAOT_DIST_OCI_TOKEN to no other origin)."""

    ISSUER, SERVICE = "tfaot-test-issuer", "tfaot-test-registry"

    def __init__(self, root: Path, user: str, password: str) -> None:
        import base64
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, urlsplit

        self.key, self.cert = root / "token.key", root / "token.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                self.key,
                "-out",
                self.cert,
                "-days",
                "2",
                "-subj",
                "/CN=tfaot-test-token",
            ],
            check=True,
            capture_output=True,
        )
        der = subprocess.run(
            ["openssl", "x509", "-in", self.cert, "-outform", "DER"], check=True, capture_output=True
        ).stdout
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        owner = self
        self.requests: list[str] = []

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def proxy(self) -> None:
                import http.client

                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection("127.0.0.1", owner.upstream_port, timeout=60)
                conn.request(
                    self.command,
                    self.path,
                    body=body,
                    headers={k: v for k, v in self.headers.items() if k.lower() != "connection"},
                )
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header(
                    "Content-Length",
                    resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)),
                )
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = proxy

            def do_GET(self) -> None:
                if self.path.startswith("/v2"):
                    self.proxy()
                    return
                query = parse_qs(urlsplit(self.path).query)
                granted = self.headers.get("Authorization") == expected
                owner.requests.append("user" if granted else "anonymous")
                access = []
                for scope in query.get("scope", []) if granted else []:
                    kind, name, actions = scope.split(":")
                    access.append({"type": kind, "name": name, "actions": actions.split(",")})
                now = int(time.time())
                head = b64(
                    json.dumps(
                        {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
                    ).encode()
                )
                claims = b64(
                    json.dumps(
                        {
                            "iss": owner.ISSUER,
                            "sub": user if granted else "",
                            "aud": owner.SERVICE,
                            "exp": now + 300,
                            "nbf": now - 10,
                            "iat": now,
                            "jti": os.urandom(8).hex(),
                            "access": access,
                        }
                    ).encode()
                )
                signature = subprocess.run(
                    ["openssl", "dgst", "-sha256", "-sign", str(owner.key)],
                    input=f"{head}.{claims}".encode(),
                    check=True,
                    capture_output=True,
                ).stdout
                body = json.dumps({"token": f"{head}.{claims}.{b64(signature)}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.upstream_port = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        import threading

        threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True).start()

    def config(self) -> str:
        return (
            f"auth:\n  token:\n    realm: http://127.0.0.1:{self.httpd.server_address[1]}/token\n"
            f"    service: {self.SERVICE}\n    issuer: {self.ISSUER}\n    rootcertbundle: {self.cert}\n"
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_bearer_tokens_from_a_token_service(built: Path, tmp_path: Path, cache: Path) -> None:
    """The ghcr.io way: the registry answers 401 with a Bearer challenge naming a token service; the
    client trades TFAOT_DIST_OCI_TOKEN for a scoped token there."""
    secret = "ghp-" + os.urandom(12).hex()
    tokens = TokenService(tmp_path, "ci", secret)
    server = Registry(tmp_path / "bearer-registry", auth=tokens.config())
    tokens.upstream_port = server.port
    channel = f"oci://127.0.0.1:{tokens.port}/{NAMESPACE}"  # the registry, through the token service's origin
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, USERNAME_ENV)}
    try:

        def cli(*args: object, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "tfaot_dist", *map(str, args)],
                capture_output=True,
                text=True,
                check=False,
                env={**env, "TFAOT_DIST_CACHE": str(cache), **(extra or {})},
            )

        missing = cli("publish", "--channel", channel, "--dist", built / "dist")
        assert missing.returncode == 4 and f"requires authentication: set {TOKEN_ENV}" in missing.stderr, (
            missing.stderr
        )
        given = {TOKEN_ENV: secret, USERNAME_ENV: "ci"}
        published = cli("publish", "--channel", channel, "--dist", built / "dist", extra=given)
        assert published.returncode == 0, published.stderr
        area = tmp_path / "area"
        setup = cli("setup", "test-multi", "--channel", channel, "--area", area, extra=given)
        assert setup.returncode == 0, setup.stderr
        assert (area / "tfaot" / "tfaot-model-test-multi" / "1.0.0" / "manifest.json").is_file()
        assert tokens.requests.count("user") >= 2 and "anonymous" in tokens.requests
        for proc in (missing, published, setup):
            assert secret not in proc.stdout + proc.stderr
    finally:
        server.stop()
        tokens.close()


# ---------------------------------------------------------------- yank, retries (hand-built packages)


def test_yank_on_a_registry(run: Cli, registry_server: Registry, tmp_path: Path) -> None:
    """The yank is an index part of its own with a higher revision: readers that merge `latest`
    with parts see it, and publishing the same bytes again keeps it."""
    from hostile import hand_built_dist

    channel = registry_server.channel("tfaot/yank")
    dist = hand_built_dist(tmp_path / "dist", models=("a",))
    run("publish", "--channel", channel, "--dist", dist)
    run("yank", "a==1.0", "--reason", "bad weights", "--channel", channel)
    rows = {
        p["name"]: p
        for p in json.loads(run("setup", "--list", "--channel", channel, "--json")[0])["packages"]
    }
    assert rows["tfaot-model-a"]["yanked"] == "bad weights" and rows["tfaot-model-a"]["revision"] == 1
    run("publish", "--channel", channel, "--dist", dist)
    assert "(available: 1.0 (yanked))" in run.error(
        "setup", "a", "--channel", channel, "--area", tmp_path / "area", expect=3
    )
    _, err = run("setup", "a==1.0", "--channel", channel, "--area", tmp_path / "area")
    assert "warning: tfaot-model-a 1.0 is yanked" in err and "bad weights" in err
    run("yank", "a==1.0", "--undo", "--channel", channel)
    rows = {
        p["name"]: p
        for p in json.loads(run("setup", "--list", "--channel", channel, "--json")[0])["packages"]
    }
    assert "yanked" not in rows["tfaot-model-a"] and rows["tfaot-model-a"]["revision"] == 2


class FlakyProxy:
    """In front of a registry on 127.0.0.1: answers 500 (as the distribution registry does under
    concurrent writes) to the first `fails` requests of each GET path under /v2/, passes the rest on."""

    def __init__(self, upstream_port: int, fails: int) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.failed: list[str] = []
        seen: dict[str, int] = {}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.command == "GET" and self.path.startswith("/v2/") and seen.get(self.path, 0) < fails:
                    seen[self.path] = seen.get(self.path, 0) + 1
                    owner.failed.append(self.path)
                    data = b'{"errors":[{"code":"UNKNOWN","message":"unknown error"}]}'
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
                conn.request(
                    self.command,
                    self.path,
                    body=body,
                    headers={k: v for k, v in self.headers.items() if k.lower() != "connection"},
                )
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        value = value.replace(f"127.0.0.1:{upstream_port}", f"127.0.0.1:{owner.port}")
                        self.send_header(key, value)
                self.send_header(
                    "Content-Length",
                    resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)),
                )
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(POLL,), daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("fails, code", [(2, 0), (3, 4)])
def test_5xx_answers_are_retried_with_backoff(
    run: Cli,
    registry_server: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fails: int,
    code: int,
) -> None:
    """Two 500s per path: publish and setup succeed, each retry logged with its doubling pause (the
    tests' TFAOT_DIST_HTTP_BACKOFF, conftest.py). Three (the default of three attempts): exit 4 with one
    line naming the answer."""
    from hostile import hand_built_dist

    proxy = FlakyProxy(registry_server.port, fails)
    monkeypatch.setenv("TFAOT_DIST_HTTP_RETRIES", "3")
    try:
        channel = f"oci://127.0.0.1:{proxy.port}/tfaot/flaky{fails}"
        dist = hand_built_dist(tmp_path / "dist", models=("a",))
        _, err = run("publish", "--channel", channel, "--dist", dist, expect=code)
        assert proxy.failed
        if code:
            assert "HTTP 500 UNKNOWN: unknown error" in err.splitlines()[-1] and "Traceback" not in err
            return
        first = download.backoff(0)
        assert f"HTTP 500 UNKNOWN: unknown error; trying again in {first:g} s (attempt 2 of 3)" in err
        assert f"trying again in {2 * first:g} s (attempt 3 of 3)" in err
        out, _ = run("setup", "a", "--channel", channel, "--area", tmp_path / "area", "--json")
        assert {r["name"] for r in json.loads(out)["results"]} == {"tfaot-model-a", RUNTIME}
    finally:
        proxy.close()
