"""Extracting tar (plain, gz, bz2, xz) and zip archives that come from elsewhere.

Every entry is checked before anything is written: relative POSIX names with
no ".." and no absolute paths, only regular files, directories and symbolic
links that stay inside the tree; no hard links, devices or FIFOs; at most
MAX_ENTRIES entries and MAX_BYTES bytes. One bad entry refuses the whole
archive with an IntegrityError naming it.
"""

import os
import posixpath
import stat
import struct
import tarfile
import zipfile
from pathlib import Path

from tfaot_dist.errors import IntegrityError

MAX_ENTRIES = 100_000
MAX_BYTES = 16 << 30
_EOCD_SEARCH = 22 + 0xFFFF  # the end record and the longest comment


def extract(archive: Path, dest: Path, label: str | None = None, max_entries: int = MAX_ENTRIES,
            max_bytes: int = MAX_BYTES) -> None:
    """Extract archive (tar or zip, told apart by content) into dest, which must not exist yet."""
    label = label or str(archive)
    if zipfile.is_zipfile(archive):
        _extract_zip(archive, dest, label, max_entries, max_bytes)
        return
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _checked_tar_members(tar, label, max_entries, max_bytes)
            dest.mkdir(parents=True)
            # The data filter repeats the checks above inside tarfile, and drops modes we do not want.
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(f"{label}: not a readable tar or zip archive ({exc})") from None


def check_name(name: str, label: str) -> str:
    """A member name as a safe relative POSIX path (trailing "/" removed)."""
    clean = name.rstrip("/")
    parts = clean.split("/")
    if (not clean or name.startswith("/") or "\\" in name or "\0" in name or ".." in parts
            or (len(parts[0]) == 2 and parts[0][1] == ":")):
        raise IntegrityError(f"{label}: unsafe entry name {name!r}")
    return posixpath.normpath(clean)


def check_link(name: str, target: str, label: str) -> None:
    """A symbolic link at name pointing at target must stay inside the tree."""
    if not target or target.startswith("/") or "\0" in target:
        raise IntegrityError(f"{label}: link {name!r} -> {target!r} leaves the tree")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../"):
        raise IntegrityError(f"{label}: link {name!r} -> {target!r} leaves the tree")


def _checked_tar_members(tar: tarfile.TarFile, label: str, max_entries: int, max_bytes: int):
    members, total = [], 0
    for member in tar:
        if len(members) >= max_entries:
            raise IntegrityError(f"{label}: more than {max_entries} entries")
        if member.name == "pax_global_header" or member.type in (tarfile.XGLTYPE,):
            continue
        name = check_name(member.name, label)
        if member.islnk():
            raise IntegrityError(f"{label}: hard link {member.name!r} is not allowed")
        if member.issym():
            check_link(name, member.linkname, label)
        elif not (member.isfile() or member.isdir()):
            raise IntegrityError(f"{label}: {member.name!r} is not a file, directory or link")
        total += member.size if member.isfile() else 0
        if total > max_bytes:
            raise IntegrityError(f"{label}: more than {max_bytes} bytes when extracted")
        members.append(member)
    return members


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
        if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":  # zip64: the locator points at its end record
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
                if kind == "dir":
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                _no_link_on_the_way(dest, path, label)
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
