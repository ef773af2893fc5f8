"""What the CLI's signing options and its `keys` and `trust` commands do (cli.py parses and prints)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfaot_dist.channels.channel import ChannelPackage
from tfaot_dist.channels.factory import open_channel
from tfaot_dist.errors import InvalidInput, UsageError
from tfaot_dist.trust import keys, provenance, repository
from tfaot_dist.trust.options import KEY_ENV
from tfaot_dist.trust.signing import (
    DEFAULT_TIMESTAMP_LIFETIME,
    MAX_METADATA,
    SIGNED_ROOT,
    MetadataStore,
    Signing,
)


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


@dataclass(frozen=True)
class RootKeys:
    """trust init-root: the root's public keys, how many must sign it, and the private keys signing it."""

    keys: list[Path]
    threshold: int | None
    signers: list[Path]


def trust_command(
    action: str,
    location: str,
    cache: Path,
    sign: Path | None,
    new_key: Path | None,
    timestamp_expiry: str | None,
    root_keys: RootKeys | None = None,
) -> tuple[dict[str, Any], str]:
    """refresh-timestamp: a new timestamp, nothing else; rotate: the root handed to --new-key's key;
    init-root: a channel's first root, held by root_keys (a threshold of them), --sign's key online."""
    from tfaot_dist.channels.directory import DirectoryChannel, DirectoryTransaction
    from tfaot_dist.channels.oci import OciChannel, OciMetadata

    channel = open_channel(location, cache)
    if not isinstance(channel, (DirectoryChannel, OciChannel)):
        raise UsageError(f"trust {action}: {location}: only directory and oci:// channels are signed")
    if action != "init-root" and root_keys is not None and (root_keys.keys or root_keys.signers):
        raise UsageError(f"trust {action} takes no --key or --root-sign (those make a root: trust init-root)")
    signed = signing(sign, timestamp_expiry)
    if signed is None:
        raise UsageError(f"trust {action}: give --sign KEY (or set ${KEY_ENV} to the key's text)")
    if action != "rotate" and new_key is not None:
        raise UsageError(f"trust {action} takes no --new-key")
    with channel.transaction() as tx:
        if isinstance(tx, DirectoryTransaction):
            store: MetadataStore = tx.writer
        else:
            store = OciMetadata(tx.client, tx.rows.values())
        if action == "init-root":
            return _init_root(
                store, list(tx.rows.values()), root_keys or RootKeys([], None, []), signed, location
            )
        if action == "refresh-timestamp":
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
            f"(hand {store.root / SIGNED_ROOT} to new users; trusting areas follow it)",
        )


def _init_root(
    store: MetadataStore,
    rows: list[ChannelPackage],
    root_keys: RootKeys,
    signed: Signing,
    location: str,
) -> tuple[dict[str, Any], str]:
    if not root_keys.keys:
        raise UsageError("trust init-root: give the root's public keys (--key A.pub --key B.pub ...)")
    public = [keys.load_public(path) for path in root_keys.keys]
    signers = [keys.require_signer(path, "--root-sign") for path in root_keys.signers]
    threshold = root_keys.threshold if root_keys.threshold is not None else len(public)
    root = repository.init_root(store, rows, public, threshold, signers, signed, location)
    n = len(root.roles["root"].keyids)
    return (
        {"channel": location, "root_version": root.version, "root_keys": n, "threshold": threshold},
        f"{location}: root version {root.version}, {threshold} of {n} root keys must sign its changes; "
        f"online key {signed.signer.public_key.keyid[:12]} (hand {store.root / SIGNED_ROOT} "
        "to users)",
    )


def verify_provenance(archive: Path, envelope: Path, key_files: list[Path]) -> tuple[dict[str, Any], str]:
    """verify ARCHIVE --provenance ENVELOPE --key KEY.pub: the archive's files against its manifest,
    and the envelope signed by one of the keys, its statement's subject this archive's sha256."""
    from tfaot_dist.channels.channel import index_line, verify_archive

    if not key_files:
        raise UsageError("--provenance needs --key KEY.pub (the public key of the channel or publisher)")
    public = [keys.load_public(path) for path in key_files]
    try:
        with open(envelope, "rb") as f:
            data = f.read(MAX_METADATA + 1)
    except OSError as exc:
        raise InvalidInput(f"--provenance: {envelope}: unreadable ({exc.strerror})") from None
    if len(data) > MAX_METADATA:
        raise InvalidInput(f"--provenance: {envelope}: larger than {MAX_METADATA} bytes")
    row = index_line(verify_archive(archive))
    shown = ", ".join(str(p) for p in key_files)
    doc = provenance.check(data, list(public), 1, row, str(envelope), f"the key of {shown}")
    builder = doc.get("predicate", {}).get("runDetails", {}).get("builder", {}).get("id", "")
    return (
        {"archive": str(archive), "sha256": row.sha256, "provenance": str(envelope), "builder": builder},
        f"{archive}: provenance {envelope} is signed by {shown} and names sha256 {row.sha256}",
    )
