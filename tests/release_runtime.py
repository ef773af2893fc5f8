"""A release-like tensorflow-xla-runtime, built the way cmsdist's tensorflow-xla-runtime.spec builds it.

cmsdist (IB/CMSSW_14_2_X/master) builds the wheel's own xla_aot_runtime_src/CMakeLists.txt with
BUILD_SHARED_LIBS=ON after removing runtime_fork_join.cc, its patch turning the library SHARED and
linking it to the release's abseil-cpp (absl::strings, absl::str_format_internal, shared libraries
of Abseil 20220623, the inline namespace of TF 2.12's headers), and installs only
lib/libtf_xla_runtime.so. Here the Abseil is our own build of the same Abseil release
(cxx/abseil.py: PIC objects, one static archive), turned into one shared library with a minimal
CMake package config, so the CMake edit is the release's: find_package(absl) + those two targets.

    CACHE/test-release-runtime/<key>/
        tensorflow-xla-runtime/lib/libtf_xla_runtime.so   needs libtfaot_absl.so, no RUNPATH: consumers find
                                                           it through ABSEIL_CPP_ROOT
        abseil-cpp/include/absl/...  abseil-cpp/lib/libtfaot_absl.so
        COMPLETE

Built once per key (the wheel's runtime sources, the Abseil build, the compiler, this file).
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.cache import ensure_entry
from tfaot_dist.cxx import abseil, build_kit
from tfaot_dist.errors import RuntimeBuildError
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_bytes, sha256_file, tree_digest
from tfaot_dist.util.progress import Log

RUNTIME_DIR = "tensorflow-xla-runtime"
ABSEIL_DIR = "abseil-cpp"
ABSEIL_SO = "libtfaot_absl.so"
CXXFLAGS = (
    "-fPIC -Wl,-z,defs -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1"  # cmsdist: -fPIC -Wl,-z,defs + arch flags
)


def tensorflow_dir(toolchain: Toolchain) -> Path:
    return next((toolchain.root / "lib").glob("python3.*/site-packages")) / "tensorflow"


def ensure_release_runtime(
    toolchain: Toolchain, cache: Path, log: Log = lambda m: print(m, file=sys.stderr)
) -> Path:
    """The cached entry: release-like tensorflow-xla-runtime and abseil-cpp roots."""
    tf = tensorflow_dir(toolchain)
    cc = build_kit.compiler(build_kit.CXX, RuntimeBuildError)
    absl_source = abseil.source_for(tf / "include" / "absl" / "base" / "options.h")
    identity = {
        "runtime_src": tree_digest(tf / "xla_aot_runtime_src"),
        "abseil": abseil.key(cc, absl_source),
        "compiler": [cc.version_line, cc.full_version, cc.target],
        "recipe": sha256_file(Path(__file__)),
    }
    key = (
        f"tf{toolchain.tensorflow_version}-{sha256_bytes(json.dumps(identity, sort_keys=True).encode())[:16]}"
    )
    final = Path(cache) / "test-release-runtime" / key

    def build(staged: Path) -> None:
        jobs = max(1, len(os.sched_getaffinity(0)))
        absl = abseil.ensure_abseil(toolchain.python, cc, absl_source, Path(cache), log, jobs)
        t0 = time.monotonic()
        _shared_abseil(cc, absl, staged / ABSEIL_DIR)
        _runtime(tf, staged / ABSEIL_DIR, staged / "work", staged / RUNTIME_DIR, jobs)
        shutil.rmtree(staged / "work")
        log(f"release-like tensorflow-xla-runtime built in {time.monotonic() - t0:.0f} s")

    return ensure_entry(final, build, log=log)


def _shared_abseil(cc: build_kit.Compiler, absl: Path, root: Path) -> None:
    """Our PIC Abseil archive as one shared library, with the two CMake targets the release's patch links."""
    (root / "lib").mkdir(parents=True)
    shutil.copytree(absl / "include", root / "include")
    objects = root / "objects"
    objects.mkdir()
    process.run(
        ["ar", "x", absl / "lib" / abseil.LIB], what="unpack Abseil", error=RuntimeBuildError, cwd=objects
    )
    process.run(
        [
            cc.command,
            "-shared",
            f"-Wl,-soname,{ABSEIL_SO}",
            "-Wl,-z,defs",
            "-o",
            root / "lib" / ABSEIL_SO,
            *_self_contained(sorted(objects.glob("*.o"))),
            "-lpthread",
        ],
        what="link the shared Abseil",
        error=RuntimeBuildError,
    )
    shutil.rmtree(objects)
    config = root / "lib" / "cmake" / "absl" / "abslConfig.cmake"
    config.parent.mkdir(parents=True)
    targets = "".join(
        f"add_library(absl::{t} SHARED IMPORTED)\n"
        f'set_target_properties(absl::{t} PROPERTIES IMPORTED_LOCATION "${{_absl_root}}/lib/{ABSEIL_SO}"\n'
        f'  IMPORTED_NO_SONAME FALSE INTERFACE_INCLUDE_DIRECTORIES "${{_absl_root}}/include")\n'
        for t in ("strings", "str_format_internal")
    )
    config.write_text(
        'get_filename_component(_absl_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)\n' + targets
    )


def _self_contained(objects: list[Path]) -> list[Path]:
    """The objects whose Abseil references the others define: the archive holds a few members that
    need test helpers (left out of our build), which a shared library of every member cannot have."""

    def symbols(obj: Path, *flag: str) -> set[str]:
        out = process.run(["nm", "-P", *flag, obj], what=f"nm {obj.name}", error=RuntimeBuildError)
        return {line.split()[0] for line in out.splitlines() if line.strip()}

    defined = {obj: symbols(obj, "--defined-only") for obj in objects}
    undefined = {obj: {s for s in symbols(obj, "-u") if "absl" in s} for obj in objects}
    kept = list(objects)
    while True:
        available = set().union(*(defined[o] for o in kept))
        keep = [o for o in kept if undefined[o] <= available]
        if keep == kept:
            return kept
        kept = keep


def _runtime(tf: Path, absl_root: Path, work: Path, out: Path, jobs: int) -> None:
    """cmsdist's %prep/%build: the wheel's runtime tree, fork-join removed, SHARED + Abseil, cmake, make."""
    shutil.copytree(tf / "xla_aot_runtime_src", work / "tensorflow" / "xla_aot_runtime_src")
    (work / "tensorflow" / "include").symlink_to(tf / "include")  # CMakeLists.txt names ../include
    src = work / "tensorflow" / "xla_aot_runtime_src"
    for fork_join in src.rglob("runtime_fork_join.cc"):
        fork_join.unlink()
    cmakelists = src / "CMakeLists.txt"
    text = cmakelists.read_text()
    static = "add_library(tf_xla_runtime STATIC"
    if static not in text:
        raise RuntimeBuildError(f"{cmakelists}: no {static!r} to make shared")
    text = text.replace(static, "find_package(absl REQUIRED)\nadd_library(tf_xla_runtime SHARED")
    cmakelists.write_text(
        text + "target_link_libraries(tf_xla_runtime absl::strings absl::str_format_internal)\n"
    )
    build = work / "build"
    # --no-as-needed: the library names Abseil's even where TF 2.12's sources use none of it (Debian's
    # linker drops unused ones), so a consumer must find it as in the release: through ABSEIL_CPP_ROOT.
    process.run(
        [
            "cmake",
            "-S",
            src,
            "-B",
            build,
            f"-DCMAKE_CXX_FLAGS={CXXFLAGS}",
            "-DCMAKE_CXX_STANDARD=17",
            "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--no-as-needed",
            f"-DCMAKE_PREFIX_PATH={absl_root}",
            "-DBUILD_SHARED_LIBS=ON",
            "-DCMAKE_SKIP_RPATH=ON",
        ],
        what="cmake of the release-like runtime",
        error=RuntimeBuildError,
    )
    process.run(
        ["make", "-C", build, f"-j{jobs}"],
        what="make of the release-like runtime",
        error=RuntimeBuildError,
        timeout=3600,
    )
    (out / "lib").mkdir(parents=True)
    shutil.copyfile(build / "libtf_xla_runtime.so", out / "lib" / "libtf_xla_runtime.so")
