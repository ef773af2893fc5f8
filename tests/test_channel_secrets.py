"""Secrets stay where they belong, the OCI client is bounded, printed lines cannot command the
GitHub Actions runner (issue 27).

Registries that misbehave are small stdlib servers on 127.0.0.1 (tests/hostile.Server): each
answers the first requests a client makes the way a hostile or broken registry would, and
records every request, so a test can say what reached which host. A second server plays
"elsewhere" (another port is another origin). The real docker-registry runs the honest flows
(tests/test_oci.py, and the fast round trip at the end).
"""

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import Cli, snapshot
from hostile import Channel, Server, answer, hand_built_dist, one_error

from tfaot_dist.channels.oci import MAX_PARTS, MAX_TAG_PAGES, MAX_TAGS, REGISTRY_ENV, TOKEN_ENV, USERNAME_ENV

SECRET = "s3cr3t-" + os.urandom(6).hex()
NS = "tfaot/models"


def secret_seen(server: Server) -> bool:
    """Whether any request server received carried the secret (as is, or in Basic credentials)."""
    encoded = base64.b64encode(f"ci:{SECRET}".encode()).decode()
    return any(SECRET in auth or encoded in auth for _, _, auth in server.seen)


@pytest.fixture
def elsewhere() -> Iterator[Server]:
    """Another origin: records whatever reaches it, answers 200 {"token": "anonymous"}."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer(
                self, 200, json.dumps({"token": "anonymous"}).encode(), {"Content-Type": "application/json"}
            )

        do_PUT = do_POST = do_HEAD = do_PATCH = do_GET

    server = Server(Handler)
    yield server
    server.close()


def registry(behaviour: Callable[[BaseHTTPRequestHandler], None]) -> Server:
    """A registry whose every request is answered by behaviour(handler) (a function of the request)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            behaviour(self)

        do_PUT = do_POST = do_HEAD = do_PATCH = do_GET

    return Server(Handler)


@pytest.fixture
def with_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    monkeypatch.setenv(USERNAME_ENV, "ci")


def basic_ok(handler: BaseHTTPRequestHandler) -> bool:
    """Basic credentials ci:SECRET given; otherwise answers 401 with a Basic challenge."""
    expected = "Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()
    if handler.headers.get("Authorization") == expected:
        return True
    answer(handler, 401, b"{}", {"WWW-Authenticate": 'Basic realm="r"'})
    return False


def basic_challenge(handler: BaseHTTPRequestHandler) -> None:
    """Every request answered 401 with a Basic challenge."""
    answer(handler, 401, b"{}", {"WWW-Authenticate": 'Basic realm="r"'})


def refused(run: Cli, tmp_path: Path, *args: object, code: int) -> str:
    """hostile.refused, and the secret in no output."""
    before = snapshot(tmp_path)
    out, err = run(*args, expect=code)
    line = one_error(err)
    assert SECRET not in out + err
    assert snapshot(tmp_path) == before
    return line


# ---------------------------------------------------------------- credentials in URLs


@pytest.mark.parametrize(
    "url",
    [
        "http://bot:" + SECRET + "@127.0.0.1/data.git",
        "https://" + SECRET + "@github.com/org/data.git",
        "ssh://git:" + SECRET + "@host/data.git",
    ],
    ids=["http-user-password", "https-token", "ssh-user-password"],  # the same on every xdist worker
)
def test_a_source_url_with_credentials_is_refused(run: Cli, tmp_path: Path, url: str) -> None:
    line = refused(
        run, tmp_path, "add-model", "x", "--source", url, "--aot-config", "a/aot_config.yaml", code=3
    )
    assert "credentials in a URL are refused" in line
    assert "credential helper" in line and "GIT_ASKPASS" in line and "netrc" in line


def test_credentials_in_registry_entries_are_refused_without_showing_them(run: Cli, tmp_path: Path) -> None:
    entry = run.registry / "models" / "x.yaml"
    entry.write_text(
        f"name: x\nversion: '1.0'\nsource:\n  git: https://bot:{SECRET}@h/r.git\n  ref: main\n"
        f"  commit: {'0' * 40}\naot_config: a/aot_config.yaml\n"
    )
    assert "credentials in a URL are refused" in refused(run, tmp_path, "list", code=3)
    entry.write_text(
        f"name: x\nversion: '1.0'\nsource:\n  archive: https://bot:{SECRET}@h/d.tar.gz\n"
        f"  sha256: {'0' * 64}\naot_config: a/aot_config.yaml\n"
    )
    assert "netrc" in refused(run, tmp_path, "list", code=3)


@pytest.mark.parametrize(
    "channel",
    [f"oci://ci:{SECRET}@127.0.0.1:1/{NS}", f"http://ci:{SECRET}@127.0.0.1:1/"],
    ids=["oci", "http"],
)
def test_a_channel_url_with_credentials_is_refused(run: Cli, tmp_path: Path, channel: str) -> None:
    assert "credentials in a URL are refused" in refused(
        run, tmp_path, "setup", "--list", "--channel", channel, code=3
    )


# ---------------------------------------------------------------- the OCI token stays with the registry


def test_a_token_service_elsewhere_never_gets_the_token(
    run: Cli, tmp_path: Path, elsewhere: Server, with_token: None
) -> None:
    server = registry(
        lambda h: answer(
            h, 401, b"{}", {"WWW-Authenticate": f'Bearer realm="{elsewhere.url}/token",service="s"'}
        )
    )
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=4
        )
        assert "HTTP 401" in line
        assert elsewhere.seen and not secret_seen(elsewhere)  # asked anonymously, never with the token
        assert not secret_seen(server)  # nor was the token offered to a Bearer registry directly
    finally:
        server.close()


def test_a_token_service_on_plain_http_elsewhere_is_not_asked(
    run: Cli, tmp_path: Path, with_token: None
) -> None:
    server = registry(
        lambda h: answer(
            h, 401, b"{}", {"WWW-Authenticate": 'Bearer realm="http://tokens.example.invalid/token"'}
        )
    )
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=4
        )
        assert "plain http on another machine" in line
    finally:
        server.close()


def test_a_tags_link_elsewhere_is_not_followed(
    run: Cli, tmp_path: Path, elsewhere: Server, with_token: None
) -> None:
    def behaviour(h: BaseHTTPRequestHandler) -> None:
        if basic_ok(h):
            answer(
                h,
                200,
                b'{"tags": ["a"]}',
                {"Link": f'<{elsewhere.url}/v2/{NS}/tfaot-index/tags/list>; rel="next"'},
            )

    server = registry(behaviour)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=7
        )
        assert "next page of tags is on another host" in line
        assert elsewhere.seen == [] and secret_seen(server)  # the registry itself got it (Basic), nobody else
    finally:
        server.close()


def test_an_upload_location_elsewhere_is_refused(
    run: Cli, tmp_path: Path, elsewhere: Server, with_token: None
) -> None:
    dist = hand_built_dist(tmp_path / "dist", models=())

    def behaviour(h: BaseHTTPRequestHandler) -> None:
        if not basic_ok(h):
            return
        if h.command == "POST":
            answer(h, 202, b"", {"Location": f"{elsewhere.url}/v2/{NS}/upload/1?state=x"})
        else:
            answer(h, 404, b'{"errors": []}')

    server = registry(behaviour)
    try:
        line = refused(
            run,
            tmp_path,
            "publish",
            "--channel",
            f"oci://127.0.0.1:{server.port}/{NS}",
            "--dist",
            dist,
            code=4,
        )
        assert "upload location on another host" in line
        assert elsewhere.seen == []
    finally:
        server.close()


def test_a_manifest_redirect_to_plain_http_elsewhere_is_refused(
    run: Cli, tmp_path: Path, elsewhere: Server, with_token: None
) -> None:
    def behaviour(h: BaseHTTPRequestHandler) -> None:
        if not basic_ok(h):
            return
        if "/tags/list" in h.path:
            answer(h, 200, b'{"tags": ["latest"]}')
        else:
            answer(h, 307, b"", {"Location": f"{elsewhere.url}/manifest"})

    server = registry(behaviour)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=4
        )
        assert "redirected to another host or scheme" in line
        assert elsewhere.seen == []
    finally:
        server.close()


# ---------------------------------------------------------------- a bounded OCI client


def test_endless_tag_pages_stop_at_the_tag_cap(run: Cli, tmp_path: Path) -> None:
    def behaviour(h: BaseHTTPRequestHandler) -> None:
        page = int(h.path.rsplit("page=", 1)[1]) if "page=" in h.path else 0
        tags = [f"t{page}-{i}" for i in range(1000)]
        answer(
            h,
            200,
            json.dumps({"tags": tags}).encode(),
            {"Link": f'</v2/{NS}/tfaot-index/tags/list?n=1000&page={page + 1}>; rel="next"'},
        )

    server = registry(behaviour)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=7
        )
        assert f"more than {MAX_TAGS} tags" in line
        assert len(server.seen) <= MAX_TAGS // 1000 + 1
    finally:
        server.close()


def test_tag_pages_that_loop_or_never_end_are_refused(run: Cli, tmp_path: Path) -> None:
    loop = registry(
        lambda h: answer(
            h, 200, b'{"tags": []}', {"Link": f'</v2/{NS}/tfaot-index/tags/list?n=1000>; rel="next"'}
        )
    )
    pages = registry(
        lambda h: answer(
            h,
            200,
            b'{"tags": []}',
            {
                "Link": f'</v2/{NS}/tfaot-index/tags/list?n=1000&p={len(h.path)}{os.urandom(4).hex()}>; rel="next"'
            },
        )
    )
    try:
        assert "loops back" in refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{loop.port}/{NS}", code=7
        )
        assert len(loop.seen) == 1  # the next page is the one just read
        assert f"more than {MAX_TAG_PAGES} pages" in refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{pages.port}/{NS}", code=7
        )
        assert len(pages.seen) == MAX_TAG_PAGES
    finally:
        loop.close()
        pages.close()


def test_a_huge_manifest_is_not_read_whole(run: Cli, tmp_path: Path) -> None:
    sent = []

    def behaviour(h: BaseHTTPRequestHandler) -> None:
        if "/tags/list" in h.path:
            answer(h, 200, b'{"tags": ["latest"]}')
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        h.end_headers()  # no length: the client must count
        try:
            for _ in range(400):  # 400 MB if read whole
                h.wfile.write(b" " * (1 << 20))
                sent.append(1)
        except OSError:
            pass

    server = registry(behaviour)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=7
        )
        assert "larger than 4194304 bytes" in line
        assert len(sent) < 100
    finally:
        server.close()


def test_index_parts_are_capped(run: Cli, tmp_path: Path) -> None:
    tags = [f"part-{i:032x}" for i in range(MAX_PARTS + 1)]
    server = registry(lambda h: answer(h, 200, json.dumps({"tags": tags}).encode()))
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=7
        )
        assert f"at most {MAX_PARTS}" in line and len(server.seen) == 1  # not one GET per part
    finally:
        server.close()


# ---------------------------------------------------------------- the honest flow on a real registry


# ---------------------------------------------------------------- the token bound to one registry


def test_a_token_bound_to_another_registry_is_not_sent(
    run: Cli, tmp_path: Path, elsewhere: Server, with_token: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TFAOT_DIST_OCI_REGISTRY names the token's registry: a channel elsewhere (here: another port of this
    machine, another origin) is asked anonymously, and the error line says why."""
    monkeypatch.setenv(REGISTRY_ENV, f"127.0.0.1:{elsewhere.port}")
    server = registry(basic_challenge)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=4
        )
        assert f"is for 127.0.0.1:{elsewhere.port} only: {REGISTRY_ENV}" in line, line
        assert server.seen and not secret_seen(server)
        assert all(not auth for _, _, auth in server.seen)  # no Authorization header at all
    finally:
        server.close()


@pytest.mark.parametrize("value", ["https://ghcr.io", "ghcr.io/org", "user@ghcr.io", "-x"])
def test_an_invalid_bound_registry_is_refused(
    run: Cli, tmp_path: Path, with_token: None, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(REGISTRY_ENV, value)
    server = registry(basic_challenge)
    try:
        line = refused(
            run, tmp_path, "setup", "--list", "--channel", f"oci://127.0.0.1:{server.port}/{NS}", code=3
        )
        assert f"{REGISTRY_ENV}: invalid registry" in line, line
        assert not server.seen  # refused before any request
    finally:
        server.close()


@pytest.mark.parametrize("bound", [False, True])
def test_publish_and_setup_through_a_real_registry_with_basic_auth(
    run: Cli, tmp_path: Path, with_token: None, monkeypatch: pytest.MonkeyPatch, bound: bool
) -> None:
    """docker-registry behind htpasswd: the token reaches the registry (unbound, or bound to it by
    TFAOT_DIST_OCI_REGISTRY), hand-built packages round-trip."""
    from test_oci import Registry

    server = Registry(tmp_path / "registry", {"ci": SECRET})
    if bound:
        monkeypatch.setenv(REGISTRY_ENV, server.channel().removeprefix("oci://").split("/")[0])
    try:
        out, err = run("publish", "--channel", server.channel(), "--dist", hand_built_dist(tmp_path / "dist"))
        assert SECRET not in out + err
        out, err = run("setup", "x", "--channel", server.channel(), "--area", tmp_path / "area")
        assert "tfaot-model-x 1.0: installed" in out and SECRET not in out + err
    finally:
        server.stop()


# ---------------------------------------------------------------- GitHub Actions


def inert(text: str) -> None:
    """No line the runner would take for a workflow command."""
    for line in text.splitlines():
        assert "##[" not in line, line
        assert not line.lstrip().startswith("::"), line


def test_printed_lines_cannot_command_the_runner(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    area = tmp_path / "area"
    (area / "tfaot").mkdir(parents=True)
    key = "x\n  ::error file=a.py::owned\n##[warning]also"
    (area / "tfaot" / "installed.json").write_text(
        json.dumps({"format": "tfaot-dist-area/1", "packages": {key: {}}})
    )
    _, err = run("setup", "--list", "--area", area, expect=3)
    one_error(err)
    inert(err)
    channel = Channel(tmp_path / "channel").runtime()
    channel.model(
        "x", signature={"inputs": [{"name": "##[error]in", "dtype": "float32", "shape": [1]}], "outputs": []}
    )
    out, _ = run("setup", "--list", "--channel", channel.root, "--json")
    inert(out)
    rows = {row["name"]: row for row in json.loads(out)["packages"]}
    assert rows["tfaot-model-x"]["signature"]["inputs"][0]["name"] == "##[error]in"  # the same value


def test_progress_lines_under_actions_are_inert() -> None:
    import io

    from tfaot_dist.util.progress import make_reporter

    stream = io.StringIO()
    reporter = make_reporter(1, stream, {"GITHUB_ACTIONS": "true"})
    reporter.log(None, "  ::error::from a registry field")
    reporter.start("m")
    reporter.log("m", "a ##[error]x\n::warning::y")
    reporter.finish("m", "built", error="bad ##[error] and\n::error::z")
    lines = stream.getvalue().splitlines()
    commands = [ln for ln in lines if ln.startswith("::")]
    assert [c.split("::")[1].split(" ")[0] for c in commands] == ["group", "endgroup", "error"]  # ours only
    inert("\n".join(ln for ln in lines if ln not in commands))
    assert "##[" not in commands[-1]


def test_the_cli_under_actions_in_a_subprocess(tmp_path: Path) -> None:
    """The same through a real process (stderr as the runner reads it)."""
    area = tmp_path / "area"
    (area / "tfaot").mkdir(parents=True)
    (area / "tfaot" / "installed.json").write_text(
        '{"format": "tfaot-dist-area/1", "packages": {"a\\n::error::x": {}}}'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "setup", "--list", "--area", str(area)],
        capture_output=True,
        text=True,
        env={**os.environ, "GITHUB_ACTIONS": "true", "TFAOT_DIST_CACHE": str(tmp_path / "c")},
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 3
    one_error(proc.stderr)
    inert(proc.stderr)


def test_bearer_tokens_from_a_token_service_on_the_registry_origin(
    run: Cli, tmp_path: Path, with_token: None
) -> None:
    """The ghcr.io way (token service on the registry's origin): the token is traded for a scoped one
    there; the same registry with its token service on another port never sees the token."""
    from test_oci import Registry, TokenService

    tokens = TokenService(tmp_path, "ci", SECRET)
    server = Registry(tmp_path / "registry", auth=tokens.config())
    tokens.upstream_port = server.port
    try:
        out, err = run(
            "publish",
            "--channel",
            f"oci://127.0.0.1:{tokens.port}/{NS}",
            "--dist",
            hand_built_dist(tmp_path / "dist"),
        )
        assert SECRET not in out + err and tokens.requests.count("user") >= 2
        tokens.requests.clear()
        out, err = run("setup", "--list", "--channel", server.channel(), expect=4)  # the registry logs it
        assert "HTTP 401" in one_error(err) and SECRET not in out + err
        assert tokens.requests and set(tokens.requests) == {"anonymous"}
    finally:
        server.stop()
        tokens.close()
