"""Channels on OCI registries: `oci://HOST[:PORT]/NAMESPACE` (ghcr.io, the CNCF distribution registry, ...).

    NAMESPACE/PACKAGE:TAG          one artifact per package version (TAG: the version with "+"
                                   as "_" and "!" as "-", as tags allow neither; Helm does the same): config = its manifest.json
                                   (CONFIG_TYPE), one layer = the package archive (LAYER_TYPE)
    NAMESPACE/tfaot-index:latest   the channel index (layer: the same document as a directory
                                   channel's index.json; config: the parts it has merged)
    NAMESPACE/tfaot-index:part-H   what one publish added (H: sha256 of that index document)

Blob digests are sha256 digests, so the index's `sha256` of a package *is* the digest of its
layer: setup pulls by digest (NAMESPACE/PACKAGE/blobs/sha256:SHA256) into the same
content-addressed download cache as HTTP channels and verifies as they do.

Rules, as for directory channels:
- A published version never changes: its tag is checked before anything is pushed (same
  layer: nothing to do; another layer: IntegrityError) and read back after the push.
- The index never lists what is not there: blobs, then the package manifests (read back),
  then the index part, then `latest`. A publish that dies anywhere leaves the index as it was
  (tags it pushed stay unlisted; the next publish of the same bytes lists them).
- Concurrent publishes both land. Registries have no conditional tag update, so nothing is
  read-modified-written: each publish adds its own immutable part tag, and a reader merges
  `latest` with every part tag that `latest` has not merged yet (one tags list per read). A
  lost race on `latest` therefore loses nothing; the next publish folds the part in.

Credentials: anonymous by default. TFAOT_DIST_OCI_TOKEN (a password or token, e.g. the job's
GITHUB_TOKEN for ghcr.io) with TFAOT_DIST_OCI_USERNAME (default "tfaot-dist") answers Basic
challenges and is exchanged for a bearer token at the registry's token service for Bearer
challenges. The token is only ever sent in request headers: never printed, never written.
Plain HTTP is used for loopback hosts only (local test registries); everything else is HTTPS.
"""

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import requests
import urllib3

from tfaot_dist import __version__, names
from tfaot_dist.cache import Cache
from tfaot_dist.channels.channel import (
    Channel,
    ChannelPackage,
    Published,
    VerifiedArchive,
    index_line,
    parse_index,
    render_index,
    verified_dist,
)
from tfaot_dist.errors import BlobsNotReady, IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.util.download import Via, cached_archive, cached_verified, download, timeout
from tfaot_dist.util.fs import file_lock, remove_stale_siblings, sha256_bytes, write_atomic

SCHEME = "oci://"
BLOB_ATTEMPTS = 5  # manifest pushes that meet a blob another publish is committing
TOKEN_ENV = "TFAOT_DIST_OCI_TOKEN"
USERNAME_ENV = "TFAOT_DIST_OCI_USERNAME"
DEFAULT_USERNAME = "tfaot-dist"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PACKAGE_ARTIFACT = "application/vnd.tfaot-dist.package.v1"
CONFIG_TYPE = "application/vnd.tfaot-dist.manifest.v1+json"
LAYER_TYPE = "application/vnd.tfaot-dist.package.v1.tar+gzip"
INDEX_ARTIFACT = "application/vnd.tfaot-dist.channel-index.v1"
INDEX_CONFIG_TYPE = "application/vnd.tfaot-dist.channel-index.config.v1+json"
INDEX_LAYER_TYPE = "application/vnd.tfaot-dist.channel-index.v1+json"
INDEX_REPO = "tfaot-index"
LATEST = "latest"
PART_PREFIX = "part-"
MAX_DOCUMENT = 64 << 20

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_OTHER = (requests.RequestException, urllib3.exceptions.HTTPError)


def tag_of(version: str) -> str:
    """The tag of a (normalized PEP 440) version: those never hold "_" or "-", so this is one to one."""
    tag = version.replace("+", "_").replace("!", "-")
    if not names.OCI_TAG.fullmatch(tag):
        raise InvalidInput(f"version {version!r} does not fit an OCI tag (at most 128 characters)")
    return tag


def is_oci(location: str) -> bool:
    return location.startswith(SCHEME)


@dataclass(frozen=True)
class Location:
    host: str  # HOST[:PORT]
    namespace: str

    @classmethod
    def parse(cls, location: str, where: str = "--channel") -> "Location":
        rest = location.removeprefix(SCHEME).rstrip("/")
        host, _, namespace = rest.partition("/")
        if not names.OCI_HOST.fullmatch(host) or not names.OCI_NAMESPACE.fullmatch(namespace):
            raise InvalidInput(f"{where}: invalid OCI channel {location!r} (expected oci://HOST[:PORT]/NAMESPACE, "
                               "lowercase NAMESPACE)")
        return cls(host, namespace)

    @property
    def base(self) -> str:
        scheme = "http" if self.host.rsplit(":", 1)[0] in LOOPBACK else "https"
        return f"{scheme}://{self.host}/v2/"

    def __str__(self) -> str:
        return f"{SCHEME}{self.host}/{self.namespace}"


# ---------------------------------------------------------------- the registry protocol


class Client:
    """The OCI distribution API calls a channel needs, with Basic and Bearer authentication."""

    def __init__(self, location: Location):
        self.location = location
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"tfaot-dist/{__version__}"
        self._auth: dict[str, str] = {}  # scope -> Authorization header value

    def url(self, repo: str, kind: str, ref: str) -> str:
        return f"{self.location.base}{self.location.namespace}/{repo}/{kind}/{ref}"

    # ---- requests

    def request(self, method: str, url: str, repo: str, ok=(200,), **kwargs) -> requests.Response:
        """One request; a 401 is answered once with credentials. Errors name the URL, never a token."""
        scope = f"repository:{self.location.namespace}/{repo}:{'pull' if method in ('GET', 'HEAD') else 'pull,push'}"
        for attempt in range(2):
            headers = dict(kwargs.pop("headers", {}) or {})
            if scope in self._auth:
                headers["Authorization"] = self._auth[scope]
            if attempt and hasattr(kwargs.get("data"), "seek"):
                kwargs["data"].seek(0)
            try:
                resp = self.session.request(method, url, headers=headers, timeout=timeout(), **kwargs)
            except requests.Timeout:
                raise SourceUnavailable(f"{url}: no answer within {timeout():g} s") from None
            except requests.ConnectionError as exc:
                raise SourceUnavailable(f"{url}: cannot connect: {_reason(exc)}") from None
            except _OTHER as exc:
                raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
            if resp.status_code == 401 and attempt == 0:
                self._auth[scope] = self._authorize(resp, scope)
                kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
                continue
            break
        if resp.status_code == 401:
            given = "refused the credentials in " if os.environ.get(TOKEN_ENV) else "requires authentication: set "
            raise SourceUnavailable(f"{self.location}: {method} {url}: HTTP 401, the registry {given}{TOKEN_ENV}")
        if resp.status_code == 403:
            raise SourceUnavailable(f"{self.location}: {method} {url}: HTTP 403, access denied "
                                    f"(does {TOKEN_ENV} allow {'reading' if method in ('GET', 'HEAD') else 'writing'}"
                                    f" {self.location.namespace}/{repo}?)")
        if resp.status_code not in ok:
            raise SourceUnavailable(f"{method} {url}: HTTP {resp.status_code} {_error_text(resp)}".rstrip())
        return resp

    def _authorize(self, resp: requests.Response, scope: str) -> str:
        """The Authorization header answering resp's challenge (Basic, or a Bearer token fetched for scope)."""
        challenge = resp.headers.get("WWW-Authenticate", "")
        kind, _, params = challenge.partition(" ")
        secret = os.environ.get(TOKEN_ENV)
        user = os.environ.get(USERNAME_ENV) or DEFAULT_USERNAME
        basic = requests.auth._basic_auth_str(user, secret) if secret else None
        if kind.lower() == "basic":
            if basic is None:
                raise SourceUnavailable(f"{self.location}: {resp.url}: HTTP 401, the registry requires "
                                        f"authentication: set {TOKEN_ENV}")
            return basic
        if kind.lower() != "bearer":
            raise SourceUnavailable(f"{self.location}: {resp.url}: HTTP 401 with an unsupported challenge "
                                    f"{kind!r}")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise SourceUnavailable(f"{self.location}: {resp.url}: HTTP 401 without a token service")
        query = {"scope": fields.get("scope", scope)}
        if "service" in fields:
            query["service"] = fields["service"]
        try:
            answer = self.session.get(realm, params=query, timeout=timeout(),
                                      headers={"Authorization": basic} if basic else {})
        except _OTHER as exc:
            raise SourceUnavailable(f"{realm}: cannot get a token: {_reason(exc)}") from None
        if answer.status_code != 200:
            raise SourceUnavailable(f"{self.location}: the token service {realm} answered HTTP {answer.status_code}"
                                    + ("" if basic else f" (set {TOKEN_ENV} for a private channel)"))
        try:
            token = answer.json().get("token") or answer.json().get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise SourceUnavailable(f"{self.location}: the token service {realm} gave no token")
        return f"Bearer {token}"

    def auth_header(self, repo: str) -> dict[str, str]:
        scope = f"repository:{self.location.namespace}/{repo}:pull"
        return {"Authorization": self._auth[scope]} if scope in self._auth else {}

    # ---- blobs and manifests

    def has_blob(self, repo: str, digest: str) -> bool:
        resp = self.request("HEAD", self.url(repo, "blobs", digest), repo, ok=(200, 404))
        return resp.status_code == 200

    def get_blob(self, repo: str, digest: str) -> bytes:
        """A small blob (a manifest.json, an index), checked against its digest."""
        resp = self.request("GET", self.url(repo, "blobs", digest), repo, stream=True)
        data = b""
        for chunk in resp.iter_content(1 << 16):  # bounded: a registry could send anything
            data += chunk
            if len(data) > MAX_DOCUMENT:
                raise IntegrityError(f"{self.url(repo, 'blobs', digest)}: larger than {MAX_DOCUMENT} bytes")
        if f"sha256:{sha256_bytes(data)}" != digest:
            raise IntegrityError(f"{self.url(repo, 'blobs', digest)}: sha256 is {sha256_bytes(data)}, expected "
                                 f"{digest.removeprefix('sha256:')}")
        return data

    def push_blob(self, repo: str, digest: str, data: bytes | Path) -> None:
        if self.has_blob(repo, digest):
            return
        start = self.request("POST", f"{self.location.base}{self.location.namespace}/{repo}/blobs/uploads/", repo,
                             ok=(202,))
        upload = urljoin(start.url, start.headers.get("Location", ""))
        upload += ("&" if "?" in upload else "?") + f"digest={digest}"
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, Path):
            with open(data, "rb") as f:
                self.request("PUT", upload, repo, ok=(201,), data=f, headers=headers)
        else:
            self.request("PUT", upload, repo, ok=(201,), data=data, headers=headers)

    def get_manifest(self, repo: str, ref: str) -> tuple[str, dict] | None:
        """(digest, manifest) of a tag or digest, or None when there is none."""
        url = self.url(repo, "manifests", ref)
        resp = self.request("GET", url, repo, ok=(200, 404), headers={"Accept": OCI_MANIFEST})
        if resp.status_code == 404:
            return None
        data = resp.content
        digest = f"sha256:{sha256_bytes(data)}"
        if ref.startswith("sha256:") and digest != ref:
            raise IntegrityError(f"{url}: sha256 is {digest}, expected {ref}")
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise InvalidInput(f"{url}: not a JSON manifest ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list) or not isinstance(
                doc.get("config"), dict):
            raise InvalidInput(f"{url}: not an OCI image manifest")
        return digest, doc

    def put_manifest(self, repo: str, tag: str, manifest: bytes) -> str:
        url = self.url(repo, "manifests", tag)
        resp = self.request("PUT", url, repo, ok=(201, 400), data=manifest, headers={"Content-Type": OCI_MANIFEST})
        if resp.status_code == 400:
            text = _error_text(resp)
            if "BLOB_UNKNOWN" in text:
                raise BlobsNotReady(f"PUT {url}: HTTP 400 {text}")
            raise SourceUnavailable(f"PUT {url}: HTTP 400 {text}".rstrip())
        return f"sha256:{sha256_bytes(manifest)}"

    def tags(self, repo: str) -> list[str]:
        out: list[str] = []
        url: str | None = f"{self.location.base}{self.location.namespace}/{repo}/tags/list?n=1000"
        while url:
            resp = self.request("GET", url, repo, ok=(200, 404))
            if resp.status_code == 404:
                return []
            try:
                got = resp.json().get("tags") or []
            except (ValueError, AttributeError):
                raise InvalidInput(f"{url}: not a tags list") from None
            out += [t for t in got if isinstance(t, str)]
            link = resp.links.get("next", {}).get("url")
            url = urljoin(url, link) if link else None
        return out


def artifact(artifact_type: str, config: tuple[str, bytes], layer: tuple[str, str, int],
             annotations: dict | None = None) -> bytes:
    """An OCI image manifest: config (media type, bytes) and one layer (media type, digest, size)."""
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
           "config": {"mediaType": config[0], "digest": f"sha256:{sha256_bytes(config[1])}", "size": len(config[1])},
           "layers": [{"mediaType": layer[0], "digest": layer[1], "size": layer[2]}]}
    if annotations:
        doc["annotations"] = annotations
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _layer(manifest: dict, media_type: str, where: str) -> dict:
    layers = [d for d in manifest["layers"] if isinstance(d, dict) and d.get("mediaType") == media_type]
    if len(layers) != 1 or not isinstance(layers[0].get("digest"), str):
        raise InvalidInput(f"{where}: expected one layer of type {media_type}")
    return layers[0]


# ---------------------------------------------------------------- the index


@dataclass
class Index:
    packages: dict[tuple[str, str], ChannelPackage]
    parts: list[str]  # part tags merged in


def read_index(client: Client) -> Index:
    """`latest` merged with every part tag it does not list (what concurrent publishes added)."""
    packages: dict[tuple[str, str], ChannelPackage] = {}
    merged: list[str] = []
    where = f"{client.location}/{INDEX_REPO}"
    tags = client.tags(INDEX_REPO)
    if LATEST in tags:
        found = client.get_manifest(INDEX_REPO, LATEST)
        if found is not None:
            _, manifest = found
            config = client.get_blob(INDEX_REPO, manifest["config"].get("digest", ""))
            try:
                merged = json.loads(config)["parts"]
                assert isinstance(merged, list) and all(isinstance(p, str) for p in merged)
            except (ValueError, KeyError, TypeError, AssertionError):
                raise InvalidInput(f"{where}:{LATEST}: config: expected {{\"parts\": [TAG, ...]}}") from None
            _merge(packages, _index_layer(client, manifest, f"{where}:{LATEST}"))
    for tag in sorted(set(tags) - set(merged)):
        if tag.startswith(PART_PREFIX):
            found = client.get_manifest(INDEX_REPO, tag)
            if found is not None:
                _merge(packages, _index_layer(client, found[1], f"{where}:{tag}"))
                merged.append(tag)
    return Index(packages, sorted(set(merged)))


def _index_layer(client: Client, manifest: dict, where: str) -> list[ChannelPackage]:
    layer = _layer(manifest, INDEX_LAYER_TYPE, where)
    return parse_index(client.get_blob(INDEX_REPO, layer["digest"]), f"{where} index.json")


def _merge(into: dict, rows: list[ChannelPackage]) -> None:
    for row in rows:
        into.setdefault(row.key, row)  # first seen wins (latest, then parts in tag order)


def _push_index(client: Client, rows, parts: list[str], tag: str) -> None:
    document = render_index(rows).encode()
    config = json.dumps({"parts": sorted(parts)}, sort_keys=True).encode()
    manifest = artifact(INDEX_ARTIFACT, (INDEX_CONFIG_TYPE, config),
                        (INDEX_LAYER_TYPE, f"sha256:{sha256_bytes(document)}", len(document)))
    _push_artifact(client, INDEX_REPO, tag, [(f"sha256:{sha256_bytes(config)}", config),
                                             (f"sha256:{sha256_bytes(document)}", document)], manifest)


# ---------------------------------------------------------------- publish


def publish(dist: Path, location: str, log=print) -> list[Published]:
    where = Location.parse(location)
    with tempfile.TemporaryDirectory(prefix="tfaot-publish-") as copies:
        return _publish_verified(verified_dist(dist, Path(copies)), Client(where), log)


def _publish_verified(verified: list[VerifiedArchive], client: Client, log) -> list[Published]:
    loc = client.location
    index = read_index(client)
    plan, out = [], []
    # Every refusal happens before the first write.
    for archive in verified:
        line = index_line(archive)
        ref = f"{loc.namespace}/{line.name}@sha256:{line.sha256}"
        listed = index.packages.get(line.key)
        # A tag a dead publish pushed but never listed counts as published too.
        old_sha = listed.sha256 if listed else _tagged_sha256(client, line)
        if old_sha is None:
            plan.append((archive, line))
            out.append(Published(line.name, line.version, "published", line.sha256, ref))
        elif old_sha == line.sha256 and listed:
            out.append(Published(line.name, line.version, "unchanged", line.sha256, ref))
        elif old_sha == line.sha256:
            plan.append((archive, line))  # there, not listed: list it
            out.append(Published(line.name, line.version, "published", line.sha256, ref))
        else:
            raise IntegrityError(f"{archive.label}: {line.name} {line.version} is already in {loc} with sha256 "
                                 f"{old_sha}, this one is {line.sha256}; a published version never changes "
                                 "(raise the version)")
    if not plan:
        return out
    for archive, line in plan:
        repo = line.name
        manifest = artifact(PACKAGE_ARTIFACT, (CONFIG_TYPE, archive.manifest_bytes),
                            (LAYER_TYPE, f"sha256:{line.sha256}", line.size),
                            {"org.opencontainers.image.version": line.version,
                             "org.opencontainers.image.title": f"{line.name}-{line.version}.tar.gz"})
        digest = _push_artifact(client, repo, tag_of(line.version),
                                [(f"sha256:{line.manifest_sha256}", archive.manifest_bytes),
                                 (f"sha256:{line.sha256}", archive.path)], manifest)
        # Read back: a concurrent publish of other bytes under this version must not be listed by us.
        now = client.get_manifest(repo, tag_of(line.version))
        if now is None or now[0] != digest:
            raise IntegrityError(f"{loc}/{repo}:{tag_of(line.version)} was pushed with other bytes at the same "
                                 "time; a published version never changes")
        log(f"published {line.name} {line.version} ({line.sha256[:12]})")
    ours = [line for _, line in plan]
    part = PART_PREFIX + sha256_bytes(render_index(ours).encode())[:32]
    _push_index(client, ours, [], part)
    # `latest`: what is there now, our part included; losing a race here loses nothing (see above).
    fresh = read_index(client)
    _merge(fresh.packages, ours)
    _push_index(client, fresh.packages.values(), sorted({*fresh.parts, part}), LATEST)
    return out


def _tagged_sha256(client: Client, line: ChannelPackage) -> str | None:
    """The layer digest (hex) under the tag NAME:VERSION, or None when there is no such tag."""
    tagged = client.get_manifest(line.name, tag_of(line.version))
    if tagged is None:
        return None
    where = f"{client.location}/{line.name}:{tag_of(line.version)}"
    return _layer(tagged[1], LAYER_TYPE, where)["digest"].removeprefix("sha256:")


# ---------------------------------------------------------------- setup


class OciChannel(Channel):
    """A channel on a registry, opened for reading."""

    def __init__(self, location: str, packages: list[ChannelPackage], client: Client | None,
                 index_bytes: bytes | None):
        super().__init__(location, packages)
        self.client = client
        self._index_bytes = index_bytes

    @classmethod
    def open_oci(cls, location: str, cache: Path, offline: bool = False) -> "OciChannel":
        where = Location.parse(location)
        saved = _saved_index(cache, where)
        if offline:
            if not saved.is_file():
                raise SourceUnavailable(f"offline: no copy of the index of {where} in the cache {cache}")
            return cls(location, parse_index(saved.read_bytes(), f"{saved} (cached index of {where})"), None, None)
        client = Client(where)
        index = read_index(client)
        if not index.packages and not client.tags(INDEX_REPO):
            raise SourceUnavailable(f"{where}: no {INDEX_REPO} (not a channel, or nothing published yet)")
        data = render_index(index.packages.values()).encode()
        return cls(location, parse_index(data, f"{where}/{INDEX_REPO}"), client, data)

    def remember(self, cache: Path) -> None:
        if self._index_bytes is not None:
            saved = _saved_index(cache, Location.parse(self.location))
            saved.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(saved.parent / ".lock"):
                remove_stale_siblings(saved)
                write_atomic(saved, self._index_bytes)

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        cached = cached_verified(cache, package.sha256)  # hashed again: replaced bytes are a miss
        if cached is not None:
            return cached, False
        digest = f"sha256:{package.sha256}"
        if offline or self.client is None:
            raise SourceUnavailable(f"offline: {package.name} {package.version} ({self.location}, sha256 "
                                    f"{package.sha256}) is not in the cache "
                                    f"{cached_archive(cache, package.sha256).parent}")
        url = self.client.url(package.name, "blobs", digest)
        # The HEAD authenticates (a token is fetched if needed) and names a missing blob clearly.
        if not self.client.has_blob(package.name, digest):
            raise SourceUnavailable(f"{url}: HTTP 404 (the index lists {package.name} {package.version}, "
                                    "the registry does not have it)")
        # Registries answer blob pulls with a redirect to their storage or CDN (ghcr.io does): other
        # hosts are allowed there, without the token; the bytes are checked against the digest.
        via = Via(headers=tuple(self.client.auth_header(package.name).items()), other_hosts=True)
        return download(url, cache, package.sha256, limit=package.size, via=via).path, True


def _saved_index(cache: Path, where: Location) -> Path:
    return Cache(cache).channel_dir(str(where)) / "index.json"


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "Connection reset by peer", "timed out"):
        if marker in text:
            return marker
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _push_artifact(client: Client, repo: str, tag: str, blobs: list[tuple[str, bytes | Path]],
                   manifest: bytes) -> str:
    """Push the blobs (digest, bytes or file), then the manifest under tag; the manifest's digest.

    Two publishes that push the same blob at once (the runtime, shared by every model's publish) can
    make the registry answer the manifest with BLOB_UNKNOWN while the other upload of that blob is
    being committed: push what is missing again and retry, a few times.
    """
    for attempt in range(BLOB_ATTEMPTS):
        for digest, data in blobs:
            client.push_blob(repo, digest, data)
        try:
            return client.put_manifest(repo, tag, manifest)
        except BlobsNotReady:
            if attempt + 1 == BLOB_ATTEMPTS:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def _error_text(resp: requests.Response) -> str:
    """The registry's own error code, e.g. MANIFEST_INVALID (bounded, one line)."""
    try:
        errors = resp.json().get("errors") or []
        return ", ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))[:300]
    except (ValueError, AttributeError):
        return (resp.reason or "")[:100]

