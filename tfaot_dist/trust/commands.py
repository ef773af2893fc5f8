"""What the CLI's signing options and its `keys` and `trust` commands do (cli.py parses and prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfaot_dist.channels.factory import open_channel
from tfaot_dist.errors import UsageError
from tfaot_dist.trust import keys, repository
from tfaot_dist.trust.options import KEY_ENV
from tfaot_dist.trust.signing import DEFAULT_TIMESTAMP_LIFETIME, Signing


def signing(sign: Path | None, timestamp_expiry: str | None) -> Signing | None:
    """--sign (or $TFAOT_DIST_SIGNING_KEY) and --timestamp-expiry; None: unsigned."""
    signer = keys.load_signer(sign)
    lifetime = repository.duration(timestamp_expiry) if timestamp_expiry else None
    if signer is None:
        if lifetime is not None:
            raise UsageError(f"--timestamp-expiry needs --sign KEY (or ${KEY_ENV})")
        return None
    return Signing(signer, lifetime or DEFAULT_TIMESTAMP_LIFETIME)


def keys_new(path: Path) -> tuple[dict[str, Any], str]:
    private, public = keys.new_key_pair(path)
    keyid = keys.load_signer(private)
    assert keyid is not None
    data = {"private": str(private), "public": str(public), "keyid": keyid.public_key.keyid}
    return data, (
        f"wrote {private} (private, mode 0600: keep it out of the channel and of git) and {public} "
        f"(key id {keyid.public_key.keyid[:12]})"
    )


def trust_command(
    action: str,
    location: str,
    cache: Path,
    sign: Path | None,
    new_key: Path | None,
    timestamp_expiry: str | None,
) -> tuple[dict[str, Any], str]:
    """refresh-timestamp: a new timestamp, nothing else; rotate: the root handed to --new-key's key."""
    from tfaot_dist.channels.directory import DirectoryChannel, DirectoryTransaction
    from tfaot_dist.channels.oci import OciChannel, OciMetadata

    channel = open_channel(location, cache)
    if not isinstance(channel, (DirectoryChannel, OciChannel)):
        raise UsageError(f"trust {action}: {location}: only directory and oci:// channels are signed")
    signed = signing(sign, timestamp_expiry)
    if signed is None:
        raise UsageError(f"trust {action}: give --sign KEY (or set ${KEY_ENV} to the key's text)")
    with channel.transaction() as tx:
        store: repository.MetadataStore = (
            tx.writer if isinstance(tx, DirectoryTransaction) else OciMetadata(tx.client)
        )
        if action == "refresh-timestamp":
            if new_key is not None:
                raise UsageError("trust refresh-timestamp takes no --new-key")
            ts = repository.refresh_timestamp(store, signed, location)
            return (
                {"channel": location, "timestamp_version": ts.version, "expires": ts.expires.isoformat()},
                f"{location}: timestamp version {ts.version}, expires {ts.expires.isoformat()}",
            )
        new = keys.load_signer(new_key) if new_key is not None else None
        if new is None:
            raise UsageError(
                "trust rotate: give --new-key KEY (the key taking over; the same key renews the root)"
            )
        root = repository.rotate(store, signed.signer, Signing(new, signed.timestamp_lifetime), location)
        return (
            {"channel": location, "root_version": root.version, "keyid": new.public_key.keyid},
            f"{location}: root version {root.version}, held by key {new.public_key.keyid[:12]} "
            f"(hand {store.root / repository.TUF / 'root.json'} to new users; trusting areas follow it)",
        )
