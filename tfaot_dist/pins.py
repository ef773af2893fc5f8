"""Pins of a model's source, and the checks of what a pin names: a leaf that the registry, the sources and
the documents import (it imports nothing of ours but names and errors).

    GitSource       a git URL, a ref and the full commit it resolved to (the commit fixes the bytes)
    ArchiveSource   a tar.gz or zip over http(s), fixed by its sha256
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfaot_dist import names
from tfaot_dist.errors import InvalidInput


@dataclass(frozen=True)
class GitSource:
    url: str
    ref: str
    commit: str
    # A branch that contains the commit, for fetchers that pull a branch and then reset to the commit
    # (cmsBuild's git download); optional, and not part of as_dict: it changes no byte of the build.
    branch: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"git": self.url, "ref": self.ref, "commit": self.commit}

    @property
    def pin(self) -> str:
        """What fixes the bytes of the source."""
        return self.commit


@dataclass(frozen=True)
class ArchiveSource:
    """A tar.gz or zip archive over http(s), pinned by its sha256."""

    url: str
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"archive": self.url, "sha256": self.sha256}

    @property
    def pin(self) -> str:
        return f"sha256:{self.sha256}"


def check_git_url(url: object, where: str) -> str:
    names.no_credentials(url, where)
    if not isinstance(url, str) or "::" in url or url.startswith("-") or not names.GIT_URL.fullmatch(url):
        raise InvalidInput(
            f"{where}: unsupported git URL {url!r} (use https://, ssh://, git://, file://, "
            "user@host:path or an absolute path)"
        )
    return url


def check_url(url: object, where: str) -> str:
    names.no_credentials(url, where, how="netrc")
    if not isinstance(url, str) or not names.HTTP_URL.fullmatch(url):
        raise InvalidInput(f"{where}: invalid URL {url!r} (expected http:// or https://)")
    return url


def check_sha256(value: object, where: str) -> str:
    if not isinstance(value, str) or not names.SHA256.fullmatch(value):
        raise InvalidInput(f"{where}: invalid sha256 {value!r} (expected 64 lowercase hex digits)")
    return value
