"""Crashes and concurrency: `build`, `publish` and `setup` killed with SIGKILL at seeded random
moments, and two of each running at once on one cache, channel or area.

A trial starts the command in its own process group, kills the whole group after a delay drawn
uniformly from [0, the time an uninterrupted run takes], and then checks what a reader can see:
every package in the output directory and the build cache is complete and equal to the reference
bytes, the channel index lists only complete archives with their digests, every package listed in
the area passes its manifest and every tool file points at one of them. The same command run again
must then finish and leave exactly the reference result, with no temporary file behind.

TFAOT_DIST_KILL_TRIALS (default 4) is the number of trials per command and TFAOT_DIST_KILL_SEED
(default 2026) the seed; the full count is

    TFAOT_DIST_KILL_TRIALS=30 scripts/test -k kill -s

which prints one line per command: trials, kills that hit a running process, and the outcomes seen.
"""

import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import fresh_cache, snapshot

from tfaot_dist import package as pkg
from tfaot_dist.channel import verify_archive
from tfaot_dist.fsutil import sha256_file, tree_digest
from tfaot_dist.setup_area import buildsys_files, read_installed

TRIALS = int(os.environ.get("TFAOT_DIST_KILL_TRIALS", "4"))
SEED = int(os.environ.get("TFAOT_DIST_KILL_SEED", "2026"))
RUNTIME = "tfaot-xla-runtime"
TEMPORARY = re.compile(r"\..*\.tmp$")


def command(*args) -> list[str]:
    return [sys.executable, "-m", "tfaot_dist", *map(str, args)]


def env_for(cache: Path) -> dict:
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    env.pop("GITHUB_ACTIONS", None)
    return env


def finish(cache: Path, *args) -> float:
    """Run to the end; return the seconds it took."""
    t0 = time.monotonic()
    proc = subprocess.run(command(*args), env=env_for(cache), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


def killed(cache: Path, delay: float, *args) -> bool:
    """Start the command and SIGKILL its process group (TensorFlow workers, compilers) after delay.

    Returns False if it had finished by then (it must have succeeded)."""
    proc = subprocess.Popen(command(*args), env=env_for(cache), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        return True
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.returncode == 0, err
    return False


def temporaries(*roots: Path) -> list[str]:
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found += [str(Path(dirpath, n)) for n in dirnames + filenames if TEMPORARY.match(n)]
            dirnames[:] = [d for d in dirnames if not TEMPORARY.match(d)]
    return found


class Tally:
    """What the kill trials of one command saw, printed at the end."""

    def __init__(self, name: str):
        self.name, self.trials, self.kills, self.outcomes = name, 0, 0, collections.Counter()

    def add(self, was_killed: bool, outcome: str) -> None:
        self.trials += 1
        self.kills += was_killed
        self.outcomes[outcome] += 1

    def report(self) -> None:
        seen = ", ".join(f"{k}: {v}" for k, v in sorted(self.outcomes.items()))
        print(f"\nkill trials {self.name}: {self.trials} trials (seed {SEED}), {self.kills} killed while "
              f"running, all recovered; states seen after the kill: {seen}", file=sys.stderr)


# ---------------------------------------------------------------- build


@pytest.fixture(scope="module")
def crash_registry(tmp_path_factory, data_repo) -> Path:
    """Two fast entries: two_inputs at batch sizes 1 and 2, simple at 1."""
    reg = tmp_path_factory.mktemp("crash-registry")
    cache = tmp_path_factory.mktemp("crash-add-cache")
    for name, config, sizes in (("crash-two", "two_inputs/aot_config.yaml", "1,2"),
                                ("crash-simple", "simple/aot_config.yaml", "1")):
        finish(cache, "--registry", reg, "add-model", name, "--source", data_repo.url, "--aot-config", config,
               "--batch-sizes", sizes)
    return reg


@pytest.fixture(scope="module")
def crash_reference(crash_registry, tmp_path_factory, shared_cache, toolchain) -> tuple[dict, float]:
    """The uninterrupted build: digests of everything in its output directory, and its duration."""
    root = tmp_path_factory.mktemp("crash-reference")
    cache = fresh_cache(root / "cache", shared_cache)
    seconds = finish(cache, "--registry", crash_registry, "build", "--all", "--dist", root / "dist")
    return dist_digests(root / "dist"), seconds


def dist_digests(dist: Path) -> dict[str, str]:
    """Every visible entry of an output directory: archives by sha256, package directories by tree digest.

    Each must be complete: an archive verifies against the manifest inside it, a directory holds
    exactly the files its manifest lists."""
    out = {}
    for entry in sorted(dist.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.name.endswith(".tar.gz"):
            verify_archive(entry)
            out[entry.name] = sha256_file(entry)
        else:
            manifest = pkg.read_manifest(entry)
            pkg.check_files(entry, manifest)
            assert entry.name.startswith(RUNTIME) or manifest["verification"]["batch_sizes"]
            out[entry.name] = tree_digest(entry)
    return out


def check_build_cache(cache: Path, reference: dict[str, str]) -> int:
    """Every finished build in the cache is complete and equal to the reference; returns how many."""
    builds = cache / "builds"
    done = [d for d in builds.iterdir() if d.is_dir() and not d.name.startswith(".")] if builds.exists() else []
    for build in done:
        assert {k: reference[k] for k in dist_digests(build)} == dist_digests(build), build
        assert len(dist_digests(build)) == 2, sorted(p.name for p in build.iterdir())
    return len(done)


def test_kill_build_at_random_moments(crash_registry, crash_reference, tmp_path, shared_cache):
    reference, seconds = crash_reference
    rng = random.Random(SEED)
    tally = Tally("build --all")
    cache = None
    for i in range(TRIALS):
        # Mostly a cold build cache (the kill lands in fetching, compiling or verifying); sometimes a
        # warm one, where the build copies finished packages into a new output directory.
        if cache is None or rng.random() < 0.7:
            cache = fresh_cache(tmp_path / f"cache-{i}", shared_cache)
        dist = tmp_path / f"dist-{i}"
        args = ("--registry", crash_registry, "build", "--all", "--dist", dist)
        was_killed = killed(cache, rng.uniform(0, seconds), *args)
        seen = dist_digests(dist) if dist.exists() else {}
        assert {k: reference[k] for k in seen} == seen
        finished = check_build_cache(cache, reference)
        tally.add(was_killed, f"{len(seen)} in dist/{finished} in cache")
        finish(cache, *args)
        assert dist_digests(dist) == reference
        assert temporaries(dist, cache / "builds", cache / "sources") == []
    tally.report()


def test_two_builds_on_one_cache_at_once(crash_registry, crash_reference, tmp_path, shared_cache):
    """Same cache, same output directory: both succeed, each model is compiled once."""
    reference, _ = crash_reference
    cache = fresh_cache(tmp_path / "cache", shared_cache)
    dist = tmp_path / "dist"
    procs = [subprocess.Popen(command("--registry", crash_registry, "--json", "build", "--all", "--dist",
                                      dist), env=env_for(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=1800) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    statuses = collections.Counter()
    for out, _ in outs:
        for row in json.loads(out)["results"]:
            statuses[row["name"], row["status"]] += 1
    for name in ("crash-two", "crash-simple"):
        assert statuses[name, "built"] == 1, statuses  # the other one waited and took the cached build
    assert dist_digests(dist) == reference
    assert check_build_cache(cache, reference) == 2
    assert temporaries(dist, cache) == []


# ---------------------------------------------------------------- publish


def index_of(channel: Path) -> dict[tuple[str, str], str]:
    doc = json.loads((channel / "index.json").read_text())
    return {(p["name"], p["version"]): p["sha256"] for p in doc["packages"]}


def check_channel(channel: Path) -> int:
    """The index parses and every archive it lists is there, complete, with the listed digest."""
    doc = json.loads((channel / "index.json").read_text())
    for p in doc["packages"]:
        assert sha256_file(channel / p["archive"]) == p["sha256"]
        assert sha256_file(channel / p["manifest"]) == p["manifest_sha256"]
        verify_archive(channel / p["archive"])
    return len(doc["packages"])


def split_dist(built: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two output directories: test-simple + runtime, test-multi + runtime."""
    out = []
    for name in ("test-simple", "test-multi"):
        dist = tmp_path / f"dist-{name}"
        dist.mkdir()
        for archive in (built / "dist").glob("*.tar.gz"):
            if name in archive.name or archive.name.startswith(RUNTIME):
                shutil.copyfile(archive, dist / archive.name)
        out.append(dist)
    return out[0], out[1]


def test_kill_publish_at_random_moments(built, tmp_path, cache):
    """The index is always the old one or the new one, and lists only files that are there."""
    simple, _ = split_dist(built, tmp_path)
    base = tmp_path / "base"
    finish(cache, "publish", "--channel", base, "--dist", simple)
    full = tmp_path / "full"
    seconds = finish(cache, "publish", "--channel", full, "--dist", built / "dist")
    old, new = index_of(base), index_of(full)
    rng = random.Random(SEED + 1)
    tally = Tally("publish")
    for i in range(TRIALS):
        channel = tmp_path / f"channel-{i}"
        if rng.random() < 0.5:
            shutil.copytree(base, channel)  # adds test-multi to a channel that has the others
        was_killed = killed(cache, rng.uniform(0, seconds), "publish", "--channel", channel, "--dist", built / "dist")
        if (channel / "index.json").exists():
            check_channel(channel)
            assert index_of(channel) in (old, new)
            tally.add(was_killed, f"{len(index_of(channel))} listed")
        else:
            tally.add(was_killed, "no index yet")
        finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
        assert index_of(channel) == new and check_channel(channel) == 3
        assert temporaries(channel) == []
    tally.report()


def test_concurrent_publishes_both_land(built, tmp_path, cache):
    a, b = split_dist(built, tmp_path)
    for attempt in range(3):
        channel = tmp_path / f"channel-{attempt}"
        procs = [subprocess.Popen(command("publish", "--channel", channel, "--dist", d), env=env_for(cache),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for d in (a, b)]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        for p in procs:
            p.stdout.close()
            p.stderr.close()
        assert {n for n, _ in index_of(channel)} == {"tfaot-model-test-simple", "tfaot-model-test-multi", RUNTIME}
        assert check_channel(channel) == 3


# ---------------------------------------------------------------- setup


def check_area(area: Path) -> int:
    """installed.json parses; each package it lists matches its manifest (plus the build-system files
    setup adds); each tool file points into a listed package. Returns how many are listed."""
    root = area / "tfaot"
    if not (root / "installed.json").exists():
        return 0
    state = read_installed(root)
    trees = set()
    for name, row in state.items():
        tree = root / row["path"]
        manifest = pkg.read_manifest(tree)
        extra = set(buildsys_files(manifest))
        listed = {rel: meta for rel, meta in manifest["files"].items()}
        present = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}
        assert present == set(listed) | extra | {pkg.MANIFEST}, name
        for rel, meta in listed.items():
            assert sha256_file(tree / rel) == meta["sha256"], rel
        for tool in row["tool_files"]:
            assert (root / tool).is_file()
        trees.add(str(tree))
    for tool in (root / "scram.d").glob("*.xml"):
        pointed = set(re.findall(re.escape(str(root)) + r"/[^/\"]+/[^/\"]+", tool.read_text()))
        assert pointed and pointed <= trees, (tool, pointed, trees)
    return len(state)


def test_kill_setup_at_random_moments(built, tmp_path, cache, shared_cache):
    from httpserve import Server

    channel = tmp_path / "channel"
    finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
    server = Server(channel)
    try:
        area = tmp_path / "area"
        args = ("setup", "test-simple", "test-multi", "--channel", server.url(), "--area", area)
        seconds = finish(fresh_cache(tmp_path / "ref-cache", shared_cache), *args)
        reference = snapshot(area)
        rng = random.Random(SEED + 2)
        tally = Tally("setup")
        for i in range(TRIALS):
            shutil.rmtree(area)
            if rng.random() < 0.4:  # an area that has test-simple already
                finish(cache, "setup", "test-simple", "--channel", server.url(), "--area", area)
            # A new cache downloads the archives (killed mid-download too); an old one has them.
            trial_cache = fresh_cache(tmp_path / f"cache-{i}", shared_cache) if rng.random() < 0.6 else cache
            was_killed = killed(trial_cache, rng.uniform(0, seconds), *args)
            tally.add(was_killed, f"{check_area(area)} installed")
            finish(trial_cache, *args)
            assert check_area(area) == 3
            assert snapshot(area) == reference
            assert temporaries(trial_cache) == []
        tally.report()
    finally:
        server.close()
