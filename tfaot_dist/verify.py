"""`verify NAME [--rebuild]`: is the package in the output directory what its entry builds?

Without --rebuild: every file matches the manifest's digests, and the package's
objects, linked with this machine's runtime, reproduce the TensorFlow outputs
it ships (the check every build makes, run again). With --rebuild:
build the entry again from nothing but the shared toolchain and runtime (a
fresh temporary cache, so the source is fetched again, and a fresh output
directory) and compare the two packages file by file and archive to archive.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import builder, harness
from tfaot_dist import package as pkg
from tfaot_dist.cache import SHARED
from tfaot_dist.documents import Verification
from tfaot_dist.errors import InvalidInput, VerificationFailed
from tfaot_dist.registry import ModelEntry
from tfaot_dist.session import Session
from tfaot_dist.util.fs import sha256_file, tree_files


def check_installed(entry: ModelEntry, dist: Path) -> pkg.Package:
    root = dist / pkg.dir_name(entry.package, entry.version)
    if not (root / pkg.MANIFEST).is_file():
        raise InvalidInput(f"{entry.name}: no package {root.name} in {dist} (run build first)")
    manifest = pkg.read_manifest(root)
    pkg.check_files(root, manifest)
    return pkg.Package(entry.package, entry.version, root, root.parent / f"{root.name}.tar.gz", manifest)


def check_numbers(package: pkg.Package, session: Session) -> Verification:
    """Link the package's objects into the verification harness again and compare every output
    with the reference TensorFlow outputs in the package, within the tolerance its build used (the
    manifest's verification records it); VerificationFailed names the first miss."""
    runtime = session.resolve().runtime
    manifest = package.model_manifest
    tolerance = manifest.verification.tolerance if manifest.verification else harness.TOLERANCE
    with tempfile.TemporaryDirectory(prefix="tfaot-verify-") as tmp_dir:
        return harness.verify_package(
            package.root, manifest, runtime, Path(tmp_dir) / "work", session.cache.root, tolerance
        )


@dataclass(frozen=True)
class Rebuilt:
    """A package built again bit-identical: its archive digest and how many files were compared."""

    package: str
    version: str
    archive_sha256: str
    files: int


def rebuild_and_compare(entry: ModelEntry, session: Session, dist: Path) -> Rebuilt:
    existing = check_installed(entry, dist)
    with tempfile.TemporaryDirectory(prefix="tfaot-rebuild-") as tmp_dir:
        tmp = Path(tmp_dir)
        # A fresh cache sharing the expensive entries keyed by their contents, but not TensorFlow's
        # compile answers nor the SavedModels converted from ONNX: the rebuild converts and compiles
        # again, that is what it checks.
        shared = [name for name in SHARED if name not in ("compiles", "onnx")]
        fresh_cache = session.cache.share_into(tmp / "cache", shared).root
        rebuilt = builder.build_entry(entry, session.with_cache(fresh_cache), tmp / "dist").package
        difference = first_difference(existing.root, rebuilt.root)
        if difference:
            raise VerificationFailed(f"{entry.package} {entry.version} is not reproducible: {difference}")
        a, b = existing.archive_sha256, rebuilt.archive_sha256
        if a != b:
            raise VerificationFailed(
                f"{entry.package} {entry.version}: archives differ ({a} vs {b}) although every file is equal"
            )
        shutil.rmtree(tmp / "dist")
    return Rebuilt(entry.package, entry.version, a, len(existing.model_manifest.files) + 1)


def first_difference(a: Path, b: Path) -> str | None:
    """A one-line description of the first file that differs between two trees, or None."""
    files_a, files_b = tree_files(a), tree_files(b)
    for rel in sorted(set(files_a) ^ set(files_b)):
        return f"{rel} exists only in {'the original' if rel in files_a else 'the rebuild'}"
    for rel in files_a:
        if sha256_file(a / rel) != sha256_file(b / rel):
            return f"{rel} differs{_json_hint(a / rel, b / rel)}"
    return None


def _json_hint(a: Path, b: Path) -> str:
    """For JSON files, name the first differing key."""
    if a.suffix != ".json":
        return ""
    try:
        left, right = json.loads(a.read_text()), json.loads(b.read_text())
    except ValueError:
        return ""
    keys = sorted(k for k in set(left) | set(right) if left.get(k) != right.get(k))
    return f" (key {keys[0]!r})" if keys else ""
