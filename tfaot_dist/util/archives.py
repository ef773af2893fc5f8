"""Extracting tar (plain, gz, bz2, xz) and zip archives that come from elsewhere.

The caller declares what an archive is (KINDS: a package archive, a tar or a
zip source); it is never told apart by sniffing, and bytes that parse as both
a tar and a zip are refused, whatever was declared. Every entry is checked
before anything is written: relative POSIX names with no ".." and no absolute
paths, only regular files, directories and (not in package archives) symbolic
links; no hard links, devices or FIFOs; at most MAX_ENTRIES entries and
MAX_BYTES bytes. Nothing is written through a link, and once everything is
written every link's real path, as the file system resolves it, must lie
inside the tree. One bad entry refuses the whole archive with an
IntegrityError naming it, and nothing of it is left.

The entries are written here (_Tree), not by tarfile or zipfile: the same
checks and the same result on every Python, with or without tarfile's
extraction filters (3.11.4 and 3.12 brought them; Debian 12's 3.11.2 and
3.9 lack them).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import posixpath
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from tfaot_dist.errors import IntegrityError, InvalidInput, TfaotError

MAX_ENTRIES = 100_000
MAX_BYTES = 16 << 30
_EOCD_SEARCH = 22 + 0xFFFF  # the end record and the longest comment


PACKAGE, TAR, ZIP = "package", "tar", "zip"
KINDS = (PACKAGE, TAR, ZIP)  # package: a .tar.gz of files and directories only
_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def kind_of_url(url: str) -> str | None:
    """The kind a source URL declares by its name (.zip, .tar.gz, ...), None if it declares none."""
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    if path.endswith(".zip"):
        return ZIP
    if path.endswith(_TAR_SUFFIXES):
        return TAR
    return None


def kind_of_content(archive: Path) -> str:
    """For URLs that declare no kind: the format whose magic number starts the file (a zip's local
    header, else tar); the polyglot check in extract() still refuses anything that is both."""
    with open(archive, "rb") as f:
        return ZIP if f.read(4) == b"PK\x03\x04" else TAR


def refuse_polyglot(archive: Path, kind: str, label: str) -> None:
    """Bytes that one reader takes for a tar and another for a zip are refused: which one a tool
    picks would decide what gets installed."""
    is_zip = zipfile.is_zipfile(archive)
    if kind == ZIP and not is_zip:
        raise IntegrityError(f"{label}: not a zip archive")
    other = _is_tar(archive) if kind == ZIP else is_zip
    if other:
        raise IntegrityError(f"{label}: the archive is both a tar and a zip; refused")


def _is_tar(archive: Path) -> bool:
    try:
        with tarfile.open(archive, "r:*") as tar:
            return tar.next() is not None
    except (tarfile.TarError, EOFError, OSError, ValueError):
        return False


@dataclass(frozen=True)
class _Entry:
    """One checked entry of an archive, to be written: a directory, a regular file or a link."""

    name: str  # a safe relative POSIX path (check_name)
    kind: str  # "dir", "file" or "link"
    executable: bool = False  # a file: written 0o755, else 0o644
    target: str = ""  # a link: its text (check_link)
    data: Callable[[], IO[bytes]] | None = None  # a file: opens its bytes


def extract(
    archive: Path,
    dest: Path,
    label: str | None = None,
    *,
    kind: str,
    max_entries: int = MAX_ENTRIES,
    max_bytes: int = MAX_BYTES,
) -> None:
    """Extract archive, which is of the declared kind, into dest, which must not exist yet.

    Every entry is checked before the first write; then each is written by _Tree (never through a
    link, modes normalised), whatever the interpreter's tarfile offers: the same on every Python.
    max_bytes bounds the bytes extracted, as the archive declares them and as they are written."""
    label = label or str(archive)
    if kind not in KINDS:
        raise ValueError(f"unknown archive kind {kind!r}")
    refuse_polyglot(archive, kind, label)
    entries = _zip_entries if kind == ZIP else _tar_entries
    with entries(archive, label, kind, max_entries, max_bytes) as checked:
        tree = _Tree(dest, label, max_bytes)
        try:
            for entry in checked:
                tree.add(entry)
            check_links_inside(dest, label)
        except BaseException:
            tree.close()
            shutil.rmtree(dest, ignore_errors=True)  # made by _Tree; rmtree never follows a link
            raise
        tree.close()


@contextlib.contextmanager
def _tar_entries(
    archive: Path, label: str, kind: str, max_entries: int, max_bytes: int
) -> Iterator[list[_Entry]]:
    """The checked entries of a tar (a package archive: gzip, no links), open while they are written;
    damage found while reading, before or during the writes, is an IntegrityError."""
    try:
        with tarfile.open(archive, "r:gz" if kind == PACKAGE else "r:*") as tar:
            entries = []
            for member in checked_tar_members(tar, label, max_entries, max_bytes, links=kind != PACKAGE):
                name = check_name(member.name, label)
                if member.isdir():
                    entries.append(_Entry(name, "dir"))
                elif member.issym():
                    entries.append(_Entry(name, "link", target=member.linkname))
                else:
                    entries.append(
                        _Entry(name, "file", bool(member.mode & 0o111), data=_tar_data(tar, member, label))
                    )
            yield entries
    except (tarfile.TarError, EOFError, OSError, zlib.error, ValueError) as exc:
        raise IntegrityError(
            f"{label}: not a readable {'.tar.gz' if kind == PACKAGE else 'tar'} archive ({exc})"
        ) from None


def _tar_data(tar: tarfile.TarFile, member: tarfile.TarInfo, label: str) -> Callable[[], IO[bytes]]:
    def data() -> IO[bytes]:
        f = tar.extractfile(member)
        if f is None:  # a regular file (checked) always has data
            raise IntegrityError(f"{label}: unreadable entry {member.name!r}")
        return f

    return data


def check_links_inside(dest: Path, label: str) -> None:
    """Every symbolic link under dest resolves (as the file system sees it now, chains of links
    included) to a path inside dest."""
    top = os.path.realpath(dest)
    for folder, dirs, files in os.walk(dest):
        for entry in dirs + files:
            path = os.path.join(folder, entry)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if real != top and not real.startswith(top + os.sep):
                    rel = os.path.relpath(path, dest)
                    raise IntegrityError(f"{label}: link {rel!r} -> {os.readlink(path)!r} leaves the tree")


def check_name(name: str, label: str) -> str:
    """A member name as a safe relative POSIX path (trailing "/" removed)."""
    clean = name.rstrip("/")
    parts = clean.split("/")
    if (
        not clean
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or ".." in parts
        or (len(parts[0]) == 2 and parts[0][1] == ":")
    ):
        raise IntegrityError(f"{label}: unsafe entry name {name!r}")
    return posixpath.normpath(clean)


def check_link(name: str, target: str, label: str) -> None:
    """A symbolic link at name pointing at target must stay inside the tree."""
    if not target or target.startswith("/") or "\0" in target:
        raise IntegrityError(f"{label}: link {name!r} -> {target!r} leaves the tree")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise IntegrityError(f"{label}: link {name!r} -> {target!r} leaves the tree")


def checked_tar_members(
    tar: tarfile.TarFile,
    label: str,
    max_entries: int = MAX_ENTRIES,
    max_bytes: int = MAX_BYTES,
    links: bool = True,
) -> Iterator[tarfile.TarInfo]:
    """Iterate over the members of tar, each checked (links only if links); the package reader
    (channel.verify_archive) and extract() both read archives through this."""
    counted = tar_header_count(tar, max_entries)
    if counted is not None and counted > max_entries:
        raise IntegrityError(f"{label}: more than {max_entries} entries")
    count, total = 0, 0
    for member in tar:
        count += 1
        if count > max_entries:
            raise IntegrityError(f"{label}: more than {max_entries} entries")
        if member.name == "pax_global_header" or member.type in (tarfile.XGLTYPE,):
            continue
        name = check_name(member.name, label)
        if member.islnk():
            raise IntegrityError(f"{label}: hard link {member.name!r} is not allowed")
        if member.issym() and not links:
            raise IntegrityError(f"{label}: link {member.name!r} is not allowed in a package archive")
        if member.issym():
            check_link(name, member.linkname, label)
        elif not (member.isfile() or member.isdir()):
            raise IntegrityError(f"{label}: {member.name!r} is not a file, directory or link")
        total += member.size if member.isfile() else 0
        if total > max_bytes:
            raise IntegrityError(f"{label}: more than {max_bytes} bytes when extracted")
        yield member


_BLOCK = 512
_REGULAR, _NO_DATA = (b"0", b"7"), (b"1", b"2", b"3", b"4", b"5", b"6")  # tarfile: data follows / none
# The numbers tarfile's header parser reads: mode, uid, gid, size, mtime, checksum, devmajor, devminor.
_NUMBERS = struct.Struct("100x8s8s8s12s12s8s173x8s8s")


def tar_header_count(tar: tarfile.TarFile, stop_after: int = MAX_ENTRIES) -> int | None:
    """The members of a just opened tar, counted from its raw header blocks up to stop_after + 1, before
    tarfile parses each one (about ten times slower: a million-entry bomb took seconds to refuse).

    Each block counted is a member tarfile finds too: its checksum and numbers read as tarfile reads
    them, and the next header is where tarfile looks (after the data of a regular file, right after
    other types; an old-style file whose name ends in "/" is a directory). Anything else (pax or GNU
    extended headers, sparse files, base-256 numbers, unknown types, damage), or more bytes than a bomb
    of empty files needs, and it stops counting: None, and tarfile's own count decides."""
    # firstmember: what open() read, not yet iterated (not in typeshed; absent: no count, as for any doubt)
    first, stream = getattr(tar, "firstmember", None), cast("IO[bytes] | None", tar.fileobj)
    if first is None or first.offset != 0 or stream is None or not stream.seekable():
        return None
    budget = 2 * _BLOCK * (stop_after + 1)  # the headers alone, and as much again of data
    back = stream.tell()
    stream.seek(0)
    try:
        count, base, at, buffer = 0, 0, 0, b""  # buffer: the stream from offset base; at: the next header
        while count <= stop_after:
            if at + _BLOCK > len(buffer):
                buffer, base, at = buffer[at:] + stream.read(1 << 20), base + at, 0
            block = buffer[at : at + _BLOCK]
            if len(block) < _BLOCK or block.count(0) == _BLOCK:
                return count  # the end (a short block too: tarfile stops there)
            mode, uid, gid, size_field, mtime, checksum, major, minor = _NUMBERS.unpack_from(block)
            size = _octal(size_field)
            if (
                size < 0
                or _octal(checksum) != sum(block) - sum(checksum) + 256
                or min(map(_octal, (mode, uid, gid, mtime, major, minor))) < 0
            ):
                return None
            kind = block[156:157]
            old_dir = kind == b"\0" and block[:100].split(b"\0", 1)[0].endswith(b"/")
            if kind in _REGULAR or (kind == b"\0" and not old_dir):
                at += _BLOCK * (1 + -(-size // _BLOCK))
            elif kind in _NO_DATA or old_dir:
                at += _BLOCK
            else:
                return None
            count += 1
            if count <= stop_after and base + at > budget:  # before skipping: a size may claim anything
                return None
            if at > len(buffer):  # the data goes on past what was read: skip it in the stream
                stream.seek(at - len(buffer), os.SEEK_CUR)
                buffer, base, at = b"", base + at, 0
        return count
    except Exception:  # damage of any compression (zlib, lzma, bz2 errors): tarfile reports it, as without
        return None  # this count
    finally:
        stream.seek(back)


@functools.lru_cache(maxsize=1024)  # most fields repeat from header to header (modes, owners, times)
def _octal(field: bytes) -> int:
    """A header's number as tarfile reads it (the text up to the first NUL, blanks around it, octal);
    -1 for base-256 numbers, negative numbers and anything else tarfile would not take."""
    if field[:1] in (b"\x80", b"\xff"):
        return -1
    try:
        return max(-1, int(field.split(b"\0", 1)[0].strip() or b"0", 8))
    except ValueError:
        return -1


def zip_entry_count(archive: Path, stop_after: int = MAX_ENTRIES) -> int | None:
    """The number of entries in a zip's central directory, counted record by record (the count in
    its end record may lie) and only up to stop_after + 1, before zipfile parses (and holds in
    memory) all of them; None if there is no end record."""
    size = archive.stat().st_size
    with open(archive, "rb", buffering=1 << 20) as f:
        f.seek(max(0, size - _EOCD_SEARCH))
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return None
        directory_size, directory_offset = struct.unpack_from("<II", tail, at + 12)
        if (
            at >= 20 and tail[at - 20 : at - 16] == b"PK\x06\x07"
        ):  # zip64: the locator points at its end record
            f.seek(struct.unpack_from("<Q", tail, at - 12)[0])
            record = f.read(56)
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                directory_size, directory_offset = struct.unpack_from("<QQ", record, 40)
        f.seek(directory_offset)
        count = consumed = 0
        while consumed < directory_size and count <= stop_after:
            header = f.read(46)
            if len(header) < 46 or header[:4] != b"PK\x01\x02":
                break  # zipfile reports the damage
            name, extra, comment = struct.unpack_from("<HHH", header, 28)
            f.seek(name + extra + comment, os.SEEK_CUR)
            consumed += 46 + name + extra + comment
            count += 1
        return count


@contextlib.contextmanager
def _zip_entries(
    archive: Path, label: str, kind: str, max_entries: int, max_bytes: int
) -> Iterator[list[_Entry]]:
    """The checked entries of a zip, open while they are written (damage: IntegrityError)."""
    counted = zip_entry_count(archive, max_entries)
    if counted is not None and counted > max_entries:
        raise IntegrityError(f"{label}: more than {max_entries} entries")
    try:
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            if len(infos) > max_entries:
                raise IntegrityError(f"{label}: more than {max_entries} entries")
            entries, total = [], 0
            for info in infos:
                name = check_name(info.filename, label)
                mode = info.external_attr >> 16
                if info.is_dir():
                    entries.append(_Entry(name, "dir"))
                elif stat.S_ISLNK(mode):
                    target = os.fsdecode(zf.read(info))
                    check_link(name, target, label)
                    entries.append(_Entry(name, "link", target=target))
                elif stat.S_IFMT(mode) in (0, stat.S_IFREG):  # 0: written without Unix modes
                    total += info.file_size
                    entries.append(
                        _Entry(name, "file", bool(mode & 0o111), data=functools.partial(zf.open, info))
                    )
                else:
                    raise IntegrityError(f"{label}: {info.filename!r} is not a file, directory or link")
                if total > max_bytes:
                    raise IntegrityError(f"{label}: more than {max_bytes} bytes when extracted")
            yield entries
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError, NotImplementedError) as exc:
        raise IntegrityError(f"{label}: damaged zip archive ({exc})") from None


class _Tree:
    """A new directory written entry by entry with the primitives of the area writer
    (install/area.py): each directory on the way opened relative to the one before without
    following a link (openat, O_NOFOLLOW), files and links created where nothing is (O_EXCL), modes
    normalised (directories 0o755, files 0o755 or 0o644). A link or a file on the way, or an entry
    that is there already, is an IntegrityError naming it; a failed write names the file."""

    def __init__(self, dest: Path, label: str, max_bytes: int):
        self.dest, self.label, self.max_bytes = dest, label, max_bytes
        self.written = 0
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(dest, 0o755)  # dest must not exist (one that does is left alone)
            self._root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            os.fchmod(self._root, 0o755)  # whatever the umask
        except OSError as exc:
            raise self._failed("", exc) from None
        self._last: tuple[str, int] | None = None  # the directory written into last: entries come grouped

    def close(self) -> None:
        if self._last is not None:
            os.close(self._last[1])
            self._last = None
        os.close(self._root)

    def add(self, entry: _Entry) -> None:
        parent, _, name = entry.name.rpartition("/")
        if entry.kind == "dir":
            os.close(self._open_dir(entry.name, entry.name))
            return
        fd = self._parent_dir(parent, entry.name)
        try:
            if entry.kind == "link":
                os.symlink(entry.target, name, dir_fd=fd)
                return
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        except FileExistsError:
            raise IntegrityError(f"{self.label}: {entry.name!r} appears twice") from None
        except OSError as exc:
            raise self._failed(entry.name, exc) from None
        try:
            assert entry.data is not None  # a file has data
            with entry.data() as src:
                while True:
                    chunk = src.read(1 << 20)  # damage here is the reader's (an IntegrityError there)
                    if not chunk:
                        break
                    self.written += len(chunk)
                    if self.written > self.max_bytes:
                        raise IntegrityError(f"{self.label}: more than {self.max_bytes} bytes when extracted")
                    self._write(out, chunk, entry.name)
            try:
                os.fchmod(out, 0o755 if entry.executable else 0o644)
            except OSError as exc:
                raise self._failed(entry.name, exc) from None
        finally:
            os.close(out)

    def _write(self, fd: int, chunk: bytes, name: str) -> None:
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise self._failed(name, exc) from None

    def _parent_dir(self, rel: str, entry: str) -> int:
        """A descriptor of the directory rel ("": dest) of entry, made as needed, kept for the next entry."""
        if not rel:
            return self._root
        if self._last is not None and self._last[0] == rel:
            return self._last[1]
        fd = self._open_dir(rel, entry)
        if self._last is not None:
            os.close(self._last[1])
        self._last = (rel, fd)
        return fd

    def _open_dir(self, rel: str, entry: str) -> int:
        """A new descriptor of the directory rel (of entry), each part made (0o755) if missing, none
        followed."""
        fd = os.dup(self._root)
        parts = rel.split("/")
        try:
            for i, part in enumerate(parts):
                made = False
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    raise self._in_the_way(entry, "/".join(parts[: i + 1]), part, fd, exc) from None
                os.close(fd)
                fd = nxt
                if made:
                    os.fchmod(fd, 0o755)  # whatever the umask
            return fd
        except OSError as exc:
            os.close(fd)
            raise self._failed(rel, exc) from None
        except BaseException:
            os.close(fd)
            raise

    def _in_the_way(self, entry: str, prefix: str, part: str, fd: int, exc: OSError) -> Exception:
        """The error for the directory prefix (on the way to entry) that could not be opened: a link
        or a file there, or exc."""
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return exc
        try:
            st = os.lstat(part, dir_fd=fd)
        except OSError:
            return exc
        if prefix == entry:
            return IntegrityError(f"{self.label}: {entry!r} appears twice")
        what = "link" if stat.S_ISLNK(st.st_mode) else "file"
        return IntegrityError(f"{self.label}: {entry} lies below the {what} {prefix}")

    def _failed(self, rel: str, exc: OSError) -> TfaotError:
        return InvalidInput(f"{self.dest / rel}: cannot write it ({exc.strerror or exc})")
