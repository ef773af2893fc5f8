"""The XLA AOT runtime library that every compiled model links against.

A model compiled by tfcompile is kernels plus a generated header; running it
needs `libtf_xla_runtime.a`, which the TensorFlow wheel ships only as sources
(`tensorflow/xla_aot_runtime_src/`), and a compiled Abseil, which the wheel
does not ship at all (headers only). This module builds both once per
(TensorFlow, compiler, recipe) and caches them as a self-contained tree:

    CACHE/runtime/<key>/
        include/            only the headers a generated model header can pull
                            in (computed with the compiler), real files
        lib/libtf_xla_runtime.a
        lib/libtfaot_absl.a
        licenses/           TensorFlow's and gRPC's (Abseil's) license texts
        runtime.json        flags and libraries a consumer needs
        COMPLETE            written last

Abseil comes from the vendored copy inside the grpcio sdist (a registry-only
source that is new enough: the Debian package lacks absl/log). Because that
Abseil is newer than the headers in the wheel, the runtime and every consumer
must see its headers instead of the wheel's; the runtime is compiled through
an include overlay (the wheel's include entries, with `absl` swapped), and
the shipped include/ already holds the swapped headers.

Builds are deterministic: objects are compiled from relative paths with the
build directories mapped away, and archives are written by `ar` in
deterministic mode with sorted members, so two builds of the same inputs in
different directories give identical bytes.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.errors import CompileFailed
from tfaot_dist.fsutil import remove_stale_siblings, replace_dir, sha256_file, temp_sibling, write_atomic

# Bump when anything below changes the bytes of a build (flags, file
# selection, layout), so old cache entries are not reused.
RECIPE_VERSION = 1

CXX = "g++"
AR = "ar"


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

# Flags a consumer must compile with; the runtime and Abseil use them too, so
# both sides agree on the std::string ABI and the language level.
CONSUMER_CXXFLAGS = ("-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1")
SYSTEM_LIBS = ("-lpthread", "-lm")

# No -g: debug info would embed build paths and grow the archives tenfold.
# NDEBUG matches TensorFlow's own optimized builds (Eigen asserts sit in the
# dot and convolution loops of the runtime).
_BUILD_FLAGS = ("-O2", "-DNDEBUG", "-fPIC")

# The runtime's CMakeLists.txt warning switches, plus the deprecation noise of
# tsl/platform/mutex.h. `-include string`: with the newer Abseil,
# xla/service/custom_call_status_internal.h no longer gets <string> through
# other headers.
_RUNTIME_FLAGS = (
    "-include", "string",
    "-ftemplate-backtrace-limit=0",
    "-Wno-ignored-attributes",
    "-Wno-deprecated-copy",
    "-Wno-cast-qual",
    "-Wno-sign-compare",
    "-Wno-deprecated-declarations",
)

# Abseil's own build compiles the hardware AES Randen with these on x86-64;
# the code is only entered after a run-time CPU check.
_ABSEIL_FILE_FLAGS = {"x86_64": {"absl/random/internal/randen_hwaes.cc": ("-maes", "-msse4.1")}}

# Every header tfcompile's C++ code generator (TF 2.21) can name in a
# generated header: the fixed ones and the per-thunk ones (sort, convolution,
# dot, top-k, notification). The program-shape variant also includes
# xla/xla_data.pb.h, which needs protobuf; saved_model_cli and our worker
# compile with gen_program_shape=False, so it is left out on purpose.
CODEGEN_HEADERS = (
    "absl/log/check.h",
    "absl/synchronization/blocking_counter.h",
    "absl/synchronization/notification.h",
    "xla/backends/cpu/runtime/kernel_c_api.h",
    "xla/types.h",
    "xla/backends/cpu/runtime/sort_lib.h",
    "xla/backends/cpu/runtime/convolution_lib.h",
    "xla/backends/cpu/runtime/dot_lib.h",
    "xla/backends/cpu/runtime/topk_lib.h",
    "tensorflow/compiler/tf2xla/xla_compiled_cpu_function.h",
    "tensorflow/core/platform/types.h",
)

# Eigen picks architecture headers by the target's ISA macros, so a consumer
# built with -march=... needs headers a baseline scan never opens. The header
# set is the union over these flag sets (unsupported ones are skipped).
_SCAN_VARIANTS = {
    "x86_64": (
        (),
        ("-march=x86-64-v2",),
        ("-march=x86-64-v3",),
        ("-march=x86-64-v4",),
        ("-march=sapphirerapids",),
    ),
}
_SCAN_STDS = ("-std=c++17", "-std=c++20")

# Runtime sources left out: the multi-threaded fork-join entry (AOT models are compiled
# single-threaded) needs TSL logging and mutex code the wheel does not ship (TF 2.12;
# cmsdist's tensorflow-xla-runtime removes it too). Newer wheels no longer have it.
_EXCLUDED_SOURCES = ("runtime_fork_join.cc",)

RUNTIME_LIB = "libtf_xla_runtime.a"
ABSEIL_LIB = "libtfaot_absl.a"
MANIFEST = "runtime.json"
MARKER = "COMPLETE"

Log = Callable[[str], None]


class RuntimeBuildError(CompileFailed):
    """Building the runtime, or compiling against it, failed."""


@dataclass(frozen=True)
class XlaRuntime:
    root: Path
    include_dir: Path
    libs: list[Path]  # link order: runtime before Abseil
    cxxflags: list[str]
    ldflags: list[str]  # system libraries, after libs
    tensorflow_version: str
    key: str
    compiler: str = CXX

    @classmethod
    def from_dir(cls, root: Path) -> "XlaRuntime":
        """Load a complete runtime tree (also after it was moved elsewhere)."""
        root = Path(root)
        if not (root / MARKER).is_file():
            raise RuntimeBuildError(f"{root}: not a complete XLA runtime tree")
        meta = json.loads((root / MANIFEST).read_text())
        return cls(
            root=root,
            include_dir=root / meta["include_dir"],
            libs=[root / rel for rel in meta["libs"]],
            cxxflags=list(meta["cxxflags"]),
            ldflags=list(meta["system_libs"]),
            tensorflow_version=meta["tensorflow"]["version"],
            key=meta["key"],
            compiler=meta["compiler"]["command"],
        )


# ---------------------------------------------------------------- identities

# Runs inside the toolchain's Python. find_spec locates the package without
# importing TensorFlow (which takes seconds).
_TF_QUERY = r"""
import importlib.metadata as md, importlib.util, json, sys
spec = importlib.util.find_spec("tensorflow")
if spec is None or not spec.submodule_search_locations:
    sys.exit("tensorflow is not installed in this environment")
# Several distributions may put files under tensorflow/ (plugins); the
# TensorFlow wheel is the one that owns tensorflow/__init__.py.
names = sorted(set(md.packages_distributions().get("tensorflow", [])))
owners = [n for n in names
          if any(str(f) == "tensorflow/__init__.py" for f in md.distribution(n).files or ())]
if not (owners or names):
    sys.exit("no distribution provides the tensorflow package")
dist = (owners or names)[0]
print(json.dumps({"dir": list(spec.submodule_search_locations)[0],
                  "dist": dist, "version": md.version(dist)}))
"""


@dataclass(frozen=True)
class _TensorFlow:
    dir: Path
    dist: str
    version: str

    @property
    def include(self) -> Path:
        return self.dir / "include"

    @property
    def runtime_src(self) -> Path:
        return self.dir / "xla_aot_runtime_src"

    @property
    def abseil(self) -> AbseilSource:
        """The Abseil source that matches this wheel's Abseil headers."""
        return ABSEIL_BY_NAMESPACE.get(_absl_namespace(self.include / "absl" / "base" / "options.h"), ABSEIL)


@dataclass(frozen=True)
class _Compiler:
    command: str
    version_line: str
    full_version: str
    target: str

    @property
    def arch(self) -> str:
        return self.target.split("-", 1)[0]


def _tensorflow(toolchain_python: Path) -> _TensorFlow:
    out = _run([str(toolchain_python), "-I", "-c", _TF_QUERY], "locate TensorFlow")
    info = json.loads(out)
    tf = _TensorFlow(Path(info["dir"]), info["dist"], info["version"])
    if not (tf.runtime_src / "CMakeLists.txt").is_file() or not tf.include.is_dir():
        raise RuntimeBuildError(
            f"{tf.dist} {tf.version} at {tf.dir} ships no xla_aot_runtime_src/ or include/")
    return tf


def _compiler(cxx: str) -> _Compiler:
    return _Compiler(
        command=cxx,
        version_line=_run([cxx, "--version"], "compiler version").splitlines()[0].strip(),
        full_version=_run([cxx, "-dumpfullversion"], "compiler version").strip(),
        target=_run([cxx, "-dumpmachine"], "compiler target").strip(),
    )


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _tree_sha(root: Path) -> str:
    """Digest of the names and contents of the files below root."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(sha256_file(path).encode() + b"\n")
    return h.hexdigest()


def _abseil_identity(cc: _Compiler, src: AbseilSource) -> dict:
    return {
        "recipe": RECIPE_VERSION,
        "source": [src.dist, src.version, src.sha256, src.subdir],
        "compiler": [cc.version_line, cc.full_version, cc.target],
        "flags": [CONSUMER_CXXFLAGS, _BUILD_FLAGS, _ABSEIL_FILE_FLAGS.get(cc.arch, {})],
    }


def _abseil_key(cc: _Compiler, src: AbseilSource) -> str:
    return f"{src.dist}-{src.version}-{cc.target}-{_digest(_abseil_identity(cc, src))[:16]}"


def _runtime_key(tf: _TensorFlow, cc: _Compiler) -> str:
    identity = {
        "recipe": RECIPE_VERSION,
        "tensorflow": [tf.dist, tf.version],
        # The sources themselves, so a local build reusing a version string
        # cannot hit a stale entry; cheap (21 files).
        "runtime_src": _tree_sha(tf.runtime_src),
        "abseil": _abseil_identity(cc, tf.abseil),
        "flags": [CONSUMER_CXXFLAGS, _BUILD_FLAGS, _RUNTIME_FLAGS, SYSTEM_LIBS],
        "headers": [CODEGEN_HEADERS, _SCAN_VARIANTS.get(cc.arch, ((),)), _SCAN_STDS],
    }
    excluded = _excluded_sources(tf.runtime_src)
    if excluded:  # only then: the keys of runtimes without such files stay as they were
        identity["excluded_sources"] = excluded
    return f"tf{tf.version}-gcc{cc.full_version}-{cc.target}-{_digest(identity)[:16]}"


def runtime_key(toolchain_python: Path, *, cxx: str = CXX) -> str:
    """The cache key of the runtime built from this toolchain with this compiler."""
    return _runtime_key(_tensorflow(Path(toolchain_python)), _compiler(cxx))


# ---------------------------------------------------------------- public API


def ensure_runtime(toolchain_python: Path, cache_dir: Path, log: Log = print, *,
                   cxx: str = CXX, jobs: int | None = None) -> XlaRuntime:
    """Return the cached runtime for this toolchain, building it first if needed.

    Safe to call from concurrent processes: one builds, the others wait on the
    lock and then find the finished tree.
    """
    tf = _tensorflow(Path(toolchain_python))
    cc = _compiler(cxx)
    key = _runtime_key(tf, cc)
    cache_dir = Path(cache_dir).absolute()
    final = cache_dir / "runtime" / key
    found = _load_complete(final, key)
    if found:
        return found
    with _lock(cache_dir / "runtime" / f"{key}.lock", log):
        found = _load_complete(final, key)  # another process may have finished it
        if found:
            return found
        remove_stale_siblings(final)
        jobs = jobs or max(1, len(os.sched_getaffinity(0)))
        abseil = _ensure_abseil(Path(toolchain_python), cc, tf.abseil, cache_dir, log, jobs)
        log(f"building XLA AOT runtime {key} ({jobs} jobs)")
        t0 = time.monotonic()
        staged = temp_sibling(final)
        try:
            _build_runtime(tf, cc, key, abseil, staged, log, jobs)
            if final.exists():  # an incomplete leftover, we hold the lock
                shutil.rmtree(final)
            replace_dir(staged, final)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        log(f"XLA AOT runtime built in {time.monotonic() - t0:.0f} s: {final}")
    return XlaRuntime.from_dir(final)


def installed_runtime(root: Path, tensorflow_version: str) -> XlaRuntime:
    """An XLA runtime installed elsewhere (--runtime DIR), checked to belong to this TensorFlow."""
    try:
        runtime = XlaRuntime.from_dir(Path(root))
    except (OSError, ValueError, KeyError) as exc:
        raise RuntimeBuildError(f"--runtime {root}: unreadable {MANIFEST}: {exc}") from None
    if runtime.tensorflow_version != tensorflow_version:
        raise RuntimeBuildError(f"--runtime {root}: built for TensorFlow {runtime.tensorflow_version}, "
                                f"the model was compiled with {tensorflow_version}")
    missing = [p for p in runtime.libs if not p.is_file()]
    if missing or not runtime.include_dir.is_dir():
        raise RuntimeBuildError(f"--runtime {root}: missing {missing[0] if missing else runtime.include_dir}")
    return runtime


def compile_consumer(runtime: XlaRuntime, sources: list[Path], include_dirs: list[Path],
                     link_inputs: list[Path], output: Path, extra_flags: Sequence[str] = ()) -> None:
    """Compile and link a C++ program against a model's objects and the runtime.

    link_inputs (model objects, archives) come before the runtime libraries so
    the linker resolves their runtime references; extra_flags come after the
    defaults and so override them (e.g. -O0, -g).
    """
    cmd = [runtime.compiler, *runtime.cxxflags, "-O2", *extra_flags,
           *(f"-I{d}" for d in include_dirs), f"-I{runtime.include_dir}",
           *(str(s) for s in sources), *(str(p) for p in link_inputs),
           *(str(lib) for lib in runtime.libs), *runtime.ldflags, "-o", str(output)]
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    _run(cmd, f"compile {Path(output).name}")


# ---------------------------------------------------------------- Abseil


def _ensure_abseil(python: Path, cc: _Compiler, src: AbseilSource, cache_dir: Path, log: Log,
                   jobs: int) -> Path:
    """The cached Abseil build: include/absl (all headers) and lib/libtfaot_absl.a."""
    key = _abseil_key(cc, src)
    final = cache_dir / "abseil" / key
    if (final / MARKER).is_file():
        return final
    with _lock(cache_dir / "abseil" / f"{key}.lock", log):
        if (final / MARKER).is_file():
            return final
        remove_stale_siblings(final)
        sdist = _ensure_sdist(python, src, cache_dir, log)
        log(f"building Abseil from {sdist.name} ({jobs} jobs)")
        t0 = time.monotonic()
        staged = temp_sibling(final)
        try:
            _build_abseil(sdist, src, cc, staged, log, jobs)
            write_atomic(staged / MARKER, key + "\n")
            if final.exists():
                shutil.rmtree(final)
            replace_dir(staged, final)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        log(f"Abseil built in {time.monotonic() - t0:.0f} s")
    return final


def _ensure_sdist(python: Path, source: AbseilSource, cache_dir: Path, log: Log) -> Path:
    """The grpcio sdist in CACHE/downloads/, fetched with pip when missing.

    The toolchain's pip does the download: the toolchain is a venv made with
    pip, while the Python running tfaot-dist may have none.
    """
    downloads = cache_dir / "downloads"
    name = f"{source.dist}-{source.version}.tar.gz"
    target = downloads / name
    if target.is_file() and sha256_file(target) == source.sha256:
        return target
    with _lock(downloads / f"{name}.lock", log):
        if target.is_file() and sha256_file(target) == source.sha256:
            return target
        log(f"downloading {source.dist}=={source.version} sdist (vendored Abseil sources)")
        staged = temp_sibling(target)
        try:
            _run([str(python), "-m", "pip", "download", "--disable-pip-version-check",
                  "--no-deps", "--no-binary", source.dist, "-d", str(staged),
                  f"{source.dist}=={source.version}"], f"pip download {source.dist}")
            got = staged / name
            if not got.is_file():
                raise RuntimeBuildError(f"pip download did not produce {name}")
            digest = sha256_file(got)
            if digest != source.sha256:
                raise RuntimeBuildError(
                    f"{name}: sha256 {digest} does not match the pinned {source.sha256}")
            os.replace(got, target)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    return target


def _abseil_sources(root: Path) -> list[str]:
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


def _build_abseil(sdist: Path, source: AbseilSource, cc: _Compiler, out: Path, log: Log, jobs: int) -> None:
    work = out / "work"
    src = _extract_abseil(sdist, source, work / "src")
    sources = _abseil_sources(src)
    log(f"  {len(sources)} Abseil sources")
    file_flags = _ABSEIL_FILE_FLAGS.get(cc.arch, {})
    objdir = work / "obj"
    objdir.mkdir(parents=True)
    units = []
    for rel in sources:
        obj = objdir / _object_name(rel)
        units.append(_Unit(
            cmd=[cc.command, *CONSUMER_CXXFLAGS, *_BUILD_FLAGS, *file_flags.get(rel, ()),
                 *_reproducible_flags(rel, {work: "tfaot-build"}), "-I.",
                 "-c", rel, "-o", str(obj)],
            cwd=src, obj=obj, name=rel))
    _compile_all(units, jobs, log)
    (out / "lib").mkdir()
    _archive(out / "lib" / ABSEIL_LIB, [u.obj for u in units])
    # Headers: every .h/.inc of the tree, so the overlay sees a complete absl.
    for path in sorted((src / "absl").rglob("*")):
        if path.is_file() and path.suffix in (".h", ".inc"):
            _copy_file(path, out / "include" / path.relative_to(src))
    _copy_file(src / "LICENSE.grpc", out / "LICENSE")
    shutil.rmtree(work)


def _extract_abseil(sdist: Path, source: AbseilSource, dest: Path) -> Path:
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
            m.name = m.name[len(prefix):]
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


# ---------------------------------------------------------------- runtime


def _build_runtime(tf: _TensorFlow, cc: _Compiler, key: str, abseil: Path, out: Path,
                   log: Log, jobs: int) -> None:
    work = out / "work"
    overlay = _make_overlay(tf.include, abseil / "include" / "absl", work / "overlay")
    src_root = tf.runtime_src
    excluded = set(_excluded_sources(src_root))
    sources = sorted(p.relative_to(src_root).as_posix() for p in src_root.rglob("*.cc"))
    sources = [rel for rel in sources if rel not in excluded]
    log(f"  {len(sources)} runtime sources from {tf.dist} {tf.version}")
    objdir = work / "obj"
    objdir.mkdir(parents=True)
    # Mapping the overlay (a temporary directory) and the venv away keeps
    # __FILE__ in headers, and so the objects, independent of where we build.
    maps = {overlay: "tfaot-include", src_root: "xla_aot_runtime_src"}
    units = []
    for rel in sources:
        obj = objdir / _object_name(rel)
        units.append(_Unit(
            cmd=[cc.command, *CONSUMER_CXXFLAGS, *_BUILD_FLAGS, *_RUNTIME_FLAGS,
                 *_reproducible_flags(rel, maps), f"-I{overlay}", "-c", rel, "-o", str(obj)],
            cwd=src_root, obj=obj, name=rel))
    _compile_all(units, jobs, log)

    lib = out / "lib"
    lib.mkdir()
    _archive(lib / RUNTIME_LIB, [u.obj for u in units])
    shutil.copyfile(abseil / "lib" / ABSEIL_LIB, lib / ABSEIL_LIB)
    libs = [lib / RUNTIME_LIB, lib / ABSEIL_LIB]

    # Each TensorFlow's code generator names its own headers: those this wheel has.
    codegen = [h for h in CODEGEN_HEADERS if (overlay / h).is_file()]
    headers = _scan_headers(cc, overlay, codegen, work / "scan")
    include = out / "include"
    for rel in headers:
        _copy_file(overlay / rel, include / rel)
    log(f"  {len(headers)} headers copied to include/")

    _check_headers(cc, include, codegen, work / "check")
    _check_link(cc, libs, work / "check")

    licenses = out / "licenses"
    _copy_file(_tensorflow_license(tf), licenses / "tensorflow-LICENSE")
    if (tf.dir / "THIRD_PARTY_NOTICES.txt").is_file():
        _copy_file(tf.dir / "THIRD_PARTY_NOTICES.txt", licenses / "tensorflow-THIRD_PARTY_NOTICES.txt")
    _copy_file(abseil / "LICENSE", licenses / f"abseil-via-{tf.abseil.dist}-LICENSE")

    shutil.rmtree(work)
    meta = {
        "format": 1,
        "key": key,
        "recipe_version": RECIPE_VERSION,
        "tensorflow": {"distribution": tf.dist, "version": tf.version},
        "abseil": {"source": f"{tf.abseil.dist}=={tf.abseil.version} sdist, {tf.abseil.subdir}",
                   "sdist_sha256": tf.abseil.sha256,
                   "inline_namespace": _absl_namespace(include / "absl" / "base" / "options.h")},
        "compiler": {"command": cc.command, "version": cc.version_line,
                     "full_version": cc.full_version, "target": cc.target},
        "include_dir": "include",
        "cxxflags": list(CONSUMER_CXXFLAGS),
        "libs": [p.relative_to(out).as_posix() for p in libs],
        "system_libs": list(SYSTEM_LIBS),
        "build_flags": [*_BUILD_FLAGS, *_RUNTIME_FLAGS],
        "codegen_headers": codegen,
    }
    write_atomic(out / MANIFEST, json.dumps(meta, indent=1, sort_keys=True) + "\n")
    write_atomic(out / MARKER, key + "\n")  # last: the tree is complete


def _tensorflow_license(tf: _TensorFlow) -> Path:
    """The wheel's license text: include/LICENSE (2.21), else its dist-info's LICENSE (2.12)."""
    if (tf.include / "LICENSE").is_file():
        return tf.include / "LICENSE"
    for info in sorted(tf.dir.parent.glob("*.dist-info")):
        if info.name.split("-", 1)[0].lower() == tf.dist.lower().replace("-", "_") and (info / "LICENSE").is_file():
            return info / "LICENSE"
    raise RuntimeBuildError(f"{tf.dist} {tf.version} at {tf.dir} ships no LICENSE")


def _excluded_sources(src_root: Path) -> list[str]:
    return sorted(p.relative_to(src_root).as_posix() for p in src_root.rglob("*.cc") if p.name in _EXCLUDED_SOURCES)


def _make_overlay(wheel_include: Path, absl: Path, overlay: Path) -> Path:
    """A directory that looks like the wheel's include/ but with our absl.

    Symlinks are fine here: the overlay only lives during the build.
    """
    overlay.mkdir(parents=True)
    for entry in sorted(wheel_include.iterdir()):
        if entry.name != "absl":
            (overlay / entry.name).symlink_to(entry)
    (overlay / "absl").symlink_to(absl)
    return overlay


def _scan_headers(cc: _Compiler, overlay: Path, codegen: list[str], work: Path) -> list[str]:
    """Headers (relative to the overlay) a generated model header can include.

    The compiler's own dependency output over every header tfcompile can emit,
    for each language level and architecture variant.
    """
    work.mkdir(parents=True)
    probe = work / "probe.cc"
    probe.write_text("".join(f'#include "{h}"\n' for h in codegen))
    variants = [(std, *arch) for std in _SCAN_STDS
                for arch in _SCAN_VARIANTS.get(cc.arch, ((),))
                if _compiler_accepts(cc, (std, *arch))]
    found: set[str] = set()
    for i, flags in enumerate(variants):
        depfile = work / f"probe{i}.d"
        _run([cc.command, *CONSUMER_CXXFLAGS, *flags, f"-I{overlay}",
              "-M", "-MF", str(depfile), str(probe)], f"header scan {' '.join(flags)}")
        for dep in _parse_depfile(depfile.read_text()):
            path = os.path.normpath(dep if os.path.isabs(dep) else work / dep)
            rel = os.path.relpath(path, overlay)
            if not rel.startswith(".."):
                found.add(Path(rel).as_posix())
    if not found:
        raise RuntimeBuildError("the header scan found no headers")
    return sorted(found)


def _parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule written by gcc -M."""
    body = text.replace("\\\n", " ").split(":", 1)[1]
    words = re.findall(r"(?:\\.|[^\s\\])+", body)
    return [re.sub(r"\\(.)", r"\1", w).replace("$$", "$") for w in words]


def _compiler_accepts(cc: _Compiler, flags: Iterable[str]) -> bool:
    proc = subprocess.run([cc.command, *flags, "-x", "c++", "-E", "-o", os.devnull, os.devnull],
                          capture_output=True, text=True)
    return proc.returncode == 0


def _check_headers(cc: _Compiler, include: Path, codegen: list[str], work: Path) -> None:
    """The copied headers alone (no wheel, no -include string) compile."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / "headers.cc"
    probe.write_text("".join(f'#include "{h}"\n' for h in codegen))
    _run([cc.command, *CONSUMER_CXXFLAGS, f"-I{include}", "-fsyntax-only", str(probe)],
         "check of the copied headers")


def _check_link(cc: _Compiler, libs: list[Path], work: Path) -> None:
    """Every runtime object links against Abseil and the system libraries alone."""
    work.mkdir(parents=True, exist_ok=True)
    main = work / "link.cc"
    main.write_text("int main() { return 0; }\n")
    exe = work / "link"
    _run([cc.command, *CONSUMER_CXXFLAGS, str(main), "-Wl,--whole-archive", str(libs[0]),
          "-Wl,--no-whole-archive", *(str(p) for p in libs[1:]), *SYSTEM_LIBS, "-o", str(exe)],
         "link check of the runtime")
    _run([str(exe)], "run of the link check")


def _absl_namespace(options_h: Path) -> str:
    m = re.search(r"#define\s+ABSL_OPTION_INLINE_NAMESPACE_NAME\s+(\w+)", options_h.read_text())
    return m.group(1) if m else "unknown"


# ---------------------------------------------------------------- helpers


@dataclass
class _Unit:
    cmd: list[str]
    cwd: Path
    obj: Path
    name: str


def _object_name(rel: str) -> str:
    # Flattened: Abseil has several files with one basename (globals.cc), and
    # ar keys members by basename.
    return rel.removesuffix(".cc").replace("/", "__") + ".o"


def _reproducible_flags(rel: str, maps: dict[Path, str]) -> list[str]:
    flags = [f"-ffile-prefix-map={path}={name}" for path, name in maps.items()]
    return [*flags, f"-frandom-seed={rel}"]


def _compile_all(units: list[_Unit], jobs: int, log: Log) -> None:
    """Compile units on `jobs` threads; stop at the first failure."""
    failed: list[RuntimeBuildError] = []
    done = 0
    lock = threading.Lock()
    step = max(1, len(units) // 8)  # about eight progress lines per stage
    t0 = time.monotonic()

    def one(unit: _Unit) -> None:
        nonlocal done
        if failed:
            return
        proc = subprocess.run(unit.cmd, cwd=unit.cwd, capture_output=True, text=True)
        with lock:
            if proc.returncode != 0:
                failed.append(_error(f"compile {unit.name}", unit.cmd, proc))
                return
            done += 1
            if done % step == 0 or done == len(units):
                log(f"  compiled {done}/{len(units)} ({time.monotonic() - t0:.0f} s)")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, units))
    if failed:
        raise failed[0]


def _archive(target: Path, objects: list[Path]) -> None:
    """A static archive with deterministic headers and sorted members."""
    members = sorted(objects, key=lambda p: p.name)
    # Relative member paths from the object directory: ar stores basenames
    # anyway, this keeps the command line short.
    cwd = members[0].parent
    _run([AR, "rcsD", str(target.absolute()), *(p.name for p in members)], f"archive {target.name}",
         cwd=cwd)


def _copy_file(src: Path, dst: Path) -> None:
    """A real file (symlinks followed) with normal permissions."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


def _load_complete(root: Path, key: str) -> XlaRuntime | None:
    if not (root / MARKER).is_file():
        return None
    try:
        runtime = XlaRuntime.from_dir(root)
    except (OSError, ValueError, KeyError):
        return None
    return runtime if runtime.key == key else None


class _lock:
    """file_lock that says so when it has to wait for another builder."""

    def __init__(self, path: Path, log: Log):
        self.path, self.log = path, log

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.log(f"waiting for another build holding {self.path}")
            fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.fh.close()  # closing releases the lock


def _error(what: str, cmd: Sequence[str], proc: subprocess.CompletedProcess) -> RuntimeBuildError:
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-40:]
    return RuntimeBuildError(
        f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))[:2000]}\n" + "\n".join(tail))


def _run(cmd: Sequence[str], what: str, cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    except OSError as exc:
        raise RuntimeBuildError(f"{what}: cannot run {cmd[0]}: {exc}") from exc
    if proc.returncode != 0:
        raise _error(what, cmd, proc)
    return proc.stdout
