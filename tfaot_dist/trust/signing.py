"""How a publish, yank or trust command signs: the key and the timestamp's lifetime; and where a signed
channel keeps its metadata (a leaf: the channel modules name it without importing the TUF metadata code,
or securesystemslib, which only a signed change or channel loads)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import PurePath
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # a Signing is made by trust/commands.py, which loads it
    from securesystemslib.signer import CryptoSigner

DEFAULT_TIMESTAMP_LIFETIME = timedelta(days=7)
TUF = "tuf"  # a signed channel's metadata (trust/repository.py)
SIGNED_ROOT = f"{TUF}/root.json"  # a channel that has it is signed: it takes only signed changes
MAX_METADATA = 64 << 20  # bytes read of one metadata file


@dataclass(frozen=True)
class Signing:
    signer: CryptoSigner
    timestamp_lifetime: timedelta = DEFAULT_TIMESTAMP_LIFETIME


class MetadataStore(Protocol):
    """Where a channel's files are read and written by path (a directory channel's AreaWriter, an
    OCI channel's oci.OciMetadata): None for a file that is not there; each write whole or not at all."""

    @property
    def root(self) -> PurePath: ...  # named in error lines

    def read(self, rel: str, limit: int = ...) -> bytes | None: ...

    def write(self, rel: str, data: bytes | str) -> None: ...

    def kind(self, rel: str) -> str | None: ...


def signed_change_or_channel(store: MetadataStore, signing: Signing | None) -> bool:
    """A signed change (--sign) or a signed channel (it has SIGNED_ROOT): what python-tuf and
    securesystemslib are loaded for; an unsigned change to an unsigned channel needs neither."""
    return signing is not None or store.kind(SIGNED_ROOT) is not None
