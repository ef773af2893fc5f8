"""CMake package configs and pkg-config files of model and runtime packages.

    lib/cmake/tfaot-model-NAME/tfaot-model-NAMEConfig.cmake   target tfaot::model-NAME
    lib/cmake/tfaot-model-NAME/tfaot-model-NAMEConfigVersion.cmake
    lib/pkgconfig/tfaot-model-NAME.pc                          Requires: tfaot-xla-runtime
    lib/cmake/tfaot-xla-runtime/tfaot-xla-runtimeConfig.cmake  target tfaot::xla-runtime
    lib/pkgconfig/tfaot-xla-runtime.pc

The runtime's include directory is a system include directory for consumers
(-isystem; CMake's INTERFACE_SYSTEM_INCLUDE_DIRECTORIES), as scram's
SYSTEM_INCLUDE makes it in CMSSW: no warning flag of a consumer fires inside
TensorFlow's headers. All four are relocatable: CMake paths are relative to CMAKE_CURRENT_LIST_DIR,
pkg-config paths to ${pcfiledir} (so `pkg-config --define-prefix` works too).
Each function takes a manifest (documents.Manifest: typed, from package.py,
runtime_package.py or a channel) and returns the file's text; every value is
checked against a strict pattern first, so nothing in a manifest can add a
CMake command or a pkg-config field.
"""

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from tfaot_dist import __version__, names
from tfaot_dist.consumer_versions import cmake_version, rpm_version
from tfaot_dist.cxx import scram_tool
from tfaot_dist.documents import Manifest
from tfaot_dist.errors import InvalidInput
from tfaot_dist.util.textsafe import pkgconfig_text, render

RUNTIME_PACKAGE = "tfaot-xla-runtime"
RUNTIME_TARGET = "tfaot::xla-runtime"


def cmake_config_path(package: str) -> str:
    return f"lib/cmake/{package}/{package}Config.cmake"


def cmake_version_path(package: str) -> str:
    return f"lib/cmake/{package}/{package}ConfigVersion.cmake"


def pkgconfig_path(package: str) -> str:
    return f"lib/pkgconfig/{package}.pc"


def model_target(package: str) -> str:
    return "tfaot::model-" + package.removeprefix("tfaot-model-")


def render_cmake_config(manifest: Manifest) -> str:
    """lib/cmake/names.MODEL_PACKAGE/PACKAGEConfig.cmake of a model package."""
    package, version = _model_identity(manifest)
    return render(
        "cmake_config.cmake.j2",
        package=package,
        version=version,
        target=model_target(package),
        archive=f"lib/lib{package}.a",
        include_dir="include",
        runtime_package=RUNTIME_PACKAGE,
        runtime_target=RUNTIME_TARGET,
        tfaot_dist_version=__version__,
    )


def render_cmake_version(manifest: Manifest) -> str:
    """lib/cmake/PACKAGE/PACKAGEConfigVersion.cmake of a model or runtime package: find_package(PACKAGE
    VERSION) and version ranges."""
    package = manifest.package
    if not names.PACKAGE_NAME.fullmatch(package):
        raise InvalidInput(f"manifest: package: invalid package name {package!r}")
    version = _pep440(_version(manifest.version, "version"))
    return render(
        "cmake_config_version.cmake.j2",
        package=package,
        version=version,
        cmake_version=cmake_version(version),
        tfaot_dist_version=__version__,
    )


def render_pkgconfig(manifest: Manifest) -> str:
    """lib/pkgconfig/names.MODEL_PACKAGE.pc of a model package; Requires the runtime it was verified with, if known."""
    package, version = _model_identity(manifest)
    requires = _runtime_requirement(manifest)
    text = (
        manifest.text("model", "description")
        or f"AOT compiled TensorFlow model {package.removeprefix('tfaot-model-')}"
    )
    url = manifest.text("source", "url") or manifest.text("source", "git")
    return render(
        "pkgconfig.pc.j2",
        package=package,
        version=rpm_version(version),  # pkg-config compares like rpm (consumer_versions.py)
        description=pkgconfig_text(text),
        url=url if names.SAFE_URL.fullmatch(url) else "",  # only informational: left out rather than escaped
        requires=requires,
        include_dir="include",
        lib_dir="lib",
        lib=package,
        tfaot_dist_version=__version__,
    )


def render_runtime_cmake_config(runtime_manifest: Manifest) -> str:
    """lib/cmake/tfaot-xla-runtime/tfaot-xla-runtimeConfig.cmake: target tfaot::xla-runtime."""
    facts = _runtime_facts(runtime_manifest)
    features, definitions, options = [], [], []
    for flag in facts["cxxflags"]:
        if m := re.fullmatch(r"-std=(?:c|gnu)\+\+(\d\d)", flag):
            features.append(f"cxx_std_{m.group(1)}")
        elif flag.startswith("-D") and len(flag) > 2:
            definitions.append(flag[2:])
        else:
            options.append(flag)
    return render(
        "runtime_cmake_config.cmake.j2",
        **facts,
        target=RUNTIME_TARGET,
        features=features,
        definitions=definitions,
        options=options,
        tfaot_dist_version=__version__,
    )


def render_runtime_pkgconfig(runtime_manifest: Manifest) -> str:
    """lib/pkgconfig/tfaot-xla-runtime.pc.

    No -std= in Cflags: pkg-config cannot say "at least C++17", and a later -std=c++17
    would take C++20 away from the consumer (the headers compile under both).
    """
    facts = _runtime_facts(runtime_manifest)
    facts["cxxflags"] = [flag for flag in facts["cxxflags"] if not flag.startswith("-std=")]
    return render("runtime_pkgconfig.pc.j2", **facts, tfaot_dist_version=__version__)


def _runtime_requirement(manifest: Manifest) -> str:
    """The runtime build the package was verified with if known, else any build of its TensorFlow version.

    The builder knows the exact runtime before assembly; the range is for manifests without
    `requires` (packages of older tfaot-dist versions whose files setup writes in an area):
    "2.21.0" allows 2.21.0 and 2.21.0+BUILD (pkg-config compares like rpm), not 2.21.1.
    """
    for req in manifest.requires:
        if req.name in (RUNTIME_PACKAGE, names.RELEASE_RUNTIME_PACKAGE):
            return f"{req.name} = {_version(req.version, 'requires.version')}"
    tf = manifest.toolchain.tensorflow_version if manifest.toolchain else ""
    if not tf:
        return RUNTIME_PACKAGE
    try:
        release = Version(_version(tf, "toolchain.tensorflow_version")).release
    except InvalidVersion:
        raise InvalidInput(f"manifest: toolchain.tensorflow_version: invalid version {tf!r}") from None
    major, minor, patch = (*release, 0, 0)[:3]
    return f"{RUNTIME_PACKAGE} >= {tf}, {RUNTIME_PACKAGE} < {major}.{minor}.{patch + 1}"


def _model_identity(manifest: Manifest) -> tuple[str, str]:
    package = manifest.package
    if not names.MODEL_PACKAGE.fullmatch(package):
        raise InvalidInput(f"manifest: package: invalid package name {package!r}")
    return package, _pep440(_version(manifest.version, "version"))


def _pep440(version: str) -> str:
    try:
        Version(version)  # every consumer's form is made from it (consumer_versions.py)
    except InvalidVersion:
        raise InvalidInput(f"manifest: version: invalid version {version!r} (expected PEP 440)") from None
    return version


def _version(value: str, field: str) -> str:
    if not names.VERSION_CHARS.fullmatch(value):
        raise InvalidInput(f"manifest: {field}: invalid version {value!r}")
    return value


def _runtime_facts(manifest: Manifest) -> dict[str, Any]:
    package = manifest.package
    if package != RUNTIME_PACKAGE:
        raise InvalidInput(f"runtime manifest: package: expected {RUNTIME_PACKAGE!r}, got {package!r}")
    version = _version(manifest.version, "version")
    cxxflags = _each(manifest.cxxflags, names.COMPILER_FLAG, "cxxflags")
    # "-lpthread" -> "pthread": CMake adds the -l itself.
    system_libs = [lib[2:] for lib in _each(manifest.system_libs, names.SYSTEM_LIB, "system_libs")]
    libs = []
    for path in _each(manifest.libs, names.STATIC_LIB, "libs"):
        match = names.STATIC_LIB.fullmatch(path)
        name = match.group(1) if match else path  # every entry matched in _each
        libs.append({"path": path, "name": name, "target": f"tfaot::xla-runtime-{name}"})
    if not libs:
        raise InvalidInput("runtime manifest: libs: no static library listed")
    # A shared library linking the runtime exports none of its symbols (see scram_tool.py).
    link_options = [scram_tool.exclude_libs([f"lib{lib['name']}.a" for lib in libs])]
    tf = manifest.tensorflow_version or ""
    description = "XLA AOT runtime of tfaot-model packages" + (f" (TensorFlow {tf})" if tf else "")
    return {
        "package": package,
        "version": version,
        "cxxflags": cxxflags,
        "system_libs": system_libs,
        "libs": libs,
        "include_dir": "include",
        "lib_dir": "lib",
        "description": pkgconfig_text(description),
        "link_options": link_options,
    }


def _each(values: tuple[str, ...], pattern: re.Pattern[str], field: str) -> list[str]:
    for value in values:
        if not pattern.fullmatch(value):
            raise InvalidInput(f"runtime manifest: {field}: invalid entry {value!r}")
    return list(values)
