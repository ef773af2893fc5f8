"""The compiled Abseil the XLA runtime and every consumer link against.

The TensorFlow wheel ships Abseil headers but no Abseil library, and Debian's
is too old (no absl/log). A registry-only source that is new enough: the copy
of Abseil vendored inside the grpcio sdist (no build files; its library
sources compile with plain g++). It is built once per (source, compiler,
recipe) into

    CACHE/abseil/<key>/
        include/absl/...     every header of the tree
        lib/libtfaot_absl.a
        LICENSE              gRPC's (which covers its vendored copy)
        COMPLETE             written last
"""

import json
import os
import re
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfaot_dist import process
from tfaot_dist.cache import COMPLETE, Cache, ensure_entry
from tfaot_dist.cxx import build_kit
from tfaot_dist.cxx.build_kit import BUILD_FLAGS, CONSUMER_CXXFLAGS, RECIPE_VERSION, Compiler, Log
from tfaot_dist.errors import RuntimeBuildError, SourceUnavailable
from tfaot_dist.util.fs import copy_file, file_lock, sha256_bytes, sha256_file, temp_sibling


@dataclass(frozen=True)
class AbseilSource:
    """Where the compiled Abseil comes from: a vendored copy inside an sdist."""

    dist: str
    version: str
    sha256: str  # of the sdist; pinned so a changed upload cannot slip in
    subdir: str  # the Abseil root inside the sdist's top directory


ABSEIL = AbseilSource(
    dist="grpcio",
    version="1.85.1",
    sha256="5f530287d5de5f7f66089ead81de44f6787162944dab3922efa65dfdff108a1d",
    subdir="third_party/abseil-cpp",
)

# A wheel whose Abseil headers are in one of these inline namespaces gets the
# sdist that vendors the same Abseil release (TF 2.12: lts_20220623, grpcio
# 1.51.3 vendors it); any other (TF 2.21's lts_20250814) gets ABSEIL, a newer
# Abseil whose headers then replace the wheel's.
ABSEIL_BY_NAMESPACE = {
    "lts_20220623": AbseilSource(
        dist="grpcio",
        version="1.51.3",
        sha256="be7b2265b7527bb12109a7727581e274170766d5b3c9258d4e466f4872522d7a",
        subdir="third_party/abseil-cpp",
    ),
}

# Abseil's own build compiles the hardware AES Randen with these on x86-64;
# the code is only entered after a run-time CPU check.
FILE_FLAGS = {"x86_64": {"absl/random/internal/randen_hwaes.cc": ("-maes", "-msse4.1")}}

LIB = "libtfaot_absl.a"
MARKER = COMPLETE


def source_for(options_h: Path) -> AbseilSource:
    """The Abseil source that matches the Abseil headers whose absl/base/options.h this is."""
    return ABSEIL_BY_NAMESPACE.get(inline_namespace(options_h), ABSEIL)


def inline_namespace(options_h: Path) -> str:
    m = re.search(r"#define\s+ABSL_OPTION_INLINE_NAMESPACE_NAME\s+(\w+)", options_h.read_text())
    return m.group(1) if m else "unknown"


def identity(cc: Compiler, src: AbseilSource) -> dict[str, Any]:
    """Everything that makes the bytes of an Abseil build (also part of the runtime's key)."""
    return {
        "recipe": RECIPE_VERSION,
        "source": [src.dist, src.version, src.sha256, src.subdir],
        "compiler": [cc.version_line, cc.full_version, cc.target],
        "flags": [CONSUMER_CXXFLAGS, BUILD_FLAGS, FILE_FLAGS.get(cc.arch, {})],
    }


def key(cc: Compiler, src: AbseilSource) -> str:
    digest = sha256_bytes(json.dumps(identity(cc, src), sort_keys=True).encode())
    return f"{src.dist}-{src.version}-{cc.target}-{digest[:16]}"


def ensure_abseil(
    python: Path, cc: Compiler, src: AbseilSource, cache_dir: Path, log: Log, jobs: int, offline: bool = False
) -> Path:
    """The cached Abseil build: include/absl (all headers) and lib/libtfaot_absl.a.

    python: a Python with pip (the toolchain's) to download the sdist with; offline: never download
    (the sdist must already be in CACHE/downloads, as a cmsBuild spec's Source puts it there).
    """
    final = Cache(cache_dir).abseil / key(cc, src)

    def build(staged: Path) -> None:
        sdist = _ensure_sdist(python, src, cache_dir, log, offline)
        log(f"building Abseil from {sdist.name} ({jobs} jobs)")
        t0 = time.monotonic()
        _build(sdist, src, cc, staged, log, jobs)
        log(f"Abseil built in {time.monotonic() - t0:.0f} s")

    return ensure_entry(final, build, marker=MARKER, log=log)


def _ensure_sdist(
    python: Path, source: AbseilSource, cache_dir: Path, log: Log, offline: bool = False
) -> Path:
    """The grpcio sdist in CACHE/downloads/, fetched with pip when missing.

    The toolchain's pip does the download: the toolchain is a venv made with
    pip, while the Python running tfaot-dist may have none.
    """
    downloads = Cache(cache_dir).downloads
    name = f"{source.dist}-{source.version}.tar.gz"
    target = downloads / name
    if target.is_file() and sha256_file(target) == source.sha256:
        return target
    if offline:
        raise SourceUnavailable(
            f"offline: {name} (sha256 {source.sha256}, the Abseil sources of the runtime) "
            f"is not in {downloads}"
        )
    with file_lock(downloads / f"{name}.lock", log):
        if target.is_file() and sha256_file(target) == source.sha256:
            return target
        log(f"downloading {source.dist}=={source.version} sdist (vendored Abseil sources)")
        staged = temp_sibling(target)
        try:
            process.run(
                [
                    python,
                    "-m",
                    "pip",
                    "download",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--no-binary",
                    source.dist,
                    "-d",
                    staged,
                    f"{source.dist}=={source.version}",
                ],
                what=f"pip download {source.dist}",
                error=RuntimeBuildError,
            )
            got = staged / name
            if not got.is_file():
                raise RuntimeBuildError(f"pip download did not produce {name}")
            sha = sha256_file(got)
            if sha != source.sha256:
                raise RuntimeBuildError(f"{name}: sha256 {sha} does not match the pinned {source.sha256}")
            os.replace(got, target)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    return target


def library_sources(root: Path) -> list[str]:
    """The library sources of an Abseil tree that comes without build files.

    A library source is a .cc file whose name mentions neither test nor
    benchmark, that includes no gtest/gmock/benchmark header and defines no
    main(): this drops tests, benchmarks, test helpers and table generators.
    Also dropped: cctz's time_zone_name_win.cc, the one Windows-only file
    that is not guarded by #ifdef _WIN32 inside (Abseil's CMake adds it on
    Windows only).
    """
    testish = re.compile(r"test|benchmark|_win\.cc$")
    harness = re.compile(r'#\s*include\s*[<"](gtest|gmock|benchmark)/|^\s*int\s+main\s*\(', re.M)
    out = []
    for path in sorted((root / "absl").rglob("*.cc")):
        if testish.search(path.name) or harness.search(path.read_text(errors="replace")):
            continue
        out.append(path.relative_to(root).as_posix())
    return out


def _build(sdist: Path, source: AbseilSource, cc: Compiler, out: Path, log: Log, jobs: int) -> None:
    work = out / "work"
    src = _extract(sdist, source, work / "src")
    sources = library_sources(src)
    log(f"  {len(sources)} Abseil sources")
    file_flags = FILE_FLAGS.get(cc.arch, {})
    objdir = work / "obj"
    objdir.mkdir(parents=True)
    units = []
    for rel in sources:
        obj = objdir / build_kit.object_name(rel)
        units.append(
            build_kit.Unit(
                cmd=[
                    cc.command,
                    *CONSUMER_CXXFLAGS,
                    *BUILD_FLAGS,
                    *file_flags.get(rel, ()),
                    *build_kit.reproducible_flags(rel, {work: "tfaot-build"}),
                    "-I.",
                    "-c",
                    rel,
                    "-o",
                    str(obj),
                ],
                cwd=src,
                obj=obj,
                name=rel,
            )
        )
    build_kit.compile_all(units, jobs, log, RuntimeBuildError)
    (out / "lib").mkdir()
    build_kit.archive(out / "lib" / LIB, [u.obj for u in units], RuntimeBuildError)
    # Headers: every .h/.inc of the tree, so the overlay sees a complete absl.
    for path in sorted((src / "absl").rglob("*")):
        if path.is_file() and path.suffix in (".h", ".inc"):
            copy_file(path, out / "include" / path.relative_to(src))
    copy_file(src / "LICENSE.grpc", out / "LICENSE")
    shutil.rmtree(work)


def _extract(sdist: Path, source: AbseilSource, dest: Path) -> Path:
    """Extract the vendored Abseil (and gRPC's license) from the sdist into dest."""
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        top = names[0].split("/", 1)[0]
        prefix = f"{top}/{source.subdir}/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        if not any(m.name == f"{prefix}absl/base/options.h" for m in members):
            raise RuntimeBuildError(f"{sdist.name} has no {source.subdir}/absl")
        for m in members:
            m.name = m.name[len(prefix) :]
        license_member = tar.getmember(f"{top}/LICENSE")
        license_member.name = "LICENSE.grpc"
        members.append(license_member)
        # The "data" filter refuses absolute names, .. and links out of dest
        # (Python >= 3.11.4); older 3.11 gets the same check by hand.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:
            for m in members:
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise RuntimeBuildError(f"{sdist.name}: unsafe member {m.name}")
            tar.extractall(dest, members=members)
    return dest
