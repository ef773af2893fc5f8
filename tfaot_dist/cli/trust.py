"""Commands for signed channels: keys (a key pair) and trust (the timestamp, the root)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.cli.common import Options, arg, command, emit
from tfaot_dist.cli.distribution import sign_option, timestamp_expiry_option


@dataclass(frozen=True)
class KeysOptions(Options):
    action: str = arg(choices=["new"], help="new: a new key pair")
    path: Path = arg(type=Path, metavar="PATH", help="the private key's file (the public key: PATH.pub)")


@command(
    "keys",
    KeysOptions,
    summary="make a key pair for signing a channel",
    description="keys new PATH writes an ed25519 private key (PATH, mode 0600) and its public key (PATH.pub); "
    "it never overwrites a file. Keep the private key off the channel's host; in CI put its text "
    "in the secret TFAOT_DIST_SIGNING_KEY.",
    examples=(
        "tfaot-dist keys new ~/.tfaot/channel.key",
        "tfaot-dist publish --channel /srv/channel --sign ~/.tfaot/channel.key",
    ),
)
def cmd_keys(o: KeysOptions) -> int:
    from tfaot_dist.trust.commands import keys_new  # cryptography: only for this command

    emit(o, *keys_new(o.path))
    return 0


@dataclass(frozen=True)
class TrustOptions(Options):
    action: str = arg(
        choices=["refresh-timestamp", "rotate", "init-root"],
        help="refresh-timestamp: a new signed timestamp; rotate: hand the root to --new-key; init-root: "
        "a new channel's root held by several keys (--key, --threshold, --root-sign)",
    )
    channel: str = arg(
        "--channel",
        required=True,
        metavar="CHANNEL",
        help="the channel (a directory or oci://HOST/NAMESPACE)",
    )
    new_key: Path | None = arg(
        "--new-key", type=Path, metavar="KEY", help="rotate: the private key taking over"
    )
    key: list[Path] | None = arg(
        "--key", type=Path, action="append", metavar="KEY.pub", help="init-root: a root key (repeatable)"
    )
    threshold: int | None = arg(
        "--threshold", type=int, metavar="N", help="init-root: root keys that must sign a root (default: all)"
    )
    root_sign: list[Path] | None = arg(
        "--root-sign",
        type=Path,
        action="append",
        metavar="KEY",
        help="init-root: a root key's private key signing the new root (repeatable; at least --threshold)",
    )
    sign: Path | None = sign_option()
    timestamp_expiry: str | None = timestamp_expiry_option()


@command(
    "trust",
    TrustOptions,
    summary="refresh a signed channel's timestamp, or rotate its root",
    description="refresh-timestamp signs a new timestamp (run it on a schedule: an expired timestamp is refused "
    "by every area that trusts the channel); rotate hands the channel's root and online roles to "
    "--new-key's key, signed by the old key and the new one (trusting areas follow it; the same "
    "key twice renews the root); init-root makes a channel's first root held by several keys "
    "(--key, repeatable), --threshold of which must sign it and every later root (--root-sign: "
    "their private keys), with --sign's key signing publishes and yanks.",
    examples=(
        "tfaot-dist trust refresh-timestamp --channel /srv/channel --sign KEY --timestamp-expiry 2d",
        "tfaot-dist trust rotate --channel /srv/channel --sign OLD.key --new-key NEW.key",
        "tfaot-dist trust init-root --channel /srv/channel --key A.pub --key B.pub --threshold 2 "
        "--root-sign A.key --root-sign B.key --sign ONLINE.key",
    ),
)
def cmd_trust(o: TrustOptions) -> int:
    from tfaot_dist.trust.commands import RootKeys, trust_command  # cryptography: only for this command

    root_keys = RootKeys(o.key or [], o.threshold, o.root_sign or [])
    emit(o, *trust_command(o.action, o.channel, o.cache, o.sign, o.new_key, o.timestamp_expiry, root_keys))
    return 0
