"""How a publish, yank or trust command signs: the key and the timestamp's lifetime (a leaf: the
channel modules name it without importing the TUF metadata code)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from securesystemslib.signer import CryptoSigner

DEFAULT_TIMESTAMP_LIFETIME = timedelta(days=7)


@dataclass(frozen=True)
class Signing:
    signer: CryptoSigner
    timestamp_lifetime: timedelta = DEFAULT_TIMESTAMP_LIFETIME
