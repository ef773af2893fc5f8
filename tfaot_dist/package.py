"""The layout of a tfaot-model-NAME package, its manifest and its archive.

    tfaot-model-NAME-VERSION/
      include/tfaot-model-NAME/   model.h and one CLASS_bsN.h per batch size (and CPU level)
      lib/                        CLASS_bsN.o, CLASS_bsN_constants.o, libtfaot-model-NAME.a
                                  (levels above the lowest: CLASS_bsN_x86_64_v3.o, ...);
                                  the archive also holds the XLA runtime parts the objects call
      etc/scram.d/tfaot-model-NAME.xml
      share/tfaot-model-NAME/reference/bsN/{input,output}_I.bin   TensorFlow's numbers
      sbom.cdx.json               the bill of materials (CycloneDX: trust/sbom.py)
      manifest.json               everything above, with the sha256 of every file

The manifest holds no times or paths of the build machine, so that two builds
of the same inputs give the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from tfaot_dist.documents import Manifest, ModelManifest
from tfaot_dist.errors import IntegrityError, InvalidInput
from tfaot_dist.util.fs import reproducible_targz, sha256_file, tree_files, write_atomic

MANIFEST = "manifest.json"
MAX_MANIFEST = 64 << 20  # bytes read of a manifest inside an archive
# Part of the build key: bump it when the same inputs give other package bytes.
# 2: the .pc file Requires the exact runtime the package was verified with (was a version range).
# 3: the archive holds the runtime parts its objects call (cxx/runtime_parts.py).
# 4: a CMake version file; the .pc's Version as pkg-config orders it (consumer_versions.py).
# 5: sbom.cdx.json, the package's bill of materials (trust/sbom.py).
LAYOUT_VERSION = 5
# What a build did with a package: compiled it, copied it from the build cache, or found it in place.
Status = Literal["built", "cached", "up to date"]


@dataclass(frozen=True)
class Package:
    name: str  # tfaot-model-NAME
    version: str
    root: Path  # the package directory
    archive: Path  # the .tar.gz next to it
    manifest: Manifest

    @property
    def archive_sha256(self) -> str:
        return sha256_file(self.archive)

    @cached_property
    def model_manifest(self) -> ModelManifest:
        """The whole manifest of a model package (IntegrityError naming the field if it does not fit)."""
        return model_manifest(read_manifest_json(self.root), self.root / MANIFEST)


def dir_name(package: str, version: str) -> str:
    return f"{package}-{version}"


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    write_atomic(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def read_manifest_json(root: Path) -> dict[str, Any]:
    """The manifest of the package in root as JSON (to read as ModelManifest or RuntimeManifest)."""
    try:
        manifest: dict[str, Any] = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{root / MANIFEST}: unreadable manifest: {exc}") from None
    return manifest


def read_manifest(root: Path) -> Manifest:
    """The fields of the manifest of the package in root that every reader needs, checked."""
    try:
        typed: Manifest = Manifest.from_json(read_manifest_json(root), str(root / MANIFEST))
    except InvalidInput as exc:
        raise IntegrityError(str(exc)) from None
    return typed


def model_manifest(manifest: dict[str, Any], path: Path) -> ModelManifest:
    try:
        typed: ModelManifest = ModelManifest.from_json(manifest, str(path))
    except InvalidInput as exc:
        raise IntegrityError(str(exc)) from None
    return typed


def check_files(root: Path, manifest: Manifest) -> None:
    """Every file listed is present with its digest, and nothing else is there."""
    listed = set(manifest.files)
    present = set(tree_files(root)) - {MANIFEST}
    for rel in sorted(present - listed):
        raise IntegrityError(f"{root / rel}: not listed in the manifest")
    for rel in sorted(listed):
        path = root / rel
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the manifest but missing")
        if sha256_file(path) != manifest.files[rel].sha256:
            raise IntegrityError(f"{path}: sha256 differs from the manifest")


def write_archive(root: Path, archive: Path, top: str | None = None) -> None:
    """The reproducible archive of the package in root, its top directory named top (default: root's name)."""
    write_atomic(archive, reproducible_targz(root, top or root.name))
