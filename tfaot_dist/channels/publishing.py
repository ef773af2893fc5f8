"""Publishing into a channel and yanking from it, for every transport: the rules are written here once, and a
transport only provides an IndexTransaction (the rows as they are, storing one archive, listing rows).

publish_archives(): every refusal before the first write, a published version never changes, archives before
the index that lists them. yank(): a version's rows marked (or unmarked) in one commit; the archive stays.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from tfaot_dist.channels.channel import (
    RUNTIME,
    Channel,
    ChannelPackage,
    VerifiedArchive,
    exact_pin,
    index_line,
    parse_requirement,
    verified_dist,
)
from tfaot_dist.channels.directory import DirectoryChannel
from tfaot_dist.channels.factory import open_channel
from tfaot_dist.documents import yank_reason
from tfaot_dist.errors import IntegrityError, InvalidInput, UsageError
from tfaot_dist.install import ownership
from tfaot_dist.trust.signing import Signing
from tfaot_dist.util.progress import Log


@dataclass(frozen=True)
class Published:
    name: str
    version: str
    status: str  # "published" or "unchanged"
    sha256: str
    archive: str  # relative to the channel; in an OCI registry NAMESPACE/PACKAGE@sha256:... (the layer)


def sign_with(channel: Channel, signing: Signing | None) -> None:
    """Let a directory or OCI channel's next commit sign its TUF metadata (trust/repository.py) with
    signing; an HTTP channel is read only."""
    if isinstance(channel, DirectoryChannel):
        channel.signing = signing
        return
    from tfaot_dist.channels.oci import OciChannel  # a remote channel: the HTTP stack is loaded already

    if isinstance(channel, OciChannel):
        channel.signing = signing
    elif signing is not None:
        raise UsageError(f"--sign: {channel.location}: only directory and oci:// channels are signed")


def publish(
    dist: Path,
    location: str,
    cache: Path,
    log: Log = print,
    selection: list[str] | tuple[str, ...] = (),
    signing: Signing | None = None,
) -> list[Published]:
    """Publish the package archives in dist (models and runtimes; selection: the archives matching
    these requirements, with the runtimes they require) into the channel at location; signing: its
    TUF metadata signed too (trust/repository.py)."""
    channel = open_channel(location, cache, log=log)
    sign_with(channel, signing)
    with tempfile.TemporaryDirectory(prefix="tfaot-publish-") as copies:
        return publish_archives(channel, verified_dist(dist, Path(copies), selection))


MAX_LISTED = 5  # conflicts named in one error line


def publish_archives(channel: Channel, verified: list[VerifiedArchive]) -> list[Published]:
    """The rules of publishing, for every transport: a package holds only its own files
    (ownership.py); a listed version with the same bytes is unchanged (skipped; stored again if
    the channel lost them: "restored"), with other bytes a conflict, and so is another spelling of
    a listed version (1.0 next to 1.0.0: versions are PEP 440 values); a model whose runtime the
    channel would not have is refused; every refusal (all conflicts named) before the first write;
    archives stored, then listed in one commit."""
    for archive in verified:  # what setup would refuse is not published either
        ownership.check_package(archive.manifest, archive.tool_files, archive.label)
    _one_archive_per_version(verified)
    with channel.transaction() as tx:
        plan, restore, out, conflicts = [], [], [], []
        by_value: dict[tuple[str, Version], list[ChannelPackage]] = {}
        for row in tx.rows.values():
            by_value.setdefault((row.name, Version(row.version)), []).append(row)
        for archive in verified:
            line = index_line(archive)
            listed = tx.rows.get(line.key)
            spelled = [r for r in by_value.get((line.name, Version(line.version)), []) if r is not listed]
            old = listed.sha256 if listed else tx.stored_sha256(line)
            if spelled:
                other = spelled[0]
                conflicts.append(
                    f"{archive.label} ({line.name} {line.version}: published as {other.version}, sha256 "
                    f"{other.sha256[:12]}, this one {line.sha256[:12]})"
                )
            elif listed and old == line.sha256:
                status = "unchanged"
                if not tx.intact(listed):
                    restore.append((archive, line))  # listed, but the channel lost its files
                    status = "restored"
                out.append(Published(line.name, line.version, status, line.sha256, tx.reference(listed)))
            elif old is None or old == line.sha256:
                plan.append((archive, line))  # new, or stored by a publish that died before listing it
                out.append(Published(line.name, line.version, "published", line.sha256, tx.reference(line)))
            else:
                conflicts.append(
                    f"{archive.label} ({line.name} {line.version}: published sha256 {old[:12]}, "
                    f"this one {line.sha256[:12]})"
                )
        if conflicts:
            more = f" and {len(conflicts) - MAX_LISTED} more" if len(conflicts) > MAX_LISTED else ""
            raise IntegrityError(
                f"{len(conflicts)} package version{'s' if len(conflicts) > 1 else ''} already in "
                f"{channel.location} with other bytes, nothing published: "
                f"{'; '.join(conflicts[:MAX_LISTED])}{more}; a published version never changes "
                "(give the model a new build: tfaot-dist update NAME --new-build)"
            )
        listed_after = set(tx.rows) | {line.key for _, line in plan}
        for _, line in plan:
            for req in line.requires:
                if req.name == RUNTIME and (req.name, req.version) not in listed_after:
                    raise InvalidInput(
                        f"{line.name} {line.version} requires {req.name} {req.version}, which "
                        f"neither {channel.location} nor the archives published have (publish it "
                        "too: it is in the dist directory the model was built into)"
                    )
        for archive, line in plan + restore:
            tx.store(archive, line)
        tx.commit(
            [line for _, line in plan], {line.key: archive.manifest for archive, line in plan + restore}
        )
    return out


def _one_archive_per_version(verified: list[VerifiedArchive]) -> None:
    """Two archives of one version (1.0 and 1.0.0) in one publish: refused, as a conflict is."""
    seen: dict[tuple[str, Version], VerifiedArchive] = {}
    for archive in verified:
        key = (archive.name, Version(archive.version))
        if key in seen:
            raise IntegrityError(
                f"{seen[key].label} and {archive.label}: {archive.name} {seen[key].version} and "
                f"{archive.version} are one version; nothing published (a version has one build)"
            )
        seen[key] = archive


def yank(
    location: str,
    cache: Path,
    text: str,
    reason: str | None,
    log: Log = print,
    signing: Signing | None = None,
) -> tuple[list[ChannelPackage], bool]:
    """Mark the version `text` names exactly (NAME==VERSION) as yanked for reason (None: not yanked
    any more) in the channel's index; returns its rows (every spelling of the version: 1.0 and 1.0.0
    are one; NAME===VERSION names one spelling) and whether any changed. The archive stays: setup
    takes a yanked version only when it is pinned exactly."""
    package, specifier = parse_requirement(text)
    if not exact_pin(specifier):
        raise InvalidInput(f"{text!r}: name one version exactly (NAME==VERSION)")
    spec = next(iter(specifier))
    try:
        wanted = Version(spec.version)
    except InvalidVersion:
        raise InvalidInput(f"{text!r}: {spec.version!r} is not a version (PEP 440)") from None
    if reason is not None:
        yank_reason(reason, "--reason")
    channel = open_channel(location, cache, log=log)
    sign_with(channel, signing)
    with channel.transaction() as tx:
        rows = [
            row
            for (name, version), row in sorted(tx.rows.items())
            if name == package
            and (version == spec.version if spec.operator == "===" else Version(version) == wanted)
        ]
        if not rows:
            have = ", ".join(
                v for n, v in sorted(tx.rows, key=lambda k: (k[0], Version(k[1]))) if n == package
            )
            raise InvalidInput(
                f"{text!r}: {package} {wanted} is not in {location} (versions: {have or 'none'})"
            )
        changed = [
            dataclasses.replace(row, yanked=reason, revision=row.revision + 1)
            for row in rows
            if row.yanked != reason
        ]
        if changed:
            tx.commit(changed, {})
    after = {row.key: row for row in changed}
    return [after.get(row.key, row) for row in rows], bool(changed)
