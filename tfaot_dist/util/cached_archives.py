"""The content-addressed archive cache, and the downloads on their way into it (util/download.py makes
them; this module needs no HTTP stack, so a directory channel's setup does not load one).

    CACHE/archives/<sha256>   content-addressed: a file there has exactly that digest

A download is a temporary file in CACHE/, locked by this process (hold()) until it is moved into
CACHE/archives/ once verified (keep()) or deleted (discard()). A cached archive is hashed again before
each use (cached_verified): bytes replaced in the cache are a miss, removed and fetched again, never
installed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO

from tfaot_dist.cache import Cache
from tfaot_dist.util.fs import sha256_file

_held: dict[Path, BinaryIO] = {}  # our downloads not yet kept or discarded -> their locked file
_held_lock = threading.Lock()


def hold(path: Path, locked: BinaryIO) -> None:
    """A new download at path, kept locked (locked: its open file) until keep() or discard()."""
    with _held_lock:
        _held[path] = locked


def _release(path: Path) -> None:
    with _held_lock:
        locked = _held.pop(path, None)
    if locked is not None:
        locked.close()


def discard(downloaded: Path) -> None:
    """Delete a download that is not wanted (after a refusal)."""
    downloaded.unlink(missing_ok=True)
    _release(downloaded)


def cached_archive(cache: Path, sha256: str) -> Path:
    return Cache(cache).archives / sha256


def cached_verified(cache: Path, sha256: str) -> Path | None:
    """The cached archive of sha256 if its bytes still have that digest; a file whose bytes changed
    is removed (a cache miss: the caller fetches it again)."""
    path = cached_archive(cache, sha256)
    if not path.is_file():
        return None
    if sha256_file(path) == sha256:
        return path
    path.unlink(missing_ok=True)
    return None


def keep(downloaded: Path, cache: Path, sha256: str) -> Path:
    """Move a verified download (a temporary file in cache) into the content-addressed cache."""
    final = cached_archive(cache, sha256)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(downloaded, final)
    _release(downloaded)
    return final
