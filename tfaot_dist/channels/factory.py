"""Opening a channel: the one place a location's form is recognised, above the transports it chooses from.

    open_channel(location, cache)   a directory or file:// URL   -> directory.DirectoryChannel
                                    http:// or https://          -> http_channel.HttpChannel (read only)
                                    oci://HOST[:PORT]/NAMESPACE   -> oci.OciChannel

The transports import the interface (channel.py); this module imports them, so the interface never imports
a transport back. The remote transports are imported when a location names one: they load the HTTP stack
(util/download.py), which a directory channel does without.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tfaot_dist.channels.channel import Channel
from tfaot_dist.channels.directory import DirectoryChannel
from tfaot_dist.errors import InvalidInput


def open_channel(
    location: str, cache: Path, offline: bool = False, log: Callable[[str], None] | None = None
) -> Channel:
    """The channel at location. log: told of retries."""
    if not isinstance(location, str) or not location:
        raise InvalidInput("--channel: empty")
    if location.startswith("oci://"):
        from tfaot_dist.channels.oci import OciChannel

        return OciChannel(location, cache, offline, log)
    if location.startswith(("http://", "https://")):
        from tfaot_dist.channels.http_channel import HttpChannel

        return HttpChannel(location, cache, offline)
    return DirectoryChannel(location)
