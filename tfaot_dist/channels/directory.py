"""Directory channels: a directory of released packages, usable as it is over any static HTTP server.

    CHANNEL/
      index.json                                         every package: name, version, size, sha256, key facts
      packages/PACKAGE/VERSION/PACKAGE-VERSION.tar.gz    the archive, never changed once listed
      packages/PACKAGE/VERSION/manifest.json             its manifest, to read without unpacking
      index.html, packages/PACKAGE/VERSION/index.html    the catalogue (catalogue.py)

Publishing is atomic and immutable (publishing.publish_archives): archives and
manifests are written (each by a rename) before the index that lists them, and
the index is replaced in one rename, so a crash leaves the previous index and
everything it lists. A lock of the directory itself (flock; no lock file is
left in the channel) lets concurrent publishers into one channel take turns,
and both land. Read from a path or a file:// URL; the same
directory served over HTTP is an http_channel.HttpChannel.

Every file a publish or yank writes goes through a ChannelWriter (area.py's primitives): opened
relative to the channel directory, never through a link; a link inside the channel is refused with
one line. A channel given as a link (--channel LINK) is resolved once, when it is opened.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tfaot_dist.channels.channel import (
    INDEX,
    MAX_INDEX,
    MAX_MANIFEST,
    BrokenRow,
    ChannelPackage,
    Index,
    VerifiedArchive,
    checked_manifest,
    parse_index,
    parse_index_rows,
    render_index,
)
from tfaot_dist.documents import Manifest, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.install.area import AreaWriter
from tfaot_dist.trust.signing import Signing, signed_change_or_channel
from tfaot_dist.util.fs import crash_point, sha256_file


def channel_root(location: str) -> Path:
    if location.startswith("file://"):
        parts = urlsplit(location)
        if parts.netloc not in ("", "localhost"):
            raise InvalidInput(f"--channel: file URL with a host is not supported: {location!r}")
        return Path(unquote(parts.path))
    if "://" in location:
        raise InvalidInput(
            f"--channel: unsupported channel {location!r} (a directory, file://, http://, https:// or oci://)"
        )
    return Path(location).absolute()


class ChannelWriter(AreaWriter):
    """The channel directory opened for a publish or yank (DirectoryChannel.transaction()): every
    write replaces its file in one rename, after removing what writers killed half-way left of it."""

    place = "channel"

    def _hints(self) -> tuple[str, str]:
        return "the command again", "the command again"

    def write(self, rel: str, data: bytes | str) -> None:
        self.remove_stale(rel)
        super().write(rel, data)

    def copy_in(self, rel: str, source: Path) -> None:
        self.remove_stale(rel)
        super().copy_in(rel, source)


class DirectoryChannel:
    signing: Signing | None = None  # set by channel.sign_with: what commits sign with

    def __init__(self, location: str):
        self.location = location
        # Resolved once: a channel given as a link is the directory it points to, from here on.
        self.root = Path(os.path.realpath(channel_root(location)))
        self._index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            index = self.root / INDEX
            if not index.is_file():
                raise SourceUnavailable(
                    f"{self.location}: no {INDEX} (not a channel, or nothing published yet)"
                )
            rows, broken = parse_index_rows(index.read_bytes(), str(index))
            usable = []
            for p in rows:
                missing = [rel for rel in (p.archive, p.manifest) if not (self.root / rel).is_file()]
                if missing:
                    reason = f"{index}: lists {missing[0]}, which is missing from the channel"
                    broken.append(BrokenRow(p.name, p.version, reason, SourceUnavailable))
                else:
                    usable.append(p)
            self._index = Index(tuple(usable), tuple(broken))
        return self._index

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        path = self.root / package.archive
        if not path.is_file():
            raise SourceUnavailable(f"{self.location}: {package.archive} is missing from the channel")
        got = sha256_file(path)
        if got != package.sha256:
            raise IntegrityError(f"{path}: sha256 is {got}, the channel index says {package.sha256}")
        return path, False

    def manifest_bytes(self, package: ChannelPackage) -> bytes:
        path = self.root / package.manifest
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_MANIFEST + 1)
        except OSError as exc:
            raise SourceUnavailable(f"{path}: unreadable ({exc.strerror})") from None
        return checked_manifest(data, package, str(path))

    def remember(self, cache: Path) -> None:
        pass  # a local channel is there offline too

    @contextmanager
    def transaction(self) -> Iterator[DirectoryTransaction]:
        if self.root.exists() and not self.root.is_dir():
            raise InvalidInput(f"--channel: {self.root} is not a directory")
        made = [p for p in (self.root, *self.root.parents) if not p.exists()]  # the directories made here
        try:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError as exc:
                problem = "a read-only file system" if exc.errno == errno.EROFS else exc.strerror
                raise InvalidInput(
                    f"--channel: {self.root}: cannot write a channel there ({problem})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the directory itself: no lock file in the channel
                writer = ChannelWriter(self.root, fd)
                data = writer.read(INDEX, MAX_INDEX)
                rows = parse_index(data, str(self.root / INDEX)) if data is not None else []
                yield DirectoryTransaction(self, writer, {row.key: row for row in rows})
            finally:
                os.close(fd)
        except BaseException:
            for directory in made:  # a refused publish into a new channel leaves no trace of it
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise


class DirectoryTransaction:
    def __init__(
        self, channel: DirectoryChannel, writer: ChannelWriter, rows: dict[tuple[str, str], ChannelPackage]
    ):
        self.channel, self.root, self.writer, self.rows = channel, channel.root, writer, rows
        self.stored: list[tuple[VerifiedArchive, ChannelPackage]] = []

    def stored_sha256(self, row: ChannelPackage) -> str | None:
        return None  # an unlisted archive is what a dead publish left: it is written again

    def intact(self, row: ChannelPackage) -> bool:
        return (
            self.writer.sha256(row.archive) == row.sha256
            and self.writer.sha256(row.manifest) == row.manifest_sha256
        )

    def store(self, archive: VerifiedArchive, row: ChannelPackage) -> None:
        """Written by commit(), first: every path is checked for links before anything is written."""
        self.stored.append((archive, row))

    def reference(self, row: ChannelPackage) -> str:
        return row.archive

    def commit(self, changed: list[ChannelPackage], manifests: dict[tuple[str, str], Manifest]) -> None:
        """Archives and manifests stored, version pages of the changed rows (and any missing), then
        index.json, then index.html (catalogue.py says why in this order). A link (or a file) on the
        way to any of them refuses the commit before the first write."""
        from tfaot_dist.channels import catalogue  # jinja2: loaded by a write only, never by a read

        for row in changed:
            self.rows[row.key] = row
        rows = list(self.rows.values())
        pages = catalogue.pages_to_write(self.writer, rows, changed)
        for rel in (
            *(rel for _, row in self.stored for rel in (row.manifest, row.archive)),
            *(catalogue.page_path(row.name, row.version) for row in pages),
            *catalogue.FILES,
            INDEX,
        ):
            self.writer.check_removable(rel)  # refuses a link at rel or on the way to it
        is_signed = signed_change_or_channel(self.writer, self.channel.signing)
        if is_signed:
            from tfaot_dist.trust import repository

            repository.check_signing(self.writer, self.channel.signing, self.channel.location)
        for archive, row in self.stored:
            self.writer.write(row.manifest, archive.manifest_bytes)
            self.writer.copy_in(row.archive, archive.path)
        catalogue.write_pages(self.writer, pages, manifests, self._manifest)
        if is_signed:
            repository.sign_rows(self.writer, rows, self.channel.signing)  # before the index lists them
        crash_point("publish_index")
        index = render_index(rows)
        self.writer.remove_stale(INDEX)
        if changed:
            self.writer.write(INDEX, index)
        else:
            self.writer.write_if_changed(INDEX, index)
        crash_point("publish_catalogue")
        catalogue.write_listing(self.writer, rows, manifests, self._manifest)

    def _manifest(self, row: ChannelPackage) -> Manifest | None:
        """A listed row's published manifest; one that no longer reads gets a page without it."""
        data = self.writer.read(row.manifest, MAX_MANIFEST)  # a link there is refused, never followed
        if data is None:
            return None
        try:
            checked = checked_manifest(data, row, str(self.root / row.manifest))
            return Manifest.from_json(load_json(checked, row.manifest, MAX_MANIFEST), row.manifest)
        except (InvalidInput, IntegrityError):
            return None
