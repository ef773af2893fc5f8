"""A model package laid out from the TensorFlow worker's output (package.py: the layout it follows).

The objects and headers of each batch size and level, the weights shared once
(cxx/weight_sharing.py), the archive with the runtime parts the objects call,
model.h, the consumer files (scram tool file, CMake config, pkg-config file),
TensorFlow's reference numbers and the bill of materials; the manifest is
returned, not yet verified and not written. Only builds import this module: its
C++ and template modules are not for commands that read packages.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tfaot_dist import __version__, names
from tfaot_dist.cxx import INTERFACE_INCLUDE, build_kit, buildsys, scram_tool, weight_sharing
from tfaot_dist.cxx.runtime_parts import BuiltPart
from tfaot_dist.documents import (
    Compilation,
    CompileAnswer,
    FileDigest,
    Manifest,
    ModelInfo,
    ModelManifest,
    Reference,
    Requirement,
    SharedConstants,
    Signature,
    ToolchainRecord,
    ToolInfo,
)
from tfaot_dist.errors import CompileFailed
from tfaot_dist.util.fs import sha256_file, tree_files
from tfaot_dist.util.render import render_model_header

# Templates whose output is part of a model package (and so of its build key).
TEMPLATES = (
    "model.h.j2",
    "scram_tool.xml.j2",
    "verify_harness.cc.j2",
    "cmake_config.cmake.j2",
    "cmake_config_version.cmake.j2",
    "pkgconfig.pc.j2",
)

ORDER_NOTE = "arguments and results are ordered by signature key name (Python str sort)"


def assemble(
    compiled: Path,
    reference: Path,
    answer: CompileAnswer,
    root: Path,
    *,
    package: str,
    version: str,
    build_key: str | None,
    source: dict[str, str],
    digests: dict[str, str],
    model: ModelInfo,
    toolchain: ToolchainRecord,
    compilation: Compilation,
    requires: tuple[Requirement, ...],
    runtime_parts: Sequence[BuiltPart] = (),
) -> ModelManifest:
    """Lay out a package in root from the worker's output; returns its manifest, not yet verified
    (verification None) and not written. runtime_parts: the XLA runtime parts the objects call, which
    go into the package's archive with them."""
    include = root / "include" / package
    lib = root / "lib"
    include.mkdir(parents=True)
    lib.mkdir()
    objects = _copy_compiled(compiled, answer, compilation, include, lib)
    # Weights once: identical constant buffers of several batch sizes and levels are defined by one object.
    shared = weight_sharing.share_constants(
        include,
        lib,
        compilation.class_name,
        list(compilation.batch_sizes),
        other_levels=compilation.cpu_levels[1:],
    )
    build_kit.archive(
        lib / f"lib{package}.a",
        [lib / obj for obj in objects] + [obj for part in runtime_parts for obj in part.objects],
        CompileFailed,
    )
    signature = answer.signature
    _write_model_header(include / "model.h", package, compilation, signature)
    _write_consumer_files(root, package, version, source, model, requires)
    if reference.is_dir():
        shutil.copytree(reference, root / "share" / package / "reference")
    _write_sbom(root, package, version, build_key, source, digests, toolchain, requires, runtime_parts)
    return ModelManifest(
        package=package,
        name=package.removeprefix("tfaot-model-"),
        version=version,
        build_key=build_key,
        source=source,
        digests=digests,
        model=model,
        toolchain=toolchain,
        compilation=compilation,
        requires=requires,
        signature=replace(signature, order=ORDER_NOTE),
        reference=Reference(dir=f"share/{package}/reference", cases=answer.reference),
        tool=ToolInfo(name="tfaot-dist", version=__version__),
        constants=SharedConstants.from_json(shared.as_dict(), "constants"),
        files={
            rel: FileDigest(sha256=sha256_file(root / rel), size=(root / rel).stat().st_size)
            for rel in tree_files(root)
        },
        verification=None,
        runtime_parts=tuple(part.name for part in runtime_parts),
    )


def _write_sbom(
    root: Path,
    package: str,
    version: str,
    build_key: str | None,
    source: dict[str, str],
    digests: dict[str, str],
    toolchain: ToolchainRecord,
    requires: tuple[Requirement, ...],
    runtime_parts: Sequence[BuiltPart],
) -> None:
    """The package's bill of materials (trust/sbom.py), a file of the package like the others."""
    from tfaot_dist.trust import sbom  # cyclonedx takes most of a second to import: only when building

    (root / sbom.SBOM).write_text(
        sbom.model_sbom(
            package=package,
            version=version,
            build_key=build_key,
            source=source,
            digests=digests,
            toolchain=toolchain,
            requires=requires,
            runtime_parts=[part.name for part in runtime_parts],
        )
    )


def _copy_compiled(
    compiled: Path, answer: CompileAnswer, compilation: Compilation, include: Path, lib: Path
) -> list[str]:
    """Each batch size's (and level's) header into include, its objects into lib; returns the objects."""
    objects = []
    levels = compilation.cpu_levels
    keys = [str(bs) for bs in compilation.batch_sizes]
    keys += [f"{bs}@{level}" for level in levels[1:] for bs in compilation.batch_sizes]
    for key in keys:
        files = answer.files[key]
        shutil.copyfile(compiled / files.header, include / files.header)
        for obj in files.objects:
            shutil.copyfile(compiled / obj, lib / obj)
            objects.append(obj)
    return objects


def _write_model_header(path: Path, package: str, compilation: Compilation, signature: Signature) -> None:
    path.write_text(
        render_model_header(
            {
                "package": package,
                "namespace": compilation.namespace,
                "class_name": compilation.class_name,
                "batch_sizes": list(compilation.batch_sizes),
                "inputs": [t.to_json() for t in signature.inputs],
                "outputs": [t.to_json() for t in signature.outputs],
                "default_rules": list(compilation.batch_rules),  # tuned rules (tfaot-dist tune)
                "cpu_levels": list(compilation.cpu_levels),
                "target_cpu": compilation.target_cpu or "",
                "tfaot_dist_version": __version__,
            }
        )
    )


def _write_consumer_files(
    root: Path,
    package: str,
    version: str,
    source: dict[str, str],
    model: ModelInfo,
    requires: tuple[Requirement, ...],
) -> None:
    """What builds find the package by: its scram tool file, CMake config and pkg-config file."""
    # Built against a release's tensorflow-xla-runtime: its tool is the one used, and the package
    # carries the interface headers model.h includes, which that runtime does not have; no CMake
    # config (the release has none for that runtime to depend on).
    release = any(r.name == names.RELEASE_RUNTIME_PACKAGE for r in requires)
    if release:
        shutil.copytree(INTERFACE_INCLUDE / "tfaot", root / "include" / "tfaot")
    tool = root / "etc" / "scram.d" / f"{package}.xml"
    tool.parent.mkdir(parents=True)
    tool.write_text(
        scram_tool.render_model_tool(
            package,
            version,
            source.get("url", ""),
            names.RELEASE_RUNTIME_PACKAGE if release else scram_tool.RUNTIME_TOOL,
        )
    )
    # buildsys checks every value it is given: the same fields as in a manifest read from elsewhere.
    facts = Manifest(
        package=package, version=version, files={}, model=model.to_json(), source=source, requires=requires
    )
    build_files = (
        []
        if release
        else [
            (buildsys.cmake_config_path(package), buildsys.render_cmake_config(facts)),
            (buildsys.cmake_version_path(package), buildsys.render_cmake_version(facts)),
        ]
    )
    for rel, text in (*build_files, (buildsys.pkgconfig_path(package), buildsys.render_pkgconfig(facts))):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
