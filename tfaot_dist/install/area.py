"""The one writer of a user area: every file that setup, repair and removal create, change or
remove under AREA/tfaot goes through an AreaWriter. A directory channel's files are written by the
same primitives (directory.ChannelWriter, which only words its errors for a channel).

- Nothing outside AREA/tfaot: paths are relative to it, plain segments (no "..", no "/" first).
- Never through a link: each directory on the way is opened with O_NOFOLLOW relative to the one
  before (openat), files are created with O_EXCL|O_NOFOLLOW and renamed into place relative to
  their directory, trees are removed through descriptors the same way (_remove_tree).
  A link met on the way refuses the operation with one line naming it (exit 7): setup never
  follows one, nor removes what the user put there.
- Atomic: a file is written to a temporary sibling and renamed; a package directory is staged in
  the area and renamed into place.
- AREA/tfaot must be a directory (not a link, not a file) that we can write: else one line.

The writer holds the area's lock (AREA/tfaot/.lock) while it is open.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tfaot_dist.errors import IntegrityError, InvalidInput, TfaotError

LOCK = ".lock"
_SEGMENT = re.compile(r"[^/\x00]+")  # any name an entry may have (found in the area), never "." or ".."
TEMP = re.compile(r"\..+\.tmp")  # what the writer's temporaries are called (.NAME.RANDOM.tmp)
MAX_READ = 64 << 20


def _segments(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") or not _SEGMENT.fullmatch(p) for p in parts):
        raise ValueError(f"not a plain relative path inside an area: {rel!r}")
    return parts


class AreaWriter:
    """AREA/tfaot opened for changes (use open_area())."""

    place = "area"  # what errors call the directory

    def __init__(self, root: Path, fd: int):
        self.root = root
        self._fd = fd

    # ---- errors

    def _hints(self) -> tuple[str, str]:
        """What to run once the user removed a link, or something else in the way."""
        return "setup again", f"`tfaot-dist setup --repair --area {self.root.parent}`"

    def _failed(self, rel: str, exc: OSError) -> TfaotError:
        path = self.root / rel if rel else self.root
        after_link, after_other = self._hints()
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (
            exc.errno == errno.ENOTDIR and self._is_link_on_way(rel)
        ):
            return IntegrityError(
                f"{self._link_on_way(rel) or path}: a symbolic link inside the {self.place}; tfaot-dist "
                f"never follows or removes links there (remove it yourself, then run {after_link})"
            )
        if exc.errno == errno.ENOTDIR:
            return InvalidInput(
                f"{path}: something on the way is not a directory (remove it, then run {after_other})"
            )
        if exc.errno == errno.EROFS:
            return InvalidInput(f"{path}: a read-only file system (the {self.place} cannot be changed there)")
        return InvalidInput(f"{path}: {exc.strerror or exc}")

    def _link_on_way(self, rel: str) -> Path | None:
        here = self.root
        for part in rel.split("/") if rel else []:
            here = here / part
            with contextlib.suppress(OSError):
                if here.is_symlink():
                    return here
        return None

    def _is_link_on_way(self, rel: str) -> bool:
        return self._link_on_way(rel) is not None

    # ---- directories

    @contextlib.contextmanager
    def _dir(self, rel: str, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory rel ("" for the root), opened link by link without following."""
        fd = os.dup(self._fd)
        try:
            for part in _segments(rel) if rel else []:
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _parent(self, rel: str, create: bool = False) -> Iterator[tuple[int, str]]:
        parts = _segments(rel)
        with self._dir("/".join(parts[:-1]), create) as fd:
            yield fd, parts[-1]

    def kind(self, rel: str) -> str | None:
        """ "file", "dir", "link", "other", or None when nothing is there (links are not followed)."""
        try:
            with self._parent(rel) as (fd, name):
                st = os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed(rel, exc) from None
        if stat.S_ISLNK(st.st_mode):
            return "link"
        return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"

    def entries(self, rel: str = "") -> list[tuple[str, str]]:
        """(name, kind) of each entry of the directory rel; [] if there is none."""
        try:
            with self._dir(rel) as fd:
                out = []
                for name in sorted(os.listdir(fd)):
                    st = os.lstat(name, dir_fd=fd)
                    kind = (
                        "link"
                        if stat.S_ISLNK(st.st_mode)
                        else "dir"
                        if stat.S_ISDIR(st.st_mode)
                        else "file"
                        if stat.S_ISREG(st.st_mode)
                        else "other"
                    )
                    out.append((name, kind))
                return out
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._failed(rel, exc) from None

    # ---- files

    def read(self, rel: str, limit: int = MAX_READ) -> bytes | None:
        """The bytes of the regular file rel (None if there is none); a link is refused."""
        try:
            with self._parent(rel) as (dfd, name):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        raise InvalidInput(f"{self.root / rel}: not a regular file")
                    data = f.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed(rel, exc) from None
        if len(data) > limit:
            raise InvalidInput(f"{self.root / rel}: larger than {limit} bytes")
        return data

    def sha256(self, rel: str) -> str | None:
        """The sha256 of the regular file rel (read in pieces), None if there is none; a link is refused."""
        try:
            with self._parent(rel) as (dfd, name):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        return None
                    digest = hashlib.sha256()
                    for piece in iter(lambda: f.read(1 << 20), b""):
                        digest.update(piece)
                    return digest.hexdigest()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed(rel, exc) from None

    def write(self, rel: str, data: bytes | str) -> None:
        """rel (its directories made as needed) replaced in one rename by a file holding data."""
        raw = data.encode() if isinstance(data, str) else data
        self._replace(rel, lambda f: f.write(raw))

    def copy_in(self, rel: str, source: Path) -> None:
        """rel replaced in one rename by a copy of the file source (read in pieces: archives are large)."""

        def copy(f: BinaryIO) -> None:
            with open(source, "rb") as s:
                shutil.copyfileobj(s, f, 1 << 20)

        self._replace(rel, copy)

    def _replace(self, rel: str, fill: Callable[[BinaryIO], object]) -> None:
        try:
            with self._parent(rel, create=True) as (dfd, name):
                tmp = f".{name}.{secrets.token_hex(4)}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
                try:
                    with os.fdopen(fd, "wb") as f:
                        fill(f)
                        f.flush()
                        os.fsync(f.fileno())
                        os.fchmod(f.fileno(), 0o644)
                    there = self._kind_at(dfd, name)
                    if there == "link":  # replaced, it would be gone; followed, it would write elsewhere
                        raise OSError(errno.ELOOP, "a symbolic link", name)
                    if there == "dir":
                        raise IsADirectoryError(errno.EISDIR, "a directory is in the way", name)
                    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=dfd)
                    raise
        except OSError as exc:
            raise self._failed(rel, exc) from None

    def remove_stale(self, rel: str) -> None:
        """The temporaries of rel that writers killed half-way left (.NAME.XXXXXXXX.tmp beside it).
        Only correct under the lock those writers held: then none belongs to a live process."""
        parts = _segments(rel)
        where = "/".join(parts[:-1])
        own = re.compile(rf"\.{re.escape(parts[-1])}\.[a-z0-9_]{{8}}\.tmp")
        for name, kind in self.entries(where):
            if kind == "file" and own.fullmatch(name):
                self.remove(f"{where}/{name}" if where else name)

    def write_if_changed(self, rel: str, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        if self.kind(rel) != "file" or self.read(rel) != raw:
            self.write(rel, raw)

    @staticmethod
    def _kind_at(dfd: int, name: str) -> str | None:
        try:
            st = os.lstat(name, dir_fd=dfd)
        except FileNotFoundError:
            return None
        return "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"

    # ---- removing

    def check_removable(self, rel: str) -> None:
        """What remove(rel) would refuse, refused now (before anything else changes): rel a link, or
        a link on the way."""
        try:
            with self._parent(rel) as (dfd, name):
                if stat.S_ISLNK(os.lstat(name, dir_fd=dfd).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link", name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._failed(rel, exc) from None

    def remove(self, rel: str) -> None:
        """Remove the file or directory tree rel; rel a link, or a link on the way, is refused (a link
        inside the tree is removed itself, never followed)."""
        try:
            with self._parent(rel) as (dfd, name):
                try:
                    st = os.lstat(name, dir_fd=dfd)
                except FileNotFoundError:
                    return
                if stat.S_ISLNK(st.st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link", name)
                if stat.S_ISDIR(st.st_mode):
                    _remove_tree(dfd, name)
                else:
                    os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._failed(rel, exc) from None

    def remove_if_empty(self, rel: str) -> None:
        try:
            with self._parent(rel) as (dfd, name):
                os.rmdir(name, dir_fd=dfd)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                raise self._failed(rel, exc) from None

    # ---- package directories

    def stage(self) -> tuple[str, Path]:
        """A new empty directory in the area's root to build a package tree in: (rel, path)."""
        name = f".stage.{secrets.token_hex(4)}.tmp"
        try:
            os.mkdir(name, 0o755, dir_fd=self._fd)
        except OSError as exc:
            raise self._failed(name, exc) from None
        return name, self.root / name

    def place_dir(self, staged: str, rel: str) -> None:
        """Move the staged directory (relative to the root) to rel, replacing what was there; the
        directory that was there is removed after the rename (a crash between leaves it to repair)."""
        try:
            with self._parent(rel, create=True) as (dfd, name), self._parent(staged) as (sfd, sname):
                old = None
                there = self._kind_at(dfd, name)
                if there == "link":
                    raise OSError(errno.ELOOP, "a symbolic link", name)
                if there is not None:
                    old = f".{name}.{secrets.token_hex(4)}.tmp"
                    os.rename(name, old, src_dir_fd=dfd, dst_dir_fd=dfd)
                os.rename(sname, name, src_dir_fd=sfd, dst_dir_fd=dfd)
                if old is not None:
                    _remove_tree(dfd, old)
        except OSError as exc:
            raise self._failed(rel, exc) from None


def _remove_tree(dfd: int, name: str) -> None:
    """Remove the directory name of the open directory dfd and everything in it, each directory
    opened relative to the one before and none followed if it is a link (a link is removed itself).
    shutil.rmtree(dir_fd=...) does the same from Python 3.11 on; this is the one way on every Python."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)  # read whole before removing
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dfd)


@contextlib.contextmanager
def open_area(root: Path, create: bool = True) -> Iterator[AreaWriter]:
    """AREA/tfaot opened for changes under its lock; created (with AREA) if missing and create."""
    try:
        if create:
            root.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(root, 0o755)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if root.is_symlink():
            raise IntegrityError(
                f"{root}: a symbolic link; tfaot-dist writes only into a real AREA/tfaot "
                "directory (remove the link or use another --area)"
            ) from None
        if exc.errno == errno.ENOTDIR or (root.exists() and not root.is_dir()):
            raise InvalidInput(
                f"{root}: exists and is not a directory (move it away or use another --area)"
            ) from None
        raise InvalidInput(f"{root}: cannot use it as an area ({exc.strerror or exc})") from None
    try:
        try:
            lock = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        except OSError as exc:
            raise AreaWriter(root, fd)._failed(LOCK, exc) from None
        with os.fdopen(lock, "r+b") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield AreaWriter(root, fd)
    finally:
        os.close(fd)
