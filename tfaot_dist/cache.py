"""The cache: its layout, and the one way a cached entry is made.

    CACHE/                         $TFAOT_DIST_CACHE (default_cache()), default ~/.cache/tfaot-dist
      toolchains/<key>/ <key>.lock TensorFlow venvs                          (shared)
      abseil/<key>/ <key>.lock     Abseil builds                             (shared)
      runtime/<key>/ <key>.lock    XLA AOT runtime builds                    (shared)
      downloads/<sdist> .lock      pinned sdists fetched with pip            (shared)
      pch/<key>/ <key>.lock        precompiled interface headers             (shared)
      bench/tf-capi-<key>/ .lock   the TensorFlow C API benchmark program    (shared)
      git/<digest>.git <digest>.lock   bare mirrors of source repositories
      sources/<commit>/ .lock      git source trees; sha256-<hex>/: archives' (claim_temp, no lock)
      archives/<sha256>            downloaded archives, content-addressed (download.py)
      channels/<digest>/           the last index read from each channel
      builds/<build key>/          finished packages; locks/build-<build key>.lock
      locks/  logs/                build locks; full output of failed programs (process.py)

The shared directories hold entries keyed by everything that makes their
bytes, nothing that belongs to one registry: another cache (a rebuild's, a
test's) may link to them and reuse what is there.

ensure_entry() is the one primitive for a directory entry: lock, check again,
build in a temporary sibling, mark complete, rename into place. A reader
never sees half an entry; a process that dies leaves only a temporary sibling,
which the next builder removes.
"""

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.errors import TfaotError
from tfaot_dist.util.fs import (
    file_lock,
    remove_stale_siblings,
    replace_dir,
    sha256_bytes,
    temp_sibling,
    write_atomic,
)

# Written last into an entry (before its rename): an entry that has it is complete.
COMPLETE = "COMPLETE"
# Expensive entries keyed by their contents, reusable from any cache that links to them.
SHARED = ("toolchains", "runtime", "runtime-parts", "abseil", "downloads", "pch", "bench")


def default_cache() -> Path:
    """$TFAOT_DIST_CACHE, else $XDG_CACHE_HOME/tfaot-dist, else ~/.cache/tfaot-dist."""
    if os.environ.get("TFAOT_DIST_CACHE"):
        return Path(os.environ["TFAOT_DIST_CACHE"]).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base, "tfaot-dist").absolute()


@dataclass(frozen=True)
class Cache:
    root: Path

    @property
    def toolchains(self) -> Path:
        return self.root / "toolchains"

    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    @property
    def runtime_parts(self) -> Path:
        return self.root / "runtime-parts"

    @property
    def abseil(self) -> Path:
        return self.root / "abseil"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def pch(self) -> Path:
        return self.root / "pch"

    @property
    def bench(self) -> Path:
        return self.root / "bench"

    @property
    def git(self) -> Path:
        return self.root / "git"

    @property
    def sources(self) -> Path:
        return self.root / "sources"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def channels(self) -> Path:
        return self.root / "channels"

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def git_mirror(self, url: str) -> Path:
        return self.git / f"{sha256_bytes(url.encode())[:24]}.git"

    def git_mirror_lock(self, url: str) -> Path:
        return self.git_mirror(url).with_suffix(".lock")

    def channel_dir(self, location: str) -> Path:
        """Where what was last read from the channel at location is kept."""
        return self.channels / sha256_bytes(location.encode())[:24]

    def build_lock(self, key: str) -> Path:
        # Outside builds/, so that a build that fails leaves builds/ as it was.
        return self.locks / f"build-{key}.lock"

    def output_lock(self, path: Path) -> Path:
        """The lock of a staging place in an output directory (compile's): in the cache, so that the
        output directory holds only packages."""
        return self.locks / f"output-{sha256_bytes(str(path.absolute()).encode())[:24]}.lock"

    def share_into(self, other: Path) -> "Cache":
        """A cache at other (made if missing) whose shared directories are links to ours."""
        other.mkdir(parents=True, exist_ok=True)
        for name in SHARED:
            (self.root / name).mkdir(parents=True, exist_ok=True)
            (other / name).symlink_to((self.root / name).absolute())
        return Cache(other)


def entry_lock(entry: Path) -> Path:
    """The lock of a cache entry: a sibling file named after it."""
    return entry.parent / f"{entry.name}.lock"


def has_marker(marker: str) -> Callable[[Path], bool]:
    return lambda entry: (entry / marker).is_file()


def ensure_entry(final: Path, build: Callable[[Path], object], *, marker: str | None = COMPLETE,
                 is_complete: Callable[[Path], bool] | None = None, lock: Path | None = None,
                 log: Callable[[str], None] | None = None, keep_failed: bool = False) -> Path:
    """The complete directory entry final, made by build(staged) if it is not.

    build fills the empty directory staged, a temporary sibling of final (the name
    fsutil.remove_stale_siblings recognises; what build returns is ignored); then marker
    (if any) is written in it, containing final's name, and staged is renamed to final.
    If build raises, staged is removed (see staging() for keep_failed) and the error goes
    on: final is as it was.
    is_complete: whether an existing final is usable (default: it has marker).
    lock: held while checking again and building (default: entry_lock(final)); log is
    told when another process holds it.
    """
    if is_complete is None:
        if marker is None:
            raise ValueError("ensure_entry needs a marker or is_complete")
        is_complete = has_marker(marker)
    if is_complete(final):
        return final
    with file_lock(lock or entry_lock(final), log):
        if is_complete(final):  # another process made it while we waited
            return final
        remove_stale_siblings(final)  # under the lock: only dead processes' siblings are there
        with staging(final, keep_failed) as staged:
            build(staged)
            if marker is not None:
                write_atomic(staged / marker, final.name + "\n")
            replace_dir(staged, final)  # an incomplete final is replaced
    return final


@contextlib.contextmanager
def staging(final: Path, keep_failed: bool = False) -> Iterator[Path]:
    """A temporary sibling of final to build in. On an error it goes, so that final's directory
    is as it was. keep_failed: if the error is a TfaotError whose message names a file in it (a
    log), it moves to the system's temporary space instead, and the message names it there."""
    staged = temp_sibling(final)
    try:
        yield staged
    except TfaotError as exc:
        if not keep_failed or not staged.exists() or str(staged) not in str(exc):
            shutil.rmtree(staged, ignore_errors=True)
            raise
        kept = Path(tempfile.mkdtemp(prefix=f"tfaot-dist-failed-{final.name}-")) / "build"
        shutil.move(staged, kept)
        raise type(exc)(str(exc).replace(str(staged), str(kept))) from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
