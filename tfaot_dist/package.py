"""The layout of a tfaot-model-NAME package, its manifest and its archive.

    tfaot-model-NAME-VERSION/
      include/tfaot-model-NAME/   model.h and one CLASS_bsN.h per batch size
      lib/                        CLASS_bsN.o, CLASS_bsN_constants.o, libtfaot-model-NAME.a
      etc/scram.d/tfaot-model-NAME.xml
      share/tfaot-model-NAME/reference/bsN/{input,output}_I.bin   TensorFlow's numbers
      manifest.json               everything above, with the sha256 of every file

The manifest holds no times or paths of the build machine, so that two builds
of the same inputs give the same bytes.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfaot_dist import __version__, buildsys, constants, cxx_build, scram_tool
from tfaot_dist.errors import CompileFailed, IntegrityError
from tfaot_dist.fsutil import reproducible_targz, sha256_file, tree_files, write_atomic
from tfaot_dist.render import render_model_header

MANIFEST = "manifest.json"
# Templates whose output is part of a model package (and so of its build key).
TEMPLATES = ("model.h.j2", "scram_tool.xml.j2", "verify_harness.cc.j2", "cmake_config.cmake.j2", "pkgconfig.pc.j2")
ORDER_NOTE = "arguments and results are ordered by signature key name (Python str sort)"


@dataclass(frozen=True)
class Package:
    name: str  # tfaot-model-NAME
    version: str
    root: Path  # the package directory
    archive: Path  # the .tar.gz next to it
    manifest: dict[str, Any]

    @property
    def archive_sha256(self) -> str:
        return sha256_file(self.archive)


def dir_name(package: str, version: str) -> str:
    return f"{package}-{version}"


def assemble(compiled: Path, reference: Path, answer: dict[str, Any], meta: dict[str, Any], root: Path) -> dict[str, Any]:
    """Lay out a package in root from the worker's output; returns the manifest written."""
    package, class_name = meta["package"], meta["compilation"]["class_name"]
    include = root / "include" / package
    lib = root / "lib"
    include.mkdir(parents=True)
    lib.mkdir()
    objects = []
    for bs in meta["compilation"]["batch_sizes"]:
        files = answer["files"][str(bs)]
        shutil.copyfile(compiled / files["header"], include / files["header"])
        for obj in files["objects"]:
            shutil.copyfile(compiled / obj, lib / obj)
            objects.append(obj)
    # Weights once: identical constant buffers of several batch sizes are defined by one object.
    shared = constants.share_constants(include, lib, class_name, list(meta["compilation"]["batch_sizes"]))
    _archive_objects(lib, sorted(objects), lib / f"lib{package}.a")

    signature = answer["signature"]
    (include / "model.h").write_text(render_model_header({
        "package": package,
        "namespace": meta["compilation"]["namespace"],
        "class_name": class_name,
        "batch_sizes": meta["compilation"]["batch_sizes"],
        "inputs": signature["inputs"],
        "outputs": signature["outputs"],
        "default_rules": list(meta["compilation"].get("batch_rules", [])),  # tuned rules (tfaot-dist tune)
        "tfaot_dist_version": __version__,
    }))
    tool = root / "etc" / "scram.d" / f"{package}.xml"
    tool.parent.mkdir(parents=True)
    tool.write_text(scram_tool.render_model_tool(package, meta["version"], meta["source"].get("url", "")))
    for rel, text in ((buildsys.cmake_config_path(package), buildsys.render_cmake_config(meta)),
                      (buildsys.pkgconfig_path(package), buildsys.render_pkgconfig(meta))):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if reference.is_dir():
        shutil.copytree(reference, root / "share" / package / "reference")

    manifest = dict(meta)
    manifest["signature"] = {**signature, "order": ORDER_NOTE}
    manifest["reference"] = {"dir": f"share/{package}/reference", "cases": answer.get("reference", [])}
    manifest["tool"] = {"name": "tfaot-dist", "version": __version__}
    manifest["constants"] = shared.as_dict()
    manifest["files"] = {rel: {"sha256": sha256_file(root / rel), "size": (root / rel).stat().st_size}
                         for rel in tree_files(root)}
    write_manifest(root, manifest)
    return manifest


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    write_atomic(root / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def read_manifest(root: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{root / MANIFEST}: unreadable manifest: {exc}") from None
    return manifest


def check_files(root: Path, manifest: dict[str, Any]) -> None:
    """Every file listed is present with its digest, and nothing else is there."""
    listed = set(manifest.get("files", {}))
    present = set(tree_files(root)) - {MANIFEST}
    for rel in sorted(present - listed):
        raise IntegrityError(f"{root / rel}: not listed in the manifest")
    for rel in sorted(listed):
        path = root / rel
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the manifest but missing")
        if sha256_file(path) != manifest["files"][rel]["sha256"]:
            raise IntegrityError(f"{path}: sha256 differs from the manifest")


def write_archive(root: Path, archive: Path) -> None:
    write_atomic(archive, reproducible_targz(root, root.name))


def _archive_objects(lib: Path, objects: list[str], output: Path) -> None:
    cxx_build.archive(output, [lib / obj for obj in objects], CompileFailed)  # reproducible
