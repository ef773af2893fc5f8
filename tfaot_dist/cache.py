"""The cache: its layout, and the one way a cached entry is made.

    CACHE/                         $TFAOT_DIST_CACHE (default_cache()), default ~/.cache/tfaot-dist
      toolchains/<key>/ <key>.lock TensorFlow venvs                          (shared)
      abseil/<key>/ <key>.lock     Abseil builds                             (shared)
      runtime/<key>/ <key>.lock    XLA AOT runtime builds                    (shared)
      runtime-parts/<key>/ .lock   heavy runtime sources built per part      (shared, cxx/runtime_parts.py)
      downloads/<sdist> .lock      pinned sdists fetched with pip            (shared)
      pch/<key>/ <key>.lock        precompiled interface headers             (shared)
      bench/<program>-<key>/ .lock the benchmark programs (tf-capi, peak)    (shared)
      onnx/<key>/ <key>.lock       SavedModels converted from ONNX files     (onnx_source.py; shared, but not
                                   by `verify --rebuild`)
      git/<digest>.git <digest>.lock   bare mirrors of source repositories
      sources/<commit>/ .lock      git source trees; sha256-<hex>/: archives' (claim_temp, no lock)
      archives/<sha256>            downloaded archives, content-addressed (download.py)
      channels/<digest>/           the last index read from each channel
      checks/<key>.json            TensorFlow's check answers, by SavedModel digest (check_answers.py) (shared)
      compiles/<key>/ <key>.lock   TensorFlow's compile answers: objects, headers, reference outputs
                                   (compile_answers.py; shared, but not by `verify --rebuild`)
      objects/<key>/ <key>.lock    compiled verification harnesses, linked anew each time
                                   (cxx/object_cache.py)                     (shared)
      builds/<build key>/          finished packages; locks/build-<build key>.lock
      locks/  logs/                build locks; full output of failed programs (process.py)

The shared directories hold entries keyed by everything that makes their
bytes, nothing that belongs to one registry: another cache (a rebuild's, a
test's) may link to them and reuse what is there.

ensure_entry() is the one primitive for a directory entry: lock, check again,
build in a temporary sibling, mark complete, seal, rename into place. A reader
never sees half an entry; a process that dies leaves only a temporary sibling,
which the next builder removes. The process that made or found an entry then
holds a shared lock on the entry's lock file until it exits (hold_in_use), and
touches that file: `tfaot-dist cache --prune` (cache_admin.py) removes only
entries whose lock it can take at once, so never one a running command uses,
and its mtime says when the entry was last used.

A cache that is not ours is not trusted (what is in it is run and published):
- the root (trusted_root) must be a directory we own that neither group nor others
  can write, as ssh wants of its keys; it is created 0700. Anything else is refused
  with one line (exit 7).
- a finished entry is checked before use (check_entry): every file and directory in
  it ours and not writable by group or others (else refused: nothing of it is run),
  and its listing (path, type, permissions, size, link target of everything,
  `__pycache__` aside) the one its seal (SEAL, written when it was made) records
  (else it is made again, as an incomplete entry is). That is cheap where content
  digests are not (a 1.6 GB toolchain of 25,000 files: under a second, against
  ~10 s to hash it): ownership keeps other users out, the listing catches an entry
  changed or cut short since. Entries made before seals existed are
  sealed on first use once they pass the ownership check. Package builds are also
  checked against their manifests' digests before they are copied (builder.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.errors import IntegrityError, InvalidInput, TfaotError
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
# Written into every entry ensure_entry makes: its name and listing digest (check_entry).
SEAL = ".tfaot-entry"
SEAL_FORMAT = "tfaot-dist-entry/1"
_SKIPPED = ("__pycache__",)  # Python writes byte code into a venv as it imports; not part of the listing
# Expensive entries keyed by their contents, reusable from any cache that links to them.
SHARED = (
    "toolchains",
    "runtime",
    "runtime-parts",
    "abseil",
    "downloads",
    "pch",
    "bench",
    "onnx",
    "checks",
    "compiles",
    "objects",
)


def default_cache() -> Path:
    """$TFAOT_DIST_CACHE, else $XDG_CACHE_HOME/tfaot-dist, else ~/.cache/tfaot-dist."""
    if os.environ.get("TFAOT_DIST_CACHE"):
        return Path(os.environ["TFAOT_DIST_CACHE"]).absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base, "tfaot-dist").absolute()


def trusted_root(root: Path) -> Path:
    """The cache root: created (mode 0700) if missing, else refused with one line unless it is a
    directory we own that group and others cannot write (a link to such a directory is fine)."""
    with contextlib.suppress(FileExistsError):
        root.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(root, 0o700)
    try:
        st = os.stat(root)
    except OSError as exc:
        raise InvalidInput(f"cache {root}: {exc.strerror} (TFAOT_DIST_CACHE)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidInput(f"cache {root}: not a directory (TFAOT_DIST_CACHE)")
    _check_owned(root, st, "the cache")
    return root


def _check_owned(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise IntegrityError(
            f"{path}: {what} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
            "refusing to use what another user could have put there (TFAOT_DIST_CACHE: use a "
            "directory of your own)"
        )
    if st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode):
        raise IntegrityError(
            f"{path}: {what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"refusing to use it (chmod go-w it, or use another TFAOT_DIST_CACHE)"
        )


def listing_digest(entry: Path) -> str:
    """Ownership and permissions of everything in entry checked (IntegrityError), and one digest of
    its listing: path, type, permission bits, size and link target of each entry (SEAL and
    __pycache__ aside; nothing is read, so this costs one lstat per file)."""
    _check_owned(entry, os.lstat(entry), "the cache entry")
    lines: list[str] = []
    uid = os.geteuid()

    def walk(directory: str, rel: str) -> None:
        with os.scandir(directory) as it:
            found = sorted(it, key=lambda e: e.name)
        for e in found:
            st = e.stat(follow_symlinks=False)
            mode = st.st_mode
            if st.st_uid != uid or (mode & 0o022 and not stat.S_ISLNK(mode)):
                _check_owned(Path(e.path), st, "the cache entry's file")
            name = f"{rel}{e.name}"
            if e.name in _SKIPPED and stat.S_ISDIR(mode):
                _skipped_owned(e.path, uid)
                continue
            if name == SEAL:
                continue
            if stat.S_ISDIR(mode):
                lines.append(f"{name}/\0{mode:o}")
                walk(e.path, f"{name}/")
            elif stat.S_ISLNK(mode):
                lines.append(f"{name}\0{mode:o}\0{os.readlink(e.path)}")
            else:
                lines.append(f"{name}\0{mode:o}\0{st.st_size}")

    walk(str(entry), "")
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def _skipped_owned(directory: str, uid: int) -> None:
    """A __pycache__ directory: not in the listing, but still ours alone."""
    for dirpath, _, filenames in os.walk(directory):
        for name in [".", *filenames]:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_uid != uid or st.st_mode & 0o022:
                _check_owned(Path(dirpath, name), st, "the cache entry's file")


def seal(entry: Path) -> None:
    """Record entry's listing in it (ensure_entry does, before the rename that makes it visible)."""
    write_atomic(entry / SEAL, json.dumps({"format": SEAL_FORMAT, "listing": listing_digest(entry)}) + "\n")


def check_entry(entry: Path) -> bool:
    """Whether a finished entry may be used: ours and not writable by others (else IntegrityError:
    nothing of it is run, read or replaced), and as it was made (False when its listing differs
    from its seal: the caller makes it again, as it would an incomplete one). An entry made before
    seals were written is sealed now. Nothing there: True (nothing to check)."""
    if not os.path.lexists(entry):
        return True
    _check_owned(entry.parent, os.stat(entry.parent), "the cache directory")
    try:
        recorded = json.loads((entry / SEAL).read_text())
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError):
        recorded = {}
    found = listing_digest(entry)
    if recorded is None:
        with contextlib.suppress(OSError):
            write_atomic(entry / SEAL, json.dumps({"format": SEAL_FORMAT, "listing": found}) + "\n")
        return True
    return isinstance(recorded, dict) and recorded.get("listing") == found


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
    def onnx(self) -> Path:
        """SavedModels converted from ONNX files (onnx_source.py)."""
        return self.root / "onnx"

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
    def checks(self) -> Path:
        return self.root / "checks"

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    @property
    def compiles(self) -> Path:
        return self.root / "compiles"

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

    def share_into(self, other: Path, names: Sequence[str] = SHARED) -> Cache:
        """A cache at other (made if missing) whose shared directories (or those of names) are links to ours."""
        other.mkdir(parents=True, exist_ok=True)
        for name in names:
            (self.root / name).mkdir(parents=True, exist_ok=True)
            (other / name).symlink_to((self.root / name).absolute())
        return Cache(other)


def entry_lock(entry: Path) -> Path:
    """The lock of a cache entry: a sibling file named after it."""
    return entry.parent / f"{entry.name}.lock"


def has_marker(marker: str) -> Callable[[Path], bool]:
    return lambda entry: (entry / marker).is_file()


def ensure_entry(
    final: Path,
    build: Callable[[Path], object],
    *,
    marker: str | None = COMPLETE,
    is_complete: Callable[[Path], bool] | None = None,
    lock: Path | None = None,
    log: Callable[[str], None] | None = None,
    keep_failed: bool = False,
    sealed: bool = True,
    as_made: bool | None = None,
) -> Path:
    """The complete directory entry final, made by build(staged) if it is not.

    build fills the empty directory staged, a temporary sibling of final (the name
    util/fs.py's remove_stale_siblings recognises; what build returns is ignored); then marker
    (if any) is written in it, containing final's name, and staged is renamed to final.
    If build raises, staged is removed (see staging() for keep_failed) and the error goes
    on: final is as it was.
    is_complete: whether an existing final is usable (default: it has marker).
    lock: held while checking again and building (default: entry_lock(final)); log is
    told when another process holds it. sealed: a cache entry (check_entry before use, SEAL
    written when made); False for entries outside the cache (a package directory in --dist).
    as_made: the caller's check_entry(final) of a moment ago, taken for the first look instead of
    walking the entry again (a toolchain's listing costs a quarter of a second); under the lock
    it is checked again.
    """
    if is_complete is None:
        if marker is None:
            raise ValueError("ensure_entry needs a marker or is_complete")
        is_complete = has_marker(marker)

    def usable(entry: Path, checked: bool | None = None) -> bool:
        if checked is None:
            checked = not sealed or check_entry(entry)
        return checked and is_complete(entry)

    lock = lock or entry_lock(final)
    # One thread of this process at a time per entry (`build --jobs` builds in threads): a thread
    # waiting for the file lock below would otherwise wait forever once the thread that made the
    # entry holds it shared (hold_in_use: until the process exits).
    with _thread_lock(lock):
        if usable(final, as_made):
            if sealed:  # a cache entry: in use from now on
                hold_in_use(lock)
            return final
        release_in_use(lock)  # our own shared hold would keep the lock below from us
        with file_lock(lock, log):
            if not usable(final):  # else another process made it while we waited
                remove_stale_siblings(final)  # under the lock: only dead processes' siblings are there
                with staging(final, keep_failed) as staged:
                    build(staged)
                    if marker is not None:
                        write_atomic(staged / marker, final.name + "\n")
                    if sealed:
                        seal(staged)
                    replace_dir(staged, final)  # an incomplete final is replaced
        if sealed:
            hold_in_use(lock)
        return final


_making: dict[str, threading.Lock] = {}  # lock file -> the lock of this process's threads on its entry


def _thread_lock(lock: Path) -> threading.Lock:
    with _in_use_guard:
        return _making.setdefault(str(lock), threading.Lock())


_in_use: dict[str, int] = {}  # lock file -> the descriptor of our shared lock on it
_in_use_guard = threading.Lock()


def hold_in_use(lock: Path) -> None:
    """A shared lock on an entry's lock file, held until this process exits (or release_in_use):
    a prune skips the entry. Touches the file: its mtime is when the entry was last used. Where the
    lock cannot be had at once (another process rebuilds the entry) or the file not written (a
    read-only cache), nothing is held."""
    with _in_use_guard:
        if str(lock) in _in_use:
            with contextlib.suppress(OSError):
                os.utime(_in_use[str(lock)])
            return
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.utime(fd)
        except OSError:
            os.close(fd)
            return
        _in_use[str(lock)] = fd


def release_in_use(lock: Path | None = None) -> None:
    """Let go of the shared hold on lock (None: on every entry this process holds)."""
    with _in_use_guard:
        for key in [str(lock)] if lock is not None else list(_in_use):
            fd = _in_use.pop(key, None)
            if fd is not None:
                os.close(fd)


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
