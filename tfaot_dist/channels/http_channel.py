"""A directory channel served over HTTP(S) (any static server, GitHub Pages): read only.

Every request goes through util/download (its size caps, deadline, retries and redirect rules);
no credentials are ever sent (a channel URL with user:password@ is refused by check_url).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from urllib.parse import quote

from tfaot_dist.channels.channel import (
    INDEX,
    MAX_INDEX,
    MAX_MANIFEST,
    ChannelPackage,
    Index,
    IndexTransaction,
    cached_or_fetch,
    checked_manifest,
    parse_index_rows,
    read_saved_index,
    remember_index,
)
from tfaot_dist.errors import UsageError
from tfaot_dist.pins import check_url
from tfaot_dist.util.download import download, get_bytes


class HttpChannel:
    def __init__(self, location: str, cache: Path, offline: bool = False):
        check_url(location, "--channel")
        self.location = location
        self.base_url = location if location.endswith("/") else location + "/"
        self.offline = offline
        self._cache = cache
        self._index: Index | None = None
        self._index_bytes: bytes | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            if self.offline:
                self._index = read_saved_index(self._cache, self.base_url, self.base_url + INDEX)
            else:
                self._index_bytes = get_bytes(self.base_url + INDEX, limit=MAX_INDEX)
                rows, broken = parse_index_rows(self._index_bytes, self.base_url + INDEX)
                self._index = Index(tuple(rows), tuple(broken))
        return self._index

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        url = self.base_url + quote(package.archive)
        return cached_or_fetch(
            package,
            cache,
            offline,
            url,
            lambda: download(url, cache, package.sha256, limit=package.size).path,
        )

    def manifest_bytes(self, package: ChannelPackage) -> bytes:
        url = self.base_url + quote(package.manifest)
        return checked_manifest(get_bytes(url, limit=MAX_MANIFEST), package, url)

    def remember(self, cache: Path) -> None:
        if self._index_bytes is not None:
            remember_index(cache, self.base_url, self._index_bytes)

    def transaction(self) -> AbstractContextManager[IndexTransaction]:
        raise UsageError(
            f"--channel: {self.location} is read only over http(s); publish and yank write to the "
            "channel directory it serves (or to an oci:// registry)"
        )
