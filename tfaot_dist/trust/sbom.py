"""The bill of materials of a package: sbom.cdx.json (CycloneDX 1.6, written with cyclonedx-python-lib),
listed in the manifest like every file, so scanners see what a package is made of.

A model package's names the model (its source URL without credentials, the commit or archive digest,
the SavedModel's tree digest), TensorFlow and the other toolchain requirements, tfcompile (the
compiler, TensorFlow's), the runtime it links against and the runtime parts its archive holds, and
tfaot-dist (the tool that made it). The runtime package's names what its libraries are compiled
from: the XLA runtime sources of the TensorFlow wheel, Abseil, Eigen (headers and the products our
kernels compile in), our per-level kernels (their sources' digest and levels), the compiler and
tfaot-dist. Only what the manifest records: no times, no paths of the build
machine, and a serial number derived from the package, so that a rebuild writes the same bytes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import InvalidRequirement, Requirement

from tfaot_dist import __version__
from tfaot_dist.documents import Requirement as PackageRequirement
from tfaot_dist.documents import ToolchainRecord

SBOM = "sbom.cdx.json"
NAMESPACE = uuid.UUID("0f6b1a1e-2b51-5c0e-9d39-7466616f7464")  # ours: serial numbers are uuid5 in it


def public_url(url: str) -> str:
    """url without user:password@ (the registry refuses those already: here too, whatever comes)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _pypi(text: str) -> Component | None:
    """A pinned requirement (name==version) as a component with its purl; others are not pins."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
    if len(pins) != 1:
        return None
    return Component(
        name=req.name,
        version=pins[0],
        type=ComponentType.FRAMEWORK if req.name.startswith("tensorflow") else ComponentType.LIBRARY,
        purl=PackageURL("pypi", name=req.name.lower(), version=pins[0]),
        bom_ref=f"pypi:{req.name.lower()}",
    )


def _properties(values: Mapping[str, str]) -> list[Property]:
    return [Property(name=f"tfaot-dist:{k}", value=v) for k, v in sorted(values.items()) if v]


def model_sbom(
    *,
    package: str,
    version: str,
    build_key: str | None,
    source: Mapping[str, str],
    digests: Mapping[str, str],
    toolchain: ToolchainRecord,
    requires: Sequence[PackageRequirement],
    runtime_parts: Iterable[str],
) -> str:
    """The SBOM of a model package, as JSON text."""
    tf = toolchain.tensorflow_version
    url = public_url(source.get("url") or source.get("git") or source.get("archive") or "")
    model = Component(
        name=package.removeprefix("tfaot-model-"),
        version=source.get("commit") or source.get("sha256") or None,
        type=ComponentType.MACHINE_LEARNING_MODEL,
        bom_ref="model",
        description="the SavedModel this package was compiled from",
        external_references=[ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(url))]
        if url
        else [],
        properties=_properties(
            {
                "source_commit": source.get("commit", ""),
                "source_archive_sha256": source.get("sha256", ""),
                "saved_model_tree_sha256": digests.get("saved_model", "")
                or source.get("saved_model_sha256", ""),
                "aot_config_sha256": digests.get("aot_config", ""),
            }
        ),
    )
    components = [model]
    pinned = [c for c in map(_pypi, toolchain.requirements or toolchain.installed or ()) if c is not None]
    if not any(c.name.startswith("tensorflow") for c in pinned) and tf:
        pinned.append(
            Component(name="tensorflow", version=tf, type=ComponentType.FRAMEWORK, bom_ref="pypi:tensorflow")
        )
    components += pinned
    if tf:
        components.append(
            Component(
                name="tfcompile",
                version=tf,
                type=ComponentType.APPLICATION,
                bom_ref="compiler",
                description="XLA's ahead-of-time compiler, from TensorFlow (saved_model_cli aot_compile_cpu)",
            )
        )
    for req in requires:
        components.append(
            Component(
                name=req.name,
                version=req.version,
                type=ComponentType.LIBRARY,
                bom_ref=f"runtime:{req.name}",
                description="the runtime package this one links against (its own SBOM lists its parts)",
            )
        )
    for part in sorted(set(runtime_parts)):
        components.append(
            Component(
                name=f"xla-runtime-part-{part}",
                version=tf or None,
                type=ComponentType.LIBRARY,
                bom_ref=f"part:{part}",
                description="XLA runtime sources from the TensorFlow wheel, compiled into this package's archive",
            )
        )
    return _render(package, version, build_key, components)


def runtime_sbom(
    *,
    package: str,
    version: str,
    runtime_key: str,
    tensorflow: str,
    compiler: str,
    abseil: Mapping[str, str],
    eigen: str | None,
    kernels: Mapping[str, str],
) -> str:
    """The SBOM of the runtime package, as JSON text. abseil: the runtime build's record of it
    (inline_namespace, sdist_sha256, source); kernels: sources_sha256 and levels (comma-separated)."""
    lts = abseil.get("inline_namespace", "").removeprefix("lts_")
    components = [
        Component(
            name="xla-runtime-sources",
            version=tensorflow,
            type=ComponentType.LIBRARY,
            bom_ref="xla",
            description="XLA's CPU runtime sources from the TensorFlow wheel (libtf_xla_runtime.a)",
            purl=PackageURL("pypi", name="tensorflow", version=tensorflow),
        ),
        Component(
            name="abseil-cpp",
            version=lts or None,
            type=ComponentType.LIBRARY,
            bom_ref="abseil",
            description="Abseil, compiled into libtfaot_absl.a",
            properties=_properties(
                {"source": abseil.get("source", ""), "source_sha256": abseil.get("sdist_sha256", "")}
            ),
        ),
        Component(
            name="eigen",
            version=eigen,
            type=ComponentType.LIBRARY,
            bom_ref="eigen",
            description="Eigen's headers from the TensorFlow wheel (shipped in include/)",
        ),
        Component(
            name="tfaot-dist-kernels",
            version=__version__,
            type=ComponentType.LIBRARY,
            bom_ref="kernels",
            description="tfaot-dist's matrix and convolution kernels, one build per CPU level",
            properties=_properties(
                {"sources_sha256": kernels.get("sources_sha256", ""), "cpu_levels": kernels.get("levels", "")}
            ),
        ),
        Component(
            name=compiler.split(" ", 1)[0],
            version=compiler.split(" ", 1)[1] if " " in compiler else None,
            type=ComponentType.APPLICATION,
            bom_ref="compiler",
            description="the C++ compiler of the runtime's libraries",
        ),
        Component(
            name="tfaot-dist",
            version=__version__,
            type=ComponentType.APPLICATION,
            bom_ref="tfaot-dist",
            purl=PackageURL("pypi", name="tfaot-dist", version=__version__),
            description="the tool that built and packaged the runtime",
        ),
    ]
    return _render(package, version, runtime_key, components)


def _render(package: str, version: str, build_key: str | None, components: list[Component]) -> str:
    bom = Bom(
        components=components,
        serial_number=uuid.uuid5(NAMESPACE, f"{package}=={version} {build_key or ''}"),
    )
    bom.metadata.component = Component(
        name=package, version=version, type=ComponentType.LIBRARY, bom_ref="package"
    )
    bom.metadata.tools.components.add(
        Component(name="tfaot-dist", version=__version__, type=ComponentType.APPLICATION, bom_ref="tool")
    )
    bom.register_dependency(bom.metadata.component, components)
    doc = json.loads(JsonV1Dot6(bom).output_as_string())
    doc["metadata"].pop("timestamp", None)  # optional; a time would make every rebuild differ
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
