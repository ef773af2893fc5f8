"""The publisher's side of a signed channel: its TUF metadata (python-tuf's metadata API), written by
publish and yank under the channel's lock through its ChannelWriter, each file by a rename.

    CHANNEL/tuf/
      N.root.json        every root version (clients follow rotations N -> N+1, each signed by both)
      root.json          the newest root, to hand to users out of band (setup --trust ROOT.json)
      N.targets.json     the archives and manifests: path, length, sha256; a yanked archive's reason
      N.snapshot.json    the targets version in force
      timestamp.json     the snapshot version in force; short-lived (--timestamp-expiry)

Consistent snapshots: targets and snapshot are written under new versioned names first, and the
rename of timestamp.json switches readers to them in one step. A signed publish writes the metadata
before the index: an index read at any moment lists only rows the metadata in force signs (old rows
stay targets), so a reader never sees a half-signed channel. One ed25519 key holds all four roles
when a channel's first signed publish creates its root; `trust rotate` replaces it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from securesystemslib.signer import CryptoSigner, Key
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import (
    Metadata,
    MetaFile,
    Root,
    Snapshot,
    TargetFile,
    Targets,
    Timestamp,
)
from tuf.api.serialization import DeserializationError
from tuf.api.serialization.json import JSONSerializer

from tfaot_dist.channels.channel import MAX_MANIFEST, ChannelPackage
from tfaot_dist.documents import load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, UsageError
from tfaot_dist.trust import provenance
from tfaot_dist.trust.signing import MAX_METADATA, SIGNED_ROOT, TUF, MetadataStore, Signing

ROLES = (Root.type, Targets.type, Snapshot.type, Timestamp.type)
ROOT_LIFETIME = timedelta(days=730)  # renewed by `trust rotate` (the same key may be given twice)
TARGETS_LIFETIME = timedelta(days=365)  # renewed by every signed publish, yank and timestamp refresh
_DURATION = re.compile(r"([1-9][0-9]{0,6})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

RoleT = TypeVar("RoleT", Root, Timestamp, Snapshot, Targets)  # as tuf.api.metadata.T


def duration(text: str, option: str = "--timestamp-expiry") -> timedelta:
    """30s, 15m, 12h, 7d."""
    m = _DURATION.fullmatch(text)
    if not m:
        raise InvalidInput(f"{option}: {text!r} is not a duration (a number and s, m, h or d: 30s, 12h, 7d)")
    return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


@dataclass
class Current:
    """A channel's metadata in force, as read back from the channel."""

    root: Metadata[Root]
    targets: Metadata[Targets]
    snapshot: Metadata[Snapshot]
    timestamp: Metadata[Timestamp]


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _read(writer: MetadataStore, name: str, kind: type[RoleT]) -> Metadata[RoleT]:
    rel = f"{TUF}/{name}"
    data = writer.read(rel, MAX_METADATA)
    if data is None:
        raise IntegrityError(f"{writer.root / rel}: missing from the signed channel (restore it)")
    try:
        md = Metadata[RoleT].from_bytes(data)
    except DeserializationError as exc:
        raise IntegrityError(f"{writer.root / rel}: not TUF metadata ({exc})") from None
    if not isinstance(md.signed, kind):
        raise IntegrityError(f"{writer.root / rel}: not {kind.type} metadata")
    return md


def read_current(writer: MetadataStore) -> Current | None:
    """The channel's metadata (None: an unsigned channel, no tuf/root.json)."""
    if writer.kind(SIGNED_ROOT) is None:
        return None
    root = _read(writer, "root.json", Root)
    timestamp = _read(writer, "timestamp.json", Timestamp)
    snapshot = _read(writer, f"{timestamp.signed.snapshot_meta.version}.snapshot.json", Snapshot)
    targets = _read(writer, f"{snapshot.signed.meta['targets.json'].version}.targets.json", Targets)
    return Current(root, targets, snapshot, timestamp)


def check_signing(writer: MetadataStore, signing: Signing | None, location: str) -> None:
    """Before a publish or yank writes anything: a signed channel takes only signed changes, and
    only by a key its root names for the online roles."""
    current = read_current(writer)
    if current is None:
        return
    if signing is None:
        raise UsageError(
            f"{location} is a signed channel (tuf/root.json): give --sign KEY (or set "
            "TFAOT_DIST_SIGNING_KEY); an unsigned change would be refused by every area that trusts it"
        )
    _check_key(current.root.signed, signing.signer, (Targets.type, Snapshot.type, Timestamp.type))


def _check_key(root: Root, signer: CryptoSigner, roles: tuple[str, ...]) -> None:
    keyid = signer.public_key.keyid
    for role in roles:
        if keyid not in root.roles[role].keyids:
            raise InvalidInput(
                f"--sign: key {keyid[:12]} is not a {role} key of the channel's root (version "
                f"{root.version}); sign with the channel's key, or rotate the root first (trust rotate)"
            )


def targets_of(
    writer: MetadataStore, rows: list[ChannelPackage], signer: CryptoSigner
) -> dict[str, TargetFile]:
    """Every row's archive, manifest (read back: it is written before the metadata) and provenance
    (made for a row that has none: an archive's provenance never changes but by a key rotation)."""
    out = {}
    for row in rows:
        custom: dict[str, Any] = {"custom": {"yanked": row.yanked}} if row.yanked is not None else {}
        out[row.archive] = TargetFile(row.size, {"sha256": row.sha256}, row.archive, custom)
        manifest = writer.read(row.manifest, MAX_MANIFEST)
        if manifest is None:
            raise IntegrityError(f"{writer.root / row.manifest}: missing; nothing signed")
        out[row.manifest] = TargetFile.from_data(row.manifest, manifest, ["sha256"])
        if out[row.manifest].hashes["sha256"] != row.manifest_sha256:
            raise IntegrityError(f"{writer.root / row.manifest}: differs from its index row; nothing signed")
        rel = provenance.path(row)
        envelope = writer.read(rel, MAX_METADATA)
        if envelope is None or not provenance.names(envelope, row):
            doc = load_json(manifest, str(writer.root / row.manifest), MAX_MANIFEST)
            if not isinstance(doc, dict):
                raise IntegrityError(f"{writer.root / row.manifest}: not a manifest; nothing signed")
            envelope = provenance.envelope(row, doc, signer)
            writer.write(rel, envelope)
        out[rel] = TargetFile.from_data(rel, envelope, ["sha256"])
    return out


def sign_rows(writer: MetadataStore, rows: list[ChannelPackage], signing: Signing | None) -> None:
    """Called by a commit before it writes the index: sign rows as the channel's targets (a first
    signed publish creates the root from the key). Unsigned, on an unsigned channel: nothing."""
    if signing is None:
        return
    current = read_current(writer)
    targets = targets_of(writer, rows, signing.signer)
    if current is None:
        root = _new_root(signing.signer)
        _write_root(writer, root)
        write_online(writer, root.signed, None, targets, signing)
    elif targets != current.targets.signed.targets:
        write_online(writer, current.root.signed, current, targets, signing)


def _new_root(signer: CryptoSigner) -> Metadata[Root]:
    root = Root(expires=_now() + ROOT_LIFETIME, consistent_snapshot=True)
    for role in ROLES:
        root.add_key(signer.public_key, role)
    md = Metadata(root)
    md.sign(signer)
    return md


def init_root(
    writer: MetadataStore,
    rows: list[ChannelPackage],
    root_keys: Sequence[Key],
    threshold: int,
    root_signers: list[CryptoSigner],
    signing: Signing,
    location: str,
) -> Root:
    """A channel's first root held by root_keys, threshold of which must sign it and every later root
    (signed here by root_signers, at least threshold of them), with signing's key in the online
    roles; then the online metadata signing the rows the channel already lists."""
    if read_current(writer) is not None:
        raise InvalidInput(f"{location}: already signed (tuf/root.json); a root changes by trust rotate")
    ids = [key.keyid for key in root_keys]
    if len(set(ids)) != len(ids):
        raise InvalidInput("--key: the same key twice (each root key counts once toward the threshold)")
    if not 1 <= threshold <= len(ids):
        raise InvalidInput(f"--threshold: {threshold} is not between 1 and the {len(ids)} root keys given")
    root = Root(expires=_now() + ROOT_LIFETIME, consistent_snapshot=True)
    for key in root_keys:
        root.add_key(key, Root.type)
    root.roles[Root.type].threshold = threshold
    for role in ROLES[1:]:
        root.add_key(signing.signer.public_key, role)
    md = Metadata(root)
    for signer in root_signers:
        if signer.public_key.keyid not in ids:
            raise InvalidInput(
                f"--root-sign: key {signer.public_key.keyid[:12]} is not one of the root's --key keys"
            )
        md.sign(signer, append=True)
    try:
        root.verify_delegate(Root.type, md.signed_bytes, md.signatures)
    except RepositoryError:
        raise InvalidInput(
            f"--root-sign: {len(md.signatures)} of the root's keys signed it, its threshold is {threshold}: "
            "every area would refuse it (give more --root-sign keys)"
        ) from None
    _write_root(writer, md)
    write_online(writer, root, None, targets_of(writer, rows, signing.signer), signing)
    return root


def _write_root(writer: MetadataStore, root: Metadata[Root]) -> None:
    data = root.to_bytes(JSONSerializer(compact=False))
    writer.write(f"{TUF}/{root.signed.version}.root.json", data)
    writer.write(SIGNED_ROOT, data)


def write_online(
    writer: MetadataStore,
    root: Root,
    current: Current | None,
    targets: dict[str, TargetFile],
    signing: Signing,
) -> None:
    """New targets, snapshot and timestamp versions; timestamp.json last (the switch)."""
    now = _now()
    t = Metadata(
        Targets(
            current.targets.signed.version + 1 if current else 1,
            expires=now + TARGETS_LIFETIME,
            targets=targets,
        )
    )
    s = Metadata(
        Snapshot(
            current.snapshot.signed.version + 1 if current else 1,
            expires=now + TARGETS_LIFETIME,
            meta={"targets.json": MetaFile(t.signed.version)},
        )
    )
    ts = Metadata(
        Timestamp(
            current.timestamp.signed.version + 1 if current else 1,
            expires=now + signing.timestamp_lifetime,
            snapshot_meta=MetaFile(s.signed.version),
        )
    )
    for md in (t, s, ts):
        md.sign(signing.signer)
        try:
            root.verify_delegate(md.signed.type, md.signed_bytes, md.signatures)
        except RepositoryError:
            raise InvalidInput(
                f"--sign: key {signing.signer.public_key.keyid[:12]} is not a {md.signed.type} key of the "
                f"channel's root (version {root.version})"
            ) from None
    serializer = JSONSerializer(compact=False)
    writer.write(f"{TUF}/{t.signed.version}.targets.json", t.to_bytes(serializer))
    writer.write(f"{TUF}/{s.signed.version}.snapshot.json", s.to_bytes(serializer))
    writer.write(f"{TUF}/timestamp.json", ts.to_bytes(serializer))


def refresh_timestamp(writer: MetadataStore, signing: Signing, location: str) -> Timestamp:
    """A new timestamp (version + 1, expiry now + lifetime) naming the snapshot in force."""
    current = read_current(writer)
    if current is None:
        raise InvalidInput(f"{location}: not a signed channel (no tuf/root.json): nothing to refresh")
    _check_key(current.root.signed, signing.signer, (Timestamp.type,))
    ts = current.timestamp.signed
    ts.version += 1
    ts.expires = _now() + signing.timestamp_lifetime
    md = Metadata(ts)
    md.sign(signing.signer)
    writer.write(f"{TUF}/timestamp.json", md.to_bytes(JSONSerializer(compact=False)))
    return ts


def rotate(writer: MetadataStore, old: CryptoSigner, new: Signing, location: str) -> Root:
    """Root version + 1 whose four roles are held by new's key, signed by the old root key and the new
    one (clients accept it only so), then the online roles signed again by the new key. The same key
    twice renews the root's expiry."""
    current = read_current(writer)
    if current is None:
        raise InvalidInput(f"{location}: not a signed channel (no tuf/root.json): nothing to rotate")
    root = current.root.signed
    _check_key(root, old, (Root.type,))
    if root.roles[Root.type].threshold > 1:  # one old key's signature: every area would refuse it
        raise InvalidInput(
            f"{location}: its root needs {root.roles[Root.type].threshold} of its keys to sign a new "
            "root; trust rotate signs with one key (a root with a threshold is not rotated by it yet)"
        )
    for role in ROLES:
        for keyid in list(root.roles[role].keyids):
            root.revoke_key(keyid, role)
        root.add_key(new.signer.public_key, role)
    root.version += 1
    root.expires = _now() + ROOT_LIFETIME
    md = Metadata(root)
    md.sign(old)
    if new.signer.public_key.keyid != old.public_key.keyid:
        md.sign(new.signer, append=True)
    _write_root(writer, md)
    targets = dict(current.targets.signed.targets)
    for rel in [rel for rel in targets if rel.endswith("/" + provenance.NAME)]:
        data = writer.read(rel, MAX_METADATA)
        if data is not None:  # signed again by the key that now holds the channel
            again = provenance.signed_again(data, new.signer)
            writer.write(rel, again)
            targets[rel] = TargetFile.from_data(rel, again, ["sha256"])
    write_online(writer, root, current, targets, new)
    return root
