"""What setup knows of a channel's signatures before it loads python-tuf (verify.py): where a channel's
metadata is, which channels an area trusts, whether a directory channel is signed at all. An unsigned
setup, or a --list of an unsigned directory channel, ends here.

    AREA/tfaot/trust/ID/          one directory per trusted channel (ID: channel_id())
      channel.txt                 the channel's location, for people
      root_history/N.root.json    every root the area followed
      timestamp.json, snapshot.json, targets.json   the newest metadata it accepted
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

from tfaot_dist.channels.channel import Channel
from tfaot_dist.channels.directory import DirectoryChannel
from tfaot_dist.errors import InvalidInput
from tfaot_dist.install.area import AreaWriter, open_area
from tfaot_dist.trust.signing import MAX_METADATA, SIGNED_ROOT, TUF

TRUST = "trust"  # in AREA/tfaot: one directory per trusted channel
KEPT = ("timestamp.json", "snapshot.json", "targets.json")


def metadata_url(channel: Channel) -> str:
    """Where the channel's tuf/ directory is, as a URL (file:// for a directory channel; oci://HOST/
    NAMESPACE/tuf/ for an OCI channel, whose files verify._Fetcher reads from NAMESPACE/tfaot-tuf)."""
    if isinstance(channel, DirectoryChannel):
        return channel.root.joinpath(TUF).as_uri() + "/"
    # Not a directory: a remote channel, whose transport loaded the HTTP stack already.
    from tfaot_dist.channels.http_channel import HttpChannel
    from tfaot_dist.channels.oci import OciChannel

    if isinstance(channel, HttpChannel):
        return f"{channel.base_url}{TUF}/"
    if isinstance(channel, OciChannel):
        return f"{channel.where}/{TUF}/"
    raise InvalidInput(f"--trust: {channel.location}: only directory, http(s) and oci:// channels are signed")


def channel_id(channel: Channel) -> str:
    return hashlib.sha256(metadata_url(channel).encode()).hexdigest()[:16]


def unsigned_directory(channel: Channel) -> bool:
    """A directory channel without tuf/root.json: unsigned, as verify.signed_state() would find."""
    return isinstance(channel, DirectoryChannel) and not os.path.exists(channel.root / SIGNED_ROOT)


@dataclasses.dataclass
class Trusted:
    """What an area keeps of a trusted channel: the roots it followed and the newest metadata."""

    roots: dict[int, bytes]
    files: dict[str, bytes]


def _stored(writer: AreaWriter, rel: str) -> Trusted | None:
    if writer.kind(rel) != "dir":
        return None
    roots = {}
    for name, _ in writer.entries(f"{rel}/root_history"):
        version = name.removesuffix(".root.json")
        if name.endswith(".root.json") and version.isdigit():
            data = writer.read(f"{rel}/root_history/{name}", MAX_METADATA)
            if data is not None:
                roots[int(version)] = data
    files = {name: data for name in KEPT if (data := writer.read(f"{rel}/{name}", MAX_METADATA)) is not None}
    return Trusted(roots, files) if roots else None


def read_trusted(area_root: Path, channel: Channel) -> Trusted | None:
    """What the area keeps of the channel's trusted metadata; None for a channel it does not trust."""
    if not area_root.is_dir():
        return None
    try:
        metadata_url(channel)
    except InvalidInput:
        return None
    with open_area(area_root, create=False) as writer:
        return _stored(writer, f"{TRUST}/{channel_id(channel)}")
