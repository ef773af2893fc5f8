"""Distribution end to end: archive sources over HTTP, parallel and sharded builds, channels,
and `setup` into user areas that a real C++ program builds against.

Everything runs for real: git repositories, an HTTP server on 127.0.0.1 (tests/httpserve.py)
that also fails, truncates, lies and stays silent on purpose, TensorFlow builds, CMake and g++.
TFAOT_DIST_TEST_MODELS (default 6) sets the size of the registry built with --jobs 2 and in four
shards (which compile two of them again); `TFAOT_DIST_TEST_MODELS=12 scripts/test
tests/test_distribution.py -k shards` is the 12-model run.
"""

from __future__ import annotations

import array
import gzip
import inspect
import io
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Cli, DataRepo, copy_registry_yaml, fresh_cache, snapshot, unpack_package
from httpserve import Server, SilentServer, refused_url
from kept import kept
from kept_objects import CMAKE_LAUNCHER, compile_kept

from tfaot_dist import scheduler
from tfaot_dist.cache import SEAL
from tfaot_dist.errors import IntegrityError
from tfaot_dist.util.archives import TAR, ZIP, extract, tar_header_count, zip_entry_count
from tfaot_dist.util.fs import reproducible_targz, sha256_file
from tfaot_dist.util.progress import make_reporter

REPO = Path(__file__).resolve().parent.parent
# The release workflow runs these same scripts (tests/test_workflows.py checks it).
SHARD_SCRIPT = "scripts/release-shard"
PUBLISH_SCRIPT = "scripts/release-publish"
N_MODELS = int(os.environ.get("TFAOT_DIST_TEST_MODELS", "6"))
RUNTIME = "tfaot-xla-runtime"


def tool(*args: object, cache: Path, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """tfaot-dist in its own process, as CI and users run it."""
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache), "PYTHON": sys.executable}
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def script(name: str, *args: object, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache), "PYTHON": sys.executable, "CI": "true"}
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run(
        [str(REPO / name), *map(str, args)], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def index_of(channel: Path) -> dict[tuple[str, str], str]:
    doc = json.loads((channel / "index.json").read_text())
    return {(p["name"], p["version"]): p["sha256"] for p in doc["packages"]}


def write_entry(
    registry: Path,
    name: str,
    source: dict[str, str],
    aot_config: str = "simple/aot_config.yaml",
    version: str = "1.0.0",
    batch_sizes: tuple[int, ...] = (1,),
) -> None:
    entry = {
        "name": name,
        "version": version,
        "source": source,
        "aot_config": aot_config,
        "overrides": {"batch_sizes": list(batch_sizes)},
    }
    (registry / "models").mkdir(parents=True, exist_ok=True)
    (registry / "models" / f"{name}.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))


def git_source(data_repo: DataRepo) -> dict[str, str]:
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=data_repo.work, check=True, capture_output=True, text=True
    ).stdout.strip()
    return {"git": data_repo.url, "ref": "main", "commit": commit}


def tar_gz(files: dict[str, bytes], top: str | None = "data-1.0") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_zip(path: Path, files: dict[str, bytes]) -> None:
    """Files at the top of the zip, no common directory (README.txt keeps simple/ from being the root)."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, "README.txt": b"example models\n"}.items():
            zf.writestr(name, data)


def source_files(root: Path, under: str) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / under).rglob("*"))
        if p.is_file()
    }


# ---------------------------------------------------------------- archives over HTTP


@pytest.fixture
def archive_server(tmp_path: Path, data_repo: DataRepo) -> Iterator[Server]:
    """The simple example model as data-1.0.tar.gz (one top directory) and data.zip (none)."""
    root = tmp_path / "www"
    root.mkdir()
    files = source_files(data_repo.work, "simple")
    (root / "data-1.0.tar.gz").write_bytes(tar_gz(files))
    write_zip(root / "data.zip", files)
    server = Server(root)
    yield server
    server.close()


def test_archive_source_retries_5xx_then_verifies_and_caches(archive_server: Server, cache: Path) -> None:
    from tfaot_dist.sources import ArchiveSources

    sha = sha256_file(archive_server.root / "data-1.0.tar.gz")
    archive_server.fail("data-1.0.tar.gz", 2)
    src = ArchiveSources(cache).fetch(archive_server.url("data-1.0.tar.gz"), sha)
    assert archive_server.count("data-1.0.tar.gz") == 3  # two 500s, then the bytes
    assert (src.root / "simple" / "aot_config.yaml").is_file()  # the top directory data-1.0/ is the root
    assert sha256_file(cache / "archives" / sha) == sha
    # Cached by content: no second request, not even offline.
    again = ArchiveSources(cache, offline=True).fetch(archive_server.url("data-1.0.tar.gz"), sha)
    assert again.root == src.root and archive_server.count("data-1.0.tar.gz") == 3


@pytest.mark.parametrize(
    "case, code, requests",
    [
        ("wrong bytes", 7, 1),
        ("not found", 4, 1),
        ("truncated", 4, 3),
        ("reset", 4, 3),
        ("refused", 4, 0),
        ("silent", 4, 0),
    ],
)
def test_archive_source_failures_leave_everything_unchanged(
    case: str,
    code: int,
    requests: int,
    run: Cli,
    registry: Path,
    cache: Path,
    tmp_path: Path,
    archive_server: Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TFAOT_DIST_HTTP_TIMEOUT", "0.5")
    sha = sha256_file(archive_server.root / "data-1.0.tar.gz")
    url = archive_server.url("data-1.0.tar.gz")
    silent = None
    if case == "wrong bytes":
        archive_server.replace("data-1.0.tar.gz", b"not the archive the registry pinned")
    elif case == "not found":
        url = archive_server.url("nothing-here.tar.gz")
    elif case == "truncated":
        archive_server.truncate("data-1.0.tar.gz")
    elif case == "reset":
        archive_server.reset("data-1.0.tar.gz")
    elif case == "refused":
        url = refused_url("data.tar.gz")
    else:
        silent = SilentServer()
        url = silent.url("data.tar.gz")
    write_entry(registry, "from-archive", {"archive": url, "sha256": sha})
    before = snapshot(registry, cache, tmp_path / "dist")
    t0 = time.monotonic()
    line = run.error("build", "from-archive", "--dist", tmp_path / "dist", expect=code)
    elapsed = time.monotonic() - t0
    if silent:
        silent.close()
    assert snapshot(registry, cache, tmp_path / "dist") == before
    assert url.split("/")[-1] in line
    expected = {
        "wrong bytes": f"expected {sha}",
        "not found": "HTTP 404",
        "truncated": "truncated",
        "reset": "Connection reset by peer",
        "refused": "Connection refused",
        "silent": "no answer within 0.5 s",
    }[case]
    assert expected in line, line
    if requests:
        assert archive_server.count(url.split("/")[-1]) == requests
    assert elapsed < 20  # bounded: 3 attempts, 0.5 s timeouts, 1.5 s of backoff


def test_unsafe_archives_are_refused(tmp_path: Path) -> None:
    def tar_with(*members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return path

    def member(
        name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = ""
    ) -> tuple[tarfile.TarInfo, bytes | None]:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, link
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        return info, data if kind == tarfile.REGTYPE else None

    cases = {
        "absolute": tar_with(member("/etc/evil")),
        "dotdot": tar_with(member("a/../../evil")),
        "link out": tar_with(member("a/link", tarfile.SYMTYPE, link="../../outside")),
        "absolute link": tar_with(member("a/link", tarfile.SYMTYPE, link="/etc/passwd")),
        "hard link": tar_with(member("a/f"), member("a/h", tarfile.LNKTYPE, link="a/f")),
        "device": tar_with(member("a/dev", tarfile.CHRTYPE)),
        "fifo": tar_with(member("a/fifo", tarfile.FIFOTYPE)),
    }
    for case, path in cases.items():
        with pytest.raises(IntegrityError) as info:
            extract(path, tmp_path / "out" / case, kind=TAR)
        assert str(path) in str(info.value), case
        assert not (tmp_path / "out" / case).exists(), case
    many = tar_with(*(member(f"f{i}") for i in range(11)))
    with pytest.raises(IntegrityError, match="more than 10 entries"):
        extract(many, tmp_path / "out" / "many", kind=TAR, max_entries=10)
    zpath = tmp_path / "evil.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("ok.txt", "fine")
        zf.writestr("../evil.txt", "bad")
    with pytest.raises(IntegrityError, match=re.escape("unsafe entry name '../evil.txt'")):
        extract(zpath, tmp_path / "out" / "zip", kind=ZIP)
    assert not (tmp_path / "evil.txt").exists()
    # Links inside the tree are fine.
    fine = tar_with(member("a/f"), member("a/link", tarfile.SYMTYPE, link="f"))
    extract(fine, tmp_path / "out" / "fine", kind=TAR)
    assert (tmp_path / "out" / "fine" / "a" / "link").read_bytes() == b"x"


def bomb_tar_gz(path: Path, entries: int) -> None:
    """A .tar.gz of `entries` empty files b/0000000..., written as raw ustar headers (tarfile would
    take a minute for 10^6)."""
    base = bytearray(512)
    for offset, value in (
        (100, b"0000644\0"),
        (108, b"0000000\0"),
        (116, b"0000000\0"),
        (124, b"00000000000\0"),
        (136, b"00000000000\0"),
        (148, b" " * 8),
        (156, b"0"),
        (257, b"ustar\x0000"),
    ):
        base[offset : offset + len(value)] = value
    base_sum = sum(base)
    with gzip.open(path, "wb", compresslevel=1) as out:
        chunk = bytearray()
        for i in range(entries):
            name = b"b/%07d" % i
            header = bytearray(base)
            header[: len(name)] = name
            header[148:156] = b"%06o\0 " % (base_sum + sum(name))
            chunk += header
            if len(chunk) >= 1 << 22:
                out.write(chunk)
                chunk.clear()
        out.write(bytes(chunk) + bytes(1024))


def bomb_zip(path: Path, entries: int, announced: int | None = None) -> None:
    """A zip64 archive of `entries` empty stored files b/0000000..., written directly; its end
    records announce `announced` entries (default: the truth)."""
    announced = entries if announced is None else announced
    central_record = struct.Struct("<4s6H3I5HII9s").pack
    local_record = struct.Struct("<4s5H3I2H9s").pack
    names = [b"b/%07d" % i for i in range(entries)]
    local = b"".join([local_record(b"PK\x03\x04", 45, 0, 0, 0, 0x21, 0, 0, 0, 9, 0, name) for name in names])
    central = b"".join(
        [
            central_record(
                b"PK\x01\x02", 45, 45, 0, 0, 0, 0x21, 0, 0, 0, 9, 0, 0, 0, 0, 0o100644 << 16, 39 * i, name
            )
            for i, name in enumerate(names)
        ]
    )
    end64 = len(local) + len(central)
    tail = (
        struct.pack(
            "<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, announced, announced, len(central), len(local)
        )
        + struct.pack("<4sIQI", b"PK\x06\x07", 0, end64, 1)
        + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    )
    path.write_bytes(local + central + tail)


@pytest.fixture
def tar_bomb() -> Path:
    """A .tar.gz of a million empty files (10 MB) for the tests that refuse it: kept between runs while its
    writer is the same (tests/kept.py)."""
    parts = {"writer": inspect.getsource(bomb_tar_gz)}
    return kept("tar-bomb", parts, lambda out: bomb_tar_gz(out / "bomb.tar.gz", 10**6)) / "bomb.tar.gz"


@pytest.fixture
def zip_bomb() -> Path:
    """A zip64 archive of a million empty files, kept like tar_bomb."""
    parts = {"writer": inspect.getsource(bomb_zip)}
    return kept("zip-bomb", parts, lambda out: bomb_zip(out / "bomb.zip", 10**6)) / "bomb.zip"


@pytest.mark.xdist_group("bombs")  # beside the rest of this module
def test_archive_bombs_of_a_million_entries_are_refused(
    tmp_path: Path, tar_bomb: Path, zip_bomb: Path
) -> None:
    # The writers make archives that Python's own readers accept (small ones, same code; past 65535
    # entries a zip needs zip64 records, a tar nothing new).
    bomb_tar_gz(tmp_path / "small.tar.gz", 1_000)
    with tarfile.open(tmp_path / "small.tar.gz") as tar:
        assert len(tar.getnames()) == 1_000
    bomb_zip(tmp_path / "small.zip", 70_000)  # past 65535 entries: zip64 records
    with zipfile.ZipFile(tmp_path / "small.zip") as zf:
        assert len(zf.infolist()) == 70_000 and zf.testzip() is None
    assert zip_entry_count(tmp_path / "small.zip") == 70_000
    assert zip_entry_count(tmp_path / "small.tar.gz") is None

    # A tar's headers are counted before tarfile parses each one (the million: tarfile took seconds).
    with tarfile.open(tar_bomb) as tar:
        assert tar_header_count(tar) == 100_001
    with pytest.raises(IntegrityError, match=re.escape("bomb.tar.gz: more than 100000 entries")):
        extract(tar_bomb, tmp_path / "out-tar", kind=TAR)
    # A zip's central directory is counted before zipfile parses a million entries, record by
    # record: the count its end records announce may lie.
    with pytest.raises(IntegrityError, match=r"bomb.zip: more than 100000 entries"):
        extract(zip_bomb, tmp_path / "out-zip", kind=ZIP)
    bomb_zip(tmp_path / "liar.zip", 150_000, announced=1)
    with pytest.raises(IntegrityError, match=r"liar.zip: more than 100000 entries"):
        extract(tmp_path / "liar.zip", tmp_path / "out-liar", kind=ZIP)
    assert not any((tmp_path / out).exists() for out in ("out-tar", "out-zip", "out-liar"))


@pytest.mark.xdist_group("source-bomb")  # beside the rest of this module
def test_a_source_archive_bomb_fails_the_build_and_leaves_the_cache(
    run: Cli, registry: Path, cache: Path, tmp_path: Path, tar_bomb: Path
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    shutil.copyfile(tar_bomb, root / "bomb.tar.gz")
    server = Server(root)
    try:
        write_entry(
            registry,
            "bomb",
            {"archive": server.url("bomb.tar.gz"), "sha256": sha256_file(root / "bomb.tar.gz")},
        )
        before = snapshot(registry, cache, tmp_path / "dist")
        line = run.error("build", "bomb", "--dist", tmp_path / "dist", expect=7)
    finally:
        server.close()
    assert "bomb.tar.gz" in line and "more than 100000 entries" in line, line
    assert snapshot(registry, cache, tmp_path / "dist") == before


def test_unsafe_source_archive_fails_the_build_and_leaves_the_cache(
    run: Cli, registry: Path, cache: Path, tmp_path: Path
) -> None:
    root = tmp_path / "www"
    root.mkdir()
    (root / "evil.tar.gz").write_bytes(tar_gz({"../../escaped": b"x"}, top=None))
    server = Server(root)
    try:
        write_entry(
            registry,
            "evil",
            {"archive": server.url("evil.tar.gz"), "sha256": sha256_file(root / "evil.tar.gz")},
        )
        before = snapshot(registry, cache)
        line = run.error("build", "evil", "--dist", tmp_path / "dist", expect=7)
    finally:
        server.close()
    assert "unsafe entry name '../../escaped'" in line
    assert snapshot(registry, cache) == before
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize(
    "source, message",
    [
        ({"archive": "http://h/x.tar.gz", "sha256": "ab"}, "source.sha256: invalid sha256 'ab'"),
        (
            {"archive": "ftp://h/x.tar.gz", "sha256": "a" * 64},
            "source.archive: invalid URL 'ftp://h/x.tar.gz'",
        ),
        ({"archive": "http://h/x.tar.gz"}, "source.sha256: required field is missing"),
        ({"archive": "http://h/x.tar.gz", "sha256": "a" * 64, "ref": "main"}, "source.ref: unknown key"),
        (
            {"archive": "http://h/x.tar.gz", "sha256": "a" * 64, "git": "https://h/r.git"},
            "source.archive: give either git or archive, not both",
        ),
    ],
)
def test_registry_archive_sources_are_strict(
    run: Cli, registry: Path, source: dict[str, str], message: str
) -> None:
    write_entry(registry, "strict", source)
    line = run.error("show", "strict", expect=3)
    assert message in line, line


# ---------------------------------------------------------------- builds: jobs, shards, failures


@dataclass
class Fleet:
    registry: Path
    cache: Path
    dist: Path
    channel: Path
    server: Server
    build: dict[str, Any]  # the JSON of `build --all --jobs 2`
    seconds: float


def make_fleet(
    tmp_path_factory: pytest.TempPathFactory, data_repo: DataRepo, shared_cache: Path
) -> Iterator[Fleet]:
    """N_MODELS registry entries of the simple example, batch size 1, built with --jobs 2 and
    published: all but two from git, one from a tar.gz and one from a zip over HTTP (whose server
    answers 500 twice first). The session fixture `fleet` (conftest.py) runs it once for this
    module and tests/test_oci.py."""
    root = tmp_path_factory.mktemp("fleet")
    www = root / "www"
    www.mkdir()
    files = source_files(data_repo.work, "simple")
    (www / "data-1.0.tar.gz").write_bytes(tar_gz(files))
    write_zip(www / "data.zip", files)
    server = Server(www)
    server.fail("data-1.0.tar.gz", 2)
    registry = root / "registry"
    registry.mkdir()
    copy_registry_yaml(registry)
    cache = fresh_cache(root / "cache", shared_cache)
    # The first through add-model; the others are the same entry under other names (the
    # registry is plain files), which saves a TensorFlow op check per model.
    tool(
        "--registry",
        registry,
        "add-model",
        "fleet-01",
        "--source",
        data_repo.url,
        "--aot-config",
        "simple/aot_config.yaml",
        "--batch-sizes",
        "1",
        cache=cache,
    )
    first = yaml.safe_load((registry / "models" / "fleet-01.yaml").read_text())
    for i in range(2, N_MODELS - 1):
        write_entry(registry, f"fleet-{i:02}", first["source"])
    for i, (archive, name) in enumerate(
        (("data-1.0.tar.gz", "tgz"), ("data.zip", "zip")), start=N_MODELS - 1
    ):
        write_entry(
            registry,
            f"fleet-{i:02}-{name}",
            {"archive": server.url(archive), "sha256": sha256_file(www / archive)},
        )
    t0 = time.monotonic()
    proc = tool(
        "--registry",
        registry,
        "build",
        "--all",
        "--jobs",
        "2",
        "--dist",
        root / "dist",
        "--json",
        cache=cache,
    )
    seconds = time.monotonic() - t0
    print(f"\nbuild --all --jobs 2 of {N_MODELS} models: {seconds:.0f} s", file=sys.stderr)
    script(PUBLISH_SCRIPT, root / "channel", root / "dist", cache=cache)
    yield Fleet(registry, cache, root / "dist", root / "channel", server, json.loads(proc.stdout), seconds)
    server.close()


@pytest.mark.xdist_group("fleet")  # the session's fleet is made on the worker of its users
def test_jobs_and_shards_publish_the_same_packages(fleet: Fleet, tmp_path: Path, shared_cache: Path) -> None:
    assert [r["status"] for r in fleet.build["results"]] == ["built"] * N_MODELS
    assert fleet.server.count("data-1.0.tar.gz") == 3  # 500, 500, then the archive
    # Four shards one after another (as the release matrix does), each into its own dist, with a build
    # cache of their own that holds the single run's builds but two: one from git and one from an archive
    # over HTTP are compiled again (the others are copied from the cache), so the shards' channel
    # equal to the single run's proves reproducible builds (two compiles prove it as well as six did:
    # the shards' cache has no compile answers, so TensorFlow compiles them again).
    cache = fresh_cache(tmp_path / "cache", shared_cache, compiles=False)
    again = {"tfaot-model-fleet-01-1.0.0", f"tfaot-model-fleet-{N_MODELS - 1:02}-tgz-1.0.0"}
    for entry in (fleet.cache / "builds").iterdir():
        if (entry / SEAL).is_file() and not any((entry / name).exists() for name in again):
            shutil.copytree(entry, cache / "builds" / entry.name, symlinks=True)
    assert len(list((cache / "builds").iterdir())) == N_MODELS - 2
    seen: dict[str, int] = {}  # archive -> shard
    compiled: list[str] = []
    for k in range(1, 5):
        dist = tmp_path / f"dist-{k}"
        out = script(SHARD_SCRIPT, f"{k}/4", dist, fleet.registry, cache=cache)
        assert f"shard {k}/4:" in out.stderr
        compiled += [
            m.replace(" ", "-") for m in re.findall(r"compiling (tfaot-model-\S+ \S+) for", out.stderr)
        ]
        for archive in dist.glob("tfaot-model-*.tar.gz"):
            assert archive.name not in seen, f"{archive.name} in shards {seen[archive.name]} and {k}"
            seen[archive.name] = k
        if dist.exists():  # an empty shard uploads no artifact
            script(PUBLISH_SCRIPT, tmp_path / "channel", dist, cache=cache)
    assert len(seen) == N_MODELS
    assert sorted(compiled) == sorted(again)
    jobs, shards = index_of(fleet.channel), index_of(tmp_path / "channel")
    assert len(jobs) == N_MODELS + 1 and {n for n, _ in jobs} >= {RUNTIME}
    assert shards == jobs  # same names, versions and digests: reproducible builds


def test_failures_do_not_stop_the_others(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfaot_dist import cli

    registry = tmp_path / "registry"
    shutil.copytree(built / "registry", registry)
    source = yaml.safe_load((registry / "models" / "test-simple.yaml").read_text())["source"]
    write_entry(registry, "a-no-config", source, aot_config="nowhere/aot_config.yaml")
    (registry / "models" / "b-bad-yaml.yaml").write_text("name: b-bad-yaml\nversion: [unclosed\n")
    write_entry(registry, "c-gone", {**source, "commit": "0" * 40})
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code = cli.main(
        [
            "--registry",
            str(registry),
            "build",
            "--all",
            "--jobs",
            "2",
            "--dist",
            str(tmp_path / "dist"),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 3  # the first failure in name order: a-no-config, an invalid input
    data = json.loads(out)
    assert [(f["name"], f["exit_code"]) for f in data["failures"]] == [
        ("a-no-config", 3),
        ("b-bad-yaml", 3),
        ("c-gone", 4),
    ]
    assert {r["name"]: r["status"] for r in data["results"]} == {
        "test-multi": "cached",
        "test-simple": "cached",
    }
    assert (tmp_path / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz").is_file()
    # Summary: one line per failure, then the single error line with the exit code's class first.
    lines = err.splitlines()
    assert "tfaot-dist: summary: 2 ok, 3 failed, 0 not started" in lines
    assert any(
        ln.startswith("tfaot-dist: FAILED a-no-config: ") and "'nowhere/aot_config.yaml' not found" in ln
        for ln in lines
    )
    assert any(ln.startswith("tfaot-dist: FAILED b-bad-yaml: ") and "malformed YAML" in ln for ln in lines)
    assert any(ln.startswith("tfaot-dist: FAILED c-gone: ") and "0000000000" in ln for ln in lines)
    (error,) = [ln for ln in lines if ln.startswith("tfaot-dist: error:")]
    assert error.startswith("tfaot-dist: error: 3 of 5 models failed: a-no-config (")
    # GitHub Actions: each model's lines folded in a group, failures as annotations.
    assert err.count("::group::") == 5 and err.count("::endgroup::") == 5
    assert "::error title=tfaot-dist c-gone::" in err
    assert any(ln.startswith("::group::[") and "test-simple: cached" in ln for ln in lines)


def test_fail_fast_starts_nothing_after_a_failure(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfaot_dist import cli

    registry = tmp_path / "registry"
    shutil.copytree(built / "registry", registry)
    source = yaml.safe_load((registry / "models" / "test-simple.yaml").read_text())["source"]
    write_entry(registry, "a-no-config", source, aot_config="nowhere/aot_config.yaml")
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("CI", "true")
    code = cli.main(
        [
            "--registry",
            str(registry),
            "build",
            "--all",
            "--fail-fast",
            "--dist",
            str(tmp_path / "dist"),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 3
    data = json.loads(out)
    assert data["not_started"] == ["test-multi", "test-simple"] and data["results"] == []
    assert not (tmp_path / "dist").exists()
    assert "tfaot-dist: [1/3] a-no-config: failed" in err  # plain lines in CI
    assert "tfaot-dist: error: 1 of 3 models failed, 2 not started: a-no-config (" in err


def test_terminal_progress_redraws_a_status_line() -> None:
    import pty

    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as stream:
        reporter = make_reporter(2, stream, {"TERM": "xterm"})
        reporter.start("alpha")
        reporter.log("alpha", "compiling")
        reporter.finish("alpha", "built")
        reporter.close()
    data = b""
    while select.select([master], [], [], 0.5)[0]:  # a pty hands the bytes over in pieces
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed and everything was read
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    text = data.decode()
    assert "\r\x1b[K[0/2] building: alpha" in text
    assert "alpha: compiling" in text and "[1/2] alpha: built (" in text


def test_shards_are_stable_and_cover_every_name(run: Cli) -> None:
    names = [f"model-{i}" for i in range(300)]
    for count in (1, 2, 3, 8):
        shards = [scheduler.shard_of(n, count) for n in names]
        assert set(shards) == set(range(1, count + 1))
        assert max(shards.count(k) for k in range(1, count + 1)) < 2.2 * len(names) / count
    # sha256 of the name, the same on every machine and Python (hash() is salted per process).
    assert [scheduler.shard_of(n, 8) for n in ("test-simple", "test-multi", "a", "b")] == [8, 5, 3, 3]
    assert run.error("build", "--all", "--shard", "5/4", expect=2).endswith("got '5/4'")
    assert "expected K/N" in run.error("build", "--all", "--shard", "x", expect=2)


def test_offline_build_names_what_is_missing(
    run: Cli, registry: Path, cache: Path, data_repo: DataRepo, tmp_path: Path
) -> None:
    write_entry(registry, "from-git", git_source(data_repo))
    write_entry(registry, "from-archive", {"archive": "http://127.0.0.1:9/data.tar.gz", "sha256": "e" * 64})
    before = snapshot(registry, cache)
    _, err = run("build", "--all", "--offline", "--dist", tmp_path / "dist", expect=4)
    assert snapshot(registry, cache) == before
    assert (
        f"offline: source archive http://127.0.0.1:9/data.tar.gz (sha256 {'e' * 64}) is not in the cache"
        in err
    )
    assert f"offline: commit {git_source(data_repo)['commit']} of {data_repo.url} is not in the cache" in err


# ---------------------------------------------------------------- channels


def repacked(archive: Path, out_dir: Path, change: str) -> Path:
    """A valid package archive with the same name and version but other bytes: `change` (a file in
    the package) gets one more byte and the manifest follows."""
    work = out_dir / "work"
    top = unpack_package(archive, work)
    target = top / change
    target.write_bytes(target.read_bytes() + b"\0")
    manifest = json.loads((top / "manifest.json").read_text())
    manifest["files"][change] = {"sha256": sha256_file(target), "size": target.stat().st_size}
    (top / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    out_dir.mkdir(exist_ok=True)
    path = out_dir / archive.name
    path.write_bytes(reproducible_targz(top, top.name))
    shutil.rmtree(work)
    return path


def test_publish_lists_key_facts_and_never_changes_a_version(run: Cli, built: Path, tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    out, _ = run("publish", "--channel", channel, "--dist", built / "dist", "--json")
    assert {p["status"] for p in json.loads(out)["packages"]} == {"published"}
    doc = json.loads((channel / "index.json").read_text())
    rows = {p["name"]: p for p in doc["packages"]}
    assert set(rows) == {"tfaot-model-test-multi", "tfaot-model-test-simple", RUNTIME}
    simple = rows["tfaot-model-test-simple"]
    archive = channel / simple["archive"]
    assert archive.read_bytes() == (built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz").read_bytes()
    assert (simple["size"], simple["sha256"]) == (archive.stat().st_size, sha256_file(archive))
    assert simple["kind"] == "model" and simple["batch_sizes"] == [1, 2, 4]
    assert simple["tensorflow_version"] == "2.21.0"
    assert simple["requires"] == [{"name": RUNTIME, "version": rows[RUNTIME]["version"]}]
    assert [t["name"] for t in rows["tfaot-model-test-multi"]["signature"]["inputs"]] == [
        "input_0",
        "input_1",
    ]
    assert rows[RUNTIME]["kind"] == "runtime" and rows[RUNTIME]["signature"] is None
    assert sha256_file(channel / simple["manifest"]) == simple["manifest_sha256"]

    # The same bytes again: nothing changes, not even a time stamp.
    before = snapshot(channel)
    out, _ = run("publish", "--channel", channel, "--dist", built / "dist", "--json")
    assert {p["status"] for p in json.loads(out)["packages"]} == {"unchanged"}
    assert snapshot(channel) == before

    # Other bytes under a published name and version: refused, channel untouched.
    other = repacked(
        built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz",
        tmp_path / "other",
        "share/tfaot-model-test-simple/reference/bs1/output_0.bin",
    )
    line = run.error("publish", "--channel", channel, "--dist", other.parent, expect=7)
    assert "1 package version already in" in line and "nothing published" in line
    assert (
        "(tfaot-model-test-simple 1.0.0: published sha256 " in line
        and "a published version never changes" in line
    )
    assert snapshot(channel) == before

    # A damaged archive (one flipped byte) is refused before anything is written.
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    data = bytearray((built / "dist" / "tfaot-model-test-multi-1.0.0.tar.gz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (damaged / "tfaot-model-test-multi-1.0.0.tar.gz").write_bytes(bytes(data))
    run.error("publish", "--channel", channel, "--dist", damaged, expect=7)
    assert snapshot(channel) == before


@pytest.fixture
def channel_copy(built: Path, tmp_path: Path, cache: Path) -> Path:
    channel = tmp_path / "channel"
    tool("publish", "--channel", channel, "--dist", built / "dist", cache=cache)
    return channel


@pytest.mark.parametrize("how", ["path", "http"])
@pytest.mark.parametrize(
    "damage, code, message",
    [
        ("truncate", 3, "index.json: not valid JSON (truncated?)"),
        ("ill-typed", 3, "index.json: packages[0].size: expected an integer, got 'big'"),
        ("bad path", 3, "index.json: packages[0].archive: invalid path '../../etc/passwd'"),
        ("missing file", 4, "tfaot-model-test-multi-1.0.0.tar.gz"),
        ("no index", 4, ""),
    ],
)
def test_broken_channels_are_clear_errors(
    how: str, damage: str, code: int, message: str, run: Cli, channel_copy: Path, tmp_path: Path
) -> None:
    index = channel_copy / "index.json"
    doc = json.loads(index.read_text())
    if damage == "truncate":
        index.write_text(index.read_text()[: len(index.read_text()) // 2])
    elif damage == "ill-typed":
        doc["packages"][0]["size"] = "big"
        index.write_text(json.dumps(doc))
    elif damage == "bad path":
        doc["packages"][0]["archive"] = "../../etc/passwd"
        index.write_text(json.dumps(doc))
    elif damage == "missing file":
        (channel_copy / doc["packages"][0]["archive"]).unlink()
    else:
        index.unlink()
    server = Server(channel_copy) if how == "http" else None
    location = server.url() if server else str(channel_copy)
    area = tmp_path / "area"
    try:
        if damage == "missing file":
            # A path channel checks every listed file on opening; over HTTP the archive is a 404.
            line = run.error("setup", "test-multi", "--channel", location, "--area", area, expect=code)
        elif damage in ("ill-typed", "bad path"):
            # A row that does not read refuses its own package only: --list names it (issue 38).
            out, _ = run("setup", "--list", "--channel", location)
            assert message in out and "broken:" in out, out
            name = doc["packages"][0]["name"].removeprefix("tfaot-model-")
            line = run.error("setup", name, "--channel", location, "--area", area, expect=code)
        else:
            line = run.error("setup", "--list", "--channel", location, expect=code)
    finally:
        if server:
            server.close()
    assert message in line, line
    assert not area.exists()


# ---------------------------------------------------------------- setup


@pytest.fixture
def http_channel(channel_copy: Path) -> Iterator[Server]:
    server = Server(channel_copy)
    yield server
    server.close()


def read_reference(path: Path, dtype: str) -> list[float]:
    values = array.array({"float32": "f", "bool": "B"}[dtype])
    values.frombytes(path.read_bytes())
    return list(values)


def test_setup_from_http_channel_gives_a_working_cpp_consumer(
    run: Cli, http_channel: Server, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no scram here: the environment is printed
    area = tmp_path / "area"
    out, _ = run(
        "setup", "test-simple", "test-multi", "--channel", http_channel.url(), "--area", area, "--json"
    )
    report = json.loads(out)
    assert [(r["name"], r["status"]) for r in report["results"]] == [
        (RUNTIME, "installed"),
        ("tfaot-model-test-simple", "installed"),
        (RUNTIME, "already installed"),
        ("tfaot-model-test-multi", "installed"),
    ]
    tfaot = area / "tfaot"
    assert report["environment"]["CMAKE_PREFIX_PATH"] == str(tfaot)
    assert report["scram"] == []
    assert "export PKG_CONFIG_PATH=" in (tfaot / "env.sh").read_text()

    # Tool files: relocated to the installed directories, valid XML.
    tool_xml = ET.parse(tfaot / "scram.d" / "tfaot-model-test-simple.xml").getroot()
    (base,) = [e.get("default") for e in tool_xml.iter("environment") if e.get("name", "").endswith("_BASE")]
    assert base == str(tfaot / "tfaot-model-test-simple" / "1.0.0")
    assert "@TOOL_ROOT@" not in "".join(p.read_text() for p in (tfaot / "scram.d").glob("*.xml"))

    # A user's CMake project against the area builds, links and reproduces TensorFlow's numbers.
    build = tmp_path / "build"
    subprocess.run(
        [
            "cmake",
            "-S",
            REPO / "examples" / "consumer",
            "-B",
            build,
            f"-DCMAKE_PREFIX_PATH={tfaot}",
            "-DCMAKE_BUILD_TYPE=Release",
            CMAKE_LAUNCHER,
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", build], check=True, capture_output=True)
    proc = subprocess.run([build / "consumer", tfaot], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed: dict[tuple[str, str], list[float]] = {}
    for line in proc.stdout.splitlines()[:-1]:  # MODEL OUTPUT row R col C  aot A  tensorflow T
        parts = line.split()
        printed.setdefault((parts[0], parts[1]), []).append(float(parts[7]))
    assert proc.stdout.splitlines()[-1] == "all outputs agree with TensorFlow within 1e-5"
    # Checked here too, against the reference files themselves, not only by the program.
    for (model, output), got in printed.items():
        ref = (
            tfaot / f"tfaot-model-{model}" / "1.0.0" / "share" / f"tfaot-model-{model}" / "reference" / "bs3"
        )
        dtype = "bool" if output == "output_1" else "float32"
        want = read_reference(ref / f"{output}.bin", dtype)
        assert len(got) == len(want) == 6
        assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(got, want)), (
            model,
            output,
            got,
            want,
        )

    # The same setup again changes nothing.
    before = snapshot(area)
    out, _ = run("setup", "test-simple", "--channel", http_channel.url(), "--area", area, "--json")
    assert {r["status"] for r in json.loads(out)["results"]} == {"already installed"}
    assert snapshot(area) == before
    out, _ = run("setup", "--list", "--area", area, "--json")
    listed = {p["name"]: p for p in json.loads(out)["packages"]}
    assert listed["tfaot-model-test-multi"]["version"] == "1.0.0"
    assert listed["tfaot-model-test-multi"]["path"] == str(tfaot / "tfaot-model-test-multi" / "1.0.0")


def test_setup_uses_pkg_config_and_plain_compilers_too(run: Cli, channel_copy: Path, tmp_path: Path) -> None:
    """The printed environment works without CMake: pkg-config and CPATH/LIBRARY_PATH."""
    area = tmp_path / "area"
    out, _ = run(
        "setup", "test-simple", "test-multi", "--channel", f"file://{channel_copy}", "--area", area, "--json"
    )
    env = {**os.environ, **json.loads(out)["environment"]}

    def pkg_config(what: str) -> list[str]:
        return subprocess.run(
            ["pkg-config", what, "tfaot-model-test-simple", "tfaot-model-test-multi"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()

    exe = tmp_path / "consumer"
    code, stderr = compile_kept(
        ["-O1", *pkg_config("--cflags")],
        REPO / "examples" / "consumer" / "consumer.cc",
        exe.with_suffix(".o"),
        env,
    )
    assert code == 0, stderr[-6000:]
    subprocess.run(
        ["g++", str(exe.with_suffix(".o")), *pkg_config("--libs"), "-o", str(exe)], check=True, env=env
    )
    proc = subprocess.run([exe, area / "tfaot"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.endswith("within 1e-5\n"), proc.stdout


@pytest.mark.xdist_group("fleet")
def test_setup_resolves_versions_upgrades_and_calls_scram(
    fleet: Fleet, run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fleet-01 1.0.0 from the fleet's channel and a real 2.0.0 build next to it."""
    registry = tmp_path / "fleet-registry"
    shutil.copytree(fleet.registry, registry)
    entry = registry / "models" / "fleet-01.yaml"
    entry.write_text(entry.read_text().replace("version: 1.0.0", "version: 2.0.0"))
    channel = tmp_path / "channel"
    shutil.copytree(fleet.channel, channel)
    tool("--registry", registry, "build", "fleet-01", "--dist", tmp_path / "dist", cache=fleet.cache)
    tool("publish", "--channel", channel, "--dist", tmp_path / "dist", cache=fleet.cache)
    server = Server(channel)
    stub = tmp_path / "bin" / "scram"
    stub.parent.mkdir()
    calls = tmp_path / "scram-calls"
    stub.write_text(f'#!/bin/sh\necho "$(pwd) $*" >> {calls}\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub.parent}:{os.environ['PATH']}")
    area = tmp_path / "area"
    tfaot = area / "tfaot"
    try:
        out, _ = run("setup", "fleet-01>=1.0,<2", "--channel", server.url(), "--area", area, "--json")
        assert [(r["name"], r["version"]) for r in json.loads(out)["results"]][-1] == (
            "tfaot-model-fleet-01",
            "1.0.0",
        )
        assert calls.read_text().splitlines() == [
            f"{area} setup {tfaot}/scram.d/tfaot-xla-runtime.xml",
            f"{area} setup {tfaot}/scram.d/tfaot-model-fleet-01.xml",
        ]

        out, _ = run("setup", "fleet-01", "--channel", server.url(), "--area", area, "--json")
        (runtime, model) = json.loads(out)["results"]
        assert runtime["status"] == "already installed"
        assert (model["version"], model["status"], model["previous"]) == ("2.0.0", "upgraded", "1.0.0")
        assert not (tfaot / "tfaot-model-fleet-01" / "1.0.0").exists()
        assert (
            f'default="{tfaot}/tfaot-model-fleet-01/2.0.0"'
            in (tfaot / "scram.d" / "tfaot-model-fleet-01.xml").read_text()
        )
        assert (
            "tfaot-model-fleet-01/2.0.0/"
            in (
                tfaot / "lib" / "cmake" / "tfaot-model-fleet-01" / "tfaot-model-fleet-01Config.cmake"
            ).read_text()
        )
        assert calls.read_text().splitlines()[-1] == f"{area} setup {tfaot}/scram.d/tfaot-model-fleet-01.xml"
        installed = json.loads((tfaot / "installed.json").read_text())["packages"]
        assert installed["tfaot-model-fleet-01"]["version"] == "2.0.0"

        out, _ = run("setup", "fleet-01==1.0.0", "--channel", server.url(), "--area", area, "--json")
        assert json.loads(out)["results"][-1]["status"] == "replaced"

        before = snapshot(area)
        line = run.error("setup", "fleet-01>=3", "--channel", server.url(), "--area", area, expect=3)
        assert "no version of tfaot-model-fleet-01 matches" in line and "available: 1.0.0, 2.0.0" in line
        assert snapshot(area) == before
    finally:
        server.close()


@pytest.mark.parametrize(
    "case, code, message",
    [
        ("unknown model", 3, "tfaot-model-nosuch is not in the channel"),
        ("bad requirement", 3, "invalid requirement"),
        ("wrong bytes", 7, "sha256 is"),
        ("archive missing", 4, "HTTP 404"),
        ("runtime missing", 4, "HTTP 404"),
        ("area path", 3, "cannot go into tool files"),
        ("offline", 4, "offline: no copy of"),
    ],
)
def test_refused_setups_leave_area_and_cache_unchanged(
    case: str, code: int, message: str, run: Cli, channel_copy: Path, tmp_path: Path, cache: Path
) -> None:
    server = Server(channel_copy)
    doc = json.loads((channel_copy / "index.json").read_text())
    paths = {p["name"]: p["archive"] for p in doc["packages"]}
    requirement, area, extra = "test-simple", tmp_path / "area", []
    if case == "unknown model":
        requirement = "nosuch"
    elif case == "bad requirement":
        requirement = "test-simple>>1"
    elif case == "wrong bytes":
        server.replace(paths["tfaot-model-test-simple"], b"x" * 100)
    elif case == "archive missing":
        (channel_copy / paths["tfaot-model-test-simple"]).unlink()
    elif case == "runtime missing":
        (channel_copy / paths[RUNTIME]).unlink()
    elif case == "area path":
        area = tmp_path / 'my "area"'
    else:
        extra = ["--offline"]
    area.mkdir()
    before = snapshot(area, cache)
    try:
        line = run.error("setup", requirement, "--channel", server.url(), "--area", area, *extra, expect=code)
    finally:
        server.close()
    assert message in line, line
    assert snapshot(area, cache) == before


def test_offline_setup_uses_what_an_online_one_cached(run: Cli, channel_copy: Path, tmp_path: Path) -> None:
    server = Server(channel_copy)
    try:
        run("setup", "test-simple", "--channel", server.url(), "--area", tmp_path / "online")
    finally:
        server.close()
    # The server is gone: the cached index and archives are enough for the same packages.
    out, _ = run(
        "setup",
        "test-simple",
        "--offline",
        "--channel",
        server.url(),
        "--area",
        tmp_path / "offline",
        "--json",
    )
    assert [r["status"] for r in json.loads(out)["results"]] == ["installed", "installed"]
    assert (
        tmp_path
        / "offline"
        / "tfaot"
        / "tfaot-model-test-simple"
        / "1.0.0"
        / "lib"
        / "libtfaot-model-test-simple.a"
    ).is_file()
    line = run.error(
        "setup",
        "test-multi",
        "--offline",
        "--channel",
        server.url(),
        "--area",
        tmp_path / "offline",
        expect=4,
    )
    assert "offline: tfaot-model-test-multi 1.0.0 " in line and "is not in the cache" in line


def test_setup_checks_every_file_against_the_manifest(
    run: Cli, built: Path, tmp_path: Path, cache: Path
) -> None:
    """A package whose archive matches the index but whose files do not match its own manifest."""
    dist = tmp_path / "dist"
    dist.mkdir()
    archive = built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz"
    work = tmp_path / "work"
    top = unpack_package(archive, work)
    (top / "lib" / "simple_bs1.o").write_bytes(b"tampered")
    (dist / archive.name).write_bytes(reproducible_targz(top, top.name))
    # publish refuses it, so it can only come from a channel written by hand.
    line = run.error("publish", "--channel", tmp_path / "channel", "--dist", dist, expect=7)
    assert "lib/simple_bs1.o: sha256 or size differs from the manifest" in line
    channel = tmp_path / "handmade"
    tool("publish", "--channel", channel, "--dist", built / "dist", cache=cache)
    index = json.loads((channel / "index.json").read_text())
    row = next(p for p in index["packages"] if p["name"] == "tfaot-model-test-simple")
    (channel / row["archive"]).write_bytes((dist / archive.name).read_bytes())
    row["sha256"], row["size"] = sha256_file(dist / archive.name), (dist / archive.name).stat().st_size
    (channel / "index.json").write_text(json.dumps(index))
    area = tmp_path / "area"
    line = run.error("setup", "test-simple", "--channel", channel, "--area", area, expect=7)
    assert "lib/simple_bs1.o: sha256 or size differs from the manifest" in line
    assert not area.exists()
