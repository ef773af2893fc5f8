"""The tfaot-xla-runtime package: what every model package links against.

    tfaot-xla-runtime-VERSION/
      include/              TensorFlow/XLA/Abseil headers the generated code needs, and tfaot/ (the C++ interface)
      include/eigen3/, include/third_party/eigen3/   the paths CMSSW and TensorFlow name Eigen by
      lib/                  libtf_xla_runtime.a, libtfaot_absl.a
      etc/scram.d/tfaot-xla-runtime.xml
      licenses/
      sbom.cdx.json         its bill of materials (trust/sbom.py: XLA runtime sources, Abseil, Eigen, our kernels, ...)
      manifest.json

VERSION is the TensorFlow version with a local label of two parts: the
runtime build key, then a digest of how the package is made from that build
(e.g. 2.21.0+b8fd209dfb55daad.p3f2a9c1e). Runtimes built by different compilers
are different packages, and so are packages whose headers, tool file or
build-system files changed: a channel never sees other bytes under one version.
Model packages name the exact version they were verified with in their
manifest ("requires").
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
from pathlib import Path

from packaging.version import Version

from tfaot_dist import __version__
from tfaot_dist import package as pkg
from tfaot_dist.cache import ensure_entry
from tfaot_dist.cxx import INTERFACE_INCLUDE, buildsys, installed_runtime, runtime_kernels, scram_tool
from tfaot_dist.cxx.xla_runtime import MANIFEST as RUNTIME_RECORD
from tfaot_dist.cxx.xla_runtime import XlaRuntime
from tfaot_dist.documents import FileDigest, Manifest, Requirement, RuntimeManifest, ToolInfo
from tfaot_dist.errors import InvalidInput
from tfaot_dist.util.fs import remove_stale_siblings, sha256_file, tree_digest, tree_files
from tfaot_dist.util.render import templates_digest

NAME = "tfaot-xla-runtime"
# Its own tool name, never the release's tensorflow-xla-runtime (see scram_tool.py).
SCRAM_TOOL = scram_tool.RUNTIME_TOOL
# Where CMSSW (Wrapper.h: "third_party/eigen3/unsupported/Eigen/CXX11/Tensor") and
# cmsdist's eigen tool ("eigen3/Eigen/...") find Eigen; the shipped copy is include/Eigen.
EIGEN_ALIASES = ("eigen3", "third_party/eigen3")
EIGEN_MODULE_DIRS = ("Eigen", "unsupported/Eigen", "unsupported/Eigen/CXX11")


# What shapes the package beyond the runtime build: the interface headers, the templates
# and the code that writes it (tfaot-dist's version is in its manifest too).
TEMPLATES = ("runtime_tool.xml.j2", "runtime_cmake_config.cmake.j2", "runtime_pkgconfig.pc.j2")
PACKAGING_CODE = (Path(__file__), Path(buildsys.__file__), Path(scram_tool.__file__))
PACKAGING_DIGITS = 8


@functools.cache
def packaging_digest() -> str:
    h = hashlib.sha256(f"tfaot-dist {__version__}\n".encode())
    h.update(f"interface {tree_digest(INTERFACE_INCLUDE)}\n".encode())
    h.update(f"templates {templates_digest(TEMPLATES)}\n".encode())
    for code in PACKAGING_CODE:
        h.update(f"{code.name} {sha256_file(code)}\n".encode())
    return h.hexdigest()


def runtime_version(runtime: XlaRuntime) -> str:
    build = runtime.key.rsplit("-", 1)[-1]
    # "p" keeps the segment from being all digits, which PEP 440 would reformat (0123 -> 123);
    # normalized all the same, for a build key that happens to be all digits.
    return str(Version(f"{runtime.tensorflow_version}+{build}.p{packaging_digest()[:PACKAGING_DIGITS]}"))


def requirement(runtime: XlaRuntime) -> Requirement:
    """How a model manifest names the runtime it was verified with: this package's exact version, or
    the release's tensorflow-xla-runtime, whose version is its TensorFlow's (cmsdist's spec)."""
    if runtime.kind == installed_runtime.KIND:
        return Requirement(name=installed_runtime.NAME, version=runtime.tensorflow_version)
    return Requirement(name=NAME, version=runtime_version(runtime))


def ensure_runtime_package(runtime: XlaRuntime, dist: Path) -> tuple[pkg.Package, pkg.Status]:
    """The runtime package in dist, assembled if missing; returns it and "built" or "up to date"."""
    if runtime.kind != "tfaot":
        raise InvalidInput(
            f"{runtime.root}: the release's {installed_runtime.NAME} is no {NAME} package; "
            f"packages built against it require it from the release"
        )
    version = runtime_version(runtime)
    root = dist / pkg.dir_name(NAME, version)
    archive = dist / f"{root.name}.tar.gz"
    status: pkg.Status = "up to date"

    def assemble(staged: Path) -> None:
        nonlocal status
        status = "built"
        remove_stale_siblings(archive)
        staged.chmod(0o755)  # a private temporary directory until renamed: the package's mode is the models'
        _assemble(runtime, version, staged)
        # Written before the directory's rename: the package is complete once both are there.
        pkg.write_archive(staged, archive, top=root.name)

    # An entry of dist rather than of the cache (no marker: its manifest and archive say it is complete).
    dist.mkdir(parents=True, exist_ok=True)
    ensure_entry(
        root,
        assemble,
        marker=None,
        is_complete=lambda d: (d / pkg.MANIFEST).is_file() and archive.is_file(),
        lock=dist,
        sealed=False,
    )
    return pkg.Package(NAME, version, root, archive, pkg.read_manifest(root)), status


def _assemble(runtime: XlaRuntime, version: str, root: Path) -> None:
    shutil.copytree(runtime.include_dir, root / "include")
    shutil.copytree(INTERFACE_INCLUDE / "tfaot", root / "include" / "tfaot")
    (root / "lib").mkdir()
    for lib in runtime.libs:
        shutil.copyfile(lib, root / "lib" / lib.name)
    if (runtime.root / "licenses").is_dir():
        shutil.copytree(runtime.root / "licenses", root / "licenses")
    _eigen_aliases(root / "include")
    tool = root / "etc" / "scram.d" / f"{SCRAM_TOOL}.xml"
    tool.parent.mkdir(parents=True)
    tool.write_text(
        scram_tool.render_runtime_tool(
            runtime.tensorflow_version, [lib.name for lib in runtime.libs], list(runtime.ldflags)
        )
    )
    _write_sbom(runtime, version, root)
    libs = tuple(f"lib/{lib.name}" for lib in runtime.libs)
    facts = Manifest(
        package=NAME,
        version=version,
        files={},
        kind="runtime",
        tensorflow_version=runtime.tensorflow_version,
        cxxflags=tuple(runtime.cxxflags),
        libs=libs,
        system_libs=tuple(runtime.ldflags),
    )
    for rel, text in (
        (buildsys.cmake_config_path(NAME), buildsys.render_runtime_cmake_config(facts)),
        (buildsys.pkgconfig_path(NAME), buildsys.render_runtime_pkgconfig(facts)),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    manifest = RuntimeManifest(
        kind="runtime",
        name=NAME,
        package=NAME,
        version=version,
        runtime_key=runtime.key,
        tensorflow_version=runtime.tensorflow_version,
        compiler=runtime.compiler,
        cxxflags=tuple(runtime.cxxflags),
        libs=libs,
        system_libs=tuple(runtime.ldflags),
        cpu_levels=runtime.cpu_levels,  # read back when the installed package is a --runtime
        scram_tool=SCRAM_TOOL,
        tool=ToolInfo(name="tfaot-dist", version=__version__),
        files={
            rel: FileDigest(sha256=sha256_file(root / rel), size=(root / rel).stat().st_size)
            for rel in tree_files(root)
        },
    )
    pkg.write_manifest(root, manifest.to_json())


def _write_sbom(runtime: XlaRuntime, version: str, root: Path) -> None:
    """The runtime package's bill of materials (trust/sbom.py), from the runtime build's own record
    (runtime.json: Abseil, the compiler) and the Eigen headers it ships."""
    from tfaot_dist.trust import sbom  # cyclonedx takes most of a second to import: only when building

    record = json.loads((runtime.root / RUNTIME_RECORD).read_text())
    compiler = record.get("compiler") or {}
    abseil = record.get("abseil") or {}
    (root / sbom.SBOM).write_text(
        sbom.runtime_sbom(
            package=NAME,
            version=version,
            runtime_key=runtime.key,
            tensorflow=runtime.tensorflow_version,
            compiler=f"{compiler.get('command', runtime.compiler)} {compiler.get('full_version', '')}".strip(),
            abseil={k: str(v) for k, v in abseil.items()},
            eigen=eigen_version(root / "include"),
            kernels={
                "sources_sha256": tree_digest(runtime_kernels.SOURCE_DIR),
                "levels": ",".join(runtime.cpu_levels),
            },
        )
    )


_EIGEN_DEFINE = re.compile(r"#define\s+EIGEN_(WORLD|MAJOR|MINOR|PATCH)_VERSION\s+(\d+)")
_EIGEN_STRING = re.compile(r'#define\s+EIGEN_VERSION_STRING\s+"([^"]+)"')


def eigen_version(include: Path) -> str | None:
    """Eigen's version from its headers: Eigen/Version (Eigen 5: semantic versions, MAJOR.MINOR.PATCH),
    else Core/util/Macros.h (Eigen 3: WORLD.MAJOR.MINOR, e.g. 3.4.90)."""
    for rel in ("Eigen/Version", "Eigen/src/Core/util/Macros.h"):
        path = include / rel
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        string = _EIGEN_STRING.search(text)
        if string:
            return string.group(1)
        found = dict(_EIGEN_DEFINE.findall(text))
        if "PATCH" in found and "MAJOR" in found and "MINOR" in found:
            return f"{found['MAJOR']}.{found['MINOR']}.{found['PATCH']}"
        if "WORLD" in found and "MAJOR" in found and "MINOR" in found:
            return f"{found['WORLD']}.{found['MAJOR']}.{found['MINOR']}"
    return None


def _eigen_aliases(include: Path) -> None:
    """One forwarding header per Eigen module header under each alias path (no links: archives stay plain)."""
    for module_dir in EIGEN_MODULE_DIRS:
        if not (include / module_dir).is_dir():
            continue
        for module in sorted(p for p in (include / module_dir).iterdir() if p.is_file()):
            rel = f"{module_dir}/{module.name}"
            for alias in EIGEN_ALIASES:
                forward = include / alias / rel
                forward.parent.mkdir(parents=True, exist_ok=True)
                forward.write_text(
                    f"// {alias}/{rel}: the Eigen shipped with tfaot-xla-runtime\n#include <{rel}>\n"
                )
