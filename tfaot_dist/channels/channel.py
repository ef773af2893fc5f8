"""Channels: directories of released packages, usable as they are over any static HTTP server.

    CHANNEL/
      index.json                                         every package: name, version, size, sha256, key facts
      packages/PACKAGE/VERSION/PACKAGE-VERSION.tar.gz    the archive, never changed once listed
      packages/PACKAGE/VERSION/manifest.json             its manifest, to read without unpacking
      .publish.lock                                      held while publishing

Publishing is atomic and immutable: archives and manifests are written (each
by a rename) before the index that lists them, and the index is replaced in
one rename, so a crash leaves the previous index and everything it lists. A
name and version that is listed already may only be published again with the
same bytes (a no-op); other bytes are an IntegrityError. A file lock lets
concurrent publishers into one channel take turns, and both land.

A channel is read from a path, a file:// URL or an http(s):// URL (oci:// registries:
tfaot_dist/channels/oci.py). Remote indexes are kept under CACHE/channels/ after a successful setup, so that
`setup --offline` can use the last one seen; archives go to the
content-addressed CACHE/archives/.
"""

import hashlib
import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tfaot_dist import names
from tfaot_dist.cache import Cache
from tfaot_dist.documents import IndexRow, Manifest, Requirement, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.package import MANIFEST
from tfaot_dist.util import archives
from tfaot_dist.util.archives import PACKAGE, check_name, checked_tar_members, refuse_polyglot
from tfaot_dist.util.download import cached_archive, cached_verified, download, get_bytes
from tfaot_dist.util.fs import (
    copy_atomic,
    crash_point,
    file_lock,
    remove_stale_siblings,
    sha256_bytes,
    sha256_file,
    write_atomic,
)
from tfaot_dist.util.textsafe import shown

INDEX = "index.json"
FORMAT = "tfaot-dist-channel/1"
LOCK = ".publish.lock"
RUNTIME = "tfaot-xla-runtime"
MAX_MANIFEST = 64 << 20


def package_name(value, where: str) -> str:
    if not isinstance(value, str) or not names.PACKAGE_NAME.fullmatch(value):
        raise InvalidInput(f"{where}: invalid package name {value!r} (expected tfaot-model-NAME or {RUNTIME})")
    return value


class ChannelPackage(IndexRow):
    """One line of index.json (documents.IndexRow)."""

    def as_dict(self) -> dict:
        return self.to_json()


# ---------------------------------------------------------------- package archives


@dataclass(frozen=True)
class VerifiedArchive:
    path: Path
    sha256: str
    size: int
    manifest: Manifest  # its fields, checked
    manifest_bytes: bytes
    label: str = ""  # how errors name it (the path, unless it was checked as a copy)

    @property
    def name(self) -> str:
        return self.manifest.package

    @property
    def version(self) -> str:
        return self.manifest.version


def verify_archive(path: Path, label: str | None = None) -> VerifiedArchive:
    """Read a package archive through once, without extracting it: one top directory
    PACKAGE-VERSION, only directories and regular files, and every file listed in its
    manifest.json with that sha256 and size (and none unlisted)."""
    label = label or str(path)
    found: dict[str, tuple[str, int]] = {}
    tops: set[str] = set()
    manifest_bytes = None
    refuse_polyglot(path, PACKAGE, label)
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in checked_tar_members(tar, label, archives.MAX_ENTRIES, links=False):
                name = check_name(member.name, label)
                top, _, rel = name.partition("/")
                tops.add(top)
                if member.isdir():
                    continue
                if not member.isfile() or not rel:
                    raise IntegrityError(f"{label}: unexpected entry {member.name!r} in a package archive")
                f = tar.extractfile(member)
                if rel == MANIFEST:
                    manifest_bytes = f.read(MAX_MANIFEST + 1)
                    if len(manifest_bytes) > MAX_MANIFEST:
                        raise IntegrityError(f"{label}: {MANIFEST} is too large")
                    continue
                found[rel] = (hashlib.file_digest(f, "sha256").hexdigest(), member.size)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: not a readable .tar.gz ({exc})") from None
    if manifest_bytes is None:
        raise IntegrityError(f"{label}: no {MANIFEST} in the archive")
    try:
        manifest = Manifest.from_json(load_json(manifest_bytes, f"{label}: {MANIFEST}", MAX_MANIFEST),
                                      f"{label}: {MANIFEST}")
    except InvalidInput as exc:
        raise IntegrityError(str(exc)) from None
    package, version = manifest.package, manifest.version
    if tops != {f"{package}-{version}"}:
        raise IntegrityError(f"{label}: expected the single top directory {package}-{version}/, "
                             f"found {', '.join(sorted(tops))}")
    listed = manifest.files
    for rel in sorted(found.keys() - listed.keys()):
        raise IntegrityError(f"{label}: {rel} is not listed in the manifest")
    for rel in sorted(listed):
        meta = listed[rel]
        if rel not in found:
            raise IntegrityError(f"{label}: {rel} is listed in the manifest but missing")
        if found[rel] != (meta.sha256, meta.size):
            raise IntegrityError(f"{label}: {rel}: sha256 or size differs from the manifest")
    return VerifiedArchive(path, sha256_file(path), path.stat().st_size, manifest, manifest_bytes, label)


def index_line(archive: VerifiedArchive) -> ChannelPackage:
    """The index entry of a verified archive, with the manifest's key facts."""
    m = archive.manifest
    base = f"packages/{archive.name}/{archive.version}"
    runtime = m.kind == "runtime"
    sig = m.signature
    return ChannelPackage(
        name=archive.name,
        version=archive.version,
        kind="runtime" if runtime else "model",
        archive=f"{base}/{archive.name}-{archive.version}.tar.gz",
        size=archive.size,
        sha256=archive.sha256,
        manifest=f"{base}/{MANIFEST}",
        manifest_sha256=sha256_bytes(archive.manifest_bytes),
        requires=tuple(Requirement(r.name, r.version) for r in m.requires),
        tensorflow_version=str(m.tensorflow_version if runtime else (m.toolchain.tensorflow_version
                                                                     if m.toolchain else "")),
        batch_sizes=() if runtime or not m.compilation else m.compilation.batch_sizes,
        signature=None if runtime or not sig else {"inputs": sig.get("inputs", []),
                                                   "outputs": sig.get("outputs", [])},
    )


# ---------------------------------------------------------------- publishing


@dataclass(frozen=True)
class Published:
    name: str
    version: str
    status: str  # "published" or "unchanged"
    sha256: str
    archive: str  # relative to the channel; in an OCI registry NAMESPACE/PACKAGE@sha256:... (the layer)


def publish(dist: Path, channel: Path, log=print) -> list[Published]:
    """Publish every package archive in dist (models and runtimes) into the channel directory."""
    if not dist.is_dir():
        raise InvalidInput(f"--dist: {dist} is not a directory")
    archives = sorted(p for p in dist.glob("*.tar.gz") if not p.name.startswith("."))
    if not archives:
        raise InvalidInput(f"--dist: no package archives (*.tar.gz) in {dist}")
    if channel.exists() and not channel.is_dir():
        raise InvalidInput(f"--channel: {channel} is not a directory")
    with tempfile.TemporaryDirectory(prefix="tfaot-publish-") as copies:
        return _publish_verified(verified_dist(dist, Path(copies)), channel, log)


def verified_dist(dist: Path, copies: Path) -> list[VerifiedArchive]:
    """Every package archive of dist, copied into copies and verified (for any kind of channel)."""
    if not dist.is_dir():
        raise InvalidInput(f"--dist: {dist} is not a directory")
    archives = sorted(p for p in dist.glob("*.tar.gz") if not p.name.startswith("."))
    if not archives:
        raise InvalidInput(f"--dist: no package archives (*.tar.gz) in {dist}")
    # Private copies: a build writing into dist meanwhile cannot change what is checked,
    # hashed and published between the three reads.
    verified = []
    for path in archives:
        copy = copies / path.name
        shutil.copyfile(path, copy)
        archive = verify_archive(copy, str(path))
        if path.name != f"{archive.name}-{archive.version}.tar.gz":
            raise IntegrityError(f"{path}: holds {archive.name} {archive.version}; expected the file name "
                                 f"{archive.name}-{archive.version}.tar.gz")
        verified.append(archive)
    return verified


def _publish_verified(verified: list[VerifiedArchive], channel: Path, log) -> list[Published]:
    channel.mkdir(parents=True, exist_ok=True)
    with file_lock(channel / LOCK):
        index_path = channel / INDEX
        current = parse_index(index_path.read_bytes(), str(index_path)) if index_path.exists() else []
        listed = {p.key: p for p in current}
        plan, out = [], []
        # Every refusal happens before the first write.
        for archive in verified:
            line = index_line(archive)
            old = listed.get(line.key)
            if old is None:
                plan.append((archive, line))
                out.append(Published(line.name, line.version, "published", line.sha256, line.archive))
            elif old.sha256 == line.sha256:
                out.append(Published(line.name, line.version, "unchanged", line.sha256, old.archive))
            else:
                raise IntegrityError(f"{archive.label}: {line.name} {line.version} is already in {channel} with "
                                     f"sha256 {old.sha256}, this one is {line.sha256}; a published version "
                                     "never changes (raise the version)")
        manifests = {line.key: archive.manifest for archive, line in plan}
        if not plan:
            _write_catalogue(channel, listed, manifests)  # a channel from before the catalogue gets one
            return out
        remove_stale_siblings(index_path)
        for archive, line in plan:
            remove_stale_siblings(channel / line.manifest)
            remove_stale_siblings(channel / line.archive)
            write_atomic(channel / line.manifest, archive.manifest_bytes)
            copy_atomic(archive.path, channel / line.archive)
        for _, line in plan:
            listed[line.key] = line
        _write_catalogue(channel, listed, manifests)
    return out


def _published_manifest(path: Path) -> Manifest | None:
    try:
        return Manifest.from_json(load_json(path.read_bytes(), str(path), MAX_MANIFEST), str(path))
    except (OSError, InvalidInput):
        return None


def _write_catalogue(channel: Path, listed: dict, manifests: dict) -> None:
    """Version pages, then index.json, then index.html (catalogue.py says why in this order)."""
    from tfaot_dist.channels import catalogue

    for line in listed.values():
        if line.key not in manifests:
            # Published by this channel's own checks; a manifest that no longer reads gets a page without it.
            manifests[line.key] = _published_manifest(channel / line.manifest)
    rows = list(listed.values())
    catalogue.write(channel, rows, manifests, "pages")
    crash_point("publish_index")
    index = render_index(rows)
    if not (channel / INDEX).is_file() or (channel / INDEX).read_text() != index:
        write_atomic(channel / INDEX, index)
    crash_point("publish_catalogue")
    catalogue.write(channel, rows, manifests, "index")


def render_index(packages) -> str:
    rows = sorted(packages, key=lambda p: (p.name, Version(p.version)))
    return json.dumps({"format": FORMAT, "packages": [p.as_dict() for p in rows]}, indent=1, sort_keys=True) + "\n"


# ---------------------------------------------------------------- reading


def parse_index(data: bytes, label: str) -> list[ChannelPackage]:
    """index.json, checked field by field (documents.IndexRow); errors name the field and the value."""
    doc = load_json(data, label)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InvalidInput(f"{label}: format: expected {FORMAT!r}, got {shown(got)}")
    rows = doc.get("packages")
    if not isinstance(rows, list):
        raise InvalidInput(f"{label}: packages: expected a list")
    out, seen = [], set()
    for i, row in enumerate(rows):
        where = f"{label}: packages[{i}]"
        line = ChannelPackage.from_json(row, where)
        if line.key in seen:
            raise InvalidInput(f"{where}: {line.name} {line.version} is listed twice")
        seen.add(line.key)
        out.append(line)
    return out


class Channel:
    """A channel opened for reading: its packages, and their archives on demand."""

    def __init__(self, location: str, packages: list[ChannelPackage], root: Path | None = None,
                 base_url: str | None = None, index_bytes: bytes | None = None):
        self.location = location
        self.packages = packages
        self.root = root  # a local channel
        self.base_url = base_url  # a remote one, ending in "/"
        self._index_bytes = index_bytes  # a remote index as read, for remember()

    @classmethod
    def open(cls, location: str, cache: Path, offline: bool = False) -> "Channel":
        if location.startswith("oci://"):  # a registry: tfaot_dist/channels/oci.py
            from tfaot_dist.channels.oci import OciChannel

            return OciChannel.open_oci(location, cache, offline)
        root, base_url = _locate(location)
        if root is not None:
            index = root / INDEX
            if not index.is_file():
                raise SourceUnavailable(f"{location}: no {INDEX} (not a channel, or nothing published yet)")
            packages = parse_index(index.read_bytes(), str(index))
            for p in packages:
                for rel in (p.archive, p.manifest):
                    if not (root / rel).is_file():
                        raise SourceUnavailable(f"{index}: lists {rel}, which is missing from the channel")
            return cls(location, packages, root=root)
        saved = _saved_index(cache, base_url)
        if offline:
            if not saved.is_file():
                raise SourceUnavailable(f"offline: no copy of {base_url}{INDEX} in the cache {cache}")
            return cls(location, parse_index(saved.read_bytes(), f"{saved} (cached {base_url}{INDEX})"),
                       base_url=base_url)
        data = get_bytes(base_url + INDEX)
        return cls(location, parse_index(data, base_url + INDEX), base_url=base_url, index_bytes=data)

    def remember(self, cache: Path) -> None:
        """Keep this remote index for `--offline` (called once it served its purpose)."""
        if self.base_url is not None and self._index_bytes is not None:
            saved = _saved_index(cache, self.base_url)
            saved.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(saved.parent / ".lock"):
                remove_stale_siblings(saved)
                write_atomic(saved, self._index_bytes)

    def versions(self, name: str) -> list[ChannelPackage]:
        return sorted((p for p in self.packages if p.name == name), key=lambda p: Version(p.version))

    def newest(self, name: str, specifier: SpecifierSet) -> ChannelPackage | None:
        """The newest version matching (pre-releases only when the specifier names one)."""
        candidates = {p.version: p for p in self.versions(name)}
        matching = list(specifier.filter(candidates))
        if not matching:
            return None
        return candidates[max(matching, key=Version)]

    def exact(self, name: str, version: str) -> ChannelPackage | None:
        return next((p for p in self.packages if p.key == (name, version)), None)

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        """The archive of package, its sha256 checked against the index: (path, fresh).

        fresh: a new download in a temporary file in cache, which the caller moves into the
        cache (download.keep) once everything it needs is there, or deletes.
        """
        if self.root is not None:
            path = self.root / package.archive
            if not path.is_file():
                raise SourceUnavailable(f"{self.location}: {package.archive} is missing from the channel")
            got = sha256_file(path)
            if got != package.sha256:
                raise IntegrityError(f"{path}: sha256 is {got}, the channel index says {package.sha256}")
            return path, False
        cached = cached_verified(cache, package.sha256)  # hashed again: replaced bytes are a miss
        if cached is not None:
            return cached, False
        url = self.base_url + quote(package.archive)
        if offline:
            raise SourceUnavailable(f"offline: {package.name} {package.version} {url} (sha256 {package.sha256}) "
                                    f"is not in the cache {cached_archive(cache, package.sha256).parent}")
        return download(url, cache, package.sha256, limit=package.size).path, True


def _saved_index(cache: Path, base_url: str) -> Path:
    return Cache(cache).channel_dir(base_url) / INDEX


def _locate(location: str) -> tuple[Path | None, str | None]:
    """(local directory, None) or (None, base URL ending in /)."""
    if location.startswith(("http://", "https://")):
        from tfaot_dist.util.download import check_url

        check_url(location, "--channel")
        return None, location if location.endswith("/") else location + "/"
    if location.startswith("file://"):
        parts = urlsplit(location)
        if parts.netloc not in ("", "localhost"):
            raise InvalidInput(f"--channel: file URL with a host is not supported: {location!r}")
        return Path(unquote(parts.path)), None
    if "://" in location:
        raise InvalidInput(f"--channel: unsupported channel {location!r} (a directory, file://, http://, https:// "
                           "or oci://)")
    return Path(location).absolute(), None
