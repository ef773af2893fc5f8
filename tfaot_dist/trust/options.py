"""The signing options of publish, yank and trust (parsing only: no cryptography imported here)."""

from __future__ import annotations

import argparse
from pathlib import Path

KEY_ENV = "TFAOT_DIST_SIGNING_KEY"  # the private key's text (PEM), for CI secrets


def add_signing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sign",
        type=Path,
        metavar="KEY",
        help=f"sign the channel's TUF metadata with this private key file (or ${KEY_ENV}: the key's "
        "text); a signed channel's first signed change creates its root from the key",
    )
    parser.add_argument(
        "--timestamp-expiry",
        metavar="DURATION",
        help="lifetime of the signed timestamp: 30s, 12h, 7d (default 7d; refresh it with "
        "`tfaot-dist trust refresh-timestamp`)",
    )
