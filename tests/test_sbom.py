"""The bill of materials of a model package (sbom.cdx.json, issue 41): valid CycloneDX 1.6 by the
library's own schema validator, naming the model's source (no credentials), commit and SavedModel
digest, TensorFlow, the compiler, the runtime and its parts, and tfaot-dist; the same bytes for the
same inputs (packages are reproducible). No TensorFlow: the function assembly.assemble calls. The
runtime package's own (XLA runtime sources, Abseil, Eigen, our kernels, compiler, tfaot-dist), from a
runtime tree made by hand.
Every built package's SBOM is validated by tests/test_build.py (tf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tfaot_dist import __version__
from tfaot_dist.cxx import runtime_kernels, runtime_package, xla_runtime
from tfaot_dist.cxx.xla_runtime import XlaRuntime
from tfaot_dist.documents import Requirement, ToolchainRecord
from tfaot_dist.trust.sbom import model_sbom
from tfaot_dist.util.fs import sha256_file, tree_digest

COMMIT = "a" * 40
SAVED_MODEL = "b" * 64


def sbom(url: str = "https://github.com/cms/models.git") -> str:
    return model_sbom(
        package="tfaot-model-x",
        version="1.0",
        build_key="0123abcd",
        source={"git": url, "ref": "v1", "commit": COMMIT, "url": url},
        digests={"saved_model": SAVED_MODEL, "aot_config": "c" * 64},
        toolchain=ToolchainRecord(tensorflow_version="2.21.0", requirements=("tensorflow-cpu==2.21.0",)),
        requires=(Requirement("tfaot-xla-runtime", "2.21.0+b0.p0"),),
        runtime_parts=["cpu_runtime", "xla_cpu"],
    )


def validate(text: str) -> None:
    """The library's own JSON schema validator (strict: no property the schema does not know). Imported
    here, not at collection: its format checkers build a grammar at import (2.5 s of CPU in every worker)."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    assert errors is None, errors


def component(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in doc["components"] if c["name"] == name]
    assert len(found) == 1, found
    return found[0]


def test_the_sbom_is_valid_cyclonedx_and_names_what_the_package_is_made_of() -> None:
    text = sbom()
    validate(text)
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"] == {
        "bom-ref": "package",
        "name": "tfaot-model-x",
        "type": "library",
        "version": "1.0",
    }
    assert doc["metadata"]["tools"]["components"][0]["name"] == "tfaot-dist"
    assert doc["metadata"]["tools"]["components"][0]["version"] == __version__
    model = component(doc, "x")
    assert model["type"] == "machine-learning-model" and model["version"] == COMMIT
    assert model["externalReferences"] == [{"type": "vcs", "url": "https://github.com/cms/models.git"}]
    props = {p["name"]: p["value"] for p in model["properties"]}
    assert props["tfaot-dist:saved_model_tree_sha256"] == SAVED_MODEL
    assert props["tfaot-dist:source_commit"] == COMMIT
    assert component(doc, "tensorflow-cpu")["purl"] == "pkg:pypi/tensorflow-cpu@2.21.0"
    assert component(doc, "tfcompile")["version"] == "2.21.0"
    assert component(doc, "tfaot-xla-runtime")["version"] == "2.21.0+b0.p0"
    assert component(doc, "xla-runtime-part-xla_cpu")["version"] == "2.21.0"
    (package,) = [d for d in doc["dependencies"] if d["ref"] == "package"]
    assert set(package["dependsOn"]) == {c["bom-ref"] for c in doc["components"]}


def test_the_sbom_is_reproducible_and_carries_no_credentials() -> None:
    assert sbom() == sbom()  # no time, a serial number derived from the package
    assert "timestamp" not in json.loads(sbom())["metadata"]
    text = sbom("https://user:secret@example.org:8443/models.git")
    validate(text)
    assert "secret" not in text and "user" not in text
    assert (
        component(json.loads(text), "x")["externalReferences"][0]["url"]
        == "https://example.org:8443/models.git"
    )


def fake_runtime_tree(root: Path) -> XlaRuntime:
    """A runtime build as xla_runtime.py leaves it (its record, Eigen and Abseil headers, two
    libraries), made by hand: the runtime package is assembled from it without TensorFlow."""
    (root / "include" / "Eigen").mkdir(parents=True)
    (root / "include" / "Eigen" / "Version").write_text(
        "#define EIGEN_WORLD_VERSION 3\n#define EIGEN_MAJOR_VERSION 5\n#define EIGEN_MINOR_VERSION 0\n"
        '#define EIGEN_PATCH_VERSION 1\n#define EIGEN_VERSION_STRING "5.0.1-dev+master"\n'
    )
    (root / "lib").mkdir()
    for lib in ("libtf_xla_runtime.a", "libtfaot_absl.a"):
        (root / "lib" / lib).write_bytes(b"!<arch>\n")
    record = {
        "abseil": {
            "inline_namespace": "lts_20260526",
            "sdist_sha256": "5" * 64,
            "source": "grpcio==1.85.1 sdist, third_party/abseil-cpp",
        },
        "compiler": {"command": "g++", "full_version": "12.2.0", "target": "x86_64-linux-gnu"},
        "cpu_levels": ["x86-64", "x86-64-v3"],
        "cxxflags": ["-std=c++17"],
        "include_dir": "include",
        "key": "tf2.21.0-gcc12.2.0-x86_64-linux-gnu-0123456789abcdef",
        "libs": ["lib/libtf_xla_runtime.a", "lib/libtfaot_absl.a"],
        "system_libs": ["-lpthread", "-lm"],
        "tensorflow": {"distribution": "tensorflow_cpu", "version": "2.21.0"},
    }
    (root / xla_runtime.MANIFEST).write_text(json.dumps(record))
    (root / xla_runtime.MARKER).write_text("")
    return XlaRuntime.from_dir(root)


def test_the_runtime_package_carries_its_own_sbom(tmp_path: Path) -> None:
    runtime = fake_runtime_tree(tmp_path / "runtime")
    package, _ = runtime_package.ensure_runtime_package(runtime, tmp_path / "dist")
    text = (package.root / "sbom.cdx.json").read_text()
    validate(text)
    assert package.manifest.files["sbom.cdx.json"].sha256 == sha256_file(package.root / "sbom.cdx.json")
    doc = json.loads(text)
    assert doc["metadata"]["component"]["name"] == "tfaot-xla-runtime"
    assert doc["metadata"]["component"]["version"] == package.version
    assert component(doc, "xla-runtime-sources")["version"] == "2.21.0"
    assert component(doc, "abseil-cpp")["version"] == "20260526"
    assert component(doc, "eigen")["version"] == "5.0.1-dev+master"
    kernels = {p["name"]: p["value"] for p in component(doc, "tfaot-dist-kernels")["properties"]}
    assert kernels == {
        "tfaot-dist:cpu_levels": "x86-64,x86-64-v3",
        "tfaot-dist:sources_sha256": tree_digest(runtime_kernels.SOURCE_DIR),
    }
    assert component(doc, "g++")["version"] == "12.2.0"
    assert component(doc, "tfaot-dist")["version"] == __version__
    assert "timestamp" not in doc["metadata"]  # the same runtime build packs to the same bytes


@pytest.mark.parametrize(
    ("rel", "text", "version"),
    [
        (
            "Eigen/src/Core/util/Macros.h",
            "#define EIGEN_WORLD_VERSION 3\n#define EIGEN_MAJOR_VERSION 4\n#define EIGEN_MINOR_VERSION 90\n",
            "3.4.90",
        ),
        (
            "Eigen/Version",
            "#define EIGEN_MAJOR_VERSION 5\n#define EIGEN_MINOR_VERSION 0\n#define EIGEN_PATCH_VERSION 1\n",
            "5.0.1",
        ),
        ("Eigen/Core", "", None),
    ],
)
def test_eigen_version_from_its_headers(tmp_path: Path, rel: str, text: str, version: str | None) -> None:
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(text)
    assert runtime_package.eigen_version(tmp_path) == version
