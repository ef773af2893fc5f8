"""Matrix and convolution kernels of the XLA runtime for several x86-64 levels, chosen at run time.

The wheel's runtime sources compile its Eigen matrix product and convolutions
once, for the baseline x86-64 CPU (SSE2, no FMA), and every compiled model
calls them for its dense layers (at batch sizes of 64 and more that product is
most of a model's time) and its 2-D convolutions (nearly all of a
convolutional model's time): the baseline code runs them at a half to a
seventh of what the core can do.

So the runtime part of the entry point's source (runtime_parts.py) carries
the kernel once per level of LEVELS, compiled with -march=<level> from
tfaot_dist/cxx/runtime_kernels/: level_kernels.cc for the float and double
products (Eigen's, with its packing buffers kept per thread, and its own kernel
for 2-4 columns, where Eigen would pack all the weights on every call;
level_product.h), one source built per element type (double for TF 2.16+),
conv_kernels.cc for 2-D float convolutions (patches copied per block, times
the same product), and a dispatcher takes the
place of the wheel's entry point (DISPATCHES): the wheel's definition is
renamed in its object (objcopy), ours defines the original symbol and calls
the kernel of the best level the CPU runs (cpu_level.cc, in the core library;
TFAOT_CPU_LEVEL or tfaot_runtime_force_cpu_level() lower it).
The build checks the two dangers of compiling one source for several CPUs:
a level's object defines no symbol outside its own namespace (else the linker
could hand v3 code to a baseline CPU), and the dispatcher defines exactly the
symbol the wheel's object defined (else models would not link, or would call
the baseline code).
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import names, process
from tfaot_dist.cxx import build_kit
from tfaot_dist.cxx.build_kit import BUILD_FLAGS, CONSUMER_CXXFLAGS, Compiler, Unit
from tfaot_dist.errors import RuntimeBuildError
from tfaot_dist.util.fs import tree_digest

SOURCE_DIR = Path(__file__).parent / "runtime_kernels"


@dataclass(frozen=True)
class Level:
    name: str  # -march and LLVM CPU name
    rank: int  # the psABI level number, as cpu_level.h numbers them

    @property
    def suffix(self) -> str:  # in symbol names
        return names.level_suffix(self.name)


LEVELS = (Level("x86-64", 1), Level("x86-64-v3", 3), Level("x86-64-v4", 4))
ELEMENT_INFIXES = {"float": "f32", "double": "f64"}  # in the kernels' and XLA's symbol names


@dataclass(frozen=True)
class Dispatch:
    """A runtime entry point our dispatcher replaces, in the wheels that have its source."""

    source: str  # the wheel's runtime source that defines it
    symbol: str  # regular expression of its (mangled) name
    renamed: str  # what the build renames the wheel's definition to
    dispatcher: str  # our source in SOURCE_DIR that defines the original name
    kernels: str = "level_kernels.cc"  # our source in SOURCE_DIR compiled once per level
    objects: str = "tfaot_kernels"  # the name of its objects, with the level's suffix
    element: str = "float"  # the C++ element type both sources are built for

    @property
    def type_flags(self) -> list[str]:
        """One source serves every element type: the build names the type and its symbols' infix."""
        return [f"-DTFAOT_ELEMENT={self.element}", f"-DTFAOT_TYPE={ELEMENT_INFIXES[self.element]}"]

    def level_object(self, level: Level) -> str:
        return f"{self.objects}_{level.suffix}.o"


DISPATCHES = (
    # TensorFlow 2.16+ (thunk runtime): the template instantiation the generated headers call.
    Dispatch(
        "xla/backends/cpu/runtime/dot_lib_f32.cc",
        r"_ZN3xla3cpu8internal11TypedMatMulIfffEEv\S+",
        "tfaot_xla_typed_matmul_f32",
        "dispatch_thunk_dot.cc",
    ),
    # TensorFlow 2.16+: the double product (float64 layers), with kernels and objects of its own.
    Dispatch(
        "xla/backends/cpu/runtime/dot_lib_f64.cc",
        r"_ZN3xla3cpu8internal11TypedMatMulIdddEEv\S+",
        "tfaot_xla_typed_matmul_f64",
        "dispatch_thunk_dot.cc",
        "level_kernels.cc",
        "tfaot_kernels_f64",
        "double",
    ),
    # TensorFlow 2.12: the C entry compiled models call.
    Dispatch(
        "tensorflow/compiler/xla/service/cpu/runtime_single_threaded_matmul.cc",
        r"__xla_cpu_runtime_EigenSingleThreadedMatMulF32",
        "tfaot_xla_single_threaded_matmul_f32",
        "dispatch_legacy_matmul.cc",
    ),
    # TensorFlow 2.16+: the 2-D float convolution (conv_kernels.cc: patches times the level's product).
    Dispatch(
        "xla/backends/cpu/runtime/convolution_lib_f32_2d.cc",
        r"_ZN3xla3cpu8internal11EigenConv2DIfEEv\S+",
        "tfaot_xla_eigen_conv2d_f32",
        "dispatch_thunk_conv2d.cc",
        "conv_kernels.cc",
        "tfaot_conv_kernels",
    ),
)


def levels(cc: Compiler, sources: list[str]) -> list[Level]:
    """The levels the runtime of these wheel sources gets kernels for with this compiler.

    None if the wheel has no entry point we dispatch or the compiler does not
    build x86-64; GCC before 11 knows no x86-64-vN and gets fewer.
    """
    if cc.arch != "x86_64" or not dispatches(sources):
        return []
    return [lv for lv in LEVELS if _builds(cc, lv.name)]


@functools.cache  # asked for every runtime key, i.e. on every build
def _builds(cc: Compiler, level: str) -> bool:
    return build_kit.accepts(cc, (f"-march={level}",))


def dispatches(sources: list[str]) -> list[Dispatch]:
    """The entry points of DISPATCHES whose source this wheel's runtime has."""
    return [d for d in DISPATCHES if d.source in sources]


def identity(cc: Compiler, sources: list[str]) -> dict[str, object]:
    """What the kernels add to the runtime's cache key."""
    return {
        "kernel_sources": tree_digest(SOURCE_DIR),
        "levels": [lv.name for lv in levels(cc, sources)],
        "dispatches": [d.source for d in dispatches(sources)],
    }


def core_units(cc: Compiler, sources: list[str], include: Path, objdir: Path) -> list[Unit]:
    """The CPU level choice (cpu_level.cc), which the interface's hooks call: a unit of the core library.

    Empty where levels() is.
    """
    built = levels(cc, sources)
    if not built:
        return []
    return [_unit(cc, "cpu_level.cc", "tfaot_cpu_level.o", [_top(built)], include, objdir)]


def part_units(
    cc: Compiler, sources: list[str], dispatch: Dispatch, include: Path, objdir: Path
) -> list[Unit]:
    """The kernels of one dispatched entry point: one object per level and the dispatcher. They go with
    the runtime part of the dispatch's source (runtime_parts.py). Empty where levels() is."""
    built = levels(cc, sources)
    if not built:
        return []
    out = [
        _unit(
            cc,
            dispatch.kernels,
            dispatch.level_object(lv),
            [
                f"-march={lv.name}",
                f"-DTFAOT_LEVEL={lv.suffix}",
                f"-DEigen=tfaot_eigen_{lv.suffix}",
                *dispatch.type_flags,
            ],
            include,
            objdir,
        )
        for lv in built
    ]
    out.append(
        _unit(
            cc,
            dispatch.dispatcher,
            f"tfaot_{Path(dispatch.dispatcher).stem}.o",
            [_top(built), *dispatch.type_flags],
            include,
            objdir,
        )
    )
    return out


def _top(built: list[Level]) -> str:
    return f"-DTFAOT_TOP_LEVEL={built[-1].rank}"


def _unit(cc: Compiler, source: str, obj: str, flags: list[str], include: Path, objdir: Path) -> Unit:
    maps = {SOURCE_DIR: "tfaot-runtime-kernels", include: "tfaot-include"}
    return Unit(
        cmd=[
            cc.command,
            *CONSUMER_CXXFLAGS,
            *BUILD_FLAGS,
            f"-I{include}",
            "-I.",
            *flags,
            *build_kit.reproducible_flags(obj, maps),
            "-c",
            source,
            "-o",
            str(objdir / obj),
        ],
        cwd=SOURCE_DIR,
        obj=objdir / obj,
        name=f"{source} ({obj})",
    )


def redirect(cc: Compiler, sources: list[str], dispatch: Dispatch, objdir: Path) -> None:
    """Rename the wheel's definition of a dispatched entry point; check our objects' symbols.

    Runs after the part's units (the wheel's source and part_units) are compiled into objdir.
    """
    built = levels(cc, sources)
    if not built:
        return
    for lv in built:
        _check_level_symbols(objdir / dispatch.level_object(lv), lv)
    d = dispatch
    original = objdir / build_kit.object_name(d.source)
    ours = objdir / f"tfaot_{Path(d.dispatcher).stem}.o"
    names = [s for s, kind in _defined(original) if _exported(kind) and re.fullmatch(d.symbol, s)]
    if len(names) != 1:
        raise RuntimeBuildError(f"{d.source}: expected one definition matching {d.symbol}, found {names}")
    if names[0] not in {s for s, kind in _defined(ours) if kind == "T"}:
        raise RuntimeBuildError(
            f"{d.dispatcher} does not define {names[0]}, the entry point of {d.source}: "
            "its declaration no longer matches this TensorFlow's"
        )
    process.run(
        ["objcopy", f"--redefine-sym={names[0]}={d.renamed}", original],
        what=f"rename {d.source}'s entry point",
        error=RuntimeBuildError,
    )


def _defined(obj: Path) -> list[tuple[str, str]]:
    """(name, nm type letter) of the symbols an object defines."""
    out = process.run(
        ["nm", "--defined-only", "-P", obj], what=f"symbols of {obj.name}", error=RuntimeBuildError
    )
    pairs = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            pairs.append((fields[0], fields[1]))
    return pairs


def _exported(kind: str) -> bool:
    """Whether an nm type letter is that of a symbol other objects link to (global, weak or GNU unique)."""
    return kind.isupper() or kind in ("u", "v", "w")


def _check_level_symbols(obj: Path, level: Level) -> None:
    """A level's object defines no global symbol but its entry points and its own Eigen namespace."""
    entry = re.compile(rf"tfaot_\w+_{level.suffix}")
    namespace = f"tfaot_eigen_{level.suffix}"
    mangled = (
        f"{len(namespace)}{namespace}"  # as it appears in mangled names: x86_64 is a prefix of x86_64_v3
    )
    for name, kind in _defined(obj):
        # DW.ref.*: the hidden pointer to the C++ personality routine every C++ object may carry (data)
        if not _exported(kind) or entry.fullmatch(name) or mangled in name or name.startswith("DW.ref."):
            continue
        raise RuntimeBuildError(
            f"{obj.name}: the {level.name} kernels define {name} ({kind}), a symbol other code could link to"
        )
