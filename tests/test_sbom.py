"""The bill of materials of a model package (sbom.cdx.json, issue 41): valid CycloneDX 1.6 by the
library's own schema validator, naming the model's source (no credentials), commit and SavedModel
digest, TensorFlow, the compiler, the runtime and its parts, and tfaot-dist; the same bytes for the
same inputs (packages are reproducible). No TensorFlow: the function package.assemble calls.
Every built package's SBOM is validated by tests/test_build.py (tf)."""

from __future__ import annotations

import json
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tfaot_dist import __version__
from tfaot_dist.documents import Requirement, ToolchainRecord
from tfaot_dist.trust.sbom import model_sbom

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
    """The library's own JSON schema validator (strict: no property the schema does not know)."""
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
