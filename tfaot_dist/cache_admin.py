"""`tfaot-dist cache`: what the cache holds, by kind, and pruning it (as `pip cache` and `conda clean`).

The kinds group the cache's directories (see the layout at the top of cache.py):

    toolchains   toolchains/                       TensorFlow venvs
    runtimes     runtime/ runtime-parts/ pch/      the XLA runtime, its parts, precompiled headers,
                 objects/                          compiled verification harnesses (cxx/object_cache.py)
    abseil       abseil/
    sources      git/ sources/ archives/           mirrors, source trees, downloaded archives
    builds       builds/ onnx/                     finished packages, SavedModels converted from ONNX
    downloads    downloads/                        pinned sdists
    channels     channels/                         the last index read from each channel
    checks       checks/                           TensorFlow's check answers (check_answers.py)
    compiles     compiles/                         TensorFlow's compile answers (compile_answers.py)
    bench        bench/                            benchmark programs
    logs         logs/                             full output of failed programs, tracebacks

An entry (a child of one of those directories) is removed only under its lock
(cache.entry_lock, or for builds cache.build_lock), taken without waiting: an
entry another process is making holds it exclusively, one a running command
uses holds it shared (cache.hold_in_use), and either way the prune skips it
and says so. The lock files stay (a lock file removed under a waiting process
would let two hold "the" lock). An entry goes by renaming it to a temporary
sibling first, so no reader ever sees half of one. A kind directory that is a
link (a test's cache sharing another's toolchains) is neither counted nor
pruned: it belongs to the cache it points into.

Last use: the newest mtime of the entry and of its lock file (hold_in_use
touches the lock file each time a command uses the entry). `--older-than`
takes entries not used for that many days; `--max-size` takes the least
recently used entries until the whole cache is at most that size.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.cache import Cache, entry_lock
from tfaot_dist.errors import InvalidInput, UsageError
from tfaot_dist.util.fs import remove_entry, remove_stale_siblings, temp_sibling

KINDS: dict[str, tuple[str, ...]] = {
    "toolchains": ("toolchains",),
    "runtimes": ("runtime", "runtime-parts", "pch", "objects"),
    "abseil": ("abseil",),
    "sources": ("git", "sources", "archives"),
    "builds": ("builds", "onnx"),
    "downloads": ("downloads",),
    "channels": ("channels",),
    "checks": ("checks",),
    "compiles": ("compiles",),
    "bench": ("bench",),
    "logs": ("logs",),
}
OTHER = "other"  # locks/ and anything else at the top of the cache: counted, never pruned
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")  # util/fs.py's temp_sibling and write_atomic names
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path  # may not exist: only the temporaries of an entry never finished
    lock: Path | None  # None: nothing ever holds it (a log or a check answer, written whole by a rename)
    size: int  # bytes of its files, its temporaries' included
    last_used: float  # seconds since the epoch


@dataclass(frozen=True)
class KindUsage:
    kind: str
    entries: int
    size: int
    linked: tuple[str, ...] = ()  # directories of the kind that are links elsewhere (not counted)


@dataclass(frozen=True)
class Pruned:
    removed: tuple[Entry, ...]
    in_use: tuple[Entry, ...]  # matched, but another process holds them
    size_after: int  # the whole cache's size afterwards


def parse_size(text: str) -> int:
    """'500M', '10G', '1.5GB', '1048576' (binary units: K = 1024) -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise InvalidInput(f"--max-size: expected a size such as 500M or 10G, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def usage(cache: Cache) -> list[KindUsage]:
    """Size and entry count of each kind, then OTHER (everything else at the top of the cache)."""
    out = []
    for kind, dirs in KINDS.items():
        found = entries(cache, (kind,))
        linked = tuple(d for d in dirs if (cache.root / d).is_symlink())
        out.append(KindUsage(kind, len(found), sum(e.size for e in found), linked))
    known = {d for dirs in KINDS.values() for d in dirs}
    other = 0
    if cache.root.is_dir():
        for child in cache.root.iterdir():
            if child.name not in known:
                other += _size(child)
    out.append(KindUsage(OTHER, 0, other))
    return out


def entries(cache: Cache, kinds: tuple[str, ...]) -> list[Entry]:
    """The entries of these kinds, found in the cache's directories (links to elsewhere skipped)."""
    out = []
    for kind in kinds:
        for name in KINDS[kind]:
            directory = cache.root / name
            if directory.is_symlink() or not directory.is_dir():
                continue
            groups: dict[str, list[Path]] = {}
            for child in directory.iterdir():
                temp = _TEMP.fullmatch(child.name)
                if child.name.endswith(".lock") or (child.name.endswith(".tmp") and not temp):
                    continue  # locks stay; another kind of temporary is its maker's (a download's)
                groups.setdefault(temp.group(1) if temp else child.name, []).append(child)
            for entry_name, paths in sorted(groups.items()):
                path = directory / entry_name
                lock = _lock_of(cache, name, path)
                times = [_mtime(p) for p in [*paths, *([lock] if lock else [])]]
                out.append(Entry(kind, path, lock, sum(_size(p) for p in paths), max(times)))
    return out


def prune(
    cache: Cache,
    kinds: tuple[str, ...],
    older_than_days: float | None = None,
    max_size: int | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Remove the entries of kinds that match (not used for older_than_days; the least recently used
    until the cache is at most max_size; neither given: all), skipping those another process holds."""
    candidates = sorted(entries(cache, kinds), key=lambda e: e.last_used)
    total = sum(u.size for u in usage(cache))
    now = time.time()
    removed: list[Entry] = []
    in_use: list[Entry] = []
    for entry in candidates:
        old = older_than_days is not None and now - entry.last_used > older_than_days * 86400
        too_big = max_size is not None and total > max_size
        if (older_than_days is not None or max_size is not None) and not (old or too_big):
            continue
        if _remove(entry, dry_run):
            removed.append(entry)
            total -= entry.size
        else:
            in_use.append(entry)
    return Pruned(tuple(removed), tuple(in_use), total)


def _remove(entry: Entry, dry_run: bool) -> bool:
    """Remove entry under its lock taken without waiting; False when another process holds it."""
    if entry.lock is None:
        if not dry_run:
            remove_entry(entry.path)
        return True
    try:
        fd = os.open(entry.lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if not dry_run:
            remove_stale_siblings(entry.path)  # under the lock: no live process owns them
            if os.path.lexists(entry.path):
                gone = temp_sibling(entry.path)
                os.rename(entry.path, gone / "old")  # readers see the whole entry, or none
                shutil.rmtree(gone, ignore_errors=True)
        return True
    finally:
        os.close(fd)  # the lock file stays: see the top of this file


def _lock_of(cache: Cache, directory: str, path: Path) -> Path | None:
    if directory in ("logs", "checks"):
        return None
    if directory == "builds":
        return cache.build_lock(path.name)
    if directory == "git":
        return path.with_suffix(".lock")  # Cache.git_mirror_lock
    return entry_lock(path)


def _size(path: Path) -> int:
    """Bytes of the files under path (links not followed, a file with several links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [path]
    while stack:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                stack.extend(p / name for name in os.listdir(p))
        elif (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def command(
    cache: Cache,
    kinds: tuple[str, ...],
    prune_them: bool,
    older_than_days: float | None,
    max_size: str | None,
    dry_run: bool,
) -> tuple[dict[str, object], str]:
    """What `tfaot-dist cache` prints: (JSON data, text). Without prune_them (nor a filter, which
    implies it): the size of each kind; else what the prune removed and what it left in use."""
    for kind in kinds:
        if kind not in KINDS:
            raise UsageError(f"cache: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    if older_than_days is not None and older_than_days < 0:
        raise InvalidInput(f"--older-than: expected a number of days >= 0, got {older_than_days}")
    limit = parse_size(max_size) if max_size is not None else None
    chosen = kinds or tuple(KINDS)
    if not (prune_them or older_than_days is not None or limit is not None):
        every = usage(cache)
        rows = [u for u in every if not kinds or u.kind in kinds]
        total = sum(u.size for u in every)
        data: dict[str, object] = {
            "cache": str(cache.root),
            "size": total,
            "kinds": {u.kind: {"entries": u.entries, "size": u.size, "linked": list(u.linked)} for u in rows},
        }
        lines = [f"cache {cache.root}: {human(total)}"]
        for u in rows:
            count = f"{u.entries} entr{'y' if u.entries == 1 else 'ies'}" if u.kind != OTHER else "locks"
            link = f" (links elsewhere, not counted: {', '.join(u.linked)})" if u.linked else ""
            lines.append(f"  {u.kind:<11} {human(u.size):>10}  {count}{link}")
        return data, "\n".join(lines)
    done = prune(cache, chosen, older_than_days, limit, dry_run)
    freed = sum(e.size for e in done.removed)
    data = {
        "cache": str(cache.root),
        "dry_run": dry_run,
        "removed": [{"kind": e.kind, "path": str(e.path), "size": e.size} for e in done.removed],
        "in_use": [{"kind": e.kind, "path": str(e.path), "size": e.size} for e in done.in_use],
        "freed": freed,
        "size": done.size_after,
    }
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {len(done.removed)} entries ({human(freed)}) of {', '.join(chosen)}"]
    lines += [f"  {e.kind}: {e.path} ({human(e.size)})" for e in done.removed]
    if done.in_use:
        lines.append(f"kept {len(done.in_use)} in use by another process:")
        lines += [f"  {e.kind}: {e.path}" for e in done.in_use]
    lines.append(f"cache {cache.root}: {human(done.size_after)}")
    return data, "\n".join(lines)
