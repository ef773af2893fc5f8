"""Installing packages from a channel into a user area ($CMSSW_BASE or any directory).

    AREA/tfaot/
      installed.json                        what is installed; replaced in one rename
      PACKAGE/VERSION/                      the package tree, every file checked against its manifest,
                                            plus lib/cmake/PACKAGE/ and lib/pkgconfig/PACKAGE.pc
      scram.d/PACKAGE.xml                   tool files, @TOOL_ROOT@ replaced by PACKAGE/VERSION's path
      lib/cmake/PACKAGE/PACKAGEConfig.cmake forwarders: CMAKE_PREFIX_PATH=AREA/tfaot finds every package
      lib/pkgconfig/PACKAGE.pc              PKG_CONFIG_PATH=AREA/tfaot/lib/pkgconfig
      env.sh                                the environment for builds without scram
      .lock                                 held while the area changes

Everything is fetched and verified before the area is touched, so a refused
download or archive leaves the area as it was. An upgrade puts the new
version's directory in place, then switches the tool files, forwarders and
installed.json (each by a rename), and only then removes the old directory.
A model needs the exact runtime version it was verified with; one area holds
one runtime, so models needing different runtimes are refused together.
installed.json is the truth: a setup killed half-way leaves files it does not
list, which the next setup removes or rewrites (_repair) before it changes
anything.

A package installs only what is its own (ownership.py, checked before the area
is touched), and every file of setup and repair goes through the area writer
(area.py): nothing outside AREA/tfaot, no link followed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from tfaot_dist import names, process
from tfaot_dist import package as pkg
from tfaot_dist.channels.channel import (
    MAX_TOOL_FILE,
    RUNTIME,
    Channel,
    ChannelPackage,
    VerifiedArchive,
    parse_requirement,
    verify_fetched,
)
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import buildsys
from tfaot_dist.documents import InstalledRow, Manifest, load_json
from tfaot_dist.errors import IntegrityError, InvalidInput, ScramFailed, SourceUnavailable
from tfaot_dist.install import ownership
from tfaot_dist.install.area import LOCK, TEMP, AreaWriter, open_area
from tfaot_dist.util.archives import PACKAGE, extract
from tfaot_dist.util.cached_archives import discard, keep
from tfaot_dist.util.fs import crash_point, write_atomic
from tfaot_dist.util.progress import Log
from tfaot_dist.util.textsafe import did_you_mean, shown

FORMAT = "tfaot-dist-area/1"
INSTALLED = "installed.json"
TOOL_ROOT = "@TOOL_ROOT@"


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    status: str  # "installed", "upgraded", "replaced" or "already installed"
    path: Path
    previous: str | None = None  # the version it replaced


@dataclass
class Report:
    results: list[Installed] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)  # what to export without scram
    scram: list[str] = field(default_factory=list)  # tool files given to `scram setup`


def area_root(area: Path) -> Path:
    root = area.absolute() / "tfaot"
    if not names.AREA_PATH.fullmatch(str(root)):
        bad = sorted({c for c in str(root) if not names.AREA_PATH_CHAR.fullmatch(c)})
        raise InvalidInput(
            f"--area: {area.absolute()}: characters {''.join(bad)!r} cannot go into tool files "
            "and environment lines; use another directory"
        )
    return root


# ---------------------------------------------------------------- installed.json


def read_installed(root: Path, writer: AreaWriter | None = None) -> dict[str, InstalledRow]:
    """installed.json, every row checked (documents.InstalledRow); a bad row is refused with the
    way to repair the area. writer: read through it (no link followed) when the area is open."""
    doc, path = _installed_document(root, writer)
    rows = {}
    for name, row in doc.items():
        try:
            rows[name] = InstalledRow.from_json_named(name, row, f"{path}: packages.{shown(name, 60, False)}")
        except InvalidInput as exc:
            raise InvalidInput(
                f"{exc}; `tfaot-dist setup --repair --area {root.parent}` drops the row "
                "(then set the package up again)"
            ) from None
    return rows


def _installed_document(root: Path, writer: AreaWriter | None = None) -> tuple[dict[str, Any], Path]:
    """The packages object of installed.json, rows unchecked ({} without the file)."""
    path = root / INSTALLED
    if writer is not None:
        data = writer.read(INSTALLED)
    else:
        if path.is_symlink():
            raise IntegrityError(
                f"{path}: a symbolic link inside the area; tfaot-dist never follows or removes "
                "links there (remove it yourself, then run setup again)"
            )
        try:
            data = path.read_bytes() if path.is_file() else None
        except OSError as exc:
            raise InvalidInput(f"{path}: unreadable ({exc.strerror})") from None
    if data is None:
        return {}, path
    try:
        doc = load_json(data, str(path))
    except InvalidInput as exc:
        raise InvalidInput(
            f"{exc}; `tfaot-dist setup --repair --area {root.parent}` starts it afresh"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("packages"), dict):
        raise InvalidInput(
            f"{path}: not a tfaot-dist area file (format {FORMAT!r}); "
            f"`tfaot-dist setup --repair --area {root.parent}` starts it afresh"
        )
    return doc["packages"], path


def repair(area: Path, log: Log = print) -> list[str]:
    """Drop the rows of installed.json that are not valid (an unreadable file starts afresh), then
    bring the area back to what it lists; returns the names of the packages dropped."""
    root = area_root(area)
    if not os.path.lexists(root):
        return []
    with open_area(root, create=False) as writer:
        try:
            doc, path = _installed_document(root, writer)
        except InvalidInput as exc:
            log(f"repair: {str(exc).split('; ')[0]}: starting installed.json afresh")
            doc, path = {}, root / INSTALLED
            dropped = ["installed.json"]
        else:
            dropped = []
        state: dict[str, InstalledRow] = {}
        for name, row in doc.items():
            try:
                state[name] = InstalledRow.from_json_named(
                    name, row, f"{path}: packages.{shown(name, 60, False)}"
                )
            except InvalidInput as exc:
                log(f"repair: dropping {exc}")
                dropped.append(shown(name, 60, False))
        if dropped or writer.kind(INSTALLED) != "file":
            _write_installed(writer, state)
        _repair(writer, state, None, Report())
        if not state:
            writer.remove("env.sh")
    return dropped


def list_installed(area: Path) -> list[dict[str, Any]]:
    root = area_root(area)
    return [
        {"name": name, **row.to_json(), "path": str(root / row.path)}
        for name, row in sorted(read_installed(root).items())
    ]


def _write_installed(writer: AreaWriter, state: dict[str, InstalledRow]) -> None:
    rows = {name: row.to_json() for name, row in sorted(state.items())}
    writer.write(INSTALLED, json.dumps({"format": FORMAT, "packages": rows}, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------- setup


def setup(
    requirements: list[str],
    channel: Channel,
    area: Path,
    cache: Path,
    offline: bool = False,
    log: Log = print,
    scram: str | None = None,
) -> Report:
    """Install each requirement (newest matching version) with the runtime it needs.

    scram: the scram executable to register tool files with (None: not available).
    """
    _check_available(requirements, channel)
    root = area_root(area)
    report = Report()
    for text in requirements:
        report.results += _setup_one(text, channel, root, cache, offline, log, report, scram)
    if not offline:
        channel.remember(cache)
    report.environment = environment(root, read_installed(root))
    return report


def _check_available(requirements: list[str], channel: Channel) -> None:
    """Every requirement names a package of the channel (a typo gets the closest names), before any is set up."""
    for text in requirements:
        package, _ = parse_requirement(text)
        channel.index.refuse_broken(package)
        if not channel.index.versions(package):
            known = sorted(
                {p.name.removeprefix("tfaot-model-") for p in channel.index.rows if p.kind == "model"}
            )
            raise InvalidInput(
                f"{text!r}: {package} is not in the channel {channel.location}"
                + did_you_mean(
                    package.removeprefix("tfaot-model-"),
                    known,
                    f"tfaot-dist setup --list --channel {channel.location}",
                )
            )


def _wanted(text: str, channel: Channel) -> list[ChannelPackage]:
    """The version a requirement takes (newest matching; a yanked one only by exact pin) and the
    runtime it needs, runtime first."""
    package, specifier = parse_requirement(text)
    chosen = channel.index.newest(package, specifier)
    if chosen is None:
        have = ", ".join(
            p.version + (" (yanked)" if p.yanked else "") for p in channel.index.versions(package)
        )
        raise InvalidInput(
            f"{text!r}: no version of {package} matches in {channel.location} (available: {have or 'none'})"
        )
    return [*_runtimes_for(chosen, channel), chosen]


def _setup_one(
    text: str,
    channel: Channel,
    root: Path,
    cache: Path,
    offline: bool,
    log: Log,
    report: Report,
    scram: str | None,
) -> list[Installed]:
    wanted = _wanted(text, channel)
    for p in wanted:
        if p.yanked is not None:
            log(f"warning: {p.name} {p.version} is yanked from {channel.location}: {p.yanked}")
    state = read_installed(root)
    _check_runtimes(state, wanted)

    todo, out = [], []
    for p in wanted:
        there = _already_installed(state, p, root, channel.location)
        if there:
            out.append(there)
        else:
            todo.append(p)
    if not todo:
        with _undone_if_refused(root), open_area(root) as writer:
            _repair(writer, read_installed(root, writer), scram, report)
        return out

    verified = _fetch_verified(todo, channel, cache, offline)
    for p in todo:
        # Only a warning: areas are often prepared on one machine and used on others.
        check = cpu_target.check_package(verified[p.key].manifest.compilation)
        if p.kind == "model" and not check.ok:
            log(f"warning: {p.name} {p.version}: {check.message}")

    with _undone_if_refused(root), open_area(root) as writer:
        state = read_installed(root, writer)
        _check_runtimes(state, wanted)
        _repair(writer, state, scram, report)
        installed, old_dirs = [], []
        for p in todo:
            there = _already_installed(state, p, root, channel.location)  # a setup at the same time was first
            if there:
                out.append(there)
                continue
            installed.append(p)
            previous = state.get(p.name)
            out.append(_install_one(writer, state, p, verified[p.key], channel.location, root))
            if previous and previous.path != state[p.name].path:
                old_dirs.append(previous.path)
        crash_point("setup_listed")
        _write_installed(writer, state)
        writer.write("env.sh", env_script(environment(root, state)))
        for old in old_dirs:
            writer.remove(old)
            writer.remove_if_empty(old.split("/")[0])
        if scram:
            _register(scram, writer, state, [p.name for p in installed], report)
    return out


def _already_installed(
    state: dict[str, InstalledRow], p: ChannelPackage, root: Path, location: str
) -> Installed | None:
    """p's version as the area has it (None: not installed); the same version with other bytes is refused."""
    row = state.get(p.name)
    if not row or not _same(row.version, p.version):
        return None
    if row.sha256 != p.sha256:
        raise IntegrityError(
            f"{root / row.path}: {p.name} {p.version} is installed with sha256 "
            f"{row.sha256}, {location} has {p.sha256}"
        )
    return Installed(p.name, p.version, "already installed", root / row.path)


def _fetch_verified(
    todo: list[ChannelPackage], channel: Channel, cache: Path, offline: bool
) -> dict[tuple[str, str], VerifiedArchive]:
    """Fetch and verify everything (digests, then what each package may install) before the area
    (or the cache) changes; fresh downloads enter the cache only once all are verified."""
    verified, fresh = {}, []
    try:
        for p in todo:
            path, is_new = channel.fetch(p, cache, offline)
            if is_new:
                fresh.append(path)
            archive = verify_fetched(path, p, channel.location)
            ownership.check_package(archive.manifest, archive.tool_files, archive.label)
            verified[p.key] = archive
        for p in todo:  # all there and verified: now the downloads may enter the cache
            if verified[p.key].path in fresh:
                kept = keep(verified[p.key].path, cache, p.sha256)
                verified[p.key] = dataclasses.replace(verified[p.key], path=kept)
    finally:
        for path in fresh:
            discard(path)
    return verified


def _install_one(
    writer: AreaWriter,
    state: dict[str, InstalledRow],
    p: ChannelPackage,
    archive: VerifiedArchive,
    location: str,
    root: Path,
) -> Installed:
    """p's tree and area files in place, its row in state (not yet written)."""
    rel = f"{p.name}/{p.version}"
    _install_tree(writer, archive, rel)
    previous = state.get(p.name)
    tool_files = _place_area_files(writer, archive.manifest, rel, previous)
    state[p.name] = InstalledRow(
        version=p.version,
        kind=p.kind,
        sha256=p.sha256,
        path=rel,
        requires=tuple(p.requires),
        tool_files=tuple(tool_files),
        channel=location,
    )
    status = (
        "installed" if not previous else ("upgraded" if _newer(p.version, previous.version) else "replaced")
    )
    return Installed(p.name, p.version, status, root / rel, previous.version if previous else None)


@dataclass(frozen=True)
class Planned:
    name: str
    version: str
    action: str  # "install", "upgrade", "replace", "keep" (installed already) or "remove"
    previous: str | None = None  # the version an upgrade or a replacement removes
    yanked: str | None = None


def plan_setup(requirements: list[str], channel: Channel, area: Path) -> list[Planned]:
    """What setup would do, read from the channel's index and the area's installed.json alone:
    nothing is downloaded, nothing written, and what setup would refuse is refused here too."""
    _check_available(requirements, channel)
    root = area_root(area)
    state = read_installed(root) if os.path.lexists(root) else {}
    out: list[Planned] = []
    for text in requirements:
        wanted = _wanted(text, channel)
        _check_runtimes(state, wanted)
        for p in wanted:
            row = state.get(p.name)
            if row and _same(row.version, p.version):
                if row.sha256 != p.sha256:
                    raise IntegrityError(
                        f"{root / row.path}: {p.name} {p.version} is installed with sha256 "
                        f"{row.sha256}, {channel.location} has {p.sha256}"
                    )
                action = "keep"
            else:
                action = (
                    "install" if not row else ("upgrade" if _newer(p.version, row.version) else "replace")
                )
            step = Planned(
                p.name, p.version, action, row.version if row and action != "keep" else None, p.yanked
            )
            if step not in out:
                out.append(step)
            state[p.name] = InstalledRow(
                version=p.version,
                kind=p.kind,
                sha256=p.sha256,
                path=f"{p.name}/{p.version}",
                requires=tuple(p.requires),
                tool_files=(),
                channel=channel.location,
            )
    return out


@dataclass(frozen=True)
class Removed:
    name: str
    version: str
    path: Path
    scram: bool  # `scram tool remove` was run for it


def remove(
    requirements: list[str], area: Path, log: Log = print, scram: str | None = None, dry_run: bool = False
) -> list[Removed]:
    """Take packages out of an area: their directories, tool files, CMake and pkg-config files, their
    rows of installed.json and env.sh lines, and (with scram) `scram tool remove` for the tools scram
    had taken. A runtime an installed model still needs is refused. installed.json is rewritten
    first, then what it no longer lists goes (as repair removes it), so a removal killed half-way
    is finished by the next setup, repair or remove."""
    root = area_root(area)
    if not os.path.lexists(root):
        raise InvalidInput(f"--area: {area}: nothing is installed there (no {root})")
    with open_area(root, create=False) as writer:
        state = read_installed(root, writer)
        targets = _removal_targets(requirements, state, area)
        out = [
            Removed(n, state[n].version, root / state[n].path, bool(scram and state[n].scram))
            for n in targets
        ]
        if dry_run:
            return out
        kept = {name: row for name, row in state.items() if name not in targets}
        for name in targets:  # a link where the removal goes stops it before anything changed
            for rel in (
                state[name].path,
                *state[name].tool_files,
                buildsys.cmake_config_path(name).rsplit("/", 1)[0],
                buildsys.pkgconfig_path(name),
            ):
                writer.check_removable(rel)
        for name in targets:
            if state[name].scram:
                if scram:
                    _scram_tool_remove(scram, root.parent, name)
                    # Recorded at once: if scram refuses the next one, the area says what scram
                    # holds, and the next setup (or remove) finishes the job from there.
                    state[name] = dataclasses.replace(state[name], scram=False)
                    _write_installed(writer, state)
                else:
                    log(
                        f"warning: {name} was registered with scram, which is not on the PATH now: run "
                        f"`scram tool remove {name}` in {root.parent}"
                    )
        _write_installed(writer, kept)
        crash_point("remove_listed")
        _repair(writer, kept, None, Report())
        if not kept:
            writer.remove("env.sh")
        for runtime in [n for n in kept if kept[n].kind == "runtime"]:
            if not any(r.name == runtime for row in kept.values() for r in row.requires):
                log(
                    f"note: no installed model needs {runtime} {kept[runtime].version} any more "
                    f"(tfaot-dist remove {runtime} --area {area} takes it out)"
                )
    return out


def _removal_targets(requirements: list[str], state: dict[str, InstalledRow], area: Path) -> list[str]:
    targets: list[str] = []
    for text in requirements:
        package, specifier = parse_requirement(text)
        row = state.get(package)
        if row is None or not specifier.contains(row.version, prereleases=True):
            have = ", ".join(f"{n} {r.version}" for n, r in sorted(state.items())) or "nothing"
            raise InvalidInput(f"{text!r}: not installed in {area} (installed: {have})")
        if package not in targets:
            targets.append(package)
    for name in targets:
        if state[name].kind == "runtime":
            users = [
                f"{n} {r.version}"
                for n, r in sorted(state.items())
                if n not in targets and any(q.name == name for q in r.requires)
            ]
            if users:
                raise InvalidInput(
                    f"{name} {state[name].version} is needed by {', '.join(users)}: remove "
                    f"{'it' if len(users) == 1 else 'them'} too, or keep the runtime"
                )
    return targets


@contextmanager
def _undone_if_refused(root: Path) -> Iterator[None]:
    """A setup refused in an area it created leaves no trace of it (the lock file, empty directories)."""
    created = not os.path.lexists(root)
    try:
        yield
    except BaseException:
        if created and root.is_dir() and not root.is_symlink():
            leftovers = [p for p in root.rglob("*") if not p.is_dir() and p.name != LOCK]
            if not leftovers:
                shutil.rmtree(root, ignore_errors=True)
        raise


def _register(
    scram: str, writer: AreaWriter, state: dict[str, InstalledRow], names: list[str], report: Report
) -> None:
    """`scram setup` each tool file of names, recording each package in installed.json as scram
    takes it (so that a setup killed or refused half-way, or one run where scram was missing, is
    completed by the next). Only our own
    packages' tool files, each under its package's name, are ever given to scram."""
    root = writer.root
    for name in names:
        for tool in state[name].tool_files:
            if tool != f"scram.d/{name}.xml" or writer.kind(tool) != "file":
                continue
            _scram_setup(scram, root.parent, root / tool)
            report.scram.append(str(root / tool))
        state[name] = dataclasses.replace(state[name], scram=True)
        _write_installed(
            writer, state
        )  # each as scram takes it: a refusal of the next leaves this one recorded


def _repair(writer: AreaWriter, state: dict[str, InstalledRow], scram: str | None, report: Report) -> None:
    """Bring the area back to what installed.json says after a setup that was killed half-way.

    Called under the area's lock, so no temporary file belongs to a live process: they go,
    with package directories and area files of versions that are not installed, and the
    tool files and forwarders of installed ones are written again where they differ. With
    scram, installed packages whose tool files it has not taken yet are registered. Every
    step goes through the writer: a link in the area stops it with one line, never followed.
    """
    _remove_temporaries(writer)
    for name, kind in writer.entries():
        if kind not in ("dir", "link") or not names.PACKAGE_NAME.fullmatch(name):
            continue
        row = state.get(name)
        listed = row.path if row else None
        for version, _ in writer.entries(name):
            if f"{name}/{version}" != listed:
                writer.remove(f"{name}/{version}")
        writer.remove_if_empty(name)
    tools = {tool for row in state.values() for tool in row.tool_files}
    for name, _ in writer.entries("scram.d"):
        if name.endswith(".xml") and f"scram.d/{name}" not in tools:
            writer.remove(f"scram.d/{name}")
    for name, _ in writer.entries("lib/cmake"):
        if name not in state:
            writer.remove(f"lib/cmake/{name}")
    for name, _ in writer.entries("lib/pkgconfig"):
        if name.endswith(".pc") and name.removesuffix(".pc") not in state:
            writer.remove(f"lib/pkgconfig/{name}")
    for _, row in sorted(state.items()):
        manifest = _installed_manifest(writer, row.path)
        if manifest is None:
            continue  # damaged by hand: left for the user to see, not rewritten
        _place_area_files(writer, manifest, row.path, row, repairing=True)
    if state:
        writer.write_if_changed("env.sh", env_script(environment(writer.root, state)))
    if scram:
        _register(
            scram, writer, state, [name for name, row in sorted(state.items()) if not row.scram], report
        )


def _remove_temporaries(writer: AreaWriter) -> None:
    """What writes killed half-way left: the writer's .NAME.RANDOM.tmp files and staged directories."""
    places = [""] + [name for name, kind in writer.entries() if kind == "dir"]
    places += [f"lib/{name}" for name, kind in writer.entries("lib") if kind == "dir"]
    places += [f"lib/cmake/{name}" for name, kind in writer.entries("lib/cmake") if kind == "dir"]
    for place in places:
        for name, _ in writer.entries(place):
            if TEMP.fullmatch(name):
                writer.remove(f"{place}/{name}" if place else name)


def _installed_manifest(writer: AreaWriter, rel: str) -> Manifest | None:
    try:
        data = writer.read(f"{rel}/{pkg.MANIFEST}")
        if data is None:
            return None
        return Manifest.from_json(
            load_json(data, f"{writer.root / rel}/{pkg.MANIFEST}"), str(writer.root / rel)
        )
    except InvalidInput:
        return None


def _runtimes_for(model: ChannelPackage, channel: Channel) -> list[ChannelPackage]:
    out = []
    for req in model.requires:
        found = channel.index.exact(req.name, req.version)
        if found is None:
            raise SourceUnavailable(
                f"{channel.location}: {model.name} {model.version} requires {req.name} "
                f"{req.version}, which the channel does not have"
            )
        out.append(found)
    return out


def _check_runtimes(state: dict[str, InstalledRow], wanted: list[ChannelPackage]) -> None:
    """One runtime per area: every model, installed or coming, must need the same one."""
    needs: dict[Version, tuple[str, list[str]]] = {}  # by value: the version as first spelled, who
    incoming = {p.name: p for p in wanted}
    for name, row in state.items():
        if name not in incoming:
            for r in row.requires:
                needs.setdefault(Version(r.version), (r.version, []))[1].append(f"{name} {row.version}")
    for p in wanted:
        for r in p.requires:
            needs.setdefault(Version(r.version), (r.version, []))[1].append(f"{p.name} {p.version}")
    runtime = incoming.get(RUNTIME)
    if runtime is not None:
        needs.setdefault(Version(runtime.version), (runtime.version, []))
    if len(needs) > 1:
        parts = [f"{RUNTIME} {v} ({', '.join(who) or 'asked for'})" for _, (v, who) in sorted(needs.items())]
        raise InvalidInput(f"one area holds one runtime, these would need several: {'; '.join(parts)}")


EXTRACT_MARGIN = 1 << 20  # bytes over what a package's manifest declares


def extracted_bound(archive: VerifiedArchive) -> int:
    """The most bytes extracting archive may write: what its manifest declares (every file and the
    manifest itself) and a small margin, so that a small download cannot fill a user's disk (an
    archive repeating a listed name with other contents passes the read-through, not this)."""
    declared = sum(f.size for f in archive.manifest.files.values()) + len(archive.manifest_bytes)
    return declared + EXTRACT_MARGIN


def _install_tree(writer: AreaWriter, archive: VerifiedArchive, rel: str) -> None:
    """Extract in a staged directory of the area, check every file against the manifest, add the
    build-system files, rename into place."""
    staged_rel, staged = writer.stage()
    placed = False
    try:
        top = f"{archive.name}-{archive.version}"
        extract(
            archive.path,
            staged / "x",
            f"{archive.name} {archive.version}",
            kind=PACKAGE,
            max_bytes=extracted_bound(archive),
        )
        tree = staged / "x" / top
        pkg.check_files(tree, archive.manifest)
        for file_rel, text in buildsys_files(archive.manifest).items():
            write_atomic(tree / file_rel, text)
        writer.place_dir(f"{staged_rel}/x/{top}", rel)
        placed = True
    finally:
        writer.remove(staged_rel)
        if not placed:
            writer.remove_if_empty(rel.split("/")[0])  # a refused package leaves no empty PACKAGE/ directory


def buildsys_files(manifest: Manifest) -> dict[str, str]:
    """CMake config and pkg-config file of a package (buildsys.py), unless the package ships them."""
    name = manifest.package
    if manifest.kind == "runtime":
        files = {
            buildsys.cmake_config_path(name): buildsys.render_runtime_cmake_config(manifest),
            buildsys.pkgconfig_path(name): buildsys.render_runtime_pkgconfig(manifest),
        }
    else:
        files = {
            buildsys.cmake_config_path(name): buildsys.render_cmake_config(manifest),
            buildsys.cmake_version_path(name): buildsys.render_cmake_version(manifest),
            buildsys.pkgconfig_path(name): buildsys.render_pkgconfig(manifest),
        }
    return {rel: text for rel, text in files.items() if rel not in manifest.files}


def _place_area_files(
    writer: AreaWriter, manifest: Manifest, rel: str, previous: InstalledRow | None, repairing: bool = False
) -> list[str]:
    """The relocated tool file, the CMake forwarder and the area's .pc; returns the tool files (relative).

    Only under the package's own name, and its tool file only once it passed the conventions
    (repairing: a package installed before the rule whose tool file does not pass gets none)."""
    name, version = manifest.package, manifest.version
    tree = writer.root / rel
    tools = []
    tool_rel = ownership.tool_file(name)
    text = writer.read(f"{rel}/{tool_rel}", MAX_TOOL_FILE)
    if text is not None:
        try:
            ownership.check_tool(manifest, tool_rel, text, str(tree))
        except IntegrityError:
            if not repairing:
                raise
            text = None
    if text is not None:
        writer.write_if_changed(f"scram.d/{name}.xml", text.decode().replace(TOOL_ROOT, str(tree)))
        tools.append(f"scram.d/{name}.xml")
    for old in previous.tool_files if previous else ():
        if old not in tools:
            writer.remove(old)

    cmake = buildsys.cmake_config_path(name)
    writer.write_if_changed(
        cmake,
        f"# {name} {version}, installed by tfaot-dist setup: the package's own config, "
        f'relative to this file.\ninclude("${{CMAKE_CURRENT_LIST_DIR}}/../../../{rel}/'
        f'{buildsys.cmake_config_path(name)}")\n',
    )
    writer.write_if_changed(buildsys.cmake_version_path(name), buildsys.render_cmake_version(manifest))
    pc = writer.read(f"{rel}/{buildsys.pkgconfig_path(name)}", MAX_TOOL_FILE)
    here = "prefix=${pcfiledir}/../.."
    lines = pc.decode("utf-8", "replace").splitlines() if pc is not None else []
    if here in lines:
        # Same file, its prefix pointing from AREA/tfaot/lib/pkgconfig to the package directory.
        writer.write_if_changed(
            buildsys.pkgconfig_path(name),
            "\n".join(f"{here}/{rel}" if line == here else line for line in lines) + "\n",
        )
    return tools


def _newer(a: str, b: str) -> bool:
    return Version(a) > Version(b)


def _same(a: str, b: str) -> bool:
    """One version, however spelled (1.0 and 1.0.0)."""
    return Version(a) == Version(b)


def _scram_setup(scram: str, area: Path, tool: Path) -> None:
    process.run([scram, "setup", tool], what=f"scram setup {tool}", error=ScramFailed, cwd=area)


def _scram_tool_remove(scram: str, area: Path, name: str) -> None:
    """SCRAM's `scram tool remove NAME`: the area's configuration forgets the tool (names are ours, checked)."""
    if not names.PACKAGE_NAME.fullmatch(name):
        raise InvalidInput(f"installed.json: invalid package name {shown(name)}")
    process.run(
        [scram, "tool", "remove", name], what=f"scram tool remove {name}", error=ScramFailed, cwd=area
    )


# ---------------------------------------------------------------- environment


def environment(root: Path, state: dict[str, InstalledRow]) -> dict[str, str]:
    """What a build outside scram needs: one prefix for CMake and pkg-config, include and lib dirs."""
    if not state:
        return {}
    # Models by name, then the runtime: the same lines whatever order the packages came in.
    trees = [
        root / row.path for _, row in sorted(state.items(), key=lambda kv: (kv[1].kind == "runtime", kv[0]))
    ]
    return {
        "CMAKE_PREFIX_PATH": str(root),
        "PKG_CONFIG_PATH": str(root / "lib" / "pkgconfig"),
        "CPATH": os.pathsep.join(str(t / "include") for t in trees),
        "LIBRARY_PATH": os.pathsep.join(str(t / "lib") for t in trees),
    }


def export_lines(env: dict[str, str]) -> list[str]:
    """`export NAME="VALUE${NAME:+:$NAME}"`: prepended to what is set already (values are names.AREA_PATH checked)."""
    return [f'export {k}="{v}${{{k}:+:${k}}}"' for k, v in env.items()]


def env_script(env: dict[str, str]) -> str:
    lines = [
        "# The tfaot packages of this area, for builds without scram (written by tfaot-dist setup).",
        "# Use: source THIS_FILE",
        *export_lines(env),
    ]
    return "\n".join(lines) + "\n"
