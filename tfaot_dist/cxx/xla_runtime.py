"""The XLA AOT runtime library that every compiled model links against.

A model compiled by tfcompile is kernels plus a generated header; running it
needs `libtf_xla_runtime.a`, which the TensorFlow wheel ships only as sources
(`tensorflow/xla_aot_runtime_src/`), and a compiled Abseil (abseil.py), which
the wheel does not ship at all (headers only). This module builds the runtime
once per (TensorFlow, compiler, recipe) and caches it, with its Abseil, as a
self-contained tree:

    CACHE/runtime/<key>/
        include/            only the headers a generated model header or a runtime
                            part can pull in (computed with the compiler), real files
        lib/libtf_xla_runtime.a   the core; the heavy sources are parts, built for the
                            models that call them (runtime_parts.py, runtime_parts_for)
        lib/libtfaot_absl.a
        licenses/           TensorFlow's and gRPC's (Abseil's) license texts
        runtime.json        flags and libraries a consumer needs
        COMPLETE            written last

Because the Abseil built is newer than the headers in the wheel, the runtime
and every consumer must see its headers instead of the wheel's; the runtime
is compiled through an include overlay (the wheel's include entries, with
`absl` swapped), and the shipped include/ already holds the swapped headers.

Builds are deterministic (build_kit.py), so two builds of the same inputs in
different directories give identical bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.cache import COMPLETE, Cache, ensure_entry
from tfaot_dist.cxx import abseil, build_kit, runtime_kernels, runtime_parts
from tfaot_dist.cxx.abseil import AbseilSource
from tfaot_dist.cxx.build_kit import BUILD_FLAGS, CONSUMER_CXXFLAGS, CXX, RECIPE_VERSION, Compiler
from tfaot_dist.cxx.build_kit import Log as Log  # re-exported: callers type their log with it
from tfaot_dist.documents import RuntimeManifest
from tfaot_dist.errors import RuntimeBuildError as RuntimeBuildError  # re-exported: its old home
from tfaot_dist.toolchain import RELEASE_PATH_VARIABLES, RELEASE_PATHS, PathEnvironment
from tfaot_dist.util.fs import (
    copy_file,
    sha256_bytes,
    tree_digest,
    write_atomic,
)

SYSTEM_LIBS = ("-lpthread", "-lm")

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
ABSEIL_LIB = abseil.LIB
MANIFEST = "runtime.json"
PACKAGE_MANIFEST = "manifest.json"  # of a runtime package (runtime_package.py)
MARKER = COMPLETE


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
    cpu_levels: tuple[str, ...] = ()  # levels of its matrix kernels (runtime_kernels.py); () for none
    kind: str = "tfaot"  # ours (a tree or package); "release": a release's tensorflow-xla-runtime (installed_runtime.py)
    library_sha256: str = ""  # of a release runtime's shared library: its path-free identity

    @classmethod
    def from_dir(cls, root: Path) -> XlaRuntime:
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
            cpu_levels=tuple(meta.get("cpu_levels", ())),
        )

    @classmethod
    def from_package(cls, root: Path) -> XlaRuntime:
        """The runtime of an installed tfaot-xla-runtime package (what its cmsBuild spec puts in %{i})."""
        where = str(root / PACKAGE_MANIFEST)
        meta = RuntimeManifest.from_json(json.loads((root / PACKAGE_MANIFEST).read_text()), where)
        return cls(
            root=root,
            include_dir=root / "include",
            libs=[root / rel for rel in meta.libs],
            cxxflags=list(meta.cxxflags),
            ldflags=list(meta.system_libs),
            tensorflow_version=meta.tensorflow_version,
            key=meta.runtime_key,
            compiler=meta.compiler,
            cpu_levels=meta.cpu_levels,
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
# Reading a wheel's file list takes a quarter of a second: only when there is a choice.
def packages_distributions():  # importlib.metadata's, which Python 3.9 (el9's, CMSSW 14's) lacks
    found = {}
    for d in md.distributions():
        name = d.metadata["Name"]
        tops = (d.read_text("top_level.txt") or "").split() if name else ()
        for top in tops or {f.parts[0] for f in d.files or () if name and len(f.parts) > 1}:
            found.setdefault(top, []).append(name)
    return found
names = sorted(set(getattr(md, "packages_distributions", packages_distributions)().get("tensorflow", [])))
owners = [n for n in names if len(names) > 1 and
          any(str(f) == "tensorflow/__init__.py" for f in md.distribution(n).files or ())]
if not (owners or names):
    sys.exit("no distribution provides the tensorflow package")
dist = (owners or names)[0]
print(json.dumps({"dir": list(spec.submodule_search_locations)[0],
                  "dist": dist, "version": md.version(dist)}))
"""


@dataclass(frozen=True)
class InstalledTensorFlow:
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
        return abseil.source_for(self.include / "absl" / "base" / "options.h")


# What locate_tensorflow found, by interpreter and path environment, with the stamps it holds under:
# the interpreter's and those of the directory holding the tensorflow package (installing, upgrading or
# removing a distribution there changes it; a venv made again is another directory). A process asks
# once per runtime and once per model it builds (part_source): each query starts that Python.
Stamp = tuple[int, int, int]  # st_dev, st_ino, st_mtime_ns
_located: dict[tuple[str, PathEnvironment], tuple[Stamp, Stamp, InstalledTensorFlow]] = {}


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)


def locate_tensorflow(toolchain_python: Path, path_environment: PathEnvironment = ()) -> InstalledTensorFlow:
    key = (str(toolchain_python), tuple(path_environment))
    known = _located.get(key)
    if known and known[:2] == (_stamp(toolchain_python), _stamp(known[2].dir.parent)):
        tf = known[2]
    else:
        tf = _query_tensorflow(toolchain_python, path_environment)
        python_stamp, site_stamp = _stamp(toolchain_python), _stamp(tf.dir.parent)
        if python_stamp and site_stamp:
            _located[key] = (python_stamp, site_stamp, tf)
    if not (tf.runtime_src / "CMakeLists.txt").is_file() or not tf.include.is_dir():
        raise RuntimeBuildError(
            f"{tf.dist} {tf.version} at {tf.dir} ships no xla_aot_runtime_src/ or include/"
        )
    return tf


def _query_tensorflow(toolchain_python: Path, path_environment: PathEnvironment) -> InstalledTensorFlow:
    # Only an existing Python gets the caller's PYTHONPATH/PYTHON3PATH: never one of our venvs.
    env = {k: v for k, v in os.environ.items() if k not in RELEASE_PATH_VARIABLES} | dict(path_environment)
    out = process.run(
        [toolchain_python, "-I", "-c", RELEASE_PATHS + _TF_QUERY],
        what="locate TensorFlow",
        error=RuntimeBuildError,
        env=env,
    )
    info = json.loads(out)
    return InstalledTensorFlow(Path(info["dir"]), info["dist"], info["version"])


def _compiler(cxx: str) -> Compiler:
    return build_kit.compiler(cxx, RuntimeBuildError)


def _runtime_key(tf: InstalledTensorFlow, cc: Compiler) -> str:
    identity = {
        "recipe": RECIPE_VERSION,
        "tensorflow": [tf.dist, tf.version],
        # The sources themselves, so a local build reusing a version string
        # cannot hit a stale entry; cheap (21 files).
        "runtime_src": tree_digest(tf.runtime_src),
        "abseil": abseil.identity(cc, tf.abseil),
        "flags": [CONSUMER_CXXFLAGS, BUILD_FLAGS, runtime_parts.RUNTIME_FLAGS, SYSTEM_LIBS],
        "headers": [CODEGEN_HEADERS, _SCAN_VARIANTS.get(cc.arch, ((),)), _SCAN_STDS],
    }
    excluded = _excluded_sources(tf.runtime_src)
    if excluded:  # only then: the keys of runtimes without such files stay as they were
        identity["excluded_sources"] = excluded
    identity["kernels"] = runtime_kernels.identity(cc, _sources(tf.runtime_src))
    identity["parts"] = runtime_parts.identity()
    digest = sha256_bytes(json.dumps(identity, sort_keys=True).encode())
    return f"tf{tf.version}-gcc{cc.full_version}-{cc.target}-{digest[:16]}"


def runtime_key(toolchain_python: Path, *, cxx: str = CXX) -> str:
    """The cache key of the runtime built from this toolchain with this compiler."""
    return _runtime_key(locate_tensorflow(Path(toolchain_python)), _compiler(cxx))


# ---------------------------------------------------------------- public API


def ensure_runtime(
    toolchain_python: Path,
    cache_dir: Path,
    log: Log = print,
    *,
    cxx: str = CXX,
    jobs: int | None = None,
    offline: bool = False,
    path_environment: PathEnvironment = (),
) -> XlaRuntime:
    """Return the cached runtime for this toolchain, building it first if needed (offline: with the
    Abseil sources already in the cache's downloads; path_environment: an existing Python's, see
    Toolchain.path_environment).

    Safe to call from concurrent processes: one builds, the others wait on the
    lock and then find the finished tree.
    """
    tf = locate_tensorflow(Path(toolchain_python), path_environment)
    cc = _compiler(cxx)
    key = _runtime_key(tf, cc)
    cache_dir = Path(cache_dir).absolute()
    final = Cache(cache_dir).runtime / key

    def build(staged: Path) -> None:
        workers = jobs or max(1, len(os.sched_getaffinity(0)))
        absl = abseil.ensure_abseil(Path(toolchain_python), cc, tf.abseil, cache_dir, log, workers, offline)
        log(f"building XLA AOT runtime {key} ({workers} jobs)")
        t0 = time.monotonic()
        _build_runtime(tf, cc, key, absl, staged, log, workers)
        log(f"XLA AOT runtime built in {time.monotonic() - t0:.0f} s: {final}")

    ensure_entry(
        final, build, marker=MARKER, is_complete=lambda root: _load_complete(root, key) is not None, log=log
    )
    return XlaRuntime.from_dir(final)


def part_source(
    runtime: XlaRuntime, toolchain_python: Path, path_environment: PathEnvironment = ()
) -> runtime_parts.PartSource:
    """Where the parts of this runtime are built from: the toolchain's runtime sources, its headers."""
    tf = locate_tensorflow(Path(toolchain_python), path_environment)
    return runtime_parts.PartSource(
        tf.runtime_src,
        _sources(tf.runtime_src),
        runtime.include_dir,
        runtime.key,
        _compiler(runtime.compiler),
    )


def ensure_parts(
    runtime: XlaRuntime, names: list[str], toolchain_python: Path, cache_dir: Path, log: Log = print
) -> list[runtime_parts.BuiltPart]:
    """The named parts of this runtime, built if missing (runtime_parts_for finds the ones a model needs)."""
    src = part_source(runtime, toolchain_python)
    available = {p.name: p for p in runtime_parts.parts(src.sources)}
    unknown = [n for n in names if n not in available]
    if unknown:
        raise RuntimeBuildError(
            f"runtime {runtime.key} has no part {unknown[0]} (parts: {', '.join(available)})"
        )
    return runtime_parts.ensure_parts(
        src,
        [available[n] for n in names],
        cache_dir,
        log,
        check_libs=runtime.libs,
        system_libs=runtime.ldflags,
    )


def runtime_parts_for(
    runtime: XlaRuntime,
    model: runtime_parts.CompiledModel,
    toolchain_python: Path,
    cache_dir: Path,
    log: Log = print,
    *,
    path_environment: PathEnvironment = (),
    probe_flags: Callable[[], Sequence[str]] = tuple,
) -> list[runtime_parts.BuiltPart]:
    """The parts of this runtime (runtime_parts.py) that a compiled model calls, built if missing.

    toolchain_python: the TensorFlow whose runtime sources the parts are built from (the runtime's own).
    None are needed with a release's runtime, whose shared library has every part.
    probe_flags: more flags for the compile of the generated headers (runtime_parts.header_calls).
    """
    if runtime.kind != "tfaot":
        return []
    src = part_source(runtime, toolchain_python, path_environment)
    available = runtime_parts.parts(src.sources)
    if not available:
        return []
    calls = runtime_parts.header_calls(
        model, runtime.compiler, runtime.cxxflags, runtime.include_dir, probe_flags
    )
    wanted, unclaimed = runtime_parts.claimed(
        available, runtime_parts.undefined_symbols([*model.objects, *calls])
    )
    unclaimed -= runtime_parts.defined_symbols(runtime.libs)

    def ensure(parts: list[runtime_parts.Part]) -> list[runtime_parts.BuiltPart]:
        return runtime_parts.ensure_parts(
            src, parts, cache_dir, log, check_libs=runtime.libs, system_libs=runtime.ldflags
        )

    if not unclaimed:
        return ensure(wanted)
    # A symbol of XLA's that no table entry claims: every part is built, and their symbols decide.
    log(f"the model refers to {min(unclaimed)}, which no runtime part is known to define: building all parts")
    built = ensure(available)
    defines = {b.name: runtime_parts.defined_symbols(b.objects) for b in built}
    missing = unclaimed - set().union(*defines.values())
    if missing:
        raise RuntimeBuildError(
            f"the model refers to {min(missing)}, which neither the XLA runtime "
            f"{runtime.key} nor its parts define"
        )
    names = {p.name for p in wanted} | {name for name, symbols in defines.items() if symbols & unclaimed}
    return [b for b in built if b.name in names]


def compile_object(
    runtime: XlaRuntime, source: Path, include_dirs: list[Path], output: Path, extra_flags: Sequence[str] = ()
) -> None:
    """source compiled against the runtime (its flags, include_dirs, then extra_flags, which override the
    defaults) into the object output (-c)."""
    cmd = [*_compile_command(runtime, include_dirs, extra_flags), "-c", str(source), "-o", str(output)]
    process.run(cmd, what=f"compile {source.name}", error=RuntimeBuildError)


def link_consumer(runtime: XlaRuntime, objects: list[Path], link_inputs: list[Path], output: Path) -> None:
    """A program linked from objects, then link_inputs (a model's objects and archives, whose references
    into the runtime the runtime's libraries after them resolve), then the runtime."""
    cmd = [
        runtime.compiler,
        *runtime.cxxflags,
        *(str(o) for o in objects),
        *_link_arguments(runtime, link_inputs, output),
    ]
    process.run(cmd, what=f"link {output.name}", error=RuntimeBuildError)


def _compile_command(runtime: XlaRuntime, include_dirs: list[Path], extra_flags: Sequence[str]) -> list[str]:
    return [
        runtime.compiler,
        *runtime.cxxflags,
        "-O2",
        *extra_flags,
        *(f"-I{d}" for d in include_dirs),
        f"-I{runtime.include_dir}",
    ]


def _link_arguments(runtime: XlaRuntime, link_inputs: list[Path], output: Path) -> list[str]:
    return [
        *(str(p) for p in link_inputs),
        *(str(lib) for lib in runtime.libs),
        *runtime.ldflags,
        "-o",
        str(output),
    ]


# ---------------------------------------------------------------- runtime


def _build_runtime(
    tf: InstalledTensorFlow, cc: Compiler, key: str, absl: Path, out: Path, log: Log, jobs: int
) -> None:
    work = out / "work"
    overlay = _make_overlay(tf.include, absl / "include" / "absl", work / "overlay")
    src_root = tf.runtime_src
    sources = _sources(src_root)
    core = runtime_parts.core_sources(sources)
    log(
        f"  {len(core)} of the {len(sources)} runtime sources from {tf.dist} {tf.version} "
        f"(the other {len(sources) - len(core)} are parts, built for the models that call them)"
    )
    objdir = work / "obj"
    objdir.mkdir(parents=True)
    units = [runtime_parts.wheel_unit(cc, src_root, rel, overlay, objdir) for rel in core]
    units += runtime_kernels.core_units(cc, sources, overlay, objdir)
    build_kit.compile_all(units, jobs, log, RuntimeBuildError)

    lib = out / "lib"
    lib.mkdir()
    build_kit.archive(lib / RUNTIME_LIB, [u.obj for u in units], RuntimeBuildError)
    shutil.copyfile(absl / "lib" / ABSEIL_LIB, lib / ABSEIL_LIB)
    libs = [lib / RUNTIME_LIB, lib / ABSEIL_LIB]

    # Each TensorFlow's code generator names its own headers: those this wheel has.
    codegen = [h for h in CODEGEN_HEADERS if (overlay / h).is_file()]
    headers = _scan_headers(cc, overlay, codegen, work / "scan")
    # and what the parts include, so that they can be built later against include/ alone
    parts_from = runtime_parts.PartSource(src_root, sources, overlay, key, cc)
    part_units = [
        unit
        for part in runtime_parts.parts(sources)
        for unit in runtime_parts.units(parts_from, part, overlay, objdir)
    ]
    headers = sorted(set(headers) | _scan_units(part_units, overlay, work / "scan-parts", jobs))
    include = out / "include"
    for rel in headers:
        copy_file(overlay / rel, include / rel)
    log(f"  {len(headers)} headers copied to include/")

    _check_headers(cc, include, codegen, work / "check")
    # Every runtime object links against Abseil and the system libraries alone.
    build_kit.check_link(
        cc,
        ["-Wl,--whole-archive", libs[0], "-Wl,--no-whole-archive", *libs[1:], *SYSTEM_LIBS],
        work / "check",
        RuntimeBuildError,
    )

    _copy_licenses(tf, absl, out / "licenses")
    shutil.rmtree(work)
    meta = _runtime_meta(tf, cc, key, out, libs, codegen, sources)
    write_atomic(out / MANIFEST, json.dumps(meta, indent=1, sort_keys=True) + "\n")


def _copy_licenses(tf: InstalledTensorFlow, absl: Path, licenses: Path) -> None:
    copy_file(_tensorflow_license(tf), licenses / "tensorflow-LICENSE")
    if (tf.dir / "THIRD_PARTY_NOTICES.txt").is_file():
        copy_file(tf.dir / "THIRD_PARTY_NOTICES.txt", licenses / "tensorflow-THIRD_PARTY_NOTICES.txt")
    copy_file(absl / "LICENSE", licenses / f"abseil-via-{tf.abseil.dist}-LICENSE")


def _runtime_meta(
    tf: InstalledTensorFlow,
    cc: Compiler,
    key: str,
    out: Path,
    libs: list[Path],
    codegen: list[str],
    sources: list[str],
) -> dict[str, object]:
    """The runtime's manifest (MANIFEST), once its tree under out is complete."""
    include = out / "include"
    return {
        "format": 1,
        "key": key,
        "recipe_version": RECIPE_VERSION,
        "tensorflow": {"distribution": tf.dist, "version": tf.version},
        "abseil": {
            "source": f"{tf.abseil.dist}=={tf.abseil.version} sdist, {tf.abseil.subdir}",
            "sdist_sha256": tf.abseil.sha256,
            "inline_namespace": abseil.inline_namespace(include / "absl" / "base" / "options.h"),
        },
        "compiler": {
            "command": cc.command,
            "version": cc.version_line,
            "full_version": cc.full_version,
            "target": cc.target,
        },
        "include_dir": "include",
        "cxxflags": list(CONSUMER_CXXFLAGS),
        "libs": [p.relative_to(out).as_posix() for p in libs],
        "system_libs": list(SYSTEM_LIBS),
        "build_flags": [*BUILD_FLAGS, *runtime_parts.RUNTIME_FLAGS],
        "codegen_headers": codegen,
        # x86-64 levels of the matrix kernels, chosen at run time (runtime_kernels.py)
        "cpu_levels": [lv.name for lv in runtime_kernels.levels(cc, sources)],
    }


def _tensorflow_license(tf: InstalledTensorFlow) -> Path:
    """The wheel's license text: include/LICENSE (2.21), else its dist-info's LICENSE (2.12)."""
    if (tf.include / "LICENSE").is_file():
        return tf.include / "LICENSE"
    for info in sorted(tf.dir.parent.glob("*.dist-info")):
        if (
            info.name.split("-", 1)[0].lower() == tf.dist.lower().replace("-", "_")
            and (info / "LICENSE").is_file()
        ):
            return info / "LICENSE"
    raise RuntimeBuildError(f"{tf.dist} {tf.version} at {tf.dir} ships no LICENSE")


def _sources(src_root: Path) -> list[str]:
    """The runtime sources of the wheel that go into the library."""
    excluded = set(_excluded_sources(src_root))
    return [
        rel
        for rel in sorted(p.relative_to(src_root).as_posix() for p in src_root.rglob("*.cc"))
        if rel not in excluded
    ]


def _excluded_sources(src_root: Path) -> list[str]:
    return sorted(
        p.relative_to(src_root).as_posix() for p in src_root.rglob("*.cc") if p.name in _EXCLUDED_SOURCES
    )


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


# ---------------------------------------------------------------- headers


def _scan_headers(cc: Compiler, overlay: Path, codegen: list[str], work: Path) -> list[str]:
    """Headers (relative to the overlay) a generated model header can include.

    The compiler's own dependency output over every header tfcompile can emit,
    for each language level and architecture variant.
    """
    work.mkdir(parents=True)
    probe = work / "probe.cc"
    probe.write_text("".join(f'#include "{h}"\n' for h in codegen))
    variants = [
        (std, *arch)
        for std in _SCAN_STDS
        for arch in _SCAN_VARIANTS.get(cc.arch, ((),))
        if build_kit.accepts(cc, (std, *arch))
    ]
    found: set[str] = set()
    for i, flags in enumerate(variants):
        depfile = work / f"probe{i}.d"
        process.run(
            [cc.command, *CONSUMER_CXXFLAGS, *flags, f"-I{overlay}", "-M", "-MF", depfile, probe],
            what=f"header scan {' '.join(flags)}",
            error=RuntimeBuildError,
        )
        for dep in _parse_depfile(depfile.read_text()):
            path = os.path.normpath(dep if os.path.isabs(dep) else work / dep)
            rel = os.path.relpath(path, overlay)
            if not rel.startswith(".."):
                found.add(Path(rel).as_posix())
    if not found:
        raise RuntimeBuildError("the header scan found no headers")
    return sorted(found)


def _scan_units(units: list[build_kit.Unit], overlay: Path, work: Path, jobs: int) -> set[str]:
    """Headers (relative to the overlay) that compiling these units opens: each unit's own command
    with -M instead of -c, on `jobs` threads."""
    work.mkdir(parents=True, exist_ok=True)

    def scan(i: int, unit: build_kit.Unit) -> set[str]:
        if unit.cmd[-4] != "-c" or unit.cmd[-2] != "-o":
            raise RuntimeBuildError(f"header scan: {unit.name}: unexpected command shape")
        depfile = work / f"unit{i}.d"
        process.run(
            [*unit.cmd[:-4], "-M", "-MF", depfile, unit.cmd[-3]],
            what=f"header scan of {unit.name}",
            error=RuntimeBuildError,
            cwd=unit.cwd,
        )
        rels = (
            os.path.relpath(os.path.normpath(os.path.join(unit.cwd, dep)), overlay)
            for dep in _parse_depfile(depfile.read_text())
        )
        return {Path(rel).as_posix() for rel in rels if not rel.startswith("..")}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return set().union(*pool.map(scan, range(len(units)), units))


def _parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule written by gcc -M."""
    body = text.replace("\\\n", " ").split(":", 1)[1]
    words = re.findall(r"(?:\\.|[^\s\\])+", body)
    return [re.sub(r"\\(.)", r"\1", w).replace("$$", "$") for w in words]


def _check_headers(cc: Compiler, include: Path, codegen: list[str], work: Path) -> None:
    """The copied headers alone (no wheel, no -include string) compile."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / "headers.cc"
    probe.write_text("".join(f'#include "{h}"\n' for h in codegen))
    process.run(
        [cc.command, *CONSUMER_CXXFLAGS, f"-I{include}", "-fsyntax-only", probe],
        what="check of the copied headers",
        error=RuntimeBuildError,
    )


def _load_complete(root: Path, key: str) -> XlaRuntime | None:
    if not (root / MARKER).is_file():
        return None
    try:
        runtime = XlaRuntime.from_dir(root)
    except (OSError, ValueError, KeyError):
        return None
    return runtime if runtime.key == key else None
