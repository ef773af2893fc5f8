"""Extraction writes every entry itself (issue 37): the same result and the same refusals on every
Python, whether or not its tarfile has extraction filters (Debian 12's 3.11.2 and 3.9 have none).

The archives are built here with tarfile and zipfile (their writers, not their extractors).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import snapshot

from tfaot_dist.errors import IntegrityError, InvalidInput
from tfaot_dist.util.archives import PACKAGE, TAR, ZIP, extract, tar_header_count


def tar_of(path: Path, *members: tuple[str, bytes, str, int], gz: bool = False) -> Path:
    """members: (name, data, kind, mode); kind "file", "dir" or "link" (data: the link's target)."""
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for name, data, kind, mode in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def zip_of(path: Path, *members: tuple[str, bytes, int]) -> Path:
    """members: (name, data, st_mode), the mode stored as a Unix zip tool stores it."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def modes(tree: Path) -> dict[str, int]:
    return {str(p.relative_to(tree)): stat.S_IMODE(p.lstat().st_mode) for p in sorted(tree.rglob("*"))}


def test_no_extraction_through_tarfile_or_zipfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter's extractors are never called (their safety differs from one Python to the
    next): with them made to fail, packages and tar and zip sources still extract."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the interpreter's extractor was called")

    for method in ("extract", "extractall"):
        monkeypatch.setattr(tarfile.TarFile, method, refuse)
        monkeypatch.setattr(zipfile.ZipFile, method, refuse)
    files = (("p/a", b"1", "file", 0o644), ("p/d/b", b"22", "file", 0o755))
    extract(tar_of(tmp_path / "p.tar.gz", *files, gz=True), tmp_path / "pkg", kind=PACKAGE)
    extract(tar_of(tmp_path / "s.tar", *files), tmp_path / "tar", kind=TAR)
    extract(
        zip_of(tmp_path / "s.zip", ("p/a", b"1", 0o100644), ("p/d/b", b"22", 0o100755)),
        tmp_path / "zip",
        kind=ZIP,
    )
    for out in ("pkg", "tar", "zip"):
        assert (tmp_path / out / "p" / "a").read_bytes() == b"1"
        assert (tmp_path / out / "p" / "d" / "b").read_bytes() == b"22"


@pytest.mark.parametrize("kind", [TAR, ZIP])
def test_modes_are_normalised(tmp_path: Path, kind: str) -> None:
    """Whatever the archive says (setuid, group-writable, private) and whatever the umask: directories
    0o755, files 0o755 when anybody may run them, else 0o644."""
    members = [
        ("t/", b"", "dir", 0o700),
        ("t/private", b"p", "file", 0o600),
        ("t/setuid", b"s", "file", 0o4777),
        ("t/group-exec", b"g", "file", 0o610),
        ("t/shared", b"w", "file", 0o666),
        ("t/deep/er/f", b"f", "file", 0o640),
    ]
    if kind == TAR:
        archive = tar_of(tmp_path / "a.tar", *members)
    else:
        archive = zip_of(
            tmp_path / "a.zip",
            *((n, d, (stat.S_IFDIR if k == "dir" else stat.S_IFREG) | m) for n, d, k, m in members),
        )
    old = os.umask(0o077)
    try:
        extract(archive, tmp_path / "out", kind=kind)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755
    assert modes(tmp_path / "out") == {
        "t": 0o755,
        "t/deep": 0o755,
        "t/deep/er": 0o755,
        "t/deep/er/f": 0o644,
        "t/group-exec": 0o755,
        "t/private": 0o644,
        "t/setuid": 0o755,
        "t/shared": 0o644,
    }


@pytest.mark.parametrize("kind", [TAR, ZIP])
def test_nothing_is_written_through_a_link_of_the_archive(tmp_path: Path, kind: str) -> None:
    """A link whose target stays inside, then a file below it: refused naming both, nothing left
    (tarfile's data filter would have written the file through the link, the target being inside)."""
    if kind == TAR:
        archive = tar_of(
            tmp_path / "a.tar",
            ("t/d/", b"", "dir", 0o755),
            ("t/l", b"d", "link", 0o777),
            ("t/l/x", b"x", "file", 0o644),
        )
    else:
        archive = zip_of(
            tmp_path / "a.zip", ("t/d/", b"", 0o40755), ("t/l", b"d", 0o120777), ("t/l/x", b"x", 0o100644)
        )
    with pytest.raises(IntegrityError) as exc:
        extract(archive, tmp_path / "out", "src", kind=kind)
    assert str(exc.value) == "src: t/l/x lies below the link t/l"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", [TAR, ZIP])
def test_an_entry_twice_is_refused(tmp_path: Path, kind: str) -> None:
    """Two entries of one name (which one wins would decide what is installed), or a file below a
    file: refused naming the entry."""
    cases = {
        "file twice": ([("t/f", b"1", "file", 0o644), ("t/f", b"2", "file", 0o644)], "'t/f' appears twice"),
        "file, then link": (
            [("t/f", b"1", "file", 0o644), ("t/f", b"g", "link", 0o777)],
            "'t/f' appears twice",
        ),
        "file, then directory": (
            [("t/f", b"1", "file", 0o644), ("t/f/", b"", "dir", 0o755)],
            "'t/f' appears twice",
        ),
        "below a file": (
            [("t/f", b"1", "file", 0o644), ("t/f/g", b"2", "file", 0o644)],
            "t/f/g lies below the file t/f",
        ),
    }
    for case, (members, expected) in cases.items():
        if kind == TAR:
            archive = tar_of(tmp_path / f"{case}.tar", *members)
        else:
            repeated = len({m[0] for m in members}) < len(members)  # zipfile warns when it writes them
            with pytest.warns(UserWarning, match="Duplicate name") if repeated else contextlib.nullcontext():
                archive = zip_of(
                    tmp_path / f"{case}.zip",
                    *(
                        (n, d, {"file": 0o100644, "dir": 0o40755, "link": 0o120777}[k])
                        for n, d, k, _ in members
                    ),
                )
        with pytest.raises(IntegrityError) as exc:
            extract(archive, tmp_path / case, "src", kind=kind)
        assert str(exc.value) == f"src: {expected}", case
        assert not (tmp_path / case).exists(), case


def test_an_existing_destination_is_left_alone(tmp_path: Path) -> None:
    """dest must not exist: one that does is an error and stays exactly as it was."""
    archive = tar_of(tmp_path / "a.tar", ("t/f", b"new", "file", 0o644))
    dest = tmp_path / "dest"
    (dest / "t").mkdir(parents=True)
    (dest / "t" / "f").write_bytes(b"mine")
    before = snapshot(dest)
    with pytest.raises(InvalidInput, match="cannot write it"):
        extract(archive, dest, kind=TAR)
    assert snapshot(dest) == before


def test_bytes_written_are_bounded(tmp_path: Path) -> None:
    """max_bytes bounds what is written, declared sizes and real bytes alike."""
    archive = zip_of(tmp_path / "a.zip", ("t/a", b"x" * 600, 0o100644), ("t/b", b"y" * 600, 0o100644))
    with pytest.raises(IntegrityError, match="more than 1000 bytes when extracted"):
        extract(archive, tmp_path / "out", kind=ZIP, max_bytes=1000)
    assert not (tmp_path / "out").exists()
    extract(archive, tmp_path / "out", kind=ZIP, max_bytes=1200)
    assert (tmp_path / "out" / "t" / "b").read_bytes() == b"y" * 600


def header(name: str, kind: bytes, size: int = 0, mode: str = "0000644") -> bytes:
    """One raw ustar header block, as a writer that is not tarfile may lay it out."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    block[100:108] = mode.encode()[:7].ljust(7) + b"\0"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def members_tarfile_finds(archive: Path) -> int:
    """The members tarfile yields before it ends or fails."""
    found = 0
    with contextlib.suppress(tarfile.TarError), tarfile.open(archive) as tar:
        for _ in tar:
            found += 1
    return found


def raw_tar(path: Path, *blocks: bytes, end: bool = True) -> Path:
    path.write_bytes(b"".join(blocks) + (bytes(1024) if end else b""))
    return path


def test_the_fast_count_of_tar_headers_never_passes_tarfiles(tmp_path: Path) -> None:
    """extract() refuses a tar of too many entries from its raw headers, before tarfile parses each one
    (archives.tar_header_count). Every header it counts is a member tarfile finds: it counts exactly
    where it can (plain headers, in every compression), and gives up (None) where it cannot be sure, so
    that tarfile's own count decides as before."""
    data = [("t/empty", b""), ("t/one", b"x"), ("t/block", b"y" * 512), ("t/more", b"z" * 513)]
    members: list[tuple[str, bytes, str, int]] = [(n, d, "file", 0o644) for n, d in data]
    members += [("t/d", b"", "dir", 0o755), ("t/link", b"one", "link", 0o777)]
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, content, kind, perm in members:
            info = tarfile.TarInfo(name)
            info.mode, info.size = perm, len(content) if kind == "file" else 0
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE}[kind]
            info.linkname = content.decode() if kind == "link" else ""
            tar.addfile(info, io.BytesIO(content) if kind == "file" else None)
        hard = tarfile.TarInfo("t/hard")
        hard.type, hard.linkname = tarfile.LNKTYPE, "t/one"
        tar.addfile(hard)
    exact = {plain: 7}
    for suffix, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        path = tmp_path / f"plain.tar.{suffix}"
        path.write_bytes(compress(plain.read_bytes()))
        exact[path] = 7
    # Headers whose size field is not followed by data (tarfile reads the next header right after
    # them): a directory, and an old-style file whose name ends in "/" (tarfile: a directory).
    file_after = (header("t/f", tarfile.REGTYPE, 3), b"abc".ljust(512, b"\0"))
    exact[raw_tar(tmp_path / "dir-size.tar", header("t/d", tarfile.DIRTYPE, 1024), *file_after)] = 2
    exact[raw_tar(tmp_path / "old-dir.tar", header("t/d/", tarfile.AREGTYPE, 1024), *file_after)] = 2
    exact[
        raw_tar(tmp_path / "old-file.tar", header("t/g", tarfile.AREGTYPE, 3), *file_after[1:], *file_after)
    ] = 2
    exact[raw_tar(tmp_path / "cut.tar", *file_after, header("t/h", tarfile.REGTYPE, 4096), end=False)] = 2
    unsure = [
        raw_tar(
            tmp_path / "bad-mode.tar",
            *file_after,
            header("t/m", tarfile.REGTYPE, mode="0000z44"),
            *file_after,
        )
    ]
    bad_sum = bytearray(header("t/s", tarfile.REGTYPE))
    bad_sum[0:1] = b"u"
    unsure.append(raw_tar(tmp_path / "bad-checksum.tar", *file_after, bytes(bad_sum), *file_after))
    unsure.append(raw_tar(tmp_path / "unknown-type.tar", *file_after, header("t/u", b"Z", 512), *file_after))
    long_name = "t/" + "n" * 120
    for fmt in ("gnu", "pax"):
        path = tmp_path / f"{fmt}.tar"
        tar_format = tarfile.GNU_FORMAT if fmt == "gnu" else tarfile.PAX_FORMAT
        with tarfile.open(path, "w", format=tar_format) as tar:
            for name in ("t/a", long_name, "t/b"):
                tar.addfile(tarfile.TarInfo(name))
        unsure.append(path)
    for path, count in exact.items():
        assert members_tarfile_finds(path) == count, path
        with tarfile.open(path) as tar:
            assert tar_header_count(tar, 100) == count, path
            assert tar_header_count(tar, 1) == 2, path  # stops one past where it was asked to
            found = 0
            with contextlib.suppress(tarfile.TarError):
                for _ in tar:  # tarfile reads on from where it was
                    found += 1
            assert found == count, path
    # More bytes than a bomb of empty files needs (a member's size may claim gigabytes): not skipped.
    huge = tmp_path / "huge.tar.gz"
    huge.write_bytes(
        gzip.compress(raw_tar(tmp_path / "huge.tar", header("t/h", tarfile.REGTYPE, 8**11 - 1)).read_bytes())
    )
    unsure.append(huge)
    for path in unsure:
        with tarfile.open(path) as tar:
            assert tar_header_count(tar, 100) is None, path
    assert [members_tarfile_finds(path) for path in unsure] == [1, 1, 2, 3, 3, 1]


def test_a_tar_one_entry_past_the_limit_is_refused(tmp_path: Path) -> None:
    """Counted from the headers (plain ones) or by tarfile (after a pax header the count gives up), the
    limit is the same: max_entries entries extract, one more is refused and nothing is written."""
    files = [(f"t/{i}", b"x", "file", 0o644) for i in range(5)]
    extract(tar_of(tmp_path / "five.tar.gz", *files, gz=True), tmp_path / "five", kind=TAR, max_entries=5)
    assert len(list((tmp_path / "five" / "t").iterdir())) == 5
    six = tar_of(tmp_path / "six.tar.gz", *files, ("t/5", b"x", "file", 0o644), gz=True)
    with tarfile.open(six) as tar:
        assert tar_header_count(tar, 5) == 6
    pax = tmp_path / "six-pax.tar"
    with tarfile.open(pax, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "first"}) as tar:
        for i in range(6):
            tar.addfile(tarfile.TarInfo(f"t/{i}"))
    with tarfile.open(pax) as tar:
        assert tar_header_count(tar, 5) is None
    for archive in (six, pax):
        with pytest.raises(IntegrityError, match=f"{archive.name}: more than 5 entries"):
            extract(archive, tmp_path / "out", kind=TAR, max_entries=5)
        assert not (tmp_path / "out").exists()
