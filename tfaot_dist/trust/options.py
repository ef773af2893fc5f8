"""The signing options' shared facts (parsing only: no cryptography imported here)."""

from __future__ import annotations

KEY_ENV = "TFAOT_DIST_SIGNING_KEY"  # the private key's text (PEM), for CI secrets
