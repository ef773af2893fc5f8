"""Totals bounded (issue 38): OCI tags checked against the tag grammar, one read of an OCI index
bounded in bytes and rows, the index's part tags compacted by publish and yank (against a real
docker-registry), and a package's extraction bounded by what its manifest declares.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import requests
from conftest import Cli, snapshot
from hostile import RUNTIME, Channel, Server, archive_bytes, hand_built_dist, model_files
from test_distribution import tool
from test_oci import Registry

from tfaot_dist.channels.channel import index_line, render_index, verify_archive
from tfaot_dist.channels.oci import COMPACT_AFTER, INDEX_REPO, MAX_INDEX_READ

NAMESPACE = "ns"

# ---------------------------------------------------------------- hostile registries (stdlib)


class Tags(BaseHTTPRequestHandler):
    """A registry whose index repository lists what the test asks for: a tag that is no OCI tag
    (/v2/badtag/...), or page after page of valid tags padded to 4,000,000 bytes (/v2/pages/...,
    at most PAGES pages: the loop is bounded whatever the client does)."""

    PAGES = 40
    served = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        if self.path.startswith("/v2/badtag/tfaot-index/tags/list"):
            body = json.dumps({"name": "badtag/tfaot-index", "tags": ["part-" + "a" * 200]}).encode()
            self.reply(body)
        elif self.path.startswith("/v2/pages/tfaot-index/tags/list"):
            with self.lock:
                Tags.served += 1
                n = Tags.served
            doc = json.dumps({"name": "pages/tfaot-index", "tags": [f"part-{n:04d}"]})
            body = doc.encode() + b" " * (4_000_000 - len(doc))
            link = (
                {} if n >= self.PAGES else {"Link": f'</v2/pages/tfaot-index/tags/list?last={n}>; rel="next"'}
            )
            self.reply(body, link)
        else:
            self.reply(b'{"errors": [{"code": "NAME_UNKNOWN"}]}', status=404)

    def reply(self, body: bytes, headers: dict[str, str] | None = None, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def tags_server() -> Iterator[Server]:
    Tags.served = 0
    server = Server(Tags)
    yield server
    server.close()


def test_a_tag_that_is_no_oci_tag_is_refused(tags_server: Server, run: Cli) -> None:
    line = run.error("setup", "--list", "--channel", f"oci://127.0.0.1:{tags_server.port}/badtag", expect=7)
    where = f"oci://127.0.0.1:{tags_server.port}/badtag/tfaot-index"
    assert line.startswith(f"tfaot-dist: error: {where}: the tags list holds 'part-aaaa"), line
    assert line.endswith(", not an OCI tag (at most 128 of A-Z a-z 0-9 _ . -, not starting with . or -)")
    assert len(line) < 300


def test_the_tags_pages_of_one_read_are_bounded_in_total(tags_server: Server, run: Cli) -> None:
    """40 pages of 4,000,000 bytes (each under the 4 MiB page cap): refused past MAX_INDEX_READ bytes,
    not read to the end (1000 such pages were ~4 GB)."""
    line = run.error("setup", "--list", "--channel", f"oci://127.0.0.1:{tags_server.port}/pages", expect=7)
    assert line == (
        f"tfaot-dist: error: oci://127.0.0.1:{tags_server.port}/pages/tfaot-index: more than {MAX_INDEX_READ} "
        "bytes read for the channel index (tags, latest and its parts); refused"
    )
    assert Tags.served == MAX_INDEX_READ // 4_000_000 + 1 < Tags.PAGES


# ---------------------------------------------------------------- compaction (a real registry)


def registry_with_deletes(root: Path, deletes: bool) -> Registry:
    server = Registry(root)
    if deletes:  # the distribution registry deletes manifests only when told to
        server.stop()
        config = root / "config.yml"
        config.write_text(
            config.read_text().replace("storage:\n", "storage:\n  delete:\n    enabled: true\n")
        )
        server.start()
    return server


@pytest.fixture(params=[True, False], ids=["deletes", "no-deletes"])
def oci(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    server = registry_with_deletes(tmp_path / "registry-server", request.param)
    yield server
    server.stop()


def index_parts(server: Registry) -> list[str]:
    url = f"http://127.0.0.1:{server.port}/v2/{NAMESPACE}/{INDEX_REPO}/tags/list?n=10000"
    tags: list[str] = requests.get(url, timeout=10).json()["tags"]
    return sorted(t for t in tags if t.startswith("part-"))


def listed(run: Cli, channel: str) -> set[str]:
    out, _ = run("setup", "--list", "--json", "--channel", channel)
    return {f"{row['name']} {row['version']}" for row in json.loads(out)["packages"]}


def test_publish_and_yank_compact_the_index_parts(oci: Registry, run: Cli, tmp_path: Path) -> None:
    """Each publish and yank adds a part tag; with more than COMPACT_AFTER, it merges them into one and
    deletes those it merged (where the registry deletes). Every row stays listed throughout."""
    channel = oci.channel(NAMESPACE)
    deletes = "delete:" in (oci.root / "config.yml").read_text()
    models = [f"m{i}" for i in range(COMPACT_AFTER + 4)]
    seen: set[str] = set()
    for model in models:
        run("publish", "--channel", channel, "--dist", hand_built_dist(tmp_path / model, (model,)))
        now = listed(run, channel)
        assert now >= seen and f"tfaot-model-{model} 1.0" in now
        seen = now
        if deletes:
            assert len(index_parts(oci)) <= COMPACT_AFTER + 1
    run("yank", "--channel", channel, "tfaot-model-m0==1.0", "--reason", "test")
    assert listed(run, channel) == seen  # a yanked row is listed (flagged), not dropped
    parts = index_parts(oci)
    if deletes:
        assert len(parts) <= COMPACT_AFTER + 1
    else:  # nothing deleted, nothing lost, nothing added: one part per publish and yank
        assert len(parts) == len(models) + 1
    assert len(seen) == len(models) + 1  # and the runtime


def test_concurrent_publishes_while_compacting_lose_no_row(tmp_path: Path) -> None:
    """Three publishes at a time, three rounds, compaction on: every row published is listed after each
    round (a part is deleted only once another one holds its rows)."""
    server = registry_with_deletes(tmp_path / "registry-server", True)
    try:
        channel, cache = server.channel(NAMESPACE), tmp_path / "cache"
        seen: set[str] = set()
        for round_ in range(3):
            names = [f"r{round_}n{i}" for i in range(3)]
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tfaot_dist",
                        "publish",
                        "--channel",
                        channel,
                        "--dist",
                        str(dist),
                    ],
                    env={**os.environ, "TFAOT_DIST_CACHE": str(tmp_path / f"cache-{name}")},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for name, dist in [(n, hand_built_dist(tmp_path / n, (n,))) for n in names]
            ]
            for proc in procs:
                _, err = proc.communicate(timeout=300)
                assert proc.returncode == 0, err
            out = tool("setup", "--list", "--json", "--channel", channel, cache=cache).stdout
            now = {f"{row['name']} {row['version']}" for row in json.loads(out)["packages"]}
            assert now >= seen | {f"tfaot-model-{n} 1.0" for n in names}
            seen = now
        assert len(index_parts(server)) <= COMPACT_AFTER + 3  # each concurrent publish may leave its own
    finally:
        server.stop()


# ---------------------------------------------------------------- extraction bounded by the manifest


def test_extraction_is_bounded_by_the_declared_sizes(run: Cli, tmp_path: Path) -> None:
    """A package whose archive holds a listed file twice, first 64 MiB of zeros (64 KiB compressed) and
    then the listed bytes, passes the read-through (the last one counts) but would write 64 MiB into
    the user's area: refused, the area as it was."""
    channel = Channel(tmp_path / "channel").runtime().model("x")
    name, version = "tfaot-model-x", "1.0"
    honest = gzip.decompress(archive_bytes(name, version, *model_files("x")))
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(honest)) as src, tarfile.open(fileobj=out, mode="w") as tar:
        bomb = tarfile.TarInfo(f"{name}-{version}/lib/libtfaot-model-x.a")
        bomb.size = 64 << 20
        tar.addfile(bomb, io.BytesIO(bytes(bomb.size)))
        for member in src:
            tar.addfile(member, src.extractfile(member))
    data = gzip.compress(out.getvalue(), mtime=0)
    assert len(data) < 1 << 20
    # The channel lists these bytes (as a publish would: they pass verify_archive).
    archive = channel.root / "packages" / name / version / f"{name}-{version}.tar.gz"
    archive.write_bytes(data)
    row = index_line(verify_archive(archive))
    channel.rows[row.key] = row
    (channel.root / "index.json").write_text(render_index(channel.rows.values()))
    area = tmp_path / "area"
    run("setup", RUNTIME, "--channel", channel.root, "--area", area)
    before = snapshot(area)
    line = run.error("setup", "x", "--channel", channel.root, "--area", area, expect=7)
    assert (
        line.startswith("tfaot-dist: error: tfaot-model-x 1.0: more than ") and "bytes when extracted" in line
    )
    assert snapshot(area) == before
