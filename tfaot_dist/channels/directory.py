"""Directory channels: a directory of released packages, usable as it is over any static HTTP server.

    CHANNEL/
      index.json                                         every package: name, version, size, sha256, key facts
      packages/PACKAGE/VERSION/PACKAGE-VERSION.tar.gz    the archive, never changed once listed
      packages/PACKAGE/VERSION/manifest.json             its manifest, to read without unpacking
      index.html, packages/PACKAGE/VERSION/index.html    the catalogue (catalogue.py)

Publishing is atomic and immutable (channel.publish_archives): archives and
manifests are written (each by a rename) before the index that lists them, and
the index is replaced in one rename, so a crash leaves the previous index and
everything it lists. A lock of the directory itself (flock; no lock file is
left in the channel) lets concurrent publishers into one channel take turns,
and both land. Read from a path or a file:// URL; the same
directory served over HTTP is an http_channel.HttpChannel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tfaot_dist.channels import catalogue
from tfaot_dist.channels.channel import (
    INDEX,
    MAX_MANIFEST,
    ChannelPackage,
    Index,
    VerifiedArchive,
    checked_manifest,
    parse_index,
    render_index,
)
from tfaot_dist.documents import Manifest, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.util.fs import (
    copy_atomic,
    crash_point,
    file_lock,
    remove_stale_siblings,
    sha256_file,
    write_atomic,
)


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


class DirectoryChannel:
    def __init__(self, location: str):
        self.location = location
        self.root = channel_root(location)
        self._index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            index = self.root / INDEX
            if not index.is_file():
                raise SourceUnavailable(
                    f"{self.location}: no {INDEX} (not a channel, or nothing published yet)"
                )
            packages = parse_index(index.read_bytes(), str(index))
            for p in packages:
                for rel in (p.archive, p.manifest):
                    if not (self.root / rel).is_file():
                        raise SourceUnavailable(f"{index}: lists {rel}, which is missing from the channel")
            self._index = Index(tuple(packages))
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
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with file_lock(self.root):
                index = self.root / INDEX
                rows = parse_index(index.read_bytes(), str(index)) if index.exists() else []
                yield DirectoryTransaction(self, {row.key: row for row in rows})
        except BaseException:
            for directory in made:  # a refused publish into a new channel leaves no trace of it
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise


class DirectoryTransaction:
    def __init__(self, channel: DirectoryChannel, rows: dict[tuple[str, str], ChannelPackage]):
        self.channel, self.root, self.rows = channel, channel.root, rows

    def stored_sha256(self, row: ChannelPackage) -> str | None:
        return None  # an unlisted archive is what a dead publish left: it is written again

    def store(self, archive: VerifiedArchive, row: ChannelPackage) -> None:
        remove_stale_siblings(self.root / INDEX)
        remove_stale_siblings(self.root / row.manifest)
        remove_stale_siblings(self.root / row.archive)
        write_atomic(self.root / row.manifest, archive.manifest_bytes)
        copy_atomic(archive.path, self.root / row.archive)

    def reference(self, row: ChannelPackage) -> str:
        return row.archive

    def commit(self, changed: list[ChannelPackage], manifests: dict[tuple[str, str], Manifest]) -> None:
        """Version pages of the changed rows (and any missing), then index.json, then index.html
        (catalogue.py says why in this order)."""
        for row in changed:
            self.rows[row.key] = row
        rows = list(self.rows.values())
        catalogue.write_pages(self.root, rows, changed, manifests, self._manifest)
        crash_point("publish_index")
        index = render_index(rows)
        path = self.root / INDEX
        if changed or not path.is_file() or path.read_text() != index:
            write_atomic(path, index)
        crash_point("publish_catalogue")
        catalogue.write_listing(self.root, rows, manifests, self._manifest)

    def _manifest(self, row: ChannelPackage) -> Manifest | None:
        """A listed row's published manifest; one that no longer reads gets a page without it."""
        try:
            data = self.channel.manifest_bytes(row)
            return Manifest.from_json(load_json(data, row.manifest, MAX_MANIFEST), row.manifest)
        except (OSError, InvalidInput, IntegrityError, SourceUnavailable):
            return None
