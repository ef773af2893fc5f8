"""`tfaot-dist cache`: sizes per kind, and prunes that never take what another process holds.

The other process is real: a second Python that makes cache entries through the
cache's own primitive (cache.ensure_entry), so it holds a shared lock on the
entries it uses and the exclusive lock of a build while it builds, as a running
`tfaot-dist build` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfaot_dist.cache import Cache, ensure_entry, release_in_use

BUILDER = r"""
import sys, time
from pathlib import Path
from tfaot_dist.cache import Cache, ensure_entry

cache, signals = Cache(Path(sys.argv[1])), Path(sys.argv[2])

def toolchain(staged):
    (staged / "python").write_bytes(b"t" * 1000)

def build(staged):
    (staged / "half").write_bytes(b"b" * 100)
    (signals / "building").touch()
    while not (signals / "go").exists():  # the prune runs now
        time.sleep(0.05)
    (staged / "package").write_bytes(b"p" * 100)

ensure_entry(cache.toolchains / "used", toolchain)  # in use from now on, as a build's toolchain is
ensure_entry(cache.builds / "building", build, lock=cache.build_lock("building"))
print("built", flush=True)
"""


def run(cache: Path, *args: str, expect: int = 0) -> str:
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "cache", *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == expect, done.stderr
    return done.stdout


def make(path: Path, size: int, lock: Path | None = None) -> None:
    """An entry of size bytes, made through the cache's primitive; this process does not hold it."""
    ensure_entry(path, lambda staged: (staged / "data").write_bytes(b"x" * size), lock=lock)
    release_in_use()


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    c = Cache(root)
    make(c.toolchains / "old", 4000)
    make(c.runtime / "r1", 3000)
    make(c.runtime_parts / "p1", 200)
    make(c.builds / "done", 500, lock=c.build_lock("done"))
    make(c.sources / ("0" * 40), 300)
    c.logs.mkdir()
    (c.logs / "cc-failed.log").write_bytes(b"l" * 50)
    return c


def sizes(c: Cache) -> dict[str, tuple[int, int]]:
    kinds = json.loads(run(c.root, "--json"))["kinds"]
    return {k: (v["entries"], v["size"]) for k, v in kinds.items() if v["entries"] or v["size"]}


def test_sizes_per_kind(cache: Cache) -> None:
    # Each entry: its data, its COMPLETE marker ("NAME\n") and its seal.
    got = sizes(cache)
    assert {k: n for k, (n, _) in got.items() if k != "other"} == {
        "toolchains": 1,
        "runtimes": 2,
        "builds": 1,
        "sources": 1,
        "logs": 1,
    }
    assert got["toolchains"][1] > 4000 and got["runtimes"][1] > 3200 and got["logs"] == (1, 50)
    seal = (cache.toolchains / "old" / ".tfaot-entry").stat().st_size
    assert got["toolchains"][1] == 4000 + len("old\n") + seal
    text = run(cache.root)
    assert text.startswith(f"cache {cache.root}: ") and "\n  toolchains " in text and "1 entry" in text


def test_a_prune_beside_a_running_build_leaves_its_entries_and_the_build(
    cache: Cache, tmp_path: Path
) -> None:
    signals = tmp_path / "signals"
    signals.mkdir()
    builder = subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(cache.root), str(signals)], stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (signals / "building").exists():
            assert builder.poll() is None and time.monotonic() < deadline, "the builder did not start"
            time.sleep(0.05)
        report = json.loads(run(cache.root, "--prune", "--json"))
        removed = {Path(e["path"]).relative_to(cache.root).as_posix() for e in report["removed"]}
        kept = {Path(e["path"]).relative_to(cache.root).as_posix() for e in report["in_use"]}
        assert removed == {
            "toolchains/old",
            "runtime/r1",
            "runtime-parts/p1",
            "builds/done",
            f"sources/{'0' * 40}",
            "logs/cc-failed.log",
        }
        assert kept == {"toolchains/used", "builds/building"}
        assert (cache.toolchains / "used" / "python").read_bytes() == b"t" * 1000
        (staged,) = cache.builds.glob(".building.*.tmp")  # the build in progress, untouched
        assert (staged / "half").read_bytes() == b"b" * 100
        for gone in removed:
            assert not os.path.lexists(cache.root / gone), gone
    finally:
        (signals / "go").touch()
        out, _ = builder.communicate(timeout=60)
    assert builder.returncode == 0 and out == "built\n"
    assert sorted(p.name for p in (cache.builds / "building").iterdir()) == [
        ".tfaot-entry",
        "COMPLETE",
        "half",
        "package",
    ]
    # Its builder gone, nothing holds them any more.
    report = json.loads(run(cache.root, "--prune", "--json"))
    assert {Path(e["path"]).name for e in report["removed"]} == {"used", "building"} and report[
        "in_use"
    ] == []
    assert not (cache.builds / "building").exists() and not (cache.toolchains / "used").exists()


def test_prune_by_age_size_and_kind(cache: Cache) -> None:
    day = 86400
    now = time.time()
    # Last use: the newer of the entry's mtime and its lock file's.
    for path, age in (
        (cache.toolchains / "old", 40),
        (cache.runtime / "r1", 10),
        (cache.runtime_parts / "p1", 5),
    ):
        for p in (path, path.parent / f"{path.name}.lock"):
            os.utime(p, (now - age * day, now - age * day))
    before = sizes(cache)

    dry = json.loads(run(cache.root, "--older-than", "30", "--dry-run", "--json"))
    assert [Path(e["path"]).name for e in dry["removed"]] == ["old"] and sizes(cache) == before

    assert "removed 1 entries" in run(cache.root, "toolchains", "runtimes", "--older-than", "30")
    assert not (cache.toolchains / "old").exists() and (cache.runtime / "r1").is_dir()

    # The least recently used first (r1, then p1) until the cache is at most the size asked for.
    total = json.loads(run(cache.root, "--json"))["size"]
    report = json.loads(run(cache.root, "--max-size", str(total - 3000), "--json"))
    assert [Path(e["path"]).name for e in report["removed"]] == ["r1"] and report["size"] <= total - 3000

    run(cache.root, "--prune", "logs")
    assert list(cache.logs.iterdir()) == [] and (cache.runtime_parts / "p1").is_dir()


@pytest.mark.parametrize(
    "args, message",
    [
        (["colours"], "cache: unknown kind 'colours' (expected one of toolchains, "),
        (["--max-size", "lots"], "--max-size: expected a size such as 500M or 10G, got 'lots'"),
        (["--older-than", "-1"], "--older-than: expected a number of days >= 0, got -1.0"),
    ],
)
def test_bad_arguments_change_nothing(cache: Cache, args: list[str], message: str) -> None:
    before = sizes(cache)
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache.root)}
    done = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "cache", "--prune", *args],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode in (2, 3) and done.stderr.startswith(f"tfaot-dist: error: {message}")
    assert done.stderr.count("\n") == 1 and sizes(cache) == before


def test_a_linked_kind_is_neither_counted_nor_pruned(tmp_path: Path, cache: Cache) -> None:
    """A test's cache shares the toolchains of another: pruning it leaves the other's alone."""
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "toolchains").symlink_to(cache.toolchains)
    run(other, "--prune")
    assert (cache.toolchains / "old").is_dir()
    assert json.loads(run(other, "--json"))["kinds"]["toolchains"] == {
        "entries": 0,
        "linked": ["toolchains"],
        "size": 0,
    }
