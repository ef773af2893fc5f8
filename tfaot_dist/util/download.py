"""HTTP(S) downloads: timeouts, bounded retries, streamed to a temporary file, verified before use.

    CACHE/archives/<sha256>   content-addressed: a file there has exactly that digest

A download goes to a temporary file in CACHE/ and is renamed into
CACHE/archives/ only once its sha256 matched, so the cache never holds a
partial or wrong file, and a failed download leaves the cache as it was.

Connection errors, timeouts, truncated bodies and 5xx answers are retried
(bounded, with exponential backoff); 4xx answers and digest mismatches are not.
TFAOT_DIST_HTTP_TIMEOUT (seconds, default 30) bounds connecting and each read;
TFAOT_DIST_HTTP_DEADLINE (seconds, default 600) bounds a download as a whole,
all its attempts together (connect and the entire transfer: a server trickling
bytes cannot hold a command); TFAOT_DIST_HTTP_RETRIES (default 3) is the
number of attempts; TFAOT_DIST_HTTP_BACKOFF (seconds, default 0.5) the pause
before the second attempt, doubled before each one after.

Bodies are asked for and read as they are stored (Accept-Encoding: identity),
capped in size (by the caller: an index's declared size), and redirects are
followed only to the same scheme, host and port. send() is the one request
function of every channel transport (directory over HTTP, OCI registries):
credentials are bound to one origin there (Via), whatever redirects say.

The cache they go into, and how a download is kept or discarded, is
util/cached_archives.py (no HTTP stack: what a local channel's setup uses).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from tfaot_dist import __version__
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.util import cached_archives
from tfaot_dist.util.fs import claim_temp, remove_abandoned
from tfaot_dist.util.textsafe import shown

TIMEOUT_ENV = "TFAOT_DIST_HTTP_TIMEOUT"
DEADLINE_ENV = "TFAOT_DIST_HTTP_DEADLINE"
DEFAULT_DEADLINE = 600.0
MAX_REDIRECTS = 5
RETRIES_ENV = "TFAOT_DIST_HTTP_RETRIES"
DEFAULT_TIMEOUT = 30.0
DEFAULT_ATTEMPTS = 3
BACKOFF_ENV = "TFAOT_DIST_HTTP_BACKOFF"
DEFAULT_BACKOFF = 0.5  # seconds before the second attempt, doubled each time after
DOWNLOAD_PREFIX = ".download-"
CHUNK = 1 << 16
# Anything else a request raises (bad URL, TLS, ...): not worth another attempt.
_OTHER = (requests.RequestException, urllib3.exceptions.HTTPError)


def _env_number(name: str, default: float, kind: type[int] | type[float] = float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value: float = kind(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidInput(f"{name}: expected a positive number, got {text!r}")
    return value


def timeout() -> float:
    return _env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT)


def deadline() -> float:
    return _env_number(DEADLINE_ENV, DEFAULT_DEADLINE)


def attempts() -> int:
    return int(_env_number(RETRIES_ENV, DEFAULT_ATTEMPTS, int))


def backoff(attempt: int) -> float:
    """Seconds to wait after the failed attempt number attempt (0-based): TFAOT_DIST_HTTP_BACKOFF doubled."""
    return _env_number(BACKOFF_ENV, DEFAULT_BACKOFF) * (1 << attempt)


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int


Sink = Callable[[bytes], object]  # where an attempt writes what it receives


class _Retry(Exception):
    """A failure worth another attempt; the message says what happened."""


class _Late(Exception):
    """The deadline of the whole download passed: no further attempt."""


def _attempt(
    url: str, sink: Sink, limit: int | None, via: Via, ends: float, budget: float
) -> tuple[str, int]:
    """One GET of url (following the redirects via allows) streamed into sink; returns (sha256, size).
    ends: when the whole download (all its attempts) must be done."""
    h = hashlib.sha256()
    size = 0
    late = f"not complete within the deadline of {budget:g} s ({DEADLINE_ENV}, all attempts)"
    try:
        resp = send("GET", url, via, ends)
        with resp:
            if resp.status_code >= 500:
                raise _Retry(f"HTTP {resp.status_code}")
            if resp.status_code != 200:
                raise SourceUnavailable(
                    f"{url}: HTTP {resp.status_code} {shown(resp.reason or '', 100, False)}".rstrip()
                )
            _check_declared(resp, url, limit)
            # Raw bytes: a server's Content-Encoding must not change what is hashed. read1 returns what
            # one receive gave (a read of CHUNK would wait for all of it), so the deadline is checked
            # at least once per socket timeout however slowly the server trickles.
            while chunk := resp.raw.read1(CHUNK, decode_content=False):
                size += len(chunk)
                if limit is not None and size > limit:
                    raise IntegrityError(f"{url}: larger than {limit} bytes")
                h.update(chunk)
                sink(chunk)
                if time.monotonic() > ends:
                    raise _Late(late)
    except (
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,
        OSError,
        urllib3.exceptions.ReadTimeoutError,
        requests.Timeout,
        requests.ConnectionError,
        urllib3.exceptions.HTTPError,
    ) as exc:
        if time.monotonic() >= ends:
            raise _Late(late) from None
        if isinstance(exc, (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError)):
            how = "reset (Connection reset by peer)" if "Connection reset" in str(exc) else "closed"
            raise _Retry(f"connection {how} before the end of the body (truncated)") from None
        if isinstance(exc, (requests.Timeout, urllib3.exceptions.ReadTimeoutError)):
            raise _Retry(f"no answer within {timeout():g} s") from None
        if isinstance(exc, requests.ConnectionError):
            raise _Retry(f"cannot connect: {_reason(exc)}") from None
        if isinstance(exc, _OTHER):
            raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
        raise _Retry(f"read failed: {_reason(exc)}") from None
    except _OTHER as exc:
        raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
    return h.hexdigest(), size


def _check_declared(resp: requests.Response, url: str, limit: int | None) -> None:
    declared = resp.headers.get("Content-Length", "")
    if limit is not None and declared.isdigit() and int(declared) > limit:
        raise IntegrityError(f"{url}: {shown(declared, 30, False)} bytes announced, at most {limit} expected")


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port of a URL: what credentials are bound to."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        scheme = parts.scheme.lower()
        return cls(scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme, 0))

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK

    @property
    def private(self) -> bool:
        """Whether a secret may travel to it: over https, or to this machine."""
        return self.scheme == "https" or (self.scheme == "http" and self.loopback)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class Via:
    """How a request may reach its answer; every request of a channel passes here (send()).

    headers: credentials (a registry's Authorization), sent only to origin (default: the origin of
    the URL asked for), and only over https or to a loopback host; never after a redirect elsewhere.
    other_hosts: GET redirects may leave the origin, to https only (an OCI registry sends blob pulls
    to its storage or CDN; the bytes are checked against their digest); the headers stay behind.
    """

    headers: tuple[tuple[str, str], ...] = ()
    origin: Origin | None = None
    other_hosts: bool = False

    def headers_for(self, url: str, first: str) -> dict[str, str]:
        """The credentials a request to url (reached from first) may carry."""
        origin = self.origin or Origin.of(first)
        here = Origin.of(url)
        return dict(self.headers) if self.headers and here == origin and here.private else {}


def send(
    method: str,
    url: str,
    via: Via,
    ends: float,
    *,
    session: requests.Session | None = None,
    headers: dict[str, str] | None = None,
    data: bytes | BinaryIO | None = None,
) -> requests.Response:
    """One request, streamed (the caller reads and closes the answer), under the rules of via:
    credentials only to their origin; GET and HEAD redirects (at most MAX_REDIRECTS) only to the same
    origin unless via allows other hosts (then to https only); other methods are never redirected.
    ends: the time.monotonic() by which the whole exchange must be done."""
    current = url
    call = session.request if session is not None else requests.request
    for _ in range(MAX_REDIRECTS + 1):
        remaining = ends - time.monotonic()
        if remaining <= 0:
            raise requests.Timeout(f"deadline reached before {method} {current}")
        wait = max(0.1, min(timeout(), remaining))
        sent = {
            "User-Agent": f"tfaot-dist/{__version__}",
            "Accept-Encoding": "identity",
            **(headers or {}),
            **via.headers_for(current, url),
        }
        resp = call(
            method, current, stream=True, timeout=(wait, wait), allow_redirects=False, headers=sent, data=data
        )
        if not resp.is_redirect:
            return resp
        target = urljoin(current, resp.headers.get("Location", ""))
        resp.close()
        if method not in ("GET", "HEAD"):
            raise SourceUnavailable(
                f"{method} {url}: redirected to {shown(target)}; refused (only reads follow redirects)"
            )
        here, there = Origin.of(url), Origin.of(target)
        if there != here and not (via.other_hosts and there.scheme == "https"):
            raise SourceUnavailable(
                f"{url}: redirected to another host or scheme ({shown(target)}); refused (give the final URL)"
            )
        current = target
    raise SourceUnavailable(f"{url}: more than {MAX_REDIRECTS} redirects")


def read_capped(resp: requests.Response, url: str, limit: int, ends: float, *, cut: bool = False) -> bytes:
    """The body of resp (closed after), read within the deadline ends (a server trickling it cannot hold
    a command) and refused past limit bytes; with cut (an error answer's text) its first limit bytes."""
    parts, size = [], 0
    with resp:
        if not cut:
            _check_declared(resp, url, limit)
        while chunk := resp.raw.read1(CHUNK, decode_content=False):
            size += len(chunk)
            parts.append(chunk)
            if size > limit and not cut:
                raise IntegrityError(f"{url}: larger than {limit} bytes")
            if time.monotonic() > ends:
                raise requests.Timeout(f"{url}: not complete within the deadline")
            if size >= limit and cut:
                break
    return b"".join(parts)[:limit]


def _with_retries(
    url: str, start: Callable[[], Sink], limit: int | None, via: Via = Via()
) -> tuple[str, int]:
    """Run attempts of url; start() gives a fresh sink for each one. One deadline covers them all."""
    n = attempts()
    budget = deadline()
    ends = time.monotonic() + budget
    for i in range(n):
        try:
            return _attempt(url, start(), limit, via, ends, budget)
        except _Late as exc:
            raise SourceUnavailable(f"{url}: {exc}") from None
        except _Retry as exc:
            pause = backoff(i)
            if i + 1 == n or time.monotonic() + pause >= ends:
                raise SourceUnavailable(f"{url}: {exc} (after {i + 1} attempt{'s' if i else ''})") from None
            time.sleep(pause)
    raise AssertionError("unreachable")


def get_bytes(url: str, limit: int = 64 << 20) -> bytes:
    """A small document (an index), whole, in memory."""
    parts: list[bytes] = []

    def start() -> Sink:
        parts.clear()
        return parts.append

    _with_retries(url, start, limit)
    return b"".join(parts)


def download(
    url: str, directory: Path, expected_sha256: str | None = None, limit: int | None = None, via: Via = Via()
) -> Downloaded:
    """Stream url into a new temporary file in directory; verified if expected_sha256 is given.

    limit: the most bytes accepted (the size an index declares). via: headers and redirect rules (Via).
    The caller moves the file into the cache with cached_archives.keep() or deletes it with
    cached_archives.discard(); until then this process holds its lock (util/fs.py's claim_temp), so
    that no other process takes it for the leftover of a killed one. On any error nothing is left behind.
    """
    directory.mkdir(parents=True, exist_ok=True)
    remove_abandoned(directory, DOWNLOAD_PREFIX)
    tmp, held = claim_temp(directory, DOWNLOAD_PREFIX)
    cached_archives.hold(tmp, held)
    try:

        def start() -> Sink:
            held.seek(0)  # a retry starts the file again
            held.truncate()
            return held.write

        digest, size = _with_retries(url, start, limit, via)
        held.flush()
        if expected_sha256 is not None and digest != expected_sha256:
            raise IntegrityError(
                f"{url}: sha256 is {digest}, expected {expected_sha256} ({size} bytes received)"
            )
        return Downloaded(tmp, digest, size)
    except BaseException:
        cached_archives.discard(tmp)
        raise


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in (
        "Connection refused",
        "Name or service not known",
        "No route to host",
        "Connection reset by peer",
        "timed out",
    ):
        if marker in text:
            return marker
    return text.splitlines()[0][:200] if text else type(exc).__name__
