"""From a registry entry (or a local AOT config) to a verified package.

    build_key(entry)  digest of everything that changes the bytes (build_key.py); no network, no TensorFlow
    build_entry()     reuse the package with that key, or fetch, compile and assemble it
    compile_config()  the same for a local aot_config.yaml, without a registry

Finished packages are cached under CACHE/builds/<key>/ and copied into the
output directory; both moves are atomic renames.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tfaot_dist import assembly, compile_answers, documents, harness, limits, names, onnx_source
from tfaot_dist import package as pkg
from tfaot_dist.build_key import build_key
from tfaot_dist.cache import ensure_entry, staging
from tfaot_dist.channels.channel import verify_archive
from tfaot_dist.check import check_saved_model_files
from tfaot_dist.config import AotConfig, load_aot_config, load_source_config
from tfaot_dist.cxx import pch, runtime_package
from tfaot_dist.cxx.installed_runtime import KIND as RELEASE_KIND
from tfaot_dist.cxx.runtime_parts import CompiledModel
from tfaot_dist.cxx.xla_runtime import XlaRuntime, runtime_parts_for
from tfaot_dist.documents import CompileAnswer, CompileRequest
from tfaot_dist.errors import CompileFailed, IntegrityError
from tfaot_dist.registry import ModelEntry
from tfaot_dist.session import Session, Tools
from tfaot_dist.sources import fetch_source
from tfaot_dist.util.fs import (
    copy_atomic,
    crash_point,
    file_lock,
    remove_stale_siblings,
    replace_dir,
    sha256_file,
    temp_sibling,
    tree_digest,
)

# Sizes checked against TensorFlow beyond the compiled ones: odd sizes need stitching and padding.
EXTRA_REFERENCE_SIZES = 2


@dataclass(frozen=True)
class BuildResult:
    name: str
    package: pkg.Package
    status: pkg.Status
    key: str


def reference_sizes(batch_sizes: Sequence[int]) -> list[int]:
    """The compiled sizes plus two that are not: 3 and one past twice the largest when possible."""
    candidates = [3, 2 * max(batch_sizes) - 1, *range(5, 10**6, 2)]
    extra = [n for n in dict.fromkeys(candidates) if n not in batch_sizes][:EXTRA_REFERENCE_SIZES]
    return sorted(set(batch_sizes) | set(extra))


def build_entry(entry: ModelEntry, session: Session, dist: Path) -> BuildResult:
    """session.offline: use the cache only (sources, toolchain); what is missing is a SourceUnavailable error."""
    cache, offline = session.cache.root, session.offline
    key = build_key(entry, session.defaults)
    dest = dist / pkg.dir_name(entry.package, entry.version)
    current = _current(dest, key)
    if current:
        return BuildResult(entry.name, current, "up to date", key)

    _refuse_other_build(
        dest, key, entry.package, entry.version
    )  # before any work: that version may be published already
    cached_dir = session.cache.builds / key
    # Fetched before the lock is taken: a source that cannot be had leaves the build cache as it was.
    src = None if _existing(cached_dir / dest.name, key) else fetch_source(entry.source, cache, offline)
    tools = session.resolve()
    if src is not None and offline:
        tools.runtime  # noqa: B018 - what is missing offline is named before the build cache is touched
    built = False

    def build(staged: Path) -> None:
        nonlocal built
        built = True
        tree = src or fetch_source(entry.source, cache, offline)
        config = load_source_config(tree, entry.aot_config).with_overrides(entry.overrides)
        config = onnx_source.converted(config, session)
        source = {**entry.source.as_dict(), "url": entry.source.url, "aot_config": entry.aot_config}
        _compile(config, Target(entry.package, entry.version, source, key), tools, staged)

    # No marker: the package's manifest names its build key; a failed build's log is kept.
    ensure_entry(
        cached_dir,
        build,
        marker=None,
        is_complete=lambda d: _existing(d / dest.name, key) is not None,
        lock=session.cache.build_lock(key),
        keep_failed=True,
    )
    status: pkg.Status = "built" if built else "cached"
    found = _existing(cached_dir / dest.name, key)
    if found is None:
        raise IntegrityError(f"{cached_dir}: the build left no package {dest.name} of build key {key}")
    if not built:
        _check_cached(found)
    package = _publish_copy(found, dest, key)
    return BuildResult(entry.name, package, status, key)


def compile_config(
    config_path: Path,
    output_dir: Path,
    session: Session,
    name: str | None = None,
    version: str | None = None,
    batch_sizes: tuple[int, ...] | None = None,
    toolchain_python: Path | None = None,
    runtime_dir: Path | None = None,
    cpu_levels: tuple[str, ...] | None = None,
) -> pkg.Package:
    """`tfaot-dist compile`: a package from a local AOT config, no registry or git involved.

    name (the package is tfaot-model-NAME), version, batch_sizes and cpu_levels default to the
    config's (name: model.name in lower case with '-' for '_'); cpu_levels clears target_cpu.
    toolchain_python, runtime_dir: an existing Python and an installed runtime (Session.resolve).
    """
    if name is not None:
        names.model_name(name, "--name")
    if version is not None:
        names.version(version, "--version")
    tools = session.resolve(toolchain_python, runtime_dir)
    tools.check_offline()
    config = onnx_source.converted(load_aot_config(config_path), session)
    if batch_sizes:
        config = config.with_overrides({"batch_sizes": batch_sizes})
    if cpu_levels:
        config = config.with_overrides({"cpu_levels": cpu_levels, "target_cpu": ""})
    package = f"tfaot-model-{name or config.name.lower().replace('_', '-')}"
    if not version and config.version != config.model_version:
        session.log(
            f"note: model.version {config.model_version!r} is not a PEP 440 version; "
            f"the package version is {config.version} (--version sets another)"
        )
    version = version or config.version
    source = {"aot_config": config_path.name, "saved_model_sha256": _model_digest(config)}
    dest = output_dir / pkg.dir_name(package, version)
    # Staged under another name than dest's: _publish_copy clears dest's temporaries.
    work = output_dir / f"{dest.name}-compiling"
    with file_lock(session.cache.output_lock(work)):
        remove_stale_siblings(work)
        with staging(work, keep_failed=True) as staged:
            _compile(config, Target(package, version, source, None), tools, staged)
            built = _publish_copy(_load(staged / dest.name), dest, None)
            shutil.rmtree(staged)
    return built


@dataclass(frozen=True)
class Target:
    """The package a compile makes: its name and version, the manifest's source, and the build key
    (None for `compile`, which has no registry entry)."""

    package: str
    version: str
    source: dict[str, str]
    key: str | None


def _compile(config: AotConfig, target: Target, tools: Tools, out: Path) -> None:
    """Compile config into out/<package>-<version>/ and its .tar.gz: request, compile, assemble, verify.

    The runtime is resolved first, so the manifest (and the .pc file) name the exact runtime
    from the start: the manifest is assembled once, verified, and written once.
    """
    session = tools.session
    defaults = session.defaults
    config = config.with_target_defaults(defaults.target_triple, defaults.target_cpu, defaults.cpu_levels)
    runtime = tools.runtime
    check_saved_model_files(config.saved_model)
    work = out / "work"
    for warning in config.warnings:
        session.log(f"warning: {warning}")
    request = _request(config, work)
    answer = _run_compile(request, config, target, tools, work)
    root = out / pkg.dir_name(target.package, target.version)
    manifest = _assemble(config, target, tools, answer, work, root)
    manifest = onnx_source.verified_against_ort(config, root, manifest, tools, work)
    _verify(root, manifest, runtime, work, session, config.tolerance)
    pkg.write_archive(root, out / f"{root.name}.tar.gz")
    shutil.rmtree(work)


def _request(config: AotConfig, work: Path) -> CompileRequest:
    """What the TensorFlow worker is asked: every batch size (and CPU level), and reference outputs
    at the compiled sizes and two more."""
    comp = config.compilation
    compiled = work / "compiled"
    compiled.mkdir(parents=True)
    return CompileRequest(
        saved_model=str(config.saved_model),
        serving_key=config.serving_key,
        batch_sizes=comp.batch_sizes,
        namespace=comp.namespace,
        class_name=config.name,
        output_dir=str(compiled),
        target_triple=comp.target_triple,
        target_cpu=comp.target_cpu,
        reference_dir=str(work / "reference"),
        reference_sizes=tuple(reference_sizes(comp.batch_sizes)),
        cpu_levels=comp.cpu_levels or (),
        activation_formulas=comp.activation_formulas,
        max_row_elements=limits.max_row_elements(),
        max_batch_bytes=limits.max_batch_bytes(),
    )


def _run_compile(
    request: CompileRequest, config: AotConfig, target: Target, tools: Tools, work: Path
) -> CompileAnswer:
    """Run the worker in the toolchain (or take its kept answer: compile_answers.py); its TensorFlow
    must be the runtime's."""
    comp = config.compilation
    levels = f" and CPU levels {list(comp.cpu_levels)}" if comp.cpu_levels else ""
    tools.session.log(
        f"compiling {target.package} {target.version} for batch sizes {list(comp.batch_sizes)}{levels}"
    )
    answer = CompileAnswer.from_json(
        compile_answers.compile_answer(
            tools.session.cache,
            request,
            tools.toolchain,
            work,
            comp.tf_xla_flags,
            comp.xla_flags,
            tools.session.log,
        ),
        "TensorFlow worker answer",
    )
    if answer.tensorflow_version != tools.runtime.tensorflow_version:
        raise CompileFailed(
            f"the model was compiled with TensorFlow {answer.tensorflow_version}, "
            f"the XLA runtime was built from TensorFlow {tools.runtime.tensorflow_version}"
        )
    return answer


def _assemble(
    config: AotConfig, target: Target, tools: Tools, answer: CompileAnswer, work: Path, root: Path
) -> documents.ModelManifest:
    """The package directory at root and its manifest (not written yet: verification goes in first)."""
    comp, runtime, log = config.compilation, tools.runtime, tools.session.log
    compiled, reference = work / "compiled", work / "reference"
    tf_version = answer.tensorflow_version
    if tools.python:  # recorded without its path: manifests hold no paths of the build machine
        used = documents.ToolchainRecord(
            tensorflow_version=tf_version, environment="existing", installed=tools.toolchain.installed
        )
    else:
        used = documents.ToolchainRecord(
            tensorflow_version=tf_version, requirements=tools.session.defaults.requirements
        )
    if tools.runtime_dir:
        used = replace(used, runtime=runtime_origin(runtime))
    model = CompiledModel(
        objects=[compiled / obj for files in answer.files.values() for obj in files.objects],
        headers=[compiled / files.header for files in answer.files.values()],
        namespace=comp.namespace,
        work=work / "runtime-calls",
    )
    parts = runtime_parts_for(
        runtime,
        model,
        tools.toolchain.python,
        tools.session.cache.root,
        log,
        path_environment=tools.toolchain.path_environment,
        probe_flags=lambda: pch.probe_flags(runtime, tools.session.cache.root, log),
    )
    if parts:
        log(f"runtime parts the model calls: {', '.join(part.name for part in parts)}")
    return assembly.assemble(
        compiled,
        reference,
        answer,
        root,
        package=target.package,
        version=target.version,
        build_key=target.key,
        source={**target.source, **dict(config.onnx_record)},
        digests={"aot_config": sha256_file(config.path), _model_kind(config): _model_digest(config)},
        model=documents.ModelInfo(
            author=config.author, description=config.description, serving_key=config.serving_key
        ),
        toolchain=used,
        compilation=documents.Compilation(
            batch_sizes=comp.batch_sizes,
            target_triple=comp.target_triple,
            target_cpu=comp.target_cpu,
            namespace=comp.namespace,
            class_name=config.name,
            tf_xla_flags=comp.tf_xla_flags,
            xla_flags=comp.xla_flags,
            batch_rules=comp.batch_rules,
            cpu_levels=comp.cpu_levels or (),
            tfcompile_xla_flags=answer.xla_flags,
            tfcompile_target_features=answer.target_features,
            activation_formulas=comp.activation_formulas,
            rewritten_activations=answer.rewritten_activations,
            rewritten_ops=answer.rewritten_ops,
        ),
        requires=(runtime_package.requirement(runtime),),
        runtime_parts=parts,
    )


def _model_kind(config: AotConfig) -> str:
    return "onnx" if config.onnx else "saved_model"


def _model_digest(config: AotConfig) -> str:
    """The source model's digest: an ONNX file's sha256 (its conversion is a function of it), or the
    SavedModel's tree digest."""
    return sha256_file(config.onnx) if config.onnx else tree_digest(config.saved_model)


def _verify(
    root: Path,
    manifest: documents.ModelManifest,
    runtime: XlaRuntime,
    work: Path,
    session: Session,
    tolerance: float,
) -> None:
    """Every output against TensorFlow's within the model's tolerance (harness.py); the manifest is
    written with the result."""
    verification = harness.verify_package(
        root, manifest, runtime, work / "verify", session.cache.root, tolerance
    )
    pkg.write_manifest(root, replace(manifest, verification=verification).to_json())
    session.log(
        f"verified {manifest.package} against TensorFlow at batch sizes {list(verification.batch_sizes)}"
    )
    for level, check in (verification.cpu_levels or {}).items():
        session.log(
            f"  CPU level {level}: " + ("verified" if check.verified else f"not verified: {check.note}")
        )


def runtime_origin(runtime: XlaRuntime) -> documents.RuntimeOrigin:
    """How the manifest records an installed runtime (the release's: its TensorFlow and library digest)."""
    if runtime.kind == RELEASE_KIND:
        return documents.RuntimeOrigin(
            origin="installed",
            key=runtime.key,
            kind=RELEASE_KIND,
            tensorflow_version=runtime.tensorflow_version,
            library_sha256=runtime.library_sha256,
        )
    return documents.RuntimeOrigin(origin="installed", key=runtime.key)


def ensure_runtime_packages(
    packages: list[pkg.Package], session: Session, dist: Path
) -> list[tuple[pkg.Package, pkg.Status]]:
    """Place in dist the runtime package each model package requires.

    A runtime package already in dist is not looked at twice; only a missing
    one needs the toolchain and the (cached) runtime build.
    """
    out: list[tuple[pkg.Package, pkg.Status]] = []
    wanted = {
        req.version for p in packages for req in p.model_manifest.requires if req.name == runtime_package.NAME
    }
    for version in sorted(wanted):
        root = dist / pkg.dir_name(runtime_package.NAME, version)
        archive = root.parent / f"{root.name}.tar.gz"
        if (root / pkg.MANIFEST).is_file() and archive.is_file():
            out.append((_load(root), "up to date"))
            continue
        runtime = session.resolve().runtime
        if runtime_package.runtime_version(runtime) != version:
            raise CompileFailed(
                f"packages require {runtime_package.NAME} {version}, but this machine builds "
                f"{runtime_package.runtime_version(runtime)}; rebuild them here"
            )
        out.append(runtime_package.ensure_runtime_package(runtime, dist))
    return out


def _load(root: Path) -> pkg.Package:
    manifest = pkg.read_manifest(root)
    return pkg.Package(
        manifest.package, manifest.version, root, root.parent / f"{root.name}.tar.gz", manifest
    )


def _existing(root: Path, key: str) -> pkg.Package | None:
    """The package at root if it is complete and was built with key."""
    archive = root.parent / f"{root.name}.tar.gz"
    if not (root / pkg.MANIFEST).is_file() or not archive.is_file():
        return None
    try:
        found = _load(root)
        built_with = found.model_manifest.build_key
    except Exception:  # unreadable, or written by another version of tfaot-dist: built again
        return None
    return found if built_with == key else None


def _check_cached(found: pkg.Package) -> None:
    """A build from the cache, before it is copied: every file against its manifest's digests, and
    its archive the same package (the cache entry's ownership was checked by ensure_entry)."""
    pkg.check_files(found.root, found.manifest)
    archive = verify_archive(found.archive)
    if (archive.name, archive.version) != (found.name, found.version) or archive.manifest != found.manifest:
        raise IntegrityError(f"{found.archive}: not the archive of {found.root}")


def _publish_copy(built: pkg.Package, dest: Path, key: str | None) -> pkg.Package:
    """Copy a finished package directory and archive to dest, each by an atomic rename; returns it.

    key (a registry build): another build of the version already there, directory or archive, is
    refused (_refuse_other_build), so whatever dest holds is this build's, complete or not: the
    archive goes first, the directory last, and a package is current once both are there
    (`_current`). Concurrent builds into one output directory take turns on a lock of the
    directory; the second finds the package current.
    """
    archive = dest.parent / f"{dest.name}.tar.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.parent):
        current = _current(dest, key) if key else None
        if current:
            return current
        if key:
            _refuse_other_build(dest, key, built.name, built.version, built)
        remove_stale_siblings(dest)
        remove_stale_siblings(archive)
        copy_atomic(built.archive, archive)
        crash_point("dist_archive")
        staged = temp_sibling(dest)
        shutil.copytree(built.root, staged / "pkg")
        replace_dir(staged / "pkg", dest)
        shutil.rmtree(staged, ignore_errors=True)
        crash_point("dist_dir")
        return _load(dest)


def _refuse_other_build(
    dest: Path, key: str, package: str, version: str, built: pkg.Package | None = None
) -> None:
    """A registry build never replaces another build of the same package version in the output
    directory: that version may be published already, and a published version never changes.

    Another build: a directory whose manifest names another build key, or an archive whose
    manifest does (or whose bytes differ from built's)."""
    archive = dest.parent / f"{dest.name}.tar.gz"
    other = None
    if dest.exists() and _key_of(dest) != key:
        other = dest
    elif archive.exists():
        if built is not None:
            same = (
                archive.stat().st_size == built.archive.stat().st_size
                and sha256_file(archive) == built.archive_sha256
            )
        else:
            same = _archive_key(archive, dest.name) == key
        other = None if same else archive
    if other is None:
        return
    name = package.removeprefix("tfaot-model-")
    raise IntegrityError(
        f"{other}: holds another build of {package} {version}; a version never changes once "
        f"built: give the entry a new build number (tfaot-dist update {name} --new-build) or "
        "version, or move the old package out of the directory"
    )


def _key_of(root: Path) -> str | None:
    try:
        return _load(root).model_manifest.build_key
    except Exception:  # unreadable: not this build's
        return None


def _archive_key(archive: Path, top: str) -> str | None:
    """The build key in the manifest inside a package archive (None if it cannot be read)."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile(f"{top}/{pkg.MANIFEST}")
            data = json.loads(member.read(pkg.MAX_MANIFEST)) if member else None
    except (OSError, tarfile.TarError, KeyError, ValueError):
        return None
    key = data.get("build_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else None


def _current(dest: Path, key: str) -> pkg.Package | None:
    """The package at dest if it was built with key and both its archive and its directory are
    there. Cheap (build --all checks every package): no other build is ever copied over them
    (_refuse_other_build), the archive is copied before the directory, both by renames."""
    found = _existing(dest, key)
    return found if found is not None and found.archive.is_file() else None
