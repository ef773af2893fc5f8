"""Taking models into the registry: everything about an entry (new or updated) is validated before it is written.

add_model()     a new entry, pinned to the commit --ref names
update_model()  re-pin an entry, checked the same way; a changed build of the same version gets
                the next build number (PEP 440 post-release: 1.0.0 -> 1.0.0.post1 -> .post2)
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from packaging.version import Version

from tfaot_dist import names
from tfaot_dist.cache import ensure_entry
from tfaot_dist.check import check_model, describe_signature, op_check
from tfaot_dist.config import AotConfig, Overrides, load_source_config
from tfaot_dist.documents import Signature
from tfaot_dist.errors import InvalidInput
from tfaot_dist.onnx_source import converted
from tfaot_dist.pins import ArchiveSource, GitSource, check_git_url
from tfaot_dist.registry import ModelEntry, Registry
from tfaot_dist.session import Session
from tfaot_dist.sources import (
    SOURCE_COMPLETE,
    ArchiveSources,
    GitSources,
    ResolvedSource,
    fetch_source,
)


def add_model(
    registry: Registry,
    session: Session,
    name: str,
    url: str,
    ref: str,
    aot_config: str,
    version: str | None = None,
    overrides: Overrides | None = None,
) -> ModelEntry:
    """session: its defaults are registry's (cli builds it so)."""
    names.model_name(name, "NAME")
    check_git_url(url, "--source")
    names.git_ref(ref, "--ref")
    names.rel_path(aot_config, "--aot-config")
    if version is not None:
        names.version(version, "--version")
    if registry.entry_path(name).exists():
        raise InvalidInput(
            f"{name}: already registered ({registry.entry_path(name)}); change it with "
            f"`tfaot-dist update {name}`"
        )

    def entry_of(source: GitSource | ArchiveSource, config: AotConfig, signature: Signature) -> ModelEntry:
        return ModelEntry(name, version or config.version, source, aot_config, overrides or {})

    entry = _checked(
        session, lambda sources: _git_pin(sources, url, ref, session), aot_config, overrides or {}, entry_of
    )
    registry.save(entry)
    return entry


@dataclass(frozen=True)
class Update:
    old: ModelEntry
    new: ModelEntry  # old itself when nothing changed
    changes: tuple[tuple[str, str, str], ...]  # (field, old value, new value) in the entry's YAML


def update_model(
    registry: Registry,
    session: Session,
    name: str,
    *,
    url: str | None = None,
    ref: str | None = None,
    aot_config: str | None = None,
    version: str | None = None,
    overrides: Overrides | None = None,
    new_build: bool = False,
) -> Update:
    """Re-pin the entry NAME and check it as add_model does; write it only if it changed.

    ref defaults to the entry's (a branch moves on to its new head), url and aot_config too;
    overrides are merged into the entry's. The version: `version` if given; else the AOT config's
    model.version when it is higher than the entry's; else the entry's, with the next build number
    when the package's inputs changed or new_build asks for one (same inputs built anew, e.g. after
    registry.yaml moved to another TensorFlow). A new build keeps the signature; the same version
    with other inputs, or a lower version, is refused.
    """
    old = registry.entry(name)
    if version is not None:
        names.version(version, "--version")
        _check_version(name, old.version, version, new_build)  # before anything is fetched
    aot_config = names.rel_path(aot_config, "--aot-config") if aot_config is not None else old.aot_config
    merged = {**old.overrides, **(overrides or {})}
    if isinstance(old.source, ArchiveSource):
        if url is not None or ref is not None:
            raise InvalidInput(
                f"{old.path}: source: an archive pinned by its sha256; change source.archive and "
                "source.sha256 there (--source and --ref re-pin git sources)"
            )
        archive = old.source

        def pin(sources: Path) -> tuple[GitSource | ArchiveSource, ResolvedSource]:
            return archive, ArchiveSources(sources).fetch(archive.url, archive.sha256)
    else:
        git_url = check_git_url(url, "--source") if url is not None else old.source.url
        git_ref = names.git_ref(ref, "--ref") if ref is not None else old.source.ref

        def pin(sources: Path) -> tuple[GitSource | ArchiveSource, ResolvedSource]:
            return _git_pin(sources, git_url, git_ref, session)

    def entry_of(source: GitSource | ArchiveSource, config: AotConfig, signature: Signature) -> ModelEntry:
        same_inputs = ModelEntry(name, old.version, source, aot_config, merged)
        changed = same_inputs.as_dict() != old.as_dict()
        if version is not None:
            # Another spelling of the entry's version (1.0 for 1.0.0) is the same version: kept as spelled.
            chosen = old.version if Version(version) == Version(old.version) else version
        elif Version(config.version) > Version(old.version):
            chosen = config.version
        elif changed or new_build:
            chosen = next_build(old.version)
            _same_signature(old, signature, chosen, session)
        else:
            chosen = old.version
        _check_version(name, old.version, chosen, changed or new_build)
        return ModelEntry(name, chosen, source, aot_config, merged)

    asked_for_nothing = version is None and not new_build
    new = _checked(session, pin, aot_config, merged, entry_of, unchanged=old if asked_for_nothing else None)
    changes = _changes(old.as_dict(), new.as_dict())
    if changes:
        new = dataclasses.replace(new, path=registry.save(new))  # the path it was written to
    return Update(old, new if changes else old, tuple(changes))


def _check_version(name: str, old: str, chosen: str, new_inputs: bool) -> None:
    """The version an update chose, against the entry's (compared as values: 1.0 is 1.0.0)."""
    if Version(chosen) < Version(old):
        raise InvalidInput(
            f"--version: {chosen} is lower than the entry's {old} (setup installs the "
            "highest version: a release is never replaced by a lower one)"
        )
    if Version(chosen) == Version(old) and new_inputs:
        raise InvalidInput(
            f"{name}: version {old} would stay while what it is built from changed; "
            f"leave --version out for its next build ({next_build(old)}) or give a "
            "higher version"
        )


def next_build(version: str) -> str:
    """The next build of a version, as a PEP 440 post-release: 1.0 -> 1.0.post1 -> 1.0.post2.

    Post-releases sort after their release and before the next one, so ranges and "newest" pick
    the new build, while `==1.0` still pins the first one exactly.
    """
    parsed = Version(version)
    if parsed.dev is not None or parsed.local is not None:
        raise InvalidInput(
            f"version {version}: a development or local version has no next build; give --version"
        )
    base = version.split(".post")[0]
    return str(Version(f"{base}.post{(parsed.post or 0) + 1}"))


Pin = Callable[[Path], tuple[Union[GitSource, ArchiveSource], ResolvedSource]]


def _git_pin(sources: Path, url: str, ref: str, session: Session) -> tuple[GitSource, ResolvedSource]:
    """The commit ref names at url, fetched into the cache at sources."""
    git_sources = GitSources(sources)
    commit = git_sources.resolve_ref(url, ref)
    session.log(f"{url} {ref} -> {commit}")
    # HEAD is no branch name: record the branch it points at, which fetchers that pull a branch
    # (cmsBuild's git download, the cmsbuild specs) need.
    branch = git_sources.head_branch(url) if ref == "HEAD" else None
    return GitSource(url, ref, commit, branch), git_sources.fetch(url, commit)


def _checked(
    session: Session,
    pin: Pin,
    aot_config: str,
    overrides: Overrides,
    entry_of: Callable[[GitSource | ArchiveSource, AotConfig, Signature], ModelEntry],
    unchanged: ModelEntry | None = None,
) -> ModelEntry:
    """Pin the source, load its AOT config, check the model in TensorFlow, and make the entry.

    Everything is fetched into a scratch cache first: a source that fails validation leaves the
    real cache untouched. unchanged: an entry that is kept as it is, unchecked, when the pin,
    the AOT config path and the overrides are its own.
    """
    with tempfile.TemporaryDirectory(prefix="tfaot-add-") as scratch_dir:
        scratch = Path(scratch_dir)
        source, src = pin(scratch / "cache")
        config = load_source_config(src, aot_config).with_overrides(overrides)
        for warning in config.warnings:
            session.log(f"warning: {warning}")
        if unchanged is not None and (source.as_dict(), aot_config, overrides) == (
            unchanged.source.as_dict(),
            unchanged.aot_config,
            unchanged.overrides,
        ):
            return unchanged
        signature = check_model(config, session, scratch / "check")
        session.log(f"signature: {describe_signature(signature)}")
        entry = entry_of(source, config, signature)
        # Copied, not renamed: the scratch dir may be on another file system.
        tree = session.cache.sources / (
            src.commit if isinstance(source, GitSource) else f"sha256-{source.sha256}"
        )
        ensure_entry(tree, lambda staged: shutil.copytree(src.root, staged / "tree"), marker=SOURCE_COMPLETE)
    return entry


def _same_signature(old: ModelEntry, signature: Signature, build: str, session: Session) -> None:
    """A new build of a version must keep its inputs and outputs: consumers compiled against it."""
    with tempfile.TemporaryDirectory(prefix="tfaot-update-") as work:
        src = fetch_source(old.source, session.cache.root, session.offline)
        config = converted(load_source_config(src, old.aot_config).with_overrides(old.overrides), session)
        # The request its entry was checked with (the same answer, kept in the cache: check_answers.py).
        batch_sizes = config.compilation.batch_sizes
        before = op_check(config.saved_model, config.serving_key, session, Path(work), batch_sizes).signature
    if before != signature:
        raise InvalidInput(
            f"{old.name}: the signature changed ({describe_signature(before)} became "
            f"{describe_signature(signature)}); a new build ({build}) keeps the signature of "
            f"{old.version}: give a higher --version"
        )


def _changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """The fields of two entry documents that differ, as (dotted name, old, new)."""
    out = []
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changes(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append((f"{prefix}{key}", "-" if a is None else str(a), "-" if b is None else str(b)))
    return out
