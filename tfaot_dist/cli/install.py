"""Commands on a user area: setup, remove."""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfaot_dist.cli.common import Options, area_of, arg, command, emit, log
from tfaot_dist.errors import UsageError

if TYPE_CHECKING:  # annotations only: channels, area and signatures load in the commands that use them
    from tfaot_dist.channels.channel import Channel


@dataclass(frozen=True)
class RemoveOptions(Options):
    packages: list[str] = arg(
        nargs="+",
        metavar="NAME",
        help="installed model name or package name "
        "(a specifier such as 'my-model==1.0' must match the installed version)",
    )
    area: Path | None = arg("--area", type=Path, help="user area (default: $CMSSW_BASE)")
    dry_run: bool = arg("--dry-run", action="store_true", help="print what would be removed, change nothing")


@command(
    "remove",
    RemoveOptions,
    summary="take packages out of a user area",
    description="Remove installed packages from AREA/tfaot: their directories, tool files, CMake and "
    "pkg-config files, their lines in env.sh and installed.json, and, with scram on the PATH, "
    "`scram tool remove NAME` for tools scram had taken. A runtime an installed model still "
    "needs is refused.",
    examples=(
        "tfaot-dist remove my-model --area $CMSSW_BASE",
        "tfaot-dist remove my-model --dry-run --area ~/area",
        "tfaot-dist remove my-model tfaot-xla-runtime --area ~/area",
    ),
)
def cmd_remove(o: RemoveOptions) -> int:
    from tfaot_dist.install import setup_area

    area = area_of(o.area)
    if area is None:
        raise UsageError("remove: give --area (or set CMSSW_BASE)")
    removed = setup_area.remove(o.packages, area, log, shutil.which("scram"), dry_run=o.dry_run)
    verb = "would remove" if o.dry_run else "removed"
    emit(
        o,
        {
            "area": str(area.absolute()),
            "dry_run": o.dry_run,
            "removed": [
                {"name": r.name, "version": r.version, "path": str(r.path), "scram": r.scram} for r in removed
            ],
        },
        "\n".join(
            f"{verb} {r.name} {r.version} ({r.path}){' and its scram tool' if r.scram else ''}"
            for r in removed
        ),
    )
    return 0


@dataclass(frozen=True)
class SetupOptions(Options):
    requirements: list[str] = arg(
        nargs="*",
        metavar="NAME",
        help="model name with optional PEP 440 version specifiers, e.g. test-simple or 'test-simple>=1.0,<2'",
    )
    channel: str | None = arg(
        "--channel",
        metavar="URL-OR-DIR",
        help="channel: directory, file://, http(s):// (default: $TFAOT_DIST_CHANNEL)",
    )
    area: Path | None = arg("--area", type=Path, help="user area (default: $CMSSW_BASE)")
    offline: bool = arg(
        "--offline", action="store_true", help="use the cache only; fail naming what is missing"
    )
    # The modes other than installing; one at most.
    listing: bool = arg(
        "--list",
        exclusive="mode",
        action="store_true",
        help="list installed packages (--area) or available (--channel)",
    )
    dry_run: bool = arg(
        "--dry-run",
        exclusive="mode",
        action="store_true",
        help="print what would be installed, upgraded or replaced (from the index), change nothing",
    )
    repair: bool = arg(
        "--repair",
        exclusive="mode",
        action="store_true",
        help="drop invalid rows of the area's installed.json and tidy the area to what it lists",
    )
    trust: Path | None = arg(
        "--trust",
        type=Path,
        metavar="ROOT.json",
        help="verify the channel's TUF metadata against this root (the area keeps it, and from then on "
        "refuses the channel's unsigned, tampered, rolled back or expired answers)",
    )


@command(
    "setup",
    SetupOptions,
    summary="install models (and their runtime) from a channel",
    description="Download the newest matching version of each model and the runtime it was verified with, "
    "check every file against the manifest, and install them under AREA/tfaot/ with SCRAM tool "
    "files, CMake configs, pkg-config files and env.sh.",
    examples=(
        "tfaot-dist setup test-simple --channel http://127.0.0.1:8000/ --area $CMSSW_BASE",
        "tfaot-dist setup 'test-simple>=1.0,<2' --channel /srv/channel --area ~/area",
        "tfaot-dist setup --list --channel http://127.0.0.1:8000/   # what is available",
    ),
    uses_cache=True,
)
def cmd_setup(o: SetupOptions) -> int:
    area = area_of(o.area)
    location = o.channel or os.environ.get("TFAOT_DIST_CHANNEL")
    if o.repair:
        return _repair(o, area)
    if o.listing:
        if o.requirements:
            raise UsageError("setup --list takes no package names")
        if area is not None:
            return _list_installed(o, area)
        if location:
            return _list_available(o, location)
        raise UsageError("setup --list: give --area (installed packages) or --channel (available ones)")
    if not o.requirements:
        raise UsageError("setup: name at least one model, e.g. test-simple or 'test-simple>=1.0,<2'")
    if area is None:
        raise UsageError("setup: give --area (or set CMSSW_BASE)")
    if not location:
        raise UsageError("setup: give --channel (or set TFAOT_DIST_CHANNEL)")
    channel = _verified_channel(o, location, area)
    if o.dry_run:
        return _plan(o, channel, location, area)
    return _install(o, channel, location, area)


def _verified_channel(o: SetupOptions, location: str, area: Path) -> Channel:
    """The channel, checked against the root this area trusts for it (trust/verify.py), if any."""
    from tfaot_dist.channels.factory import open_channel
    from tfaot_dist.install import setup_area
    from tfaot_dist.trust.trusted import read_trusted

    if o.trust is not None and o.offline:
        raise UsageError("setup --trust needs the channel's current signed metadata: not with --offline")
    channel = open_channel(location, o.cache, o.offline, log)
    root = setup_area.area_root(area)
    trusted = read_trusted(root, channel)
    if o.offline and trusted is not None:
        raise UsageError(f"setup --offline: this area trusts {location}'s signatures, which need it online")
    if trusted is None and o.trust is None:
        return channel  # no signatures to check: python-tuf is not loaded
    from tfaot_dist.trust import verify

    return verify.guard(channel, root, trusted, o.trust)


def _repair(o: SetupOptions, area: Path | None) -> int:
    """setup --repair."""
    from tfaot_dist.install import setup_area

    if o.requirements or area is None:
        raise UsageError("setup --repair takes only --area (or CMSSW_BASE)")
    dropped = setup_area.repair(area, log)
    emit(
        o,
        {"area": str(area.absolute()), "dropped": dropped},
        f"repaired {area}: " + (f"dropped {', '.join(dropped)}" if dropped else "nothing to drop"),
    )
    return 0


def _list_installed(o: SetupOptions, area: Path) -> int:
    """setup --list --area."""
    from tfaot_dist.install import setup_area

    rows = setup_area.list_installed(area)
    emit(
        o,
        {"area": str(area.absolute()), "packages": rows},
        "\n".join(f"{r['name']:40} {r['version']:28} {r['path']}" for r in rows) or "nothing installed",
    )
    return 0


def _list_available(o: SetupOptions, location: str) -> int:
    """setup --list --channel: the channel's rows, and the rows it cannot read (broken)."""
    from tfaot_dist.channels.factory import open_channel
    from tfaot_dist.trust.trusted import unsigned_directory

    listed = open_channel(location, o.cache, o.offline)
    index = listed.index
    broken = [{"name": b.name, "version": b.version, "reason": b.reason} for b in index.broken]
    if unsigned_directory(listed):
        signed = "unsigned"  # known without python-tuf
    else:
        from tfaot_dist.trust import verify

        signed = verify.signed_state(listed)
    emit(
        o,
        {
            "channel": location,
            "signed": signed,
            "packages": [p.as_dict() for p in index.rows],
            "broken": broken,
        },
        "\n".join(
            ([f"{location}: {signed}"] if signed != "unsigned" else [])  # unsigned: as before
            + [
                f"{p.name:40} {p.version:28} {p.sha256[:12]}" + (f"  yanked: {p.yanked}" if p.yanked else "")
                for p in index.rows
            ]
            + [f"{b['name'] or '?':40} {b['version'] or '?':28} broken: {b['reason']}" for b in broken]
        ),
    )
    return 0


SETUP_WORDS = {
    "install": "would install",
    "upgrade": "would upgrade",
    "replace": "would replace",
    "keep": "already installed:",
}


def _plan(o: SetupOptions, channel: Channel, location: str, area: Path) -> int:
    """setup --dry-run: what setup would do, from the channel's index."""
    from tfaot_dist.install import setup_area

    steps = setup_area.plan_setup(o.requirements, channel, area)
    emit(
        o,
        {
            "area": str(area.absolute()),
            "channel": location,
            "dry_run": True,
            "plan": [dataclasses.asdict(step) for step in steps],
        },
        "\n".join(
            f"{SETUP_WORDS[s.action]} {s.name} {s.version}"
            + (f" (removes {s.previous})" if s.previous else "")
            + (f" (yanked: {s.yanked})" if s.yanked else "")
            for s in steps
        ),
    )
    return 0


def _install(o: SetupOptions, channel: Channel, location: str, area: Path) -> int:
    """setup: install, then say what each package became and how to use them."""
    from tfaot_dist.install import setup_area

    scram = shutil.which("scram")
    # A signed channel's accepted metadata is kept for the next setup (rollback protection) by its
    # remember(), once setup succeeded.
    report = setup_area.setup(o.requirements, channel, area, o.cache, o.offline, log, scram)
    lines = [
        f"{r.name} {r.version}: {r.status}{f' (was {r.previous})' if r.previous else ''} ({r.path})"
        for r in report.results
    ]
    if report.scram:
        lines.append(f"registered with scram: {', '.join(Path(t).name for t in report.scram)}")
    elif report.environment and not scram:
        lines.append("scram is not on the PATH; for CMake, pkg-config or plain compilers add:")
        lines += [f"  {line}" for line in setup_area.export_lines(report.environment)]
        lines.append(f"  (or: source {setup_area.area_root(area) / 'env.sh'})")
    emit(
        o,
        {
            "area": str(area.absolute()),
            "channel": location,
            "results": [
                {
                    "name": r.name,
                    "version": r.version,
                    "status": r.status,
                    "path": str(r.path),
                    "previous": r.previous,
                }
                for r in report.results
            ],
            "scram": report.scram,
            "environment": report.environment,
        },
        "\n".join(lines),
    )
    return 0
