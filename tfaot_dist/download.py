"""HTTP(S) downloads: timeouts, bounded retries, streamed to a temporary file, verified before use.

    CACHE/archives/<sha256>   content-addressed: a file there has exactly that digest

A download goes to a temporary file in CACHE/ and is renamed into
CACHE/archives/ only once its sha256 matched, so the cache never holds a
partial or wrong file, and a failed download leaves the cache as it was.

Connection errors, timeouts, truncated bodies and 5xx answers are retried
(bounded, with exponential backoff); 4xx answers and digest mismatches are not.
TFAOT_DIST_HTTP_TIMEOUT (seconds, default 30) bounds connecting and each read;
TFAOT_DIST_HTTP_RETRIES (default 3) is the number of attempts.
"""

import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import urllib3

from tfaot_dist import __version__
from tfaot_dist.errors import IntegrityError, InvalidInput, SourceUnavailable
from tfaot_dist.fsutil import claim_temp, remove_abandoned

TIMEOUT_ENV = "TFAOT_DIST_HTTP_TIMEOUT"
RETRIES_ENV = "TFAOT_DIST_HTTP_RETRIES"
DEFAULT_TIMEOUT = 30.0
DEFAULT_ATTEMPTS = 3
DOWNLOAD_PREFIX = ".download-"
BACKOFF = 0.5  # seconds before the second attempt, doubled each time after
CHUNK = 1 << 16
SHA256 = re.compile(r"[0-9a-f]{64}")
HTTP_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?")
# Anything else a request raises (bad URL, TLS, ...): not worth another attempt.
_OTHER = (requests.RequestException, urllib3.exceptions.HTTPError)


def check_url(url, where: str) -> str:
    if not isinstance(url, str) or not HTTP_URL.fullmatch(url):
        raise InvalidInput(f"{where}: invalid URL {url!r} (expected http:// or https://)")
    return url


def check_sha256(value, where: str) -> str:
    if not isinstance(value, str) or not SHA256.fullmatch(value):
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


def attempts() -> int:
    return int(_env_number(RETRIES_ENV, DEFAULT_ATTEMPTS, int))


@dataclass(frozen=True)
class Downloaded:
    path: Path
    sha256: str
    size: int


class _Retry(Exception):
    """A failure worth another attempt; the message says what happened."""


def _attempt(url: str, sink, limit: int | None, headers: dict | None = None) -> tuple[str, int]:
    """One GET of url streamed into sink; returns (sha256, size)."""
    h = hashlib.sha256()
    size = 0
    try:
        with requests.get(url, stream=True, timeout=timeout(),
                          headers={"User-Agent": f"tfaot-dist/{__version__}", **(headers or {})}) as resp:
            if resp.status_code >= 500:
                raise _Retry(f"HTTP {resp.status_code}")
            if resp.status_code != 200:
                raise SourceUnavailable(f"{url}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
            # Raw bytes: a server's Content-Encoding must not change what is hashed.
            for chunk in resp.raw.stream(CHUNK, decode_content=False):
                size += len(chunk)
                if limit is not None and size > limit:
                    raise IntegrityError(f"{url}: larger than {limit} bytes")
                h.update(chunk)
                sink(chunk)
    except (requests.exceptions.ChunkedEncodingError, urllib3.exceptions.ProtocolError) as exc:
        how = "reset (Connection reset by peer)" if "Connection reset" in str(exc) else "closed"
        raise _Retry(f"connection {how} before the end of the body (truncated)") from None
    except (requests.Timeout, urllib3.exceptions.ReadTimeoutError):
        raise _Retry(f"no answer within {timeout():g} s") from None
    except requests.ConnectionError as exc:
        raise _Retry(f"cannot connect: {_reason(exc)}") from None
    except _OTHER as exc:
        raise SourceUnavailable(f"{url}: {_reason(exc)}") from None
    return h.hexdigest(), size


def _with_retries(url: str, start, limit: int | None, headers: dict | None = None) -> tuple[str, int]:
    """Run attempts of url; start() gives a fresh sink for each one."""
    n = attempts()
    for i in range(n):
        try:
            return _attempt(url, start(), limit, headers)
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


def download(url: str, directory: Path, expected_sha256: str | None = None,
             headers: dict | None = None) -> Downloaded:
    """Stream url into a new temporary file in directory; verified if expected_sha256 is given.

    headers: extra request headers (a registry's Authorization; requests drops it on redirects
    to other hosts). The caller moves the file into the cache with keep() or deletes it with discard(); until
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

        digest, size = _with_retries(url, start, None, headers)
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
    return cache / "archives" / sha256


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
