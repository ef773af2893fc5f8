"""Versions every consumer accepts (consumer_versions.py), each checked with the real tool.

For a release (1.0.0), a build of it from `update` (1.0.0.post2) and a
pre-release (2.0.0rc1): CMake's find_package with the version the catalogue
prints, EXACT, and ranges, against the files a package carries (its
Config.cmake, ConfigVersion.cmake and .pc as buildsys renders them);
pkg-config --atleast-version and --exact-version; rpm's own version comparison
and rpmspec on the rpm and cmsBuild specs; SCRAM's reading of the tool file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version
from test_specs import as_cmsbuild_would, commit, entry, git, write_entry, write_registry_yaml
from test_tool_files import read_as_scram

from tfaot_dist.channels import catalogue
from tfaot_dist.channels.channel import ChannelPackage
from tfaot_dist.consumer_versions import cmake_version, rpm_version
from tfaot_dist.cxx import buildsys, scram_tool
from tfaot_dist.documents import Manifest
from tfaot_dist.registry import Registry
from tfaot_dist.specs import flavors

VERSIONS = ("1.0.0", "1.0.0.post2", "2.0.0rc1")
SHA = "a" * 64


def test_each_consumer_form() -> None:
    assert [cmake_version(v) for v in VERSIONS] == ["1.0.0", "1.0.0.2", "2.0.0"]
    assert [rpm_version(v) for v in VERSIONS] == ["1.0.0", "1.0.0.post2", "2.0.0~rc1"]
    assert cmake_version("2") == "2.0.0" and cmake_version("1.2.3.4.5") == "1.2.3.4"
    assert cmake_version("2.post1") == "2.0.0.1" and cmake_version("1.0.0.dev3") == "1.0.0"


def _package(prefix: Path, version: str) -> str:
    """A model package's build-system files at prefix (an empty archive: find_package only looks)."""
    name = "tfaot-model-tiny"
    manifest = Manifest(package=name, version=version, files={})
    for rel, text in (
        (buildsys.cmake_config_path(name), buildsys.render_cmake_config(manifest)),
        (buildsys.cmake_version_path(name), buildsys.render_cmake_version(manifest)),
        (buildsys.pkgconfig_path(name), buildsys.render_pkgconfig(manifest)),
        ("lib/runtime.pc", "Name: r\nDescription: r\nVersion: 2.21.0\n"),
    ):
        (prefix / rel).parent.mkdir(parents=True, exist_ok=True)
        (prefix / rel).write_text(text)
    (prefix / "lib" / f"lib{name}.a").write_bytes(b"!<arch>\n")
    (prefix / "lib" / "runtime.pc").rename(prefix / buildsys.pkgconfig_path(buildsys.RUNTIME_PACKAGE))
    return name


def _catalogue_line(version: str) -> str:
    row = ChannelPackage(
        name="tfaot-model-tiny",
        version=version,
        kind="model",
        archive=f"packages/tfaot-model-tiny/{version}/tfaot-model-tiny-{version}.tar.gz",
        size=1,
        sha256=SHA,
        manifest=f"packages/tfaot-model-tiny/{version}/manifest.json",
        manifest_sha256=SHA,
        requires=(),
        tensorflow_version="2.21.0",
        batch_sizes=(1,),
        signature={"inputs": [], "outputs": []},
    )
    page = catalogue.render([row], {row.key: None})[catalogue.page_path(row.name, version)]
    match = re.search(r'<pre id="cmake">(find_package\([^)]*\))', page)
    assert match, page
    return match.group(1)


# find_package requests -> found? (besides the catalogue's line and EXACT, which must always find it)
CMAKE_REQUESTS = {
    "1.0.0": {"1.0": True, "1.0.0.1": False, "1.0...<2": True, "0.9...<1.0.0": False, "1.0.0...1.0.0": True},
    "1.0.0.post2": {
        "1.0.0": True,
        "1.0.0.1": True,  # the first build is older
        "1.0.0.3": False,
        "1.0.1": False,
        "1.0...<1.0.1": True,
        "1.0.0.3...<2": False,
    },
    # CMake has no pre-releases: 2.0.0rc1 is 2.0.0 (docs/how-to/cmake.md says so)
    "2.0.0rc1": {"2.0.0": True, "2.0.1": False, "1.0...<2.0.0": False, "1.0...<3": True},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_cmake_finds_the_version_the_catalogue_prints(tmp_path: Path, version: str) -> None:
    name = _package(tmp_path / "prefix", version)
    line = _catalogue_line(version)
    assert line == f"find_package({name} {cmake_version(version)} REQUIRED)"
    requests = {**CMAKE_REQUESTS[version], f"{cmake_version(version)} EXACT": True}
    calls = "".join(
        f'unset({name}_DIR CACHE)\nfind_package({name} {request} QUIET)\nmessage(STATUS "request {request} = ${{{name}_FOUND}}")\n'
        for request in requests
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\nproject(consumer NONE)\n"
        "add_library(tfaot::xla-runtime INTERFACE IMPORTED)\n"  # the runtime's own package is not the point here
        f"{calls}unset({name}_DIR CACHE)\n{line}\n"
        f'message(STATUS "request catalogue = ${{{name}_VERSION}} ${{{name}_VERSION_STRING}}")\n'
    )
    done = subprocess.run(
        ["cmake", "-S", "src", "-B", "build", f"-DCMAKE_PREFIX_PATH={tmp_path / 'prefix'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = dict(re.findall(r"^-- request (.+) = (.*)$", done.stdout, re.MULTILINE))
    assert found.pop("catalogue") == f"{cmake_version(version)} {version}"
    assert {k: v == "1" for k, v in found.items()} == requests


PKG_CONFIG_REQUESTS = {
    "1.0.0": {"1.0.0": True, "1.0.0.post1": False, "0.9": True},
    "1.0.0.post2": {
        "1.0.0": True,
        "1.0.0.post1": True,
        "1.0.0.post2": True,
        "1.0.0.post3": False,
        "1.0.1": False,
    },
    "2.0.0rc1": {"1.9": True, "2.0.0~rc1": True, "2.0.0~rc2": False, "2.0.0": False},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_pkg_config_orders_the_version(tmp_path: Path, version: str) -> None:
    name = _package(tmp_path, version)
    env = {"PKG_CONFIG_PATH": str(tmp_path / "lib" / "pkgconfig"), "PATH": "/usr/bin:/bin"}

    def pkg_config(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["pkg-config", *args, name], env=env, capture_output=True, text=True)

    assert pkg_config("--modversion").stdout.strip() == rpm_version(version)
    assert pkg_config(f"--exact-version={rpm_version(version)}").returncode == 0
    answers = {
        at_least: pkg_config(f"--atleast-version={at_least}").returncode == 0
        for at_least in PKG_CONFIG_REQUESTS[version]
    }
    assert answers == PKG_CONFIG_REQUESTS[version]


def test_rpm_orders_versions_as_pep440_does() -> None:
    published = [
        "1.0.0",
        "1.0.0.post1",
        "1.0.0.post2",
        "1.0.0.post10",
        "1.0.1rc1",
        "1.0.1",
        "2.0.0rc1",
        "2.0.0",
    ]
    assert sorted(published, key=Version) == published
    pairs = [(rpm_version(published[i - 1]), rpm_version(published[i])) for i in range(1, len(published))]
    script = "".join(f'print(rpm.vercmp("{a}", "{b}"), " ")' for a, b in pairs)
    done = subprocess.run(["rpm", "--eval", f"%{{lua:{script}}}"], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["-1"] * len(pairs)  # each older than the next, as PEP 440 says


def test_specs_carry_versions_rpm_accepts(tmp_path: Path) -> None:
    reg = tmp_path / "registry"
    write_registry_yaml(reg)
    git(reg, "init", "-q", "-b", "main")
    for i, version in enumerate(VERSIONS):
        write_entry(reg, entry(f"v{i}", version=version))
    commit(reg, "Add models")
    for flavor in ("rpm", "cmsbuild"):
        files = flavors.render_all(Registry(reg), flavor)
        for i, version in enumerate(VERSIONS):
            text = files[f"tfaot-model-v{i}.spec"]
            if flavor == "cmsbuild":  # cmsBuild's version is the published one, part of the package's name
                assert text.startswith(f"### RPM external tfaot-model-v{i} {version}\n")
                text = as_cmsbuild_would(text, files["tfaot-compile.file"])
            spec = tmp_path / f"{flavor}-v{i}.spec"
            spec.write_text(text)
            query = subprocess.run(
                ["rpmspec", "-q", "--srpm", "--qf", "%{version}", str(spec)],
                capture_output=True,
                text=True,
                check=True,
            )
            assert query.stdout == (rpm_version(version) if flavor == "rpm" else version), flavor


@pytest.mark.parametrize("version", VERSIONS)
def test_scram_reads_the_tool_file_version(version: str) -> None:
    text = scram_tool.render_model_tool("tfaot-model-tiny", version, "", scram_tool.RUNTIME_TOOL)
    (tool,) = read_as_scram(text)
    assert tool.get("version") == version == scram_tool.parse(text).version
