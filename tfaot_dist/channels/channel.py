"""The channel interface: one Protocol the three transports (directory.py, http_channel.py, oci.py)
implement, and what they share. factory.open_channel() chooses the transport of a location; publishing.py
holds the rules of publish and yank, for every transport.

The rules every transport keeps are written once:
- every HTTP request goes through util/download.send(): credentials are bound to the channel's
  origin (scheme, host, port) and never travel over plain http to another machine; redirects
  follow download.Via; every body is read with a size cap and under one deadline;
- the index is parsed field by field (documents.IndexRow) and a version is chosen by
  Index.newest() (an exact pin `==1.0` never picks `1.0+local`);
- an archive is checked against the index's sha256 before anything reads it, and its manifest
  against the row's manifest_sha256 (manifest_bytes());
- publishing follows publishing.publish_archives(): every refusal before the first write, a
  published version never changes, archives before the index that lists them. A transport only
  provides an IndexTransaction: the rows as they are, storing one archive, listing rows.

Changing rows (a yank mark) is a transaction whose commit() lists the changed rows; removing a
package from an area is the area writer's business (install/area.py), not the channel's.

Remote indexes are kept under CACHE/channels/ after a successful setup (remember()), so that
`setup --offline` can use the last one seen; archives go to the content-addressed CACHE/archives/.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as PackagingRequirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from tfaot_dist import names
from tfaot_dist.cache import Cache
from tfaot_dist.documents import IndexRow, JsonObject, Manifest, Requirement, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable, TfaotError
from tfaot_dist.package import MANIFEST
from tfaot_dist.util import archives
from tfaot_dist.util.archives import PACKAGE, check_name, checked_tar_members, refuse_polyglot
from tfaot_dist.util.cached_archives import cached_archive, cached_verified
from tfaot_dist.util.fs import (
    copy_regular,
    file_lock,
    open_regular,
    remove_stale_siblings,
    sha256_bytes,
    sha256_file,
    sha256_stream,
    write_atomic,
)
from tfaot_dist.util.textsafe import shown

INDEX = "index.json"
FORMAT = "tfaot-dist-channel/1"
RUNTIME = "tfaot-xla-runtime"
MAX_MANIFEST = 64 << 20
MAX_INDEX = 64 << 20
TOOL_DIR = "etc/scram.d/"
MAX_TOOL_FILE = 1 << 20


def package_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not names.PACKAGE_NAME.fullmatch(value):
        raise InvalidInput(
            f"{where}: invalid package name {value!r} (expected tfaot-model-NAME or {RUNTIME})"
        )
    return value


class ChannelPackage(IndexRow):
    """One line of index.json (documents.IndexRow)."""

    def as_dict(self) -> JsonObject:
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
    tool_files: tuple[tuple[str, bytes], ...] = ()  # etc/scram.d/*: checked (ownership.py) before setup

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
    open_regular(path).close()  # a FIFO or device in its place would block or never end
    found: dict[str, tuple[str, int]] = {}
    tops: set[str] = set()
    manifest_bytes = None
    tools: list[tuple[str, bytes]] = []
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
                if not isinstance(f, io.BufferedReader):  # a regular file's data: tarfile.ExFileObject
                    raise IntegrityError(f"{label}: unreadable entry {member.name!r} in a package archive")
                if rel == MANIFEST:
                    manifest_bytes = f.read(MAX_MANIFEST + 1)
                    if len(manifest_bytes) > MAX_MANIFEST:
                        raise IntegrityError(f"{label}: {MANIFEST} is too large")
                    continue
                if rel.startswith(TOOL_DIR):
                    data = f.read(MAX_TOOL_FILE + 1)
                    if len(data) > MAX_TOOL_FILE:
                        raise IntegrityError(f"{label}: {rel} is too large for a tool file")
                    tools.append((rel, data))
                    found[rel] = (sha256_bytes(data), member.size)
                    continue
                found[rel] = (sha256_stream(f), member.size)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: not a readable .tar.gz ({exc})") from None
    if manifest_bytes is None:
        raise IntegrityError(f"{label}: no {MANIFEST} in the archive")
    try:
        manifest = Manifest.from_json(
            load_json(manifest_bytes, f"{label}: {MANIFEST}", MAX_MANIFEST), f"{label}: {MANIFEST}"
        )
    except InvalidInput as exc:
        raise IntegrityError(str(exc)) from None
    package, version = manifest.package, manifest.version
    if tops != {f"{package}-{version}"}:
        raise IntegrityError(
            f"{label}: expected the single top directory {package}-{version}/, "
            f"found {', '.join(sorted(tops))}"
        )
    listed = manifest.files
    for rel in sorted(found.keys() - listed.keys()):
        raise IntegrityError(f"{label}: {rel} is not listed in the manifest")
    for rel in sorted(listed):
        meta = listed[rel]
        if rel not in found:
            raise IntegrityError(f"{label}: {rel} is listed in the manifest but missing")
        if found[rel] != (meta.sha256, meta.size):
            raise IntegrityError(f"{label}: {rel}: sha256 or size differs from the manifest")
    return VerifiedArchive(
        path, sha256_file(path), path.stat().st_size, manifest, manifest_bytes, label, tuple(sorted(tools))
    )


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
        tensorflow_version=str(
            m.tensorflow_version if runtime else (m.toolchain.tensorflow_version if m.toolchain else "")
        ),
        batch_sizes=() if runtime or not m.compilation else m.compilation.batch_sizes,
        signature=None
        if runtime or not sig
        else {"inputs": sig.get("inputs", []), "outputs": sig.get("outputs", [])},
    )


def verified_dist(
    dist: Path, copies: Path, selection: list[str] | tuple[str, ...] = ()
) -> list[VerifiedArchive]:
    """The package archives of dist (selection: those matching one of these requirements, NAME or
    NAME>=1.0, and the runtimes the chosen models require), copied into copies and verified."""
    if not dist.is_dir():
        raise InvalidInput(f"--dist: {dist} is not a directory")
    found = sorted(p for p in dist.glob("*.tar.gz") if not p.name.startswith("."))
    if not found:
        raise InvalidInput(f"--dist: no package archives (*.tar.gz) in {dist}")
    if selection:
        found = _selected(found, selection, dist)
    # Private copies: a build writing into dist meanwhile cannot change what is checked,
    # hashed and published between the three reads.
    verified = []
    for path in found:
        copy = copies / path.name
        copy_regular(path, copy)
        archive = verify_archive(copy, str(path))
        if path.name != f"{archive.name}-{archive.version}.tar.gz":
            raise IntegrityError(
                f"{path}: holds {archive.name} {archive.version}; expected the file name "
                f"{archive.name}-{archive.version}.tar.gz"
            )
        verified.append(archive)
    if selection:  # the runtimes the chosen models require, where dist has them
        chosen = {(a.name, a.version) for a in verified}
        for req in {r for a in verified for r in a.manifest.requires if r.name == RUNTIME}:
            path = dist / f"{req.name}-{req.version}.tar.gz"
            if (req.name, req.version) not in chosen and path.is_file():
                copy = copies / path.name
                copy_regular(path, copy)
                verified.append(verify_archive(copy, str(path)))
                chosen.add((req.name, req.version))
    return verified


def _selected(found: list[Path], selection: list[str] | tuple[str, ...], dist: Path) -> list[Path]:
    """The archives whose NAME-VERSION.tar.gz matches one of the requirements (each must match one)."""
    named = []
    for path in found:
        stem = path.name.removesuffix(".tar.gz")
        name, _, version = stem.rpartition("-")
        try:
            if str(Version(version)) == version:
                named.append((name, version, path))
        except InvalidVersion:
            continue
    out: dict[Path, None] = {}
    for text in selection:
        package, specifier = parse_requirement(text)
        hits = [
            path
            for name, version, path in named
            if name == package
            and matches(specifier, version)
            and specifier.contains(version, prereleases=True)
        ]
        if not hits:
            have = ", ".join(f"{n} {v}" for n, v, _ in named if n == package) or "none"
            raise InvalidInput(f"{text!r}: no archive of {package} in {dist} matches (there: {have})")
        out.update(dict.fromkeys(hits))
    return sorted(out)


# ---------------------------------------------------------------- the index


@dataclass(frozen=True)
class BrokenRow:
    """A row of an index that cannot be used (it does not read, is listed twice, or names a file the
    channel lacks). Its package is refused whole, with reason; other packages are not affected."""

    name: str  # the package the row names ("" when it names none)
    version: str  # as the row spells it ("" when it has none)
    reason: str  # one line, naming the index, the row and what is wrong
    error: type[TfaotError]  # what refusing the package raises (its exit code)

    def refusal(self) -> TfaotError:
        return self.error(f"{self.reason} (the channel's other packages are not affected)")


def parse_index(data: bytes, label: str) -> list[ChannelPackage]:
    """index.json, checked field by field (documents.IndexRow); errors name the field and the value.
    Strict: a row that does not read refuses the whole index (publish and yank rewrite it whole)."""
    rows, broken = parse_index_rows(data, label)
    if broken:
        raise broken[0].error(broken[0].reason)
    return rows


def parse_index_rows(data: bytes, label: str) -> tuple[list[ChannelPackage], list[BrokenRow]]:
    """index.json for reading (setup, --list): the rows that read, and those that do not. Only a
    document that is not an index at all refuses the channel."""
    doc = load_json(data, label, MAX_INDEX)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise InvalidInput(f"{label}: format: expected {FORMAT!r}, got {shown(got)}")
    rows = doc.get("packages")
    if not isinstance(rows, list):
        raise InvalidInput(f"{label}: packages: expected a list")
    out: dict[tuple[str, str], ChannelPackage] = {}
    broken: list[BrokenRow] = []
    for i, row in enumerate(rows):
        where = f"{label}: packages[{i}]"
        try:
            line = ChannelPackage.from_json(row, where)
        except InvalidInput as exc:
            name = row.get("name") if isinstance(row, dict) else None
            version = row.get("version") if isinstance(row, dict) else None
            broken.append(
                BrokenRow(
                    name if isinstance(name, str) and names.PACKAGE_NAME.fullmatch(name) else "",
                    shown(version, 40, False) if isinstance(version, str) else "",
                    str(exc),
                    InvalidInput,
                )
            )
            continue
        if line.key in out:
            broken.append(
                BrokenRow(
                    line.name,
                    line.version,
                    f"{where}: {line.name} {line.version} is listed twice",
                    InvalidInput,
                )
            )
            continue
        out[line.key] = line
    return list(out.values()), broken


def render_index(packages: Iterable[ChannelPackage]) -> str:
    """index.json: one package per line (sorted; diffs of a channel kept in git stay small), written
    by the C JSON encoder (an indented document takes the pure-Python one: seconds for 20,000 rows)."""
    rows = sorted(packages, key=lambda p: (p.name, Version(p.version)))
    lines = ",\n".join(json.dumps(p.as_dict(), sort_keys=True) for p in rows)
    return '{"format": ' + json.dumps(FORMAT) + ', "packages": [\n' + lines + "\n]}\n"


def parse_requirement(text: str) -> tuple[str, SpecifierSet]:
    """'test-simple>=1.0,<2' -> ('tfaot-model-test-simple', >=1.0,<2); a package name works too."""
    try:
        req = PackagingRequirement(text)
    except InvalidRequirement as exc:
        raise InvalidInput(f"{text!r}: invalid requirement ({exc})") from None
    if req.extras or req.url or req.marker:
        raise InvalidInput(
            f"{text!r}: only NAME and version specifiers are allowed (e.g. 'test-simple>=1.0,<2')"
        )
    name = req.name.lower()
    if name == RUNTIME or name.startswith("tfaot-model-"):
        package = name
    else:
        package = f"tfaot-model-{names.model_name(name, repr(text))}"
    return package, req.specifier


def matches(specifier: SpecifierSet, version: str) -> bool:
    """PEP 440 matching, except that a local label must be asked for: `==1.0` is 1.0 only, never
    1.0+local (PEP 440 lets 1.0+anything match it, so a later local build would shadow the pin)."""
    local = Version(version).local is not None
    for spec in specifier:
        if (
            local
            and spec.operator == "=="
            and not spec.version.endswith(".*")
            and Version(spec.version).local is None
        ):
            return False
    return True


def exact_pin(specifier: SpecifierSet) -> bool:
    """`==1.0` or `===1.0`: one version asked for by name (no wildcard, no range)."""
    specs = list(specifier)
    return len(specs) == 1 and specs[0].operator in ("==", "===") and not specs[0].version.endswith(".*")


@dataclass(frozen=True)
class Index:
    """A channel's rows, and how a version is chosen among them. Versions are compared as PEP 440
    values: 1.0 and 1.0.0 are one version."""

    rows: tuple[ChannelPackage, ...]
    broken: tuple[BrokenRow, ...] = ()  # rows that cannot be used: their packages are refused

    def refuse_broken(self, name: str) -> None:
        """A package with a broken row is refused whole (skipping the row could install an older
        version than the channel lists); the channel's other packages are not affected."""
        for row in self.broken:
            if row.name == name:
                raise row.refusal()

    def versions(self, name: str) -> list[ChannelPackage]:
        return sorted((p for p in self.rows if p.name == name), key=lambda p: Version(p.version))

    def newest(self, name: str, specifier: SpecifierSet) -> ChannelPackage | None:
        """The newest version matching (pre-releases only when the specifier names one; see matches()).
        A yanked version only for an exact pin (`==1.0`), as PEP 592 has it for pip."""
        self.refuse_broken(name)
        pinned = exact_pin(specifier)
        candidates = [
            p for p in self.versions(name) if matches(specifier, p.version) and (p.yanked is None or pinned)
        ]
        matching = set(specifier.filter(p.version for p in candidates))
        chosen = [p for p in candidates if p.version in matching]
        if not chosen:
            return None
        best = Version(chosen[-1].version)
        return self._one(name, [p for p in chosen if Version(p.version) == best])

    def exact(self, name: str, version: str) -> ChannelPackage | None:
        """The row of name at version (compared by value)."""
        self.refuse_broken(name)
        wanted = Version(version)
        found = [p for p in self.rows if p.name == name and Version(p.version) == wanted]
        return self._one(name, found) if found else None

    @staticmethod
    def _one(name: str, rows: list[ChannelPackage]) -> ChannelPackage:
        """The one row of a version; two spellings of it (1.0 and 1.0.0, published before versions
        were compared by value) are two builds, and which one is meant is not for index order to say."""
        if len(rows) > 1:
            spellings = " and ".join(p.version for p in rows)
            raise IntegrityError(
                f"{name}: {spellings} are one version listed {len(rows)} times with other archives; "
                f"pin one spelling exactly ('{name}==={rows[0].version}'), or yank the one not meant"
            )
        return rows[0]


# ---------------------------------------------------------------- the interface


class IndexTransaction(Protocol):
    """A channel opened for writing (under its lock, or as a registry allows: see oci.py)."""

    rows: dict[tuple[str, str], ChannelPackage]  # the index as it is now

    def stored_sha256(self, row: ChannelPackage) -> str | None:
        """The sha256 of what the channel stores under row's name and version without listing it
        (a publish that died before its index), or None: a stored version never changes either."""

    def intact(self, row: ChannelPackage) -> bool:
        """Whether the listed row's archive and manifest are stored with its digests (a publish of
        the same bytes stores again what is not)."""

    def store(self, archive: VerifiedArchive, row: ChannelPackage) -> None:
        """Put the archive and its manifest where row says (not yet listed)."""

    def reference(self, row: ChannelPackage) -> str:
        """Where row's archive is, as publish reports it."""

    def commit(self, changed: list[ChannelPackage], manifests: dict[tuple[str, str], Manifest]) -> None:
        """List changed (new rows, or rows replacing those of the same name and version) in one step;
        manifests: the manifests of the new rows (for catalogue pages)."""


class Channel(Protocol):
    """A channel (directory.py, http_channel.py, oci.py), as factory.open_channel() returns it."""

    location: str

    @property
    def index(self) -> Index:
        """The index (read on first use)."""

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        """The archive of package, its sha256 checked against the index: (path, fresh).

        fresh: a new download in a temporary file in cache, which the caller moves into the
        cache (cached_archives.keep) once everything it needs is there, or deletes (cached_archives.discard)."""

    def manifest_bytes(self, package: ChannelPackage) -> bytes:
        """The published manifest.json of package, checked against its row's manifest_sha256."""

    def remember(self, cache: Path) -> None:
        """Keep a remote index for `--offline` (called once it served its purpose)."""

    def transaction(self) -> AbstractContextManager[IndexTransaction]:
        """The channel opened for writing (a read-only channel refuses with a UsageError)."""


# ---------------------------------------------------------------- shared by the transports


def checked_manifest(data: bytes, package: ChannelPackage, where: str) -> bytes:
    if sha256_bytes(data) != package.manifest_sha256:
        raise IntegrityError(f"{where}: sha256 differs from the channel index's manifest_sha256")
    return data


def cached_or_fetch(
    package: ChannelPackage, cache: Path, offline: bool, where: str, get: Callable[[], Path]
) -> tuple[Path, bool]:
    """A remote archive: the verified copy in the cache, or get() (a fresh download)."""
    cached = cached_verified(cache, package.sha256)  # hashed again: replaced bytes are a miss
    if cached is not None:
        return cached, False
    if offline:
        raise SourceUnavailable(
            f"offline: {package.name} {package.version} ({where}, sha256 {package.sha256}) "
            f"is not in the cache {cached_archive(cache, package.sha256).parent}"
        )
    return get(), True


def saved_index(cache: Path, key: str) -> Path:
    """Where the last index read from the remote channel key is kept."""
    return Cache(cache).channel_dir(key) / INDEX


def remember_index(cache: Path, key: str, data: bytes) -> None:
    saved = saved_index(cache, key)
    saved.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(saved.parent / ".lock"):
        remove_stale_siblings(saved)
        write_atomic(saved, data)


def read_saved_index(cache: Path, key: str, label: str) -> Index:
    saved = saved_index(cache, key)
    if not saved.is_file():
        raise SourceUnavailable(f"offline: no copy of the index of {label} in the cache {cache}")
    rows, broken = parse_index_rows(saved.read_bytes(), f"{saved} (cached index of {label})")
    return Index(tuple(rows), tuple(broken))


def verify_fetched(path: Path, package: ChannelPackage, location: str) -> VerifiedArchive:
    """An archive fetched for package (its sha256 checked by fetch()): a valid package archive whose
    name, version, manifest and requirements are the row's (a row cannot promise another runtime)."""
    archive = verify_archive(path, f"{package.name} {package.version} from {location}")
    if (archive.name, archive.version) != package.key:
        raise IntegrityError(f"{location}: {package.archive} holds {archive.name} {archive.version}")
    if sha256_bytes(archive.manifest_bytes) != package.manifest_sha256:
        raise IntegrityError(f"{location}: {package.archive}: its manifest differs from {package.manifest}")
    if package.kind != index_line(archive).kind:
        raise IntegrityError(
            f"{location}: {package.name} {package.version}: the index says kind {package.kind}, "
            "its manifest another"
        )
    wanted = tuple(Requirement(r.name, r.version) for r in archive.manifest.requires)
    if tuple(package.requires) != wanted:
        said = ", ".join(f"{r.name} {r.version}" for r in package.requires) or "nothing"
        has = ", ".join(f"{r.name} {r.version}" for r in wanted) or "nothing"
        raise IntegrityError(
            f"{location}: {package.name} {package.version}: the index says it requires {said}, "
            f"its manifest requires {has}"
        )
    return archive
