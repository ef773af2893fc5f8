"""HTTP(S) downloads: timeouts, bounded retries, streamed to a temporary file, verified before use.

    CACHE/archives/<sha256>   content-addressed: a file there has exactly that digest

A download goes to a temporary file in CACHE/ and is renamed into
CACHE/archives/ only once its sha256 matched, so the cache never holds a
partial or wrong file, and a failed download leaves the cache as it was.

Connection errors, timeouts, truncated bodies and 5xx answers are retried
(bounded, with exponential backoff); 4xx answers and digest mismatches are not.
TFAOT_DIST_HTTP_TIMEOUT (seconds, default 30) bounds connecting and each read;
TFAOT_DIST_HTTP_DEADLINE (seconds, default 600) bounds each attempt as a whole
(connect and the entire transfer: a server trickling bytes cannot hold a
command); TFAOT_DIST_HTTP_RETRIES (default 3) is the number of attempts.

Bodies are asked for and read as they are stored (Accept-Encoding: identity),
capped in size (by the caller: an index's declared size), and redirects are
followed only to the same scheme, host and port.

A cached archive is hashed again before each use (cached_verified): bytes
replaced in the cache are a miss, removed and fetched again, never installed.
"""

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from tfaot_dist import __version__, names
from tfaot_dist.cache import Cache
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.util.fs import claim_temp, remove_abandoned, sha256_file
from tfaot_dist.util.textsafe import shown

TIMEOUT_ENV = "TFAOT_DIST_HTTP_TIMEOUT"
DEADLINE_ENV = "TFAOT_DIST_HTTP_DEADLINE"
DEFAULT_DEADLINE = 600.0
MAX_REDIRECTS = 5
RETRIES_ENV = "TFAOT_DIST_HTTP_RETRIES"
DEFAULT_TIMEOUT = 30.0
DEFAULT_ATTEMPTS = 3
DOWNLOAD_PREFIX = ".download-"
BACKOFF = 0.5  # seconds before the second attempt, doubled each time after
CHUNK = 1 << 16
# Anything else a request raises (bad URL, TLS, ...): not worth another attempt.
_OTHER = (requests.RequestException, urllib3.exceptions.HTTPError)


def check_url(url, where: str) -> str:
    if not isinstance(url, str) or not names.HTTP_URL.fullmatch(url):
        raise InvalidInput(f"{where}: invalid URL {url!r} (expected http:// or https://)")
    return url


def check_sha256(value, where: str) -> str:
    if not isinstance(value, str) or not names.SHA256.fullmatch(value):
        raise InvalidInput(f"{where}: invalid sha256 {value!r} (expected 64 lowercase hex digits)")
    return value


def _env_number(name: str, default: float, kind=float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = kind(text)
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


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int


class _Retry(Exception):
    """A failure worth another attempt; the message says what happened."""


def _attempt(url: str, sink, limit: int | None, via: "Via") -> tuple[str, int]:
    """One GET of url (following the redirects via allows) streamed into sink; returns (sha256, size)."""
    h = hashlib.sha256()
    size = 0
    budget = deadline()
    ends = time.monotonic() + budget
    try:
        resp = _get(url, ends, via)
        with resp:
            if resp.status_code >= 500:
                raise _Retry(f"HTTP {resp.status_code}")
            if resp.status_code != 200:
                raise SourceUnavailable(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
            declared = resp.headers.get("Content-Length", "")
            if limit is not None and declared.isdigit() and int(declared) > limit:
                raise IntegrityError(f"{url}: {declared} bytes announced, at most {limit} expected")
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
                    raise _Retry(f"not complete within the deadline of {budget:g} s ({DEADLINE_ENV})")
    except (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError, OSError,
            urllib3.exceptions.ReadTimeoutError, requests.Timeout, requests.ConnectionError,
            urllib3.exceptions.HTTPError) as exc:
        if time.monotonic() >= ends:
            raise _Retry(f"not complete within the deadline of {budget:g} s ({DEADLINE_ENV})") from None
        if isinstance(exc, requests.exceptions.ChunkedEncodingError | urllib3.exceptions.ProtocolError):
            how = "reset (Connection reset by peer)" if "Connection reset" in str(exc) else "closed"
            raise _Retry(f"connection {how} before the end of the body (truncated)") from None
        if isinstance(exc, requests.Timeout | urllib3.exceptions.ReadTimeoutError):
            raise _Retry(f"no answer within {timeout():g} s") from None
        if isinstance(exc, requests.ConnectionError):
            raise _Retry(f"cannot connect: {_reason(exc)}") from None
        if isinstance(exc, _OTHER):
            raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
        raise _Retry(f"read failed: {_reason(exc)}") from None
    except _OTHER as exc:
        raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
    return h.hexdigest(), size


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


@dataclass(frozen=True)
class Via:
    """How a download may reach its bytes.

    headers: extra request headers (a registry's Authorization), sent to the URL's own origin only.
    other_hosts: redirects may leave the origin (an OCI registry sends blob pulls to its storage or
    CDN; the bytes are checked against their digest); the headers are dropped there.
    """

    headers: tuple[tuple[str, str], ...] = ()
    other_hosts: bool = False


def _get(url: str, ends: float, via: Via) -> requests.Response:
    """GET url, following at most MAX_REDIRECTS redirects, each to the same scheme, host and port
    unless via allows other hosts (and then only to https, or to http on the same host)."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        connect = max(0.1, min(timeout(), ends - time.monotonic()))
        same = _origin(current) == _origin(url)
        headers = {"User-Agent": f"tfaot-dist/{__version__}", "Accept-Encoding": "identity",
                   **(dict(via.headers) if same else {})}
        resp = requests.get(current, stream=True, timeout=(connect, timeout()), allow_redirects=False,
                            headers=headers)
        if not resp.is_redirect:
            return resp
        target = urljoin(current, resp.headers.get("Location", ""))
        resp.close()
        if _origin(target) != _origin(url) and not (via.other_hosts and urlsplit(target).scheme == "https"):
            raise SourceUnavailable(f"{url}: redirected to another host or scheme ({shown(target)}); "
                                    "refused (give the final URL)")
        current = target
    raise SourceUnavailable(f"{url}: more than {MAX_REDIRECTS} redirects")


def _with_retries(url: str, start, limit: int | None, via: Via = Via()) -> tuple[str, int]:
    """Run attempts of url; start() gives a fresh sink for each one."""
    n = attempts()
    for i in range(n):
        try:
            return _attempt(url, start(), limit, via)
        except _Retry as exc:
            if i + 1 == n:
                raise SourceUnavailable(f"{url}: {exc} (after {n} attempts)") from None
            time.sleep(BACKOFF * 2**i)
    raise AssertionError("unreachable")


def get_bytes(url: str, limit: int = 64 << 20) -> bytes:
    """A small document (an index), whole, in memory."""
    parts: list[bytes] = []

    def start():
        parts.clear()
        return parts.append

    _with_retries(url, start, limit)
    return b"".join(parts)


def download(url: str, directory: Path, expected_sha256: str | None = None, limit: int | None = None,
             via: Via = Via()) -> Downloaded:
    """Stream url into a new temporary file in directory; verified if expected_sha256 is given.

    limit: the most bytes accepted (the size an index declares). via: headers and redirect rules (Via).
    The caller moves the file into the cache with keep() or deletes it with discard(); until
    then this process holds its lock (fsutil.claim_temp), so that no other process takes it for
    the leftover of a killed one. On any error nothing is left behind.
    """
    directory.mkdir(parents=True, exist_ok=True)
    remove_abandoned(directory, DOWNLOAD_PREFIX)
    tmp, held = claim_temp(directory, DOWNLOAD_PREFIX)
    with _held_lock:
        _held[tmp] = held
    try:
        def start():
            held.seek(0)  # a retry starts the file again
            held.truncate()
            return held.write

        digest, size = _with_retries(url, start, limit, via)
        held.flush()
        if expected_sha256 is not None and digest != expected_sha256:
            raise IntegrityError(f"{url}: sha256 is {digest}, expected {expected_sha256} ({size} bytes received)")
        return Downloaded(tmp, digest, size)
    except BaseException:
        discard(tmp)
        raise


_held: dict[Path, object] = {}  # our downloads not yet kept or discarded -> their locked file
_held_lock = threading.Lock()


def _release(path: Path) -> None:
    with _held_lock:
        held = _held.pop(path, None)
    if held is not None:
        held.close()


def discard(downloaded: Path) -> None:
    """Delete a download that is not wanted (after a refusal)."""
    downloaded.unlink(missing_ok=True)
    _release(downloaded)


def cached_archive(cache: Path, sha256: str) -> Path:
    return Cache(cache).archives / sha256


def cached_verified(cache: Path, sha256: str) -> Path | None:
    """The cached archive of sha256 if its bytes still have that digest; a file whose bytes changed
    is removed (a cache miss: the caller fetches it again)."""
    path = cached_archive(cache, sha256)
    if not path.is_file():
        return None
    if sha256_file(path) == sha256:
        return path
    path.unlink(missing_ok=True)
    return None


def keep(downloaded: Path, cache: Path, sha256: str) -> Path:
    """Move a verified download (a temporary file in cache) into the content-addressed cache."""
    final = cached_archive(cache, sha256)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(downloaded, final)
    _release(downloaded)
    return final


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "No route to host",
                   "Connection reset by peer", "timed out"):
        if marker in text:
            return marker
    return text.splitlines()[0][:200] if text else type(exc).__name__
