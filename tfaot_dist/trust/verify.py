"""The client's side of a signed channel: setup checks the channel's index against its TUF metadata,
read and verified by python-tuf's client (ngclient), before anything is installed.

An area trusts a channel once given its root (setup --trust ROOT.json); the root and the newest
metadata it accepted are kept in the area (AREA/tfaot/trust/ID/, one directory per channel, each
file written by a rename; trusted.py reads them without python-tuf, so that a setup from a channel
the area does not trust never loads this module), and from then on every setup from that channel
needs metadata that verifies: signed by the keys of the trusted root (followed through signed
rotations), not older than what the area saw (rollback), not expired (freeze). An index row is
installed only when its archive and manifest are signed targets with the row's lengths and digests;
a row's yank mark is the signed one. Every refusal is an IntegrityError (exit 7), raised before the
area changes; the accepted metadata is kept only once setup succeeded (SignedChannel.remember(),
which setup calls last).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from tuf.api.exceptions import (
    BadVersionNumberError,
    DownloadError,
    DownloadHTTPError,
    ExpiredMetadataError,
    LengthOrHashMismatchError,
    RepositoryError,
    UnsignedMetadataError,
)
from tuf.api.metadata import Metadata, Root, TargetFile, Targets
from tuf.api.serialization import DeserializationError
from tuf.ngclient import FetcherInterface, Updater

from tfaot_dist.channels.channel import BrokenRow, Channel, ChannelPackage, Index, IndexTransaction
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable, TfaotError
from tfaot_dist.install.area import open_area
from tfaot_dist.trust import provenance
from tfaot_dist.trust.signing import MAX_METADATA, TUF
from tfaot_dist.trust.trusted import KEPT, TRUST, Trusted, channel_id, metadata_url


class _Fetcher(FetcherInterface):
    """Metadata from a channel directory, over HTTP (util/download: its caps and deadline) or from an
    OCI channel's tags (oci.OciMetadata: the registry client's bounds). A file or answer that is not
    there is a 404, as ngclient expects (the end of the root versions)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def _fetch(self, url: str) -> Iterator[bytes]:
        if url.startswith("file://"):
            path = Path(unquote(urlsplit(url).path))
            try:
                with open(path, "rb") as f:
                    data = f.read(MAX_METADATA + 1)
            except FileNotFoundError:
                raise DownloadHTTPError(f"{path}: missing", 404) from None
            except OSError as exc:
                raise SourceUnavailable(f"{path}: unreadable ({exc.strerror})") from None
            return iter([data])
        # A remote channel (its transport loaded the HTTP stack already).
        from tfaot_dist.channels.oci import OciChannel, OciMetadata
        from tfaot_dist.util.download import get_bytes

        if isinstance(self.channel, OciChannel):
            rel = unquote(url.removeprefix(f"{self.channel.where}/"))
            found = OciMetadata(self.channel.client).read(rel, MAX_METADATA)
            if found is None:
                raise DownloadHTTPError(f"{url}: missing", 404)
            return iter([found])
        try:
            return iter([get_bytes(url, MAX_METADATA)])
        except SourceUnavailable as exc:
            # util/download says "URL: HTTP 404 Not Found"; ngclient needs the status code.
            for status in (403, 404):
                if str(exc).startswith(f"{url}: HTTP {status}"):
                    raise DownloadHTTPError(str(exc), status) from None
            raise


def _root_version(data: bytes, where: str) -> int:
    try:
        md = Metadata[Root].from_bytes(data)
    except DeserializationError as exc:
        raise InvalidInput(f"{where}: not TUF root metadata ({exc})") from None
    if not isinstance(md.signed, Root):
        raise InvalidInput(f"{where}: not TUF root metadata (its type is {md.signed.type})")
    return md.signed.version


def guard(channel: Channel, area_root: Path, trusted: Trusted | None, trust_root: Path | None) -> Channel:
    """The channel as setup may use it: itself when the area trusts no root for it (trusted: what
    trusted.read_trusted() found) and none is given, else a SignedChannel whose index holds only the
    rows the verified metadata signs."""
    given = None
    if trust_root is not None:
        try:
            given = trust_root.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"--trust: {trust_root}: unreadable ({exc.strerror})") from None
        version = _root_version(given, f"--trust: {trust_root}")
        if trusted is not None and trusted.roots.get(version) != given:
            raise IntegrityError(
                f"--trust: {trust_root}: {channel.location} is trusted with another root by "
                f"{area_root / TRUST / channel_id(channel)} (version {max(trusted.roots)}); a trusted root "
                "changes only by the channel's signed rotation (remove that directory to start again)"
            )
    if trusted is None and given is None:
        return channel
    if trusted is None:
        assert given is not None
        trusted = Trusted({_root_version(given, str(trust_root)): given}, {})
    return SignedChannel(channel, area_root, _refresh(channel, trusted))


def _refresh(channel: Channel, trusted: Trusted) -> tuple[dict[str, TargetFile], Trusted]:
    """Run ngclient over a copy of the area's trusted state: the signed targets and the new state."""
    where = channel.location
    with tempfile.TemporaryDirectory(prefix="tfaot-trust-") as tmp:
        work = Path(tmp)
        (work / "root_history").mkdir()
        for version, data in trusted.roots.items():
            (work / "root_history" / f"{version}.root.json").write_bytes(data)
        for name, data in trusted.files.items():
            (work / name).write_bytes(data)
        try:
            updater = Updater(
                str(work),
                metadata_url(channel),
                fetcher=_Fetcher(channel),
                bootstrap=trusted.roots[max(trusted.roots)],
            )
            updater.refresh()  # persists each role in work once it verified
            signed = Metadata[Targets].from_bytes((work / "targets.json").read_bytes()).signed.targets
        except DownloadHTTPError as exc:
            raise IntegrityError(
                f"{where}: unsigned (no {TUF}/ metadata: {exc}), but this area trusts the channel's "
                "root: refused"
            ) from None
        except DownloadError as exc:
            if isinstance(exc.__cause__, TfaotError):
                raise exc.__cause__ from None
            raise IntegrityError(f"{where}: signed metadata refused: {exc}") from None
        except RepositoryError as exc:
            raise IntegrityError(f"{where}: signed metadata refused: {_why(exc)} ({exc})") from None
        except (OSError, ValueError) as exc:
            raise IntegrityError(f"{where}: signed metadata refused: {exc}") from None
        roots = {
            int(p.name.split(".")[0]): p.read_bytes() for p in (work / "root_history").glob("*.root.json")
        }
        files = {name: (work / name).read_bytes() for name in KEPT if (work / name).is_file()}
        return dict(signed), Trusted(roots, files)


def _why(exc: RepositoryError) -> str:
    """What a refusal of ngclient's means for the user."""
    if isinstance(exc, ExpiredMetadataError):
        return "expired (the channel is stale or frozen; its publisher refreshes the timestamp)"
    if isinstance(exc, BadVersionNumberError):
        return "older than the metadata this area accepted before (a rollback)"
    if isinstance(exc, UnsignedMetadataError):
        return "not signed by the keys of the root this area trusts"
    if isinstance(exc, LengthOrHashMismatchError):
        return "does not match the length or digest its signed parent gives"
    return "invalid"


class SignedChannel:
    """A channel whose index is checked against its verified targets; the rest is the channel's."""

    def __init__(self, inner: Channel, area_root: Path, verified: tuple[dict[str, TargetFile], Trusted]):
        self.inner, self.area_root = inner, area_root
        self.location = inner.location
        self.targets, self.trusted = verified
        self._index: Index | None = None

    @property
    def index(self) -> Index:
        if self._index is None:
            inner = self.inner.index
            rows, broken = [], list(inner.broken)
            for row in inner.rows:
                problem = self._unsigned(row)
                if problem:
                    broken.append(
                        BrokenRow(
                            row.name,
                            row.version,
                            f"{self.location}: {row.name} {row.version}: {problem}; refused (this area "
                            "trusts the channel's signatures only)",
                            IntegrityError,
                        )
                    )
                    continue
                custom = self.targets[row.archive].custom
                yanked = custom.get("yanked") if isinstance(custom, dict) else None
                rows.append(dataclasses.replace(row, yanked=yanked if isinstance(yanked, str) else None))
            self._index = Index(tuple(rows), tuple(broken))
        return self._index

    def _unsigned(self, row: ChannelPackage) -> str | None:
        for path, length, sha256 in (
            (row.archive, row.size, row.sha256),
            (row.manifest, None, row.manifest_sha256),
        ):
            target = self.targets.get(path)
            if target is None:
                return f"{path} is not a signed target"
            if target.hashes.get("sha256") != sha256 or (length is not None and target.length != length):
                return f"{path}: the index's sha256 or size differs from the signed target's"
        return None

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        self.check_provenance(package)
        return self.inner.fetch(package, cache, offline)

    def check_provenance(self, package: ChannelPackage) -> dict[str, Any]:
        """The archive's provenance: a signed target, signed by the channel's targets keys, naming it."""
        rel = provenance.path(package)
        target = self.targets.get(rel)
        where = f"{self.location}: {package.name} {package.version}"
        if target is None:
            raise IntegrityError(f"{where}: no signed provenance ({rel} is not a signed target)")
        url = metadata_url(self.inner).removesuffix(f"{TUF}/") + quote(rel)
        try:
            data = _Fetcher(self.inner).download_bytes(url, target.length)
            target.verify_length_and_hashes(data)
        except DownloadError as exc:
            if isinstance(exc.__cause__, TfaotError):
                raise exc.__cause__ from None
            raise IntegrityError(f"{where}: provenance unreadable: {exc}") from None
        except LengthOrHashMismatchError:
            raise IntegrityError(f"{where}: {rel} differs from its signed target") from None
        root = Metadata[Root].from_bytes(self.trusted.roots[max(self.trusted.roots)]).signed
        role = root.roles[Targets.type]
        return provenance.check(data, [root.keys[k] for k in role.keyids], role.threshold, package, url)

    def manifest_bytes(self, package: ChannelPackage) -> bytes:
        return self.inner.manifest_bytes(package)

    def remember(self, cache: Path) -> None:
        """Called by setup once it succeeded: the inner channel's index kept for --offline, and the
        metadata accepted kept in the area (keep())."""
        self.inner.remember(cache)
        self.keep()

    def transaction(self) -> AbstractContextManager[IndexTransaction]:
        return self.inner.transaction()

    def keep(self) -> None:
        """After a successful setup: the area keeps the metadata it accepted (rollback protection
        from now on) and the roots it followed, each file by a rename."""
        rel = f"{TRUST}/{channel_id(self.inner)}"
        with open_area(self.area_root) as writer:
            writer.write_if_changed(f"{rel}/channel.txt", self.location + "\n")
            for version, data in sorted(self.trusted.roots.items()):
                writer.write_if_changed(f"{rel}/root_history/{version}.root.json", data)
            for name, data in self.trusted.files.items():
                writer.write_if_changed(f"{rel}/{name}", data)


def signed_state(channel: Channel) -> str:
    """For setup --list: whether the channel carries TUF metadata (not verified here)."""
    try:
        url = metadata_url(channel)
    except InvalidInput:
        return "unsigned"
    try:
        data = b"".join(_Fetcher(channel).fetch(url + quote("root.json")))
        version = _root_version(data, url + "root.json")
    except (DownloadError, TfaotError):
        return "unsigned"
    return f"signed (TUF root version {version})"
