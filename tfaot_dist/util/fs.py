"""Atomic writes, digests, locks and reproducible archives.

Every write that another process may read goes to a temporary sibling first
and is renamed into place, so a reader sees the old state or the new one,
never half of either.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import gzip
import hashlib
import io
import os
import re
import shutil
import signal
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tfaot_dist.errors import IntegrityError, InvalidInput

CRASH_AT = "TFAOT_DIST_CRASH_AT"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    with open_regular(path) as f:
        return sha256_stream(f)


def sha256_stream(f: BinaryIO) -> str:
    """The sha256 of what is left to read in f (hashlib.file_digest is Python 3.11)."""
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _not_regular(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def open_regular(path: Path) -> io.BufferedReader:
    """path opened for reading, if it is a regular file (or a link to one); a FIFO, socket, device or
    directory is refused with one line (InvalidInput). Never blocks: opening a FIFO for reading would
    wait for a writer forever, so the file is opened non-blocking and checked on the descriptor."""
    st = os.stat(path)
    if stat.S_ISREG(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)  # what was opened: the name may have been replaced since the stat
        if stat.S_ISREG(st.st_mode):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return os.fdopen(fd, "rb")
        os.close(fd)
    raise InvalidInput(f"{path}: {_not_regular(st.st_mode)}, not a regular file; refused")


def copy_regular(src: Path, dst: Path) -> None:
    """Copy src, which must be a regular file (open_regular), to a new file dst."""
    with open_regular(src) as f, open(dst, "xb") as out:
        shutil.copyfileobj(f, out, 1 << 20)


def tree_files(root: Path) -> list[str]:
    """Relative POSIX paths of the regular files below root, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                raise IntegrityError(f"{path}: not a regular file")
            out.append(path.relative_to(root).as_posix())
    return sorted(out)


def tree_digest(root: Path) -> str:
    """One digest for a directory: names and contents of every file."""
    h = hashlib.sha256()
    for rel in tree_files(root):
        h.update(rel.encode() + b"\0" + sha256_file(root / rel).encode() + b"\n")
    return h.hexdigest()


def write_atomic(path: Path, data: bytes | str) -> None:
    _replace_atomic(path, lambda f: f.write(data.encode() if isinstance(data, str) else data))


def copy_atomic(src: Path, path: Path) -> None:
    """Copy src to path through a temporary sibling and a rename."""

    def copy(f: BinaryIO) -> None:
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f, 1 << 20)

    _replace_atomic(path, copy)


def _replace_atomic(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """fill(file) writes a temporary sibling, which then replaces path in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def temp_sibling(path: Path) -> Path:
    """A fresh empty directory next to path, for building what will replace it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))


def remove_stale_siblings(path: Path) -> None:
    """Remove what temp_sibling(path) and write_atomic(path) left behind in processes that died.

    Only correct while holding the lock under which those temporaries are made:
    then none of them belongs to a live process.
    """
    # Exactly the names tempfile makes (8 characters), not those of path.name + ".1" and others.
    own = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if own.fullmatch(stale.name):
            remove_entry(stale)


def claim_temp(parent: Path, prefix: str, directory: bool = False) -> tuple[Path, BinaryIO]:
    """A new temporary file or directory PREFIX*.tmp in parent, for work that takes no lock.

    Returns (path, held): held is an open file with an exclusive lock (the file itself, or
    `owner` in the directory) that marks the temporary as live until it is closed, so that
    remove_abandoned() can tell it from the leftover of a process that died. It is made
    under a .new name and locked before it gets the name that remove_abandoned looks at.
    """
    if directory:
        new = Path(tempfile.mkdtemp(prefix=prefix, suffix=".new", dir=parent))
        held: BinaryIO = open(new / "owner", "wb")  # noqa: SIM115 - returned open: it holds the lock
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".new", dir=parent)
        new, held = Path(name), os.fdopen(fd, "w+b")
    fcntl.flock(held, fcntl.LOCK_EX)
    path = new.with_suffix(".tmp")
    os.rename(new, path)
    return path, held


def remove_abandoned(parent: Path, prefix: str) -> None:
    """Remove the claim_temp() temporaries of processes that died: *.tmp nobody holds the lock
    of, and *.new left in the instant between making and locking one (after a minute)."""
    for path in parent.glob(f"{glob.escape(prefix)}*.tmp"):
        try:
            with open(path / "owner" if path.is_dir() else path, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                remove_entry(path)
        except (BlockingIOError, FileNotFoundError, NotADirectoryError):
            continue
    for path in parent.glob(f"{glob.escape(prefix)}*.new"):
        with contextlib.suppress(FileNotFoundError):
            if time.time() - path.stat().st_mtime > 60:
                remove_entry(path)


@contextlib.contextmanager
def owned_temp_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A claim_temp() directory for the with-block; abandoned ones are removed first."""
    parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(parent, prefix)
    path, held = claim_temp(parent, prefix, directory=True)
    with held:
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def remove_entry(path: Path) -> None:
    """Remove a file, link or directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def replace_dir(staged: Path, final: Path) -> None:
    """Move a complete staged directory to final, replacing what was there."""
    if final.exists():
        old = temp_sibling(final)
        os.rename(final, old / "old")
        crash_point("replace_dir")
        os.rename(staged, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staged, final)


def crash_point(name: str) -> None:
    """Die here, as kill -9 would, when TFAOT_DIST_CRASH_AT names this point (for the crash tests:
    the windows between two renames are too short for a kill at a random time to find)."""
    if os.environ.get(CRASH_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def file_lock(path: Path, log: Callable[[str], None] | None = None) -> Iterator[None]:
    """An exclusive advisory lock held for the with-block (released if the process dies).

    log: told when the lock is held by another process, before waiting for it (long builds).
    An existing directory is locked itself (flock on the directory), leaving no lock file in it:
    output directories and channels hold only what users asked for.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log:
                log(f"waiting for another build holding {path}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def copy_file(src: Path, dst: Path) -> None:
    """A real file (symlinks followed) with normal permissions; parents made as needed."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def reproducible_targz(src: Path, top: str) -> bytes:
    """A .tar.gz of src under the directory name top, identical for identical trees.

    Sorted entries, zero times, root ownership, normalized modes, no gzip name or time.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(rel).parent) for rel in tree_files(src)} - {"."})
        all_dirs = sorted({p for d in dirs for p in _parents(d)})
        for d in ["", *all_dirs]:
            info = tarfile.TarInfo(f"{top}/{d}".rstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            _normalize(info)
            tar.addfile(info)
        for rel in tree_files(src):
            path = src / rel
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            _normalize(info)
            with open(path, "rb") as f:
                tar.addfile(info, f)
    out = io.BytesIO()
    # Level 6 (gzip's default): the XLA runtime's package (11 MB of tar) in 0.33 s, 1 % larger than
    # level 9, which took 1.6 s; every build writes that archive into its dist.
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _parents(d: str) -> list[str]:
    parts = d.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _normalize(info: tarfile.TarInfo) -> None:
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
