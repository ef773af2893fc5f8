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
"""

import os
import posixpath
import shutil
import stat
import struct
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

from tfaot_dist.errors import IntegrityError

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


def extract(
    archive: Path,
    dest: Path,
    label: str | None = None,
    *,
    kind: str,
    max_entries: int = MAX_ENTRIES,
    max_bytes: int = MAX_BYTES,
) -> None:
    """Extract archive, which is of the declared kind, into dest, which must not exist yet."""
    label = label or str(archive)
    if kind not in KINDS:
        raise ValueError(f"unknown archive kind {kind!r}")
    refuse_polyglot(archive, kind, label)
    try:
        if kind == ZIP:
            _extract_zip(archive, dest, label, max_entries, max_bytes)
        else:
            _extract_tar(archive, dest, label, kind, max_entries, max_bytes)
        check_links_inside(dest, label)
    except BaseException:
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest, ignore_errors=True)
        raise


def _extract_tar(archive: Path, dest: Path, label: str, kind: str, max_entries: int, max_bytes: int) -> None:
    try:
        with tarfile.open(archive, "r:gz" if kind == PACKAGE else "r:*") as tar:
            members = list(checked_tar_members(tar, label, max_entries, max_bytes, links=kind != PACKAGE))
            dest.mkdir(parents=True)
            # The data filter repeats the checks above inside tarfile (against the file system as it
            # is written), and drops modes we do not want.
            tar.extractall(dest, members=members, filter="data")
    except tarfile.FilterError as exc:
        member = getattr(exc, "tarinfo", None)
        raise IntegrityError(f"{label}: {member.name if member else 'an entry'!r}: {exc}") from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(
            f"{label}: not a readable {'.tar.gz' if kind == PACKAGE else 'tar'} archive ({exc})"
        ) from None


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


def _extract_zip(archive: Path, dest: Path, label: str, max_entries: int, max_bytes: int) -> None:
    counted = zip_entry_count(archive, max_entries)
    if counted is not None and counted > max_entries:
        raise IntegrityError(f"{label}: more than {max_entries} entries")
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise IntegrityError(f"{label}: damaged zip archive ({exc})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > max_entries:
            raise IntegrityError(f"{label}: more than {max_entries} entries")
        plan, total = [], 0
        for info in infos:
            name = check_name(info.filename, label)
            mode = info.external_attr >> 16
            if info.is_dir():
                kind = "dir"
            elif stat.S_ISLNK(mode):
                kind = "link"
                check_link(name, zf.read(info).decode("utf-8", "replace"), label)
            elif stat.S_IFMT(mode) in (0, stat.S_IFREG):  # 0: written without Unix modes
                kind = "file"
                total += info.file_size
            else:
                raise IntegrityError(f"{label}: {info.filename!r} is not a file, directory or link")
            if total > max_bytes:
                raise IntegrityError(f"{label}: more than {max_bytes} bytes when extracted")
            plan.append((info, name, kind, mode))
        dest.mkdir(parents=True)
        try:
            for info, name, kind, mode in plan:
                path = dest / name
                _no_link_on_the_way(dest, path, label)
                if kind == "dir":
                    if path.is_symlink():
                        raise IntegrityError(f"{label}: {name} lies below the link {name}")
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                if kind == "link":
                    os.symlink(zf.read(info).decode(), path)
                    continue
                with zf.open(info) as src, open(path, "xb") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)
        except (zipfile.BadZipFile, OSError, RuntimeError, EOFError) as exc:
            raise IntegrityError(f"{label}: damaged zip archive ({exc})") from None


def _no_link_on_the_way(dest: Path, path: Path, label: str) -> None:
    """Refuse writing through a link extracted earlier (it could point anywhere inside, or be swapped)."""
    for parent in path.relative_to(dest).parents:
        if parent != Path(".") and (dest / parent).is_symlink():
            raise IntegrityError(f"{label}: {path.relative_to(dest)} lies below the link {parent}")
