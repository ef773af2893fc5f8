"""Crashes and concurrency: `build`, `publish` and `setup` killed with SIGKILL at seeded random
moments, and two of each running at once on one cache, channel or area.

A trial starts the command in its own process group, kills the whole group after a delay drawn
uniformly from [0, the time an uninterrupted run takes], and then checks what a reader can see:
every package in the output directory and the build cache is complete and equal to the reference
bytes, the channel index lists only complete archives with their digests, every package listed in
the area passes its manifest and every tool file points at one of them. The same command run again
must then finish and leave exactly the reference result, with no temporary file behind.

TFAOT_DIST_KILL_TRIALS (default 4) is the number of trials per command and TFAOT_DIST_KILL_SEED
(default 2026) the seed. The random kills are a soak test (marker `soak`): scripts/test leaves them out, and
the weekly workflow (.github/workflows/soak.yml) runs the full count,

    TFAOT_DIST_KILL_TRIALS=30 scripts/test -m soak -s

which prints one line per command: trials, kills that hit a running process, and the outcomes seen.

A kill at a random moment rarely lands in the few microseconds between two renames, so the
`test_crash_at_*` tests also stop each command exactly there (TFAOT_DIST_CRASH_AT names a
util/fs.py's crash_point, where the process kills itself with SIGKILL).
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import DataRepo, Snapshot, fresh_cache, snapshot

from tfaot_dist import package as pkg
from tfaot_dist.channels.channel import verify_archive
from tfaot_dist.install.setup_area import buildsys_files, read_installed
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import CRASH_AT, sha256_file, tree_digest

TRIALS = int(os.environ.get("TFAOT_DIST_KILL_TRIALS", "4"))
SEED = int(os.environ.get("TFAOT_DIST_KILL_SEED", "2026"))
RUNTIME = "tfaot-xla-runtime"
TEMPORARY = re.compile(r"\..*\.tmp$")


# The uninterrupted build: digests of its output directory, seconds (cold and warm cache), its cache.
Reference = tuple[dict[str, str], dict[str, float], Path]


def command(*args: object) -> list[str]:
    return [sys.executable, "-m", "tfaot_dist", *map(str, args)]


def env_for(cache: Path, crash_at: str | None = None) -> dict[str, str]:
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    env.pop("GITHUB_ACTIONS", None)
    env.pop(CRASH_AT, None)
    if crash_at:
        env[CRASH_AT] = crash_at
    return env


def crashed(cache: Path, point: str, *args: object) -> None:
    """Run the command until it kills itself at the crash point."""
    proc = subprocess.run(command(*args), env=env_for(cache, point), capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, f"did not reach {point}: exit {proc.returncode}\n{proc.stderr}"


def finish(cache: Path, *args: object) -> float:
    """Run to the end; return the seconds it took."""
    t0 = time.monotonic()
    proc = subprocess.run(command(*args), env=env_for(cache), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - t0


def killed(cache: Path, delay: float, *args: object) -> bool:
    """Start the command and SIGKILL its process group (TensorFlow workers, compilers) after delay.

    Returns False if it had finished by then (it must have succeeded)."""
    # stderr to a file, not a pipe: a full pipe would stall the command at a moment of its choosing.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            command(*args), env=env_for(cache), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        err.seek(0)
        assert proc.returncode == 0, err.read().decode()
    return False


def temporaries(*roots: Path) -> list[str]:
    """Every .NAME.XXXXXXXX.tmp below roots: what a writer stages before its rename."""
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found += [str(Path(dirpath, n)) for n in dirnames + filenames if TEMPORARY.match(n)]
            dirnames[:] = [d for d in dirnames if not TEMPORARY.match(d)]
    return found


class Tally:
    """What the kill trials of one command saw, printed at the end."""

    def __init__(self, name: str) -> None:
        self.name, self.trials, self.kills = name, 0, 0
        self.outcomes: collections.Counter[str] = collections.Counter()

    def add(self, was_killed: bool, outcome: str) -> None:
        self.trials += 1
        self.kills += was_killed
        self.outcomes[outcome] += 1

    def report(self) -> None:
        seen = ", ".join(f"{k}: {v}" for k, v in sorted(self.outcomes.items()))
        print(
            f"\nkill trials {self.name}: {self.trials} trials (seed {SEED}), {self.kills} killed while "
            f"running, all recovered; states seen after the kill: {seen}",
            file=sys.stderr,
        )


def test_only_the_temporaries_of_that_name_are_stale(tmp_path: Path) -> None:
    """Cleaning up after tfaot-model-x-1.0 under its lock must not touch what a build of
    tfaot-model-x-1.0.1 (under another lock) is writing."""
    from tfaot_dist.util.fs import remove_stale_siblings, temp_sibling, write_atomic

    final = tmp_path / "tfaot-model-x-1.0"
    mine = [temp_sibling(final), tmp_path / ".tfaot-model-x-1.0.abcd_123.tmp"]
    mine[1].write_text("left by a killed write_atomic")
    others = [
        temp_sibling(tmp_path / "tfaot-model-x-1.0.1"),
        tmp_path / ".tfaot-model-x-1.0.tar.gz.abcdefgh.tmp",
    ]
    others[1].write_text("another file's")
    write_atomic(tmp_path / "tfaot-model-x-1.0.json", "{}")
    remove_stale_siblings(final)
    assert [p.exists() for p in mine + others] == [False, False, True, True]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "tfaot-model-x-1.0.json"
    ]


# ---------------------------------------------------------------- build


@pytest.fixture(scope="module")
def crash_registry(tmp_path_factory: pytest.TempPathFactory, data_repo: DataRepo, shared_cache: Path) -> Path:
    """Two fast entries: two_inputs at batch sizes 1 and 2, simple at 1."""
    reg = tmp_path_factory.mktemp("crash-registry")
    # add-model checks each model in TensorFlow: the shared toolchain (an empty cache made a new one, 80 s)
    cache = fresh_cache(tmp_path_factory.mktemp("crash-add") / "cache", shared_cache)
    for name, config, sizes in (
        ("crash-two", "two_inputs/aot_config.yaml", "1,2"),
        ("crash-simple", "simple/aot_config.yaml", "1"),
    ):
        finish(
            cache,
            "--registry",
            reg,
            "add-model",
            name,
            "--source",
            data_repo.url,
            "--aot-config",
            config,
            "--batch-sizes",
            sizes,
        )
    return reg


@pytest.fixture(scope="module")
def crash_reference(
    crash_registry: Path, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path, toolchain: Toolchain
) -> Reference:
    """The uninterrupted build: digests of everything in its output directory, its cache, and how
    long it takes with a cold build cache and with a warm one (copying finished packages)."""
    root = tmp_path_factory.mktemp("crash-reference")
    cache = fresh_cache(root / "cache", shared_cache)
    cold = finish(cache, "--registry", crash_registry, "build", "--all", "--dist", root / "dist")
    warm = finish(cache, "--registry", crash_registry, "build", "--all", "--dist", root / "dist-warm")
    assert dist_digests(root / "dist-warm") == dist_digests(root / "dist")
    return dist_digests(root / "dist"), {"cold": cold, "warm": warm}, cache


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
            assert entry.name.startswith(RUNTIME) or (manifest.verification or {}).get("batch_sizes")
            out[entry.name] = tree_digest(entry)
    return out


def check_build_cache(cache: Path, reference: dict[str, str]) -> int:
    """Every finished build in the cache is complete and equal to the reference; returns how many."""
    builds = cache / "builds"
    done = (
        [d for d in builds.iterdir() if d.is_dir() and not d.name.startswith(".")] if builds.exists() else []
    )
    for build in done:
        assert {k: reference[k] for k in dist_digests(build)} == dist_digests(build), build
        assert len(dist_digests(build)) == 2, sorted(p.name for p in build.iterdir())
    return len(done)


@pytest.mark.soak  # the crash_at tests below stop each command at its exact renames in every run
def test_kill_build_at_random_moments(
    crash_registry: Path, crash_reference: Reference, tmp_path: Path, shared_cache: Path
) -> None:
    reference, seconds, _ = crash_reference
    # The trials' caches hold no compile answers (TensorFlow compiles in each cold trial), so the kill
    # window of a cold trial is a build that compiles: the reference's may have taken kept answers.
    args = ("--registry", crash_registry, "build", "--all", "--dist", tmp_path / "dist-timed")
    seconds = {**seconds, "cold": finish(fresh_cache(tmp_path / "cache-timed", shared_cache, False), *args)}
    rng = random.Random(SEED)
    tally = Tally("build --all")
    cache: Path | None = None
    for i in range(TRIALS):
        # Mostly a cold build cache (the kill lands in fetching, compiling or verifying); sometimes a
        # warm one, where the build copies finished packages into a new output directory.
        cold = cache is None or rng.random() < 0.7
        if cold:
            cache = fresh_cache(tmp_path / f"cache-{i}", shared_cache, compiles=False)
        assert cache is not None  # a fresh one on the first trial
        dist = tmp_path / f"dist-{i}"
        args = ("--registry", crash_registry, "build", "--all", "--dist", dist)
        was_killed = killed(cache, rng.uniform(0, seconds["cold" if cold else "warm"]), *args)
        seen = dist_digests(dist) if dist.exists() else {}
        assert {k: reference[k] for k in seen} == seen
        finished = check_build_cache(cache, reference)
        tally.add(was_killed, f"{len(seen)} in dist/{finished} in cache")
        finish(cache, *args)
        assert dist_digests(dist) == reference
        assert temporaries(dist, cache) == []
    tally.report()


def test_two_builds_on_one_cache_at_once(
    crash_registry: Path, crash_reference: Reference, tmp_path: Path, shared_cache: Path
) -> None:
    """Same cache, same output directory: both succeed, each model is compiled once."""
    reference, _, _ = crash_reference
    cache = fresh_cache(tmp_path / "cache", shared_cache)
    dist = tmp_path / "dist"
    procs = [
        subprocess.Popen(
            command("--registry", crash_registry, "--json", "build", "--all", "--dist", dist),
            env=env_for(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=1800) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    statuses: collections.Counter[tuple[str, str]] = collections.Counter()
    for out, _ in outs:
        for row in json.loads(out)["results"]:
            statuses[row["name"], row["status"]] += 1
    for name in ("crash-two", "crash-simple"):
        assert statuses[name, "built"] == 1, statuses  # the other one waited and took the cached build
    assert dist_digests(dist) == reference
    assert check_build_cache(cache, reference) == 2
    assert temporaries(dist, cache) == []


@pytest.mark.parametrize("point", ["dist_archive", "dist_dir"])
def test_crash_at_each_step_of_copying_into_dist(
    point: str, crash_registry: Path, crash_reference: Reference, tmp_path: Path
) -> None:
    """A build dies at `point` while it copies crash-simple into the output directory: what is
    there is complete or absent, and the next build finishes the copy (no other build of the
    version is ever copied over it, test_lifecycle.py)."""
    reference, _, cache = crash_reference
    dist = tmp_path / "dist"
    finish(cache, "--registry", crash_registry, "build", "crash-two", "--dist", dist)
    crashed(cache, point, "--registry", crash_registry, "build", "crash-simple", "--dist", dist)
    seen = dist_digests(dist)
    assert all(
        reference.get(name) == digest for name, digest in seen.items()
    )  # whatever is there is complete
    proc = subprocess.run(
        command("--registry", crash_registry, "--json", "build", "--all", "--dist", dist),
        env=env_for(cache),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    statuses = {row["name"]: row["status"] for row in json.loads(proc.stdout)["results"]}
    assert statuses == {
        "crash-simple": "up to date" if point == "dist_dir" else "cached",
        "crash-two": "up to date",
    }
    assert dist_digests(dist) == reference
    assert temporaries(dist) == []


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


@pytest.mark.soak  # the crash_at tests below stop each command at its exact renames in every run
def test_kill_publish_at_random_moments(built: Path, tmp_path: Path, cache: Path) -> None:
    """The index is always the old one or the new one, and lists only files that are there."""
    simple, _ = split_dist(built, tmp_path)
    base = tmp_path / "base"
    finish(cache, "publish", "--channel", base, "--dist", simple)
    # How long each kind of trial takes uninterrupted: into a new channel, or adding test-multi.
    full, grown_full = tmp_path / "full", tmp_path / "grown"
    shutil.copytree(base, grown_full)
    seconds = {
        grown: finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
        for grown, channel in ((False, full), (True, grown_full))
    }
    old, new = index_of(base), index_of(full)
    rng = random.Random(SEED + 1)
    tally = Tally("publish")
    for i in range(TRIALS):
        channel = tmp_path / f"channel-{i}"
        grown = rng.random() < 0.5
        if grown:
            shutil.copytree(base, channel)  # adds test-multi to a channel that has the others
        was_killed = killed(
            cache, rng.uniform(0, seconds[grown]), "publish", "--channel", channel, "--dist", built / "dist"
        )
        if (channel / "index.json").exists():
            check_channel(channel)
            assert index_of(channel) in ((old, new) if grown else (new,))
            tally.add(was_killed, f"{len(index_of(channel))} listed")
        else:
            tally.add(was_killed, "no index yet")
        finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
        assert index_of(channel) == new and check_channel(channel) == 3
        assert temporaries(channel) == []
    tally.report()


def test_crash_before_the_index_is_replaced(built: Path, tmp_path: Path, cache: Path) -> None:
    simple, _ = split_dist(built, tmp_path)
    channel = tmp_path / "channel"
    finish(cache, "publish", "--channel", channel, "--dist", simple)
    old = index_of(channel)
    crashed(cache, "publish_index", "publish", "--channel", channel, "--dist", built / "dist")
    assert index_of(channel) == old and check_channel(channel) == 2
    finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
    assert check_channel(channel) == 3 and temporaries(channel) == []


def test_concurrent_publishes_both_land(built: Path, tmp_path: Path, cache: Path) -> None:
    a, b = split_dist(built, tmp_path)
    for attempt in range(3):
        channel = tmp_path / f"channel-{attempt}"
        procs = [
            subprocess.Popen(
                command("publish", "--channel", channel, "--dist", d),
                env=env_for(cache),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for d in (a, b)
        ]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        for p in procs:
            assert p.stdout is not None and p.stderr is not None  # PIPE
            p.stdout.close()
            p.stderr.close()
        assert {n for n, _ in index_of(channel)} == {
            "tfaot-model-test-simple",
            "tfaot-model-test-multi",
            RUNTIME,
        }
        assert check_channel(channel) == 3


# ---------------------------------------------------------------- setup


def check_tree(tree: Path) -> None:
    """An installed package: its manifest's files with their digests, the build-system files
    setup adds, nothing else."""
    manifest = pkg.read_manifest(tree)
    listed = manifest.files
    present = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()}
    assert present == set(listed) | set(buildsys_files(manifest)) | {pkg.MANIFEST}, tree
    for rel, meta in listed.items():
        assert sha256_file(tree / rel) == meta.sha256, rel


def check_area(area: Path) -> int:
    """Each package installed.json lists is complete, with its tool files; every tool file and
    CMake forwarder points at a complete package (one a killed setup placed may not be listed
    yet). Returns how many packages are listed."""
    root = area / "tfaot"
    state = read_installed(root) if (root / "installed.json").exists() else {}
    for row in state.values():
        check_tree(root / row.path)
        for tool in row.tool_files:
            assert (root / tool).is_file()
    pointers = [*(root / "scram.d").glob("*.xml"), *(root / "lib" / "cmake").glob("*/*Config.cmake")]
    for pointer in pointers:
        text = pointer.read_text()
        trees = set(re.findall(re.escape(str(root)) + r"/([^/\"]+/[^/\"]+)", text))
        trees |= set(re.findall(r"\.\./\.\./\.\./([^/\"]+/[^/\"]+)/", text))  # the forwarders' relative path
        assert len(trees) == 1, (pointer, text)
        check_tree(root / trees.pop())
    return len(state)


@pytest.mark.parametrize("before", [(), ("test-simple",)])
def test_crash_before_installed_json_is_replaced(
    before: tuple[()] | tuple[str, ...], built: Path, tmp_path: Path, cache: Path
) -> None:
    """Tool files and forwarders are in place, installed.json does not list them yet."""
    channel = tmp_path / "channel"
    finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
    reference = tmp_path / "reference"
    finish(cache, "setup", "test-simple", "test-multi", "--channel", channel, "--area", reference)
    area = tmp_path / "area"
    for name in before:
        finish(cache, "setup", name, "--channel", channel, "--area", area)
    crashed(cache, "setup_listed", "setup", "test-simple", "test-multi", "--channel", channel, "--area", area)
    assert check_area(area) == 2 * len(before)  # test-simple and its runtime, or nothing
    placed = "test-multi" if before else "test-simple"  # the first one setup installs
    assert (area / "tfaot" / "scram.d" / f"tfaot-model-{placed}.xml").exists()  # placed, not listed
    finish(cache, "setup", "test-simple", "test-multi", "--channel", channel, "--area", area)
    assert check_area(area) == 3
    assert snapshot(area) == relocated(snapshot(reference), str(reference), str(area))


def relocated(state: Snapshot, old: str, new: str) -> Snapshot:
    """A snapshot of an area as it would be at another path."""
    return {
        path.replace(old, new): data.replace(old.encode(), new.encode()) if isinstance(data, bytes) else data
        for path, data in state.items()
    }


@pytest.mark.soak  # the crash_at tests below stop each command at its exact renames in every run
def test_kill_setup_at_random_moments(built: Path, tmp_path: Path, cache: Path, shared_cache: Path) -> None:
    from httpserve import Server

    channel = tmp_path / "channel"
    finish(cache, "publish", "--channel", channel, "--dist", built / "dist")
    server = Server(channel)

    def setup_both(area: Path) -> tuple[object, ...]:
        return "setup", "test-simple", "test-multi", "--channel", server.url(), "--area", area

    def prepare(area: Path, has_simple: bool, new_cache: bool, name: str) -> Path:
        """The area of a trial (empty, or with test-simple); returns the cache the trial uses."""
        if has_simple:
            finish(cache, "setup", "test-simple", "--channel", server.url(), "--area", area)
        return fresh_cache(tmp_path / name, shared_cache) if new_cache else cache

    try:
        area = tmp_path / "area"
        finish(fresh_cache(tmp_path / "ref-cache", shared_cache), *setup_both(area))
        reference = snapshot(area)
        seconds: dict[
            tuple[bool, bool], float
        ] = {}  # how long each kind of trial takes uninterrupted, measured the first time
        rng = random.Random(SEED + 2)
        tally = Tally("setup")
        for i in range(TRIALS):
            shutil.rmtree(area)
            # An area that has test-simple already, or none; a new cache that downloads the archives
            # (killed mid-download too), or an old one that has them.
            kind = (rng.random() < 0.4, rng.random() < 0.6)
            if kind not in seconds:
                measure = tmp_path / f"measure-{len(seconds)}"
                seconds[kind] = finish(
                    prepare(measure, *kind, f"measure-cache-{len(seconds)}"), *setup_both(measure)
                )
            trial_cache = prepare(area, *kind, f"cache-{i}")
            args = setup_both(area)
            was_killed = killed(trial_cache, rng.uniform(0, seconds[kind]), *args)
            tally.add(was_killed, f"{check_area(area)} installed")
            finish(trial_cache, *args)
            assert check_area(area) == 3
            assert snapshot(area) == reference
            assert temporaries(trial_cache) == []
        tally.report()
    finally:
        server.close()
