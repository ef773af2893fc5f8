"""Runtime parts: the Eigen-heavy units of the XLA runtime, built only for the models that call them.

A few of the wheel's runtime sources instantiate Eigen's matrix products,
convolutions and FFTs for every element type; they take nearly all of the
runtime's build time (TF 2.21 on 2 cores: about 280 of 308 s), and a model of
small dense layers calls none of them (XLA emits its products inline). So the
runtime library holds the other sources (the core), and each heavy source is
a part of its own, built when a model's objects refer to one of its entry
points, cached by content, and added to that model's archive
(libtfaot-model-NAME.a, whose symbols the tool files keep from being
exported). The part of a source with a dispatched entry point
(runtime_kernels.DISPATCHES) also carries the per-level kernels and the
dispatcher.

Which part a model needs is known before the part is built: the undefined
symbols of its objects (TF 2.12's code calls the runtime there) and of its
generated headers' code (TF 2.16+ calls it from the header, so the headers that
include a runtime *_lib.h are compiled: header_calls) are matched against
ENTRY_POINTS, the demangled entry points models call in each source. A test
checks the table against the symbols of every part of both TensorFlow versions
(built, or recorded from builds of the same inputs). Should a model still refer
to an XLA symbol that neither the core nor the table accounts for, every part
is built and their symbols decide.

    CACHE/runtime-parts/<runtime key>-<part>-<digest>/
        obj/*.o            what goes into a model's archive
        part.json          the part, its runtime, its objects
        COMPLETE           written last

Parts are compiled against the runtime's include/, which holds the headers
they need (xla_runtime.py scans them), with the flags of the core, so a part
can be built later for an installed runtime package as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.cache import COMPLETE, Cache, ensure_entry
from tfaot_dist.cxx import build_kit, runtime_kernels
from tfaot_dist.cxx.build_kit import BUILD_FLAGS, CONSUMER_CXXFLAGS, Compiler, Log, Unit
from tfaot_dist.errors import RuntimeBuildError
from tfaot_dist.util.fs import sha256_bytes, sha256_file, write_atomic

# The heavy sources and the entry points models call in them: regular expressions over demangled
# names, the function's own name at the start (a template function's name begins with its return type).
# TensorFlow 2.16+ (thunk runtime) instantiates templates declared by the codegen headers; 2.12 defines
# C entry points.
_XLA_FUNCTION = r"^(?:void )?xla::cpu::internal::"
ENTRY_POINTS = {
    **{
        f"xla/backends/cpu/runtime/dot_lib_{suffix}.cc": rf"{_XLA_FUNCTION}TypedMatMul<{re.escape(t)}, "
        for suffix, t in (
            ("f16", "Eigen::half"),
            ("f32", "float"),
            ("f64", "double"),
            ("c64", "std::complex<float>"),
            ("c128", "std::complex<double>"),
            ("s8", "signed char"),
            ("s32", "int"),
        )
    },
    **{
        f"xla/backends/cpu/runtime/convolution_lib_{suffix}_{rank}d.cc": rf"{_XLA_FUNCTION}Eigen\w*Conv{rank}D<(?:\w+, )?{re.escape(t)}>\("
        for suffix, t in (("f16", "Eigen::half"), ("f32", "float"))
        for rank in (2, 3)
    },
    "xla/backends/cpu/runtime/sort_lib.cc": rf"{_XLA_FUNCTION}SortInplace\(",
    **{
        f"tensorflow/compiler/xla/service/cpu/runtime_{stem}.cc": rf"^__xla_cpu_runtime_{entry}"
        for stem, entry in (
            ("matmul", "Eigen(?:Batch)?MatMul"),
            ("single_threaded_matmul", "EigenSingleThreadedMatMul"),
            ("conv2d", "EigenConv2D"),
            ("conv3d", "EigenConv3D"),
            ("single_threaded_conv2d", "EigenSingleThreadedConv2D"),
            ("single_threaded_conv3d", "EigenSingleThreadedConv3D"),
            ("fft", "EigenFft"),
            ("single_threaded_fft", "EigenSingleThreadedFft"),
        )
    },
}

# Names of XLA's own code: a model referring to one that nothing claims needs a part the table misses.
XLA_SYMBOL = re.compile(r"(?:^|[\s<(,])(?:xla|tsl|tensorflow)::|^__xla_cpu_runtime_")

MARKER = COMPLETE
PART_MANIFEST = "part.json"
FORMAT = 1


@dataclass(frozen=True)
class Part:
    name: str  # the source's file name without .cc
    source: str  # relative to the wheel's xla_aot_runtime_src/
    entry: re.Pattern[str]

    def claims(self, demangled: str) -> bool:
        return self.entry.search(demangled) is not None


def parts(sources: Iterable[str]) -> list[Part]:
    """The parts of a wheel's runtime sources (the heavy ones that it has)."""
    return [
        Part(Path(rel).stem, rel, re.compile(ENTRY_POINTS[rel]))
        for rel in sorted(sources)
        if rel in ENTRY_POINTS
    ]


def core_sources(sources: Iterable[str]) -> list[str]:
    return [rel for rel in sources if rel not in ENTRY_POINTS]


def identity() -> dict[str, object]:
    """What the split adds to the runtime's cache key: which sources are left out of the core."""
    return {"parts": sorted(ENTRY_POINTS)}


# ---------------------------------------------------------------- which parts a model needs


def undefined_symbols(objects: Iterable[Path]) -> set[str]:
    """The demangled names the objects refer to without defining them."""
    return _symbols(objects, ["-u"])


def defined_symbols(files: Iterable[Path]) -> set[str]:
    """The demangled names of the global and weak definitions of objects or archives."""
    return _symbols(files, ["--defined-only", "--extern-only"])


def _symbols(files: Iterable[Path], flags: list[str]) -> set[str]:
    out: set[str] = set()
    for path in files:
        text = process.run(
            ["nm", "-C", "--format=just-symbols", *flags, path],
            what=f"symbols of {path.name}",
            error=RuntimeBuildError,
        )
        # nm names each member of an archive on a line of its own ("member.o:") before its symbols
        out.update(line for line in text.splitlines() if line and not line.endswith(".o:"))
    return out


@dataclass(frozen=True)
class CompiledModel:
    """What tfcompile made of a model: where its calls into the runtime are."""

    objects: list[Path]  # TF 2.12's generated code calls the runtime from here
    headers: list[Path]  # one class per header, named as the header; TF 2.16+ calls the runtime from here
    namespace: str  # of the classes (a validated C++ name; empty: the global namespace)
    work: Path  # for the probe that compiles the headers


# A generated header whose code calls a part includes that part's header (dot_lib.h, convolution_lib.h,
# sort_lib.h): only such headers need compiling to find the calls.
CALLING_HEADER = re.compile(r'^#include "xla/backends/cpu/runtime/\w+_lib\.h"$', re.MULTILINE)


def header_calls(
    model: CompiledModel,
    compiler: str,
    cxxflags: Iterable[str],
    include: Path,
    extra_flags: Callable[[], Sequence[str]] = tuple,
) -> list[Path]:
    """An object whose undefined symbols are the runtime functions the model's headers call ([] if none
    can): the headers compiled (-O0) with one instance of each class, so that their code is emitted.

    extra_flags: asked for only when there is something to compile (pch.probe_flags: the -O0
    precompiled header, which takes away most of the seconds, parsing the headers tfcompile's include).
    """
    calling = [h for h in model.headers if CALLING_HEADER.search(h.read_text())]
    if not calling:
        return []
    model.work.mkdir(parents=True, exist_ok=True)
    probe = model.work / "runtime_calls.cc"
    probe.write_text(
        "".join(f'#include "{h.name}"\n' for h in calling)
        + "void tfaot_runtime_calls() {\n"
        + "".join(f"  {{ {model.namespace or ''}::{h.stem} model; }}\n" for h in calling)
        + "}\n"
    )
    obj = model.work / "runtime_calls.o"
    dirs = sorted({h.parent for h in calling})
    process.run(
        [
            compiler,
            *cxxflags,
            "-O0",
            "-w",
            *extra_flags(),
            *(f"-I{d}" for d in dirs),
            f"-I{include}",
            "-c",
            probe,
            "-o",
            obj,
        ],
        what="compile of the runtime calls of the generated headers",
        error=RuntimeBuildError,
    )
    return [obj]


def claimed(available: list[Part], undefined: set[str]) -> tuple[list[Part], set[str]]:
    """The parts whose entry points the undefined names refer to, and the XLA names none claims."""
    wanted = [p for p in available if any(p.claims(s) for s in undefined)]
    rest = {s for s in undefined if XLA_SYMBOL.search(s) and not any(p.claims(s) for p in available)}
    return wanted, rest


# ---------------------------------------------------------------- building


@dataclass(frozen=True)
class BuiltPart:
    name: str
    root: Path
    objects: list[Path]  # in the order they go into an archive (sorted by name)


@dataclass(frozen=True)
class PartSource:
    """Where a runtime's parts are built from: its wheel's sources and its headers."""

    src_root: Path  # the wheel's xla_aot_runtime_src/
    sources: list[str]  # every runtime source of the wheel
    include: Path  # the runtime's include/
    runtime_key: str
    compiler: Compiler


def _part_key(src: PartSource, part: Part) -> str:
    identity = {
        "format": FORMAT,
        "runtime": src.runtime_key,
        "source": [part.source, sha256_file(src.src_root / part.source)],
        "compiler": [src.compiler.version_line, src.compiler.full_version, src.compiler.target],
        "flags": [CONSUMER_CXXFLAGS, BUILD_FLAGS, RUNTIME_FLAGS],
        "kernels": runtime_kernels.identity(src.compiler, src.sources) if _dispatch(src, part) else None,
    }
    return f"{src.runtime_key}-{part.name}-{sha256_bytes(json.dumps(identity, sort_keys=True).encode())[:12]}"


def ensure_parts(
    src: PartSource,
    wanted: list[Part],
    cache_dir: Path,
    log: Log,
    jobs: int | None = None,
    check_libs: list[Path] | None = None,
    system_libs: Iterable[str] = (),
) -> list[BuiltPart]:
    """The cached builds of the wanted parts, building the missing ones (side by side on the cores).

    check_libs: the core runtime and Abseil archives a part's objects must link against (checked once,
    when it is built).
    """
    workers = jobs or max(1, len(os.sched_getaffinity(0)))
    each = max(1, workers // max(1, len(wanted)))

    def one(part: Part) -> BuiltPart:
        final = Cache(cache_dir).runtime_parts / _part_key(src, part)

        def build(staged: Path) -> None:
            log(f"building runtime part {part.name} ({each} jobs)")
            t0 = time.monotonic()
            _build(src, part, staged, log, each, check_libs or [], list(system_libs))
            log(f"runtime part {part.name} built in {time.monotonic() - t0:.0f} s")

        ensure_entry(final, build, marker=MARKER, log=log)
        return load(final)

    with ThreadPoolExecutor(max_workers=min(workers, max(1, len(wanted)))) as pool:
        return list(pool.map(one, wanted))


def load(root: Path) -> BuiltPart:
    meta = json.loads((root / PART_MANIFEST).read_text())
    return BuiltPart(meta["name"], root, [root / rel for rel in meta["objects"]])


def _dispatch(src: PartSource, part: Part) -> runtime_kernels.Dispatch | None:
    return next((d for d in runtime_kernels.dispatches(src.sources) if d.source == part.source), None)


# The runtime's CMakeLists.txt warning switches, plus the deprecation noise of
# tsl/platform/mutex.h. `-include string`: with the newer Abseil,
# xla/service/custom_call_status_internal.h no longer gets <string> through
# other headers.
RUNTIME_FLAGS = (
    "-include",
    "string",
    "-ftemplate-backtrace-limit=0",
    "-Wno-ignored-attributes",
    "-Wno-deprecated-copy",
    "-Wno-cast-qual",
    "-Wno-sign-compare",
    "-Wno-deprecated-declarations",
)


def wheel_unit(cc: Compiler, src_root: Path, rel: str, include: Path, objdir: Path) -> Unit:
    """The compiler run of one of the wheel's runtime sources (core or part), against headers in include."""
    obj = objdir / build_kit.object_name(rel)
    # Mapping include (a temporary overlay, or a runtime's include/) and the wheel away keeps
    # __FILE__ in headers, and so the objects, independent of where we build.
    maps = {include: "tfaot-include", src_root: "xla_aot_runtime_src"}
    return Unit(
        cmd=[
            cc.command,
            *CONSUMER_CXXFLAGS,
            *BUILD_FLAGS,
            *RUNTIME_FLAGS,
            *build_kit.reproducible_flags(rel, maps),
            f"-I{include}",
            "-c",
            rel,
            "-o",
            str(obj),
        ],
        cwd=src_root,
        obj=obj,
        name=rel,
    )


def units(src: PartSource, part: Part, include: Path, objdir: Path) -> list[Unit]:
    """The compiler runs of a part: the wheel's source, then the kernels if it has a dispatched entry."""
    dispatch = _dispatch(src, part)
    kernels = (
        runtime_kernels.part_units(src.compiler, src.sources, dispatch, include, objdir) if dispatch else []
    )
    return [*kernels, wheel_unit(src.compiler, src.src_root, part.source, include, objdir)]


def _build(
    src: PartSource,
    part: Part,
    out: Path,
    log: Log,
    jobs: int,
    check_libs: list[Path],
    system_libs: list[str],
) -> None:
    objdir = out / "obj"
    objdir.mkdir(parents=True)
    compiled = units(src, part, src.include, objdir)
    build_kit.compile_all(compiled, jobs, log, RuntimeBuildError)
    dispatch = _dispatch(src, part)
    if dispatch:
        runtime_kernels.redirect(src.compiler, src.sources, dispatch, objdir)
    objects = sorted((u.obj for u in compiled), key=lambda p: p.name)
    if check_libs:  # every object of the part links against the core runtime, Abseil and the system alone
        build_kit.check_link(
            src.compiler, [*objects, *check_libs, *system_libs], out / "check", RuntimeBuildError
        )
        shutil.rmtree(out / "check")
    meta = {
        "format": FORMAT,
        "name": part.name,
        "source": part.source,
        "runtime_key": src.runtime_key,
        "objects": [p.relative_to(out).as_posix() for p in objects],
    }
    write_atomic(out / PART_MANIFEST, json.dumps(meta, indent=1, sort_keys=True) + "\n")
