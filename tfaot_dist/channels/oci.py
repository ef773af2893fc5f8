"""Channels on OCI registries: `oci://HOST[:PORT]/NAMESPACE` (ghcr.io, the CNCF distribution registry, ...).

    NAMESPACE/PACKAGE:TAG          one artifact per package version (TAG: the version with "+"
                                   as "_" and "!" as "-", as tags allow neither; Helm does the same): config = its manifest.json
                                   (CONFIG_TYPE), one layer = the package archive (LAYER_TYPE)
    NAMESPACE/tfaot-index:latest   the channel index (layer: the same document as a directory
                                   channel's index.json; config: the parts it has merged)
    NAMESPACE/tfaot-index:part-H   what one publish added (H: sha256 of that index document)
    NAMESPACE/tfaot-tuf:TAG        a signed channel's files (OciMetadata): TUF metadata by file name
                                   (1.root.json, root.json, 3.snapshot.json, timestamp.json, ...),
                                   each provenance as target-H (H: sha256 of its channel path);
                                   one layer = the file

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
challenges. The token is only ever sent in request headers: never printed, never written, and
only to the channel's origin (scheme, host and port of oci://HOST[:PORT]): a token service
(realm), a tags `Link`, an upload `Location` or a redirect elsewhere never gets it (an upload
Location elsewhere is refused; a realm elsewhere is asked anonymously). TFAOT_DIST_OCI_REGISTRY
(HOST[:PORT]) binds the token to one registry: a channel on any other is then asked anonymously,
so a token set for ghcr.io never reaches a registry named on a command line by mistake. Plain
HTTP is used for loopback hosts only (local test registries); everything else is HTTPS.

Bounds (a registry may answer anything): manifests at most MAX_MANIFEST bytes, other documents
MAX_DOCUMENT; tags lists at most MAX_TAG_PAGES pages and MAX_TAGS tags, each an OCI tag, a page
seen twice is a loop; at most MAX_PARTS index parts not yet merged into `latest`; one read of the
index takes at most MAX_INDEX_READ bytes (every answer counted) and MAX_INDEX_ROWS rows in all.
Manifest GETs follow redirects under the blob rules (download.Via: other hosts over https only,
without credentials).

Compaction: a publish or yank that finds more than COMPACT_AFTER part tags pushes one part holding
every row it read (and its own), then `latest`, and only then deletes the parts that one holds (by
digest; a registry that does not allow deletes keeps them, and that is only slower). A reader sees
`latest` and every part not deleted, so it never sees fewer rows than before, whatever a concurrent
publish does: a part is deleted only once another part holding its rows is there.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urljoin

import requests
import urllib3
from requests.structures import CaseInsensitiveDict

from tfaot_dist import __version__, names
from tfaot_dist.channels.channel import (
    ChannelPackage,
    Index,
    VerifiedArchive,
    cached_or_fetch,
    parse_index,
    read_saved_index,
    remember_index,
    render_index,
)
from tfaot_dist.documents import JsonObject, Manifest
from tfaot_dist.errors import BlobsNotReady, IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.trust.signing import TUF, Signing, signed_change_or_channel
from tfaot_dist.util.download import (
    DEADLINE_ENV,
    Origin,
    Via,
    attempts,
    backoff,
    deadline,
    download,
    read_capped,
    send,
    timeout,
)
from tfaot_dist.util.fs import sha256_bytes
from tfaot_dist.util.textsafe import shown

SCHEME = "oci://"
BLOB_ATTEMPTS = 5  # manifest pushes that meet a blob another publish is committing
TOKEN_ENV = "TFAOT_DIST_OCI_TOKEN"
USERNAME_ENV = "TFAOT_DIST_OCI_USERNAME"
REGISTRY_ENV = "TFAOT_DIST_OCI_REGISTRY"  # HOST[:PORT]: the one registry the token is for
DEFAULT_USERNAME = "tfaot-dist"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PACKAGE_ARTIFACT = "application/vnd.tfaot-dist.package.v1"
CONFIG_TYPE = "application/vnd.tfaot-dist.manifest.v1+json"
LAYER_TYPE = "application/vnd.tfaot-dist.package.v1.tar+gzip"
INDEX_ARTIFACT = "application/vnd.tfaot-dist.channel-index.v1"
INDEX_CONFIG_TYPE = "application/vnd.tfaot-dist.channel-index.config.v1+json"
INDEX_LAYER_TYPE = "application/vnd.tfaot-dist.channel-index.v1+json"
INDEX_REPO = "tfaot-index"
TUF_REPO = "tfaot-tuf"
TUF_ARTIFACT = "application/vnd.tfaot-dist.tuf.v1"
TUF_CONFIG_TYPE = "application/vnd.tfaot-dist.tuf.config.v1+json"
TUF_LAYER_TYPE = "application/vnd.tfaot-dist.tuf.v1+json"
LATEST = "latest"
PART_PREFIX = "part-"
MAX_DOCUMENT = 64 << 20  # an index, a package's manifest.json (blobs)
MAX_MANIFEST = 4 << 20  # an OCI manifest (the distribution registry's own limit)
MAX_TAG_PAGES = 1000
MAX_TAGS = 100_000
MAX_PARTS = 1000  # index parts a reader merges (each publish folds those it sees into `latest`)
# One read of the index in all (Budget): bytes of every answer (tags pages, manifests, latest,
# parts), and rows of latest and its parts together.
MAX_INDEX_READ = 128 << 20
MAX_INDEX_ROWS = 200_000
COMPACT_AFTER = 4  # index parts a publish or yank leaves; with more, it merges them into one
MAX_ERROR_BODY = 64 << 10  # what is read of an error answer

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_OTHER = (requests.RequestException, urllib3.exceptions.HTTPError)


class _Transient(Exception):
    """A connection error: worth another attempt (Client._send_retrying)."""


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
    def parse(cls, location: str, where: str = "--channel") -> Location:
        names.no_credentials(location, where, how="oci")
        rest = location.removeprefix(SCHEME).rstrip("/")
        host, _, namespace = rest.partition("/")
        if not names.OCI_HOST.fullmatch(host) or not names.OCI_NAMESPACE.fullmatch(namespace):
            raise InvalidInput(
                f"{where}: invalid OCI channel {shown(location)} (expected oci://HOST[:PORT]/NAMESPACE, "
                "lowercase NAMESPACE, no credentials: see TFAOT_DIST_OCI_TOKEN)"
            )
        return cls(host, namespace)

    @property
    def base(self) -> str:
        scheme = "http" if self.host.rsplit(":", 1)[0] in LOOPBACK else "https"
        return f"{scheme}://{self.host}/v2/"

    def __str__(self) -> str:
        return f"{SCHEME}{self.host}/{self.namespace}"


# ---------------------------------------------------------------- the registry protocol


@dataclass
class Reply:
    """A registry's answer, its body read (within a cap) and the connection closed."""

    status: int
    url: str
    headers: CaseInsensitiveDict[str] = field(default_factory=CaseInsensitiveDict)
    body: bytes = b""
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # requests' Response.links

    def json(self, what: str) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise InvalidInput(f"{self.url}: not {what}") from None


def channel_secret(origin: Origin) -> tuple[str | None, str]:
    """TFAOT_DIST_OCI_TOKEN if it may go to origin, and else why not (for error lines; "" when nothing is
    withheld). Without TFAOT_DIST_OCI_REGISTRY the token is for whatever registry the channel names;
    with it, for that registry only (its origin as a channel's: https, or http on a loopback host)."""
    secret = os.environ.get(TOKEN_ENV) or None
    bound = os.environ.get(REGISTRY_ENV) or None  # empty: unset, as for the token
    if bound is None:
        return secret, ""
    if not names.OCI_HOST.fullmatch(bound):
        raise InvalidInput(
            f"{REGISTRY_ENV}: invalid registry {shown(bound)} (expected HOST[:PORT], e.g. ghcr.io)"
        )
    registry = Origin.of(Location(bound, "").base)
    if secret is None or registry == origin:
        return secret, ""
    return None, f" ({TOKEN_ENV} is for {bound} only: {REGISTRY_ENV})"


@dataclass
class Budget:
    """What one read of the channel index may take in all (a registry may answer anything, page after
    page, part after part): bytes of every answer read, and index rows."""

    where: str
    bytes_left: int = MAX_INDEX_READ
    rows_left: int = MAX_INDEX_ROWS

    def take(self, size: int, rows: int = 0) -> None:
        self.bytes_left -= size
        self.rows_left -= rows
        if self.bytes_left < 0:
            raise IntegrityError(
                f"{self.where}: more than {MAX_INDEX_READ} bytes read for the channel index (tags, "
                f"{LATEST} and its parts); refused"
            )
        if self.rows_left < 0:
            raise IntegrityError(
                f"{self.where}: more than {MAX_INDEX_ROWS} index rows in {LATEST} and its parts; refused"
            )


class Client:
    """The OCI distribution API calls a channel needs, with Basic and Bearer authentication. Every
    request goes through download.send() with the registry's origin as the credentials' only origin."""

    def __init__(self, location: Location, log: Callable[[str], None] | None = None):
        self.location = location
        self.log = log or (lambda message: None)
        self.origin = Origin.of(location.base)
        self.secret, self.withheld = channel_secret(self.origin)
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"tfaot-dist/{__version__}"
        self._auth: dict[str, str] = {}  # scope -> Authorization header value

    def url(self, repo: str, kind: str, ref: str) -> str:
        return f"{self.location.base}{self.location.namespace}/{repo}/{kind}/{ref}"

    # ---- requests

    def request(
        self,
        method: str,
        url: str,
        repo: str,
        ok: tuple[int, ...] = (200,),
        *,
        headers: dict[str, str] | None = None,
        data: bytes | BinaryIO | None = None,
        limit: int = MAX_DOCUMENT,
        other_hosts: bool = False,
        budget: Budget | None = None,
    ) -> Reply:
        """One request; a 401 is answered once with credentials. Errors name the URL, never a token.
        other_hosts: redirects may go elsewhere (blob and manifest reads), without credentials.
        budget: what this read counts against (each answer's body, error answers included).
        One deadline (TFAOT_DIST_HTTP_DEADLINE) covers it all: every attempt, every body read, the
        token service."""
        ends = time.monotonic() + deadline()
        scope = f"repository:{self.location.namespace}/{repo}:{'pull' if method in ('GET', 'HEAD') else 'pull,push'}"
        for attempt in range(2):
            if attempt and data is not None and not isinstance(data, bytes):  # a file: read again
                data.seek(0)
            auth = (("Authorization", self._auth[scope]),) if scope in self._auth else ()
            reply = self._send_retrying(
                method, url, Via(auth, self.origin, other_hosts), headers, data, ok, limit, ends
            )
            if budget is not None:
                budget.take(len(reply.body))
            if reply.status == 401 and attempt == 0:
                self._auth[scope] = self._authorize(reply, scope, ends)
                continue
            break
        if reply.status == 401:
            given = "refused the credentials in " if self.secret else "requires authentication: set "
            raise SourceUnavailable(
                f"{self.location}: {method} {url}: HTTP 401, the registry {given}{TOKEN_ENV}{self.withheld}"
            )
        if reply.status == 403:
            raise SourceUnavailable(
                f"{self.location}: {method} {url}: HTTP 403, access denied "
                f"(does {TOKEN_ENV} allow {'reading' if method in ('GET', 'HEAD') else 'writing'}"
                f" {self.location.namespace}/{repo}?)"
            )
        if reply.status not in ok:
            raise SourceUnavailable(f"{method} {url}: HTTP {reply.status} {_error_text(reply)}".rstrip())
        return reply

    def _send_retrying(
        self,
        method: str,
        url: str,
        via: Via,
        headers: dict[str, str] | None,
        data: bytes | BinaryIO | None,
        ok: tuple[int, ...],
        limit: int,
        ends: float,
    ) -> Reply:
        """_send, again after a connection error or a 5xx answer (a registry under concurrent writes answers
        some reads with 500): at most download.attempts() attempts, backoff() between them, each
        retry logged, and none that would start after ends. Every request of a channel is idempotent
        (blobs and manifests are content-addressed, an upload that is started again leaves the first one
        unused)."""
        n = attempts()
        for i in range(n):
            if i and data is not None and not isinstance(data, bytes):
                data.seek(0)
            wait = backoff(i)
            try:
                reply = self._send(method, url, via, headers, data, ok, limit, ends)
                if reply.status < 500 or i + 1 == n or time.monotonic() + wait >= ends:
                    return reply
                why = f"HTTP {reply.status} {_error_text(reply)}".rstrip()
            except _Transient as exc:
                if i + 1 == n or time.monotonic() + wait >= ends:
                    raise SourceUnavailable(f"{exc} (after {i + 1} attempt{'s' if i else ''})") from None
                why = str(exc)
            self.log(f"{method} {url}: {why}; trying again in {wait:g} s (attempt {i + 2} of {n})")
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _send(
        self,
        method: str,
        url: str,
        via: Via,
        headers: dict[str, str] | None,
        data: bytes | BinaryIO | None,
        ok: tuple[int, ...],
        limit: int,
        ends: float,
    ) -> Reply:
        try:
            resp = send(method, url, via, ends, session=self.session, headers=headers, data=data)
            links = resp.links
            if method == "HEAD":
                resp.close()
                body = b""
            elif resp.status_code in ok:
                body = read_capped(resp, url, limit, ends)
            else:
                body = read_capped(resp, url, MAX_ERROR_BODY, ends, cut=True)  # an error's text, cut
            return Reply(resp.status_code, resp.url or url, resp.headers, body, links)
        except requests.Timeout:
            raise SourceUnavailable(
                f"{url}: no answer within {timeout():g} s, or not complete within the deadline of "
                f"{deadline():g} s ({DEADLINE_ENV}, all attempts)"
            ) from None
        except requests.ConnectionError as exc:
            raise _Transient(f"{url}: cannot connect: {_reason(exc)}") from None
        except _OTHER as exc:
            raise SourceUnavailable(f"{url}: {_reason(exc)}") from None

    def _authorize(self, reply: Reply, scope: str, ends: float) -> str:
        """The Authorization header answering reply's challenge (Basic, or a Bearer token fetched for scope).

        The credentials go only to the registry's origin: a token service elsewhere is asked
        anonymously, and one on plain http elsewhere not at all."""
        challenge = reply.headers.get("WWW-Authenticate", "")
        kind, _, params = challenge.partition(" ")
        user = os.environ.get(USERNAME_ENV) or DEFAULT_USERNAME
        basic = requests.auth._basic_auth_str(user, self.secret) if self.secret else None
        if kind.lower() == "basic":
            if basic is None:
                raise SourceUnavailable(
                    f"{self.location}: {reply.url}: HTTP 401, the registry requires "
                    f"authentication: set {TOKEN_ENV}{self.withheld}"
                )
            return basic
        if kind.lower() != "bearer":
            raise SourceUnavailable(
                f"{self.location}: {reply.url}: HTTP 401 with an unsupported challenge {shown(kind, 40)}"
            )
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise SourceUnavailable(f"{self.location}: {reply.url}: HTTP 401 without a token service")
        there = Origin.of(realm)
        if not there.private:
            raise SourceUnavailable(
                f"{self.location}: the token service {shown(realm)} is plain http on another machine; refused"
            )
        query = {"scope": fields.get("scope", scope)}
        if "service" in fields:
            query["service"] = fields["service"]
        url = requests.Request("GET", realm, params=query).prepare().url or realm
        sent = basic is not None and there == self.origin
        answer = self._send(
            "GET",
            url,
            Via((("Authorization", basic),) if basic else (), self.origin),
            None,
            None,
            (200,),
            MAX_ERROR_BODY,
            ends,
        )
        if answer.status != 200:
            why = (
                ""
                if sent
                else (
                    f" ({TOKEN_ENV} is only sent to {self.origin}, not to a token service elsewhere)"
                    if basic
                    else f" (set {TOKEN_ENV} for a private channel){self.withheld}"
                )
            )
            raise SourceUnavailable(
                f"{self.location}: the token service {shown(realm)} answered HTTP {answer.status}{why}"
            )
        try:
            doc = answer.json("a token")
            token = doc.get("token") or doc.get("access_token")
        except (InvalidInput, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise SourceUnavailable(f"{self.location}: the token service {shown(realm)} gave no token")
        return f"Bearer {token}"

    def auth_header(self, repo: str) -> tuple[tuple[str, str], ...]:
        scope = f"repository:{self.location.namespace}/{repo}:pull"
        return (("Authorization", self._auth[scope]),) if scope in self._auth else ()

    # ---- blobs and manifests

    def has_blob(self, repo: str, digest: str) -> bool:
        return self.request("HEAD", self.url(repo, "blobs", digest), repo, ok=(200, 404)).status == 200

    def get_blob(
        self, repo: str, digest: str, limit: int = MAX_DOCUMENT, budget: Budget | None = None
    ) -> bytes:
        """A small blob (a manifest.json, an index), checked against its digest."""
        url = self.url(repo, "blobs", digest)
        data = self.request("GET", url, repo, limit=limit, other_hosts=True, budget=budget).body
        if f"sha256:{sha256_bytes(data)}" != digest:
            raise IntegrityError(
                f"{url}: sha256 is {sha256_bytes(data)}, expected {digest.removeprefix('sha256:')}"
            )
        return data

    def push_blob(self, repo: str, digest: str, data: bytes | Path) -> None:
        if self.has_blob(repo, digest):
            return
        start = self.request(
            "POST",
            f"{self.location.base}{self.location.namespace}/{repo}/blobs/uploads/",
            repo,
            ok=(202,),
            limit=MAX_ERROR_BODY,
        )
        upload = urljoin(start.url, start.headers.get("Location", ""))
        if Origin.of(upload) != self.origin:
            raise SourceUnavailable(
                f"{self.location}: the registry gave an upload location on another host "
                f"({shown(upload)}); refused (credentials go to {self.origin} only)"
            )
        upload += ("&" if "?" in upload else "?") + f"digest={digest}"
        headers = {"Content-Type": "application/octet-stream"}
        if isinstance(data, Path):
            with open(data, "rb") as f:
                self.request("PUT", upload, repo, ok=(201,), data=f, headers=headers, limit=MAX_ERROR_BODY)
        else:
            self.request("PUT", upload, repo, ok=(201,), data=data, headers=headers, limit=MAX_ERROR_BODY)

    def get_manifest(
        self, repo: str, ref: str, budget: Budget | None = None
    ) -> tuple[str, JsonObject] | None:
        """(digest, manifest) of a tag or digest, or None when there is none."""
        url = self.url(repo, "manifests", ref)
        reply = self.request(
            "GET",
            url,
            repo,
            ok=(200, 404),
            headers={"Accept": OCI_MANIFEST},
            limit=MAX_MANIFEST,
            other_hosts=True,
            budget=budget,
        )
        if reply.status == 404:
            return None
        digest = f"sha256:{sha256_bytes(reply.body)}"
        if ref.startswith("sha256:") and digest != ref:
            raise IntegrityError(f"{url}: sha256 is {digest}, expected {ref}")
        doc = reply.json("a JSON manifest")
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("layers"), list)
            or not isinstance(doc.get("config"), dict)
        ):
            raise InvalidInput(f"{url}: not an OCI image manifest")
        return digest, doc

    def put_manifest(self, repo: str, tag: str, manifest: bytes) -> str:
        url = self.url(repo, "manifests", tag)
        reply = self.request(
            "PUT",
            url,
            repo,
            ok=(201, 400),
            data=manifest,
            headers={"Content-Type": OCI_MANIFEST},
            limit=MAX_ERROR_BODY,
        )
        if reply.status == 400:
            text = _error_text(reply)
            if "BLOB_UNKNOWN" in text:
                raise BlobsNotReady(f"PUT {url}: HTTP 400 {text}")
            raise SourceUnavailable(f"PUT {url}: HTTP 400 {text}".rstrip())
        return f"sha256:{sha256_bytes(manifest)}"

    def delete_manifest(self, repo: str, digest: str) -> bool:
        """Delete the manifest digest (and so every tag on it); False if the registry does not allow
        deletes (405, or the distribution registry's UNSUPPORTED)."""
        url = self.url(repo, "manifests", digest)
        reply = self.request("DELETE", url, repo, ok=(202, 404, 405, 400), limit=MAX_ERROR_BODY)
        if reply.status == 400 and "UNSUPPORTED" not in _error_text(reply):
            raise SourceUnavailable(f"DELETE {url}: HTTP 400 {_error_text(reply)}".rstrip())
        return reply.status in (202, 404)

    def tags(self, repo: str, budget: Budget | None = None) -> list[str]:
        """Every tag of repo, page by page: at most MAX_TAG_PAGES pages and MAX_TAGS tags, each an OCI
        tag (at most 128 characters), each next page on the registry's origin and not seen before."""
        out: list[str] = []
        url: str | None = f"{self.location.base}{self.location.namespace}/{repo}/tags/list?n=1000"
        seen: set[str] = set()
        while url:
            if url in seen:
                raise IntegrityError(f"{self.location}/{repo}: the tags list loops back to {shown(url)}")
            if len(seen) == MAX_TAG_PAGES:
                raise IntegrityError(f"{self.location}/{repo}: more than {MAX_TAG_PAGES} pages of tags")
            seen.add(url)
            reply = self.request("GET", url, repo, ok=(200, 404), limit=MAX_MANIFEST, budget=budget)
            if reply.status == 404:
                return []
            doc = reply.json("a tags list")
            got = doc.get("tags") if isinstance(doc, dict) else None
            if got is not None and not isinstance(got, list):
                raise InvalidInput(f"{url}: not a tags list")
            for tag in got or []:
                if not isinstance(tag, str) or not names.OCI_TAG.fullmatch(tag):
                    raise IntegrityError(
                        f"{self.location}/{repo}: the tags list holds {shown(tag, 60)}, not an OCI tag "
                        "(at most 128 of A-Z a-z 0-9 _ . -, not starting with . or -)"
                    )
            out += got or []
            if len(out) > MAX_TAGS:
                raise IntegrityError(f"{self.location}/{repo}: more than {MAX_TAGS} tags")
            link = reply.links.get("next", {}).get("url")
            url = urljoin(url, link) if link else None
            if url and Origin.of(url) != self.origin:
                raise IntegrityError(
                    f"{self.location}/{repo}: the next page of tags is on another host "
                    f"({shown(url)}); refused"
                )
        return out


def artifact(
    artifact_type: str,
    config: tuple[str, bytes],
    layer: tuple[str, str, int],
    annotations: dict[str, str] | None = None,
) -> bytes:
    """An OCI image manifest: config (media type, bytes) and one layer (media type, digest, size)."""
    doc: JsonObject = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {
            "mediaType": config[0],
            "digest": f"sha256:{sha256_bytes(config[1])}",
            "size": len(config[1]),
        },
        "layers": [{"mediaType": layer[0], "digest": layer[1], "size": layer[2]}],
    }
    if annotations:
        doc["annotations"] = annotations
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _layer(manifest: JsonObject, media_type: str, where: str) -> JsonObject:
    layers = [d for d in manifest["layers"] if isinstance(d, dict) and d.get("mediaType") == media_type]
    if len(layers) != 1 or not isinstance(layers[0].get("digest"), str):
        raise InvalidInput(f"{where}: expected one layer of type {media_type}")
    return layers[0]


# ---------------------------------------------------------------- the index


@dataclass
class RegistryIndex:
    packages: dict[tuple[str, str], ChannelPackage]
    parts: list[str]  # part tags merged in
    tags: list[str]  # of the index repository


def read_index(client: Client) -> RegistryIndex:
    """`latest` merged with every part tag it does not list (what concurrent publishes added), within
    one Budget."""
    packages: dict[tuple[str, str], ChannelPackage] = {}
    merged: list[str] = []
    where = f"{client.location}/{INDEX_REPO}"
    budget = Budget(where)
    tags = client.tags(INDEX_REPO, budget)
    if LATEST in tags:
        found = client.get_manifest(INDEX_REPO, LATEST, budget)
        if found is not None:
            _, manifest = found
            config = client.get_blob(INDEX_REPO, str(manifest["config"].get("digest", "")), budget=budget)
            try:
                merged = json.loads(config)["parts"]
                assert isinstance(merged, list) and all(isinstance(p, str) for p in merged)
            except (ValueError, KeyError, TypeError, AssertionError):
                raise InvalidInput(f'{where}:{LATEST}: config: expected {{"parts": [TAG, ...]}}') from None
            _merge(packages, _index_layer(client, manifest, f"{where}:{LATEST}", budget))
    unmerged = sorted(t for t in set(tags) - set(merged) if t.startswith(PART_PREFIX))
    if len(unmerged) > MAX_PARTS:
        raise IntegrityError(
            f"{where}: {len(unmerged)} index parts not merged into {LATEST} (at most {MAX_PARTS})"
        )
    for tag in unmerged:
        found = client.get_manifest(INDEX_REPO, tag, budget)
        if found is not None:
            _merge(packages, _index_layer(client, found[1], f"{where}:{tag}", budget))
            merged.append(tag)
    return RegistryIndex(packages, sorted(set(merged)), tags)


def _index_layer(client: Client, manifest: JsonObject, where: str, budget: Budget) -> list[ChannelPackage]:
    layer = _layer(manifest, INDEX_LAYER_TYPE, where)
    rows = parse_index(client.get_blob(INDEX_REPO, layer["digest"], budget=budget), f"{where} index.json")
    budget.take(0, len(rows))
    return rows


def _merge(into: dict[tuple[str, str], ChannelPackage], rows: list[ChannelPackage]) -> None:
    """The row of the higher revision wins (a yank, or its undoing, is a part of its own that may
    be read after `latest`); between equal revisions the first seen (latest, then parts in tag order)."""
    for row in rows:
        seen = into.get(row.key)
        if seen is None or row.revision > seen.revision:
            into[row.key] = row


def _push_index(client: Client, rows: Iterable[ChannelPackage], parts: list[str], tag: str) -> str:
    """Push an index document under tag; the digest of its manifest."""
    document = render_index(rows).encode()
    config = json.dumps({"parts": sorted(parts)}, sort_keys=True).encode()
    manifest = artifact(
        INDEX_ARTIFACT,
        (INDEX_CONFIG_TYPE, config),
        (INDEX_LAYER_TYPE, f"sha256:{sha256_bytes(document)}", len(document)),
    )
    return _push_artifact(
        client,
        INDEX_REPO,
        tag,
        [(f"sha256:{sha256_bytes(config)}", config), (f"sha256:{sha256_bytes(document)}", document)],
        manifest,
    )


# ---------------------------------------------------------------- the channel


class OciChannel:
    """A channel on a registry (channel.Channel)."""

    def __init__(
        self, location: str, cache: Path, offline: bool = False, log: Callable[[str], None] | None = None
    ):
        self.location = location
        self.log = log
        self.where = Location.parse(location)
        self.offline = offline
        self._cache = cache
        self._client: Client | None = None
        self._index: Index | None = None
        self._index_bytes: bytes | None = None
        self.signing: Signing | None = None  # set by publishing.sign_with: what commits sign with

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.where, self.log)
        return self._client

    @property
    def index(self) -> Index:
        if self._index is None:
            if self.offline:
                self._index = read_saved_index(self._cache, str(self.where), str(self.where))
            else:
                found = read_index(self.client)
                if not found.packages and not found.tags:
                    raise SourceUnavailable(
                        f"{self.where}: no {INDEX_REPO} (not a channel, or nothing published yet)"
                    )
                self._index_bytes = render_index(found.packages.values()).encode()
                rows = parse_index(self._index_bytes, f"{self.where}/{INDEX_REPO}")
                self._index = Index(tuple(rows))
        return self._index

    def fetch(self, package: ChannelPackage, cache: Path, offline: bool = False) -> tuple[Path, bool]:
        return cached_or_fetch(
            package, cache, offline or self.offline, self.location, lambda: self._download(package, cache)
        )

    def _download(self, package: ChannelPackage, cache: Path) -> Path:
        digest = f"sha256:{package.sha256}"
        url = self.client.url(package.name, "blobs", digest)
        # The HEAD authenticates (a token is fetched if needed) and names a missing blob clearly.
        if not self.client.has_blob(package.name, digest):
            raise SourceUnavailable(
                f"{url}: HTTP 404 (the index lists {package.name} {package.version}, "
                "the registry does not have it)"
            )
        # Registries answer blob pulls with a redirect to their storage or CDN (ghcr.io does): other
        # hosts are allowed there, without the token; the bytes are checked against the digest.
        via = Via(self.client.auth_header(package.name), self.client.origin, other_hosts=True)
        return download(url, cache, package.sha256, limit=package.size, via=via).path

    def manifest_bytes(self, package: ChannelPackage) -> bytes:
        # The package artifact's config blob is its manifest.json: pulled by the row's digest.
        return self.client.get_blob(package.name, f"sha256:{package.manifest_sha256}")

    def remember(self, cache: Path) -> None:
        if self._index_bytes is not None:
            remember_index(cache, str(self.where), self._index_bytes)

    @contextmanager
    def transaction(self) -> Iterator[OciTransaction]:
        yield OciTransaction(self.client, self.signing)


class OciTransaction:
    """Registries have no conditional tag update, so nothing is read-modified-written: rows are read
    as merged (latest and unmerged parts), each commit adds its own part, then rewrites latest.

    A signed channel (NAMESPACE/tfaot-tuf:root.json) takes only signed changes: checked before the
    first push; the metadata signing every row is pushed before the index part that lists them,
    timestamp.json last. Two signed publishes at once are not supported: the last timestamp wins,
    and rows only the other one signed stay refused by trusting areas until the next signed change."""

    def __init__(self, client: Client, signing: Signing | None = None):
        self.client = client
        self.signing = signing
        self.rows = read_index(client).packages
        self._signing_checked = False

    def check_signing(self) -> None:
        """Before the first push of a publish or yank (once)."""
        if not self._signing_checked:
            metadata = OciMetadata(self.client)
            if signed_change_or_channel(metadata, self.signing):
                from tfaot_dist.trust import repository

                repository.check_signing(metadata, self.signing, str(self.client.location))
            self._signing_checked = True

    def stored_sha256(self, row: ChannelPackage) -> str | None:
        """The layer digest (hex) under the tag NAME:VERSION (pushed by a publish that died)."""
        tagged = self.client.get_manifest(row.name, tag_of(row.version))
        if tagged is None:
            return None
        where = f"{self.client.location}/{row.name}:{tag_of(row.version)}"
        digest: str = _layer(tagged[1], LAYER_TYPE, where)["digest"]  # a string (_layer checks)
        return digest.removeprefix("sha256:")

    def intact(self, row: ChannelPackage) -> bool:
        """The layer and config blobs the row names (what setup pulls, by digest) are there."""
        return self.client.has_blob(row.name, f"sha256:{row.sha256}") and self.client.has_blob(
            row.name, f"sha256:{row.manifest_sha256}"
        )

    def reference(self, row: ChannelPackage) -> str:
        return f"{self.client.location.namespace}/{row.name}@sha256:{row.sha256}"

    def store(self, archive: VerifiedArchive, row: ChannelPackage) -> None:
        self.check_signing()
        client, repo, tag = self.client, row.name, tag_of(row.version)
        manifest = artifact(
            PACKAGE_ARTIFACT,
            (CONFIG_TYPE, archive.manifest_bytes),
            (LAYER_TYPE, f"sha256:{row.sha256}", row.size),
            {
                "org.opencontainers.image.version": row.version,
                "org.opencontainers.image.title": f"{row.name}-{row.version}.tar.gz",
            },
        )
        digest = _push_artifact(
            client,
            repo,
            tag,
            [
                (f"sha256:{row.manifest_sha256}", archive.manifest_bytes),
                (f"sha256:{row.sha256}", archive.path),
            ],
            manifest,
        )
        # Read back: a concurrent publish of other bytes under this version must not be listed by us.
        now = client.get_manifest(repo, tag)
        if now is None or now[0] != digest:
            raise IntegrityError(
                f"{client.location}/{repo}:{tag} was pushed with other bytes at the same "
                "time; a published version never changes"
            )

    def commit(self, changed: list[ChannelPackage], manifests: dict[tuple[str, str], Manifest]) -> None:
        if not changed:
            return
        self.check_signing()
        if self.signing is not None:  # before the index lists them
            from tfaot_dist.trust import repository

            rows = list({**self.rows, **{row.key: row for row in changed}}.values())
            repository.sign_rows(OciMetadata(self.client, rows), rows, self.signing)
        part = _part_tag(changed)
        _push_index(self.client, changed, [], part)
        # `latest`: what is there now, our part included; losing a race here loses nothing (see above).
        fresh = read_index(self.client)
        _merge(fresh.packages, changed)
        there = {t for t in fresh.tags if t.startswith(PART_PREFIX)} | {part}
        held = sorted(there & {*fresh.parts, part})  # what latest holds: parts since deleted are dropped
        if len(there) <= COMPACT_AFTER or not self._deletes():
            _push_index(self.client, fresh.packages.values(), held, LATEST)
            return
        # Compaction: one part holding every row first, then latest, then delete what that part holds.
        whole = _part_tag(fresh.packages.values())
        keep = {
            _push_index(self.client, fresh.packages.values(), [], whole),
            _push_index(self.client, fresh.packages.values(), sorted({*held, whole}), LATEST),
        }
        for tag in held:
            if tag != whole and not self._delete_part(tag, keep):
                break

    def _deletes(self) -> bool:
        """Whether the registry deletes manifests (asked with a digest no manifest has: 404 where it
        does, 405 or UNSUPPORTED where it does not): otherwise compacting would only add a part."""
        try:
            return self.client.delete_manifest(INDEX_REPO, f"sha256:{'0' * 64}")
        except SourceUnavailable:
            return False

    def _delete_part(self, tag: str, keep: set[str]) -> bool:
        """Delete the part tag (its manifest, by digest), unless that manifest is one in keep; False if
        the registry does not allow deletes (the parts stay: readers merge them, only slower)."""
        where = f"{self.client.location}/{INDEX_REPO}"
        try:
            found = self.client.get_manifest(INDEX_REPO, tag)
            if found is None or found[0] in keep or self.client.delete_manifest(INDEX_REPO, found[0]):
                return True
            why = "the registry does not delete"
        except SourceUnavailable as exc:  # the publish is done: a part left over only costs readers time
            why = str(exc)
        self.client.log(f"{where}: merged index parts stay ({why})")
        return False


class OciMetadata:
    """A signed channel's files by channel path (trust/signing.MetadataStore): each one a tag of
    NAMESPACE/tfaot-tuf (metadata_tag); a row's manifest.json is its package artifact's config blob."""

    def __init__(self, client: Client, rows: Iterable[ChannelPackage] = ()):
        self.client = client
        self.root = PurePosixPath(f"{client.location.host}/{client.location.namespace}")
        self._manifests = {row.manifest: row for row in rows}

    def read(self, rel: str, limit: int = MAX_DOCUMENT) -> bytes | None:
        row = self._manifests.get(rel)
        if row is not None:
            digest = f"sha256:{row.manifest_sha256}"
            return (
                self.client.get_blob(row.name, digest, limit)
                if self.client.has_blob(row.name, digest)
                else None
            )
        tag = metadata_tag(rel)
        found = self.client.get_manifest(TUF_REPO, tag)
        if found is None:
            return None
        layer = _layer(found[1], TUF_LAYER_TYPE, f"{self.client.location}/{TUF_REPO}:{tag}")
        return self.client.get_blob(TUF_REPO, str(layer["digest"]), limit)

    def write(self, rel: str, data: bytes | str) -> None:
        """One push of the tag: the registry switches it to the new manifest in one step."""
        raw = data.encode() if isinstance(data, str) else data
        config = json.dumps({"path": rel}, sort_keys=True).encode()
        digest = f"sha256:{sha256_bytes(raw)}"
        manifest = artifact(
            TUF_ARTIFACT,
            (TUF_CONFIG_TYPE, config),
            (TUF_LAYER_TYPE, digest, len(raw)),
            {"org.opencontainers.image.title": PurePosixPath(rel).name},
        )
        blobs: list[tuple[str, bytes | Path]] = [(f"sha256:{sha256_bytes(config)}", config), (digest, raw)]
        _push_artifact(self.client, TUF_REPO, metadata_tag(rel), blobs, manifest)

    def kind(self, rel: str) -> str | None:
        return "file" if self.read(rel) is not None else None


def metadata_tag(rel: str) -> str:
    """tuf/NAME -> NAME (every TUF file name is a tag); any other path (a provenance) -> target-H."""
    name = rel.removeprefix(f"{TUF}/")
    if "/" not in name and names.OCI_TAG.fullmatch(name):
        return name
    return "target-" + sha256_bytes(rel.encode())[:48]


def _part_tag(rows: Iterable[ChannelPackage]) -> str:
    return PART_PREFIX + sha256_bytes(render_index(rows).encode())[:32]


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in (
        "Connection refused",
        "Name or service not known",
        "Connection reset by peer",
        "timed out",
    ):
        if marker in text:
            return marker
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _push_artifact(
    client: Client, repo: str, tag: str, blobs: list[tuple[str, bytes | Path]], manifest: bytes
) -> str:
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


def _error_text(reply: Reply) -> str:
    """The registry's own error code, e.g. MANIFEST_INVALID (bounded, one line)."""
    try:
        errors = json.loads(reply.body).get("errors") or []
        return shown(
            ", ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict)),
            300,
            False,
        )
    except (ValueError, AttributeError):
        return shown(reply.body[:100].decode("utf-8", "replace"), 100, False)
