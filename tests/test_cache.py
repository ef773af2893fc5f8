"""The cache layout and its one primitive for entries (cache.ensure_entry); no TensorFlow."""

import multiprocessing
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing import queues, synchronize
from pathlib import Path

import pytest

from tfaot_dist.cache import COMPLETE, SEAL, SHARED, Cache, ensure_entry, entry_lock
from tfaot_dist.errors import CompileFailed

FORK = multiprocessing.get_context("fork")
STAGED = re.compile(r"\.entry\.[a-z0-9_]{8}\.tmp")


def counting_build(runs: Path, seconds: float = 0.0) -> Callable[[Path], None]:
    """A build that records each run in the file runs (outside the cache) and writes one file."""

    def build(staged: Path) -> None:
        with open(runs, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(seconds)
        (staged / "data").write_text("built\n")

    return build


def leftovers(parent: Path) -> list[str]:
    """What is in parent besides the entry and its lock."""
    return sorted(p.name for p in parent.iterdir() if p.name not in ("entry", "entry.lock"))


def test_layout_names_are_the_ones_existing_caches_have(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    names = {
        d: getattr(cache, d).relative_to(tmp_path).as_posix()
        for d in (
            "toolchains",
            "runtime",
            "abseil",
            "downloads",
            "pch",
            "bench",
            "git",
            "sources",
            "archives",
            "channels",
            "builds",
            "locks",
            "logs",
        )
    }
    assert names == {d: d for d in names}
    assert cache.runtime_parts == tmp_path / "runtime-parts"
    assert cache.build_lock("k") == tmp_path / "locks" / "build-k.lock"
    assert cache.git_mirror_lock("https://h/r.git") == cache.git_mirror("https://h/r.git").with_suffix(
        ".lock"
    )
    assert (
        cache.git_mirror("https://h/r.git").name == "c2fff1802b1cc2d509237b01.git"
    )  # sha256 of the URL, 24 digits
    assert entry_lock(tmp_path / "pch" / "abc") == tmp_path / "pch" / "abc.lock"


def test_share_into_links_the_shared_directories(tmp_path: Path) -> None:
    shared = Cache(tmp_path / "shared")
    other = shared.share_into(tmp_path / "other")
    assert sorted(p.name for p in other.root.iterdir()) == sorted(SHARED)
    for name in SHARED:
        assert (other.root / name).resolve() == (shared.root / name).resolve()
    (other.pch / "x").mkdir()
    assert (shared.pch / "x").is_dir()
    assert not (tmp_path / "shared" / "builds").exists()  # per-registry directories stay apart


def test_builds_once_and_marks_complete(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"
    assert ensure_entry(final, counting_build(runs)) == final
    assert ensure_entry(final, counting_build(runs)) == final
    assert len(runs.read_text().split()) == 1
    assert (final / "data").read_text() == "built\n"
    assert (final / COMPLETE).read_text() == "entry\n"
    assert leftovers(final.parent) == []


def _build_concurrently(
    final: Path, runs: Path, start: synchronize.Barrier, results: "queues.Queue[str]"
) -> None:
    start.wait()
    results.put(ensure_entry(final, counting_build(runs, seconds=1.0)).as_posix())


def test_concurrent_callers_build_once(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"
    start, results = FORK.Barrier(2), FORK.Queue()
    children = [
        FORK.Process(target=_build_concurrently, args=(final, runs, start, results)) for _ in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0]
    assert [results.get(timeout=5) for _ in children] == [final.as_posix()] * 2
    assert len(runs.read_text().split()) == 1
    assert (final / COMPLETE).is_file() and leftovers(final.parent) == []


def _threads_build(root: Path, runs: Path, entries: int) -> None:
    """Two threads of this process ask for each entry at once (`build --jobs` builds in threads)."""
    for k in range(entries):
        start = threading.Barrier(2)

        def ask(final: Path = root / f"entry{k}", start: threading.Barrier = start) -> None:
            start.wait()
            ensure_entry(final, counting_build(runs, seconds=0.05))

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def test_threads_of_one_process_build_once_and_never_wait_for_each_others_hold(tmp_path: Path) -> None:
    """The thread that made an entry holds it shared for the rest of the process (hold_in_use); a
    thread that waited for the entry's file lock meanwhile must still get it (it hung the fleet's
    `build --jobs 2` once)."""
    runs, entries = tmp_path / "runs", 12
    child = FORK.Process(target=_threads_build, args=(tmp_path / "cache", runs, entries))
    child.start()
    child.join(20)  # under a second when it works
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("two threads asking for one entry waited for each other")
    assert child.exitcode == 0
    assert len(runs.read_text().split()) == entries  # each entry built once


def test_a_failing_build_leaves_nothing_and_the_next_call_builds(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"

    def failing(staged: Path) -> None:
        (staged / "half").write_text("x")
        raise RuntimeError("compiler died")

    with pytest.raises(RuntimeError, match="compiler died"):
        ensure_entry(final, failing)
    assert not final.exists() and leftovers(final.parent) == []
    ensure_entry(final, counting_build(runs))
    assert (final / "data").is_file() and not (final / "half").exists()
    assert len(runs.read_text().split()) == 1


def _build_until_killed(final: Path, started: synchronize.Event) -> None:
    def hang(staged: Path) -> None:
        (staged / "half").write_text("x")
        started.set()
        time.sleep(600)

    ensure_entry(final, hang)


def test_a_build_killed_midway_leaves_a_sibling_that_is_not_complete_and_is_removed(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"
    started = FORK.Event()
    child = FORK.Process(target=_build_until_killed, args=(final, started))
    child.start()
    assert started.wait(60) and child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    [staged] = leftovers(final.parent)
    assert STAGED.fullmatch(staged) and (final.parent / staged / "half").is_file()
    assert not final.exists()

    ensure_entry(final, counting_build(runs))  # the dead process's lock is gone with it
    assert (final / COMPLETE).is_file() and not (final / "half").exists()
    assert leftovers(final.parent) == []
    assert len(runs.read_text().split()) == 1


def test_an_incomplete_entry_is_replaced(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"
    final.mkdir(parents=True)
    (final / "stale").write_text("x")  # no marker: not complete
    ensure_entry(final, counting_build(runs))
    assert sorted(p.name for p in final.iterdir()) == sorted([COMPLETE, SEAL, "data"])
    assert leftovers(final.parent) == []


def test_is_complete_decides_and_no_marker_is_written(tmp_path: Path) -> None:
    runs, final = tmp_path / "runs", tmp_path / "cache" / "entry"
    final.mkdir(parents=True)
    (final / "program").write_text("made by an older version, no marker")

    def has_program(entry: Path) -> bool:
        return (entry / "program").is_file()

    ensure_entry(final, counting_build(runs), marker=None, is_complete=has_program)
    assert not runs.exists()  # reused as it is

    def build_program(staged: Path) -> None:
        (staged / "program").write_text("new")

    other = tmp_path / "cache" / "other"
    lock = tmp_path / "locks" / "other.lock"
    ensure_entry(other, build_program, marker=None, is_complete=has_program, lock=lock)
    assert sorted(p.name for p in other.iterdir()) == sorted(["program", SEAL]) and lock.is_file()
    assert not entry_lock(other).exists()


def test_keep_failed_moves_a_build_whose_error_names_its_log_out_of_the_cache(tmp_path: Path) -> None:
    final = tmp_path / "cache" / "entry"

    def failing_with_log(staged: Path) -> None:
        (staged / "worker.log").write_text("why it failed\n")
        raise CompileFailed(f"compile failed (log: {staged / 'worker.log'})")

    with pytest.raises(CompileFailed) as info:
        ensure_entry(final, failing_with_log, keep_failed=True)
    log = Path(str(info.value).split("(log: ")[1].rstrip(")"))
    assert log.read_text() == "why it failed\n" and not log.is_relative_to(final.parent)
    assert log.parent.name == "build" and log.parent.parent.name.startswith("tfaot-dist-failed-entry-")
    shutil.rmtree(log.parent.parent)
    assert not final.exists() and leftovers(final.parent) == []

    with pytest.raises(CompileFailed):  # without keep_failed the staged tree goes with the error
        ensure_entry(final, failing_with_log)
    assert leftovers(final.parent) == []
