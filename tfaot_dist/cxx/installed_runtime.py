"""An XLA runtime installed elsewhere (`--runtime DIR`, registry `toolchain: runtime: DIR`), in one of
three layouts, told apart by their files:

    DIR/manifest.json               an installed tfaot-xla-runtime package (runtime_package.py)
    DIR/runtime.json                a runtime tree of ours (xla_runtime.py, e.g. a cache entry)
    DIR/lib/libtf_xla_runtime.so    a release's own tensorflow-xla-runtime (below)

cmsdist (IB/CMSSW_14_2_X/master, tensorflow-xla-runtime.spec) installs only

    DIR/lib/libtf_xla_runtime.so    the wheel's runtime sources, a shared library linked to the
                                    release's abseil-cpp (shared libraries, ABSEIL_CPP_ROOT/lib)

and its scram tool (tensorflow-xla-runtime.xml) takes the headers from tensorflow-includes (the
wheel's tensorflow/include: TensorFlow, XLA, Abseil, Eigen) and eigen. A consumer here gets the same:
the include directory of the TensorFlow the toolchain Python imports, our interface headers
(cxx.INTERFACE_INCLUDE, which verify and the package carry), the library, and Abseil's library
directory from ABSEIL_CPP_ROOT (the variable cmsBuild sets for abseil-cpp, which the runtime
requires) when set: the .so names Abseil's libraries but need not say where they are.
The runtime has no per-level kernels and no dispatcher: tfaot/CpuLevel.h declares those hooks weak.
"""

import os
from collections.abc import Callable
from pathlib import Path

from tfaot_dist.cxx.build_kit import CONSUMER_CXXFLAGS
from tfaot_dist.cxx.xla_runtime import MANIFEST, PACKAGE_MANIFEST, SYSTEM_LIBS, XlaRuntime, locate_tensorflow
from tfaot_dist.errors import InvalidInput, RuntimeBuildError
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_file

NAME = "tensorflow-xla-runtime"  # cmsdist's package and scram tool name
LIBRARY = "lib/libtf_xla_runtime.so"
ABSEIL_ROOT_VARIABLE = "ABSEIL_CPP_ROOT"
KIND = "release"


def installed_runtime(root: Path, toolchain: Toolchain, where: str = "--runtime") -> XlaRuntime:
    """The runtime installed in root, checked to belong to the toolchain's TensorFlow.

    where: how errors name its origin (the option, or the registry's toolchain.runtime)."""
    root = Path(root)
    if (root / PACKAGE_MANIFEST).is_file():
        runtime = _ours(root, PACKAGE_MANIFEST, XlaRuntime.from_package, where)
    elif (root / MANIFEST).is_file():
        runtime = _ours(root, MANIFEST, XlaRuntime.from_dir, where)
    elif (root / LIBRARY).is_file():
        runtime = release_runtime(root, toolchain)
    else:
        # An option's (or registry field's) value that is no runtime at all: invalid input (exit 3).
        raise InvalidInput(
            f"{where} {root}: not an installed XLA runtime: no {PACKAGE_MANIFEST} "
            f"(tfaot-xla-runtime package), {MANIFEST} (tfaot-dist runtime tree) or "
            f"{LIBRARY} (the release's {NAME})"
        )
    if runtime.tensorflow_version != toolchain.tensorflow_version:
        raise RuntimeBuildError(
            f"{where} {root}: built for TensorFlow {runtime.tensorflow_version}, "
            f"the model is compiled with {toolchain.tensorflow_version}"
        )
    missing = [p for p in runtime.libs if not p.is_file()]
    if missing or not runtime.include_dir.is_dir():
        raise RuntimeBuildError(f"{where} {root}: missing {missing[0] if missing else runtime.include_dir}")
    return runtime


def _ours(root: Path, document: str, load: Callable[[Path], XlaRuntime], where: str) -> XlaRuntime:
    try:
        runtime: XlaRuntime = load(root)
    except InvalidInput as exc:  # the package's manifest, read as a RuntimeManifest: names the field
        raise RuntimeBuildError(f"{where}: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeBuildError(f"{where} {root}: unreadable {document}: {exc!r}") from None
    return runtime


def release_runtime(root: Path, toolchain: Toolchain) -> XlaRuntime:
    """The installed release runtime in root, with the headers of the toolchain's TensorFlow."""
    tf = locate_tensorflow(toolchain.python, toolchain.path_environment)
    library = root / LIBRARY
    digest = sha256_file(library)
    # -rpath: the harness runs from the build directory (a package links it through scram's LIBDIR);
    # an RPATH, not a RUNPATH, so that it also finds the libraries the runtime itself needs (Abseil's).
    ldflags = ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{library.parent}"]
    abseil_root = os.environ.get(ABSEIL_ROOT_VARIABLE)
    if abseil_root:
        lib = Path(abseil_root) / "lib"
        if not Path(abseil_root).is_absolute() or not lib.is_dir():
            raise InvalidInput(
                f"{ABSEIL_ROOT_VARIABLE}={abseil_root}: not an absolute path of an "
                f"installed abseil-cpp (no lib/)"
            )
        ldflags += [f"-Wl,-rpath-link,{lib}", f"-Wl,-rpath,{lib}"]
    return XlaRuntime(
        root=root,
        include_dir=tf.include,
        libs=[library],
        cxxflags=list(CONSUMER_CXXFLAGS),
        ldflags=[*ldflags, *SYSTEM_LIBS],
        tensorflow_version=tf.version,
        key=f"{KIND}-tf{tf.version}-{digest[:16]}",
        kind=KIND,
        library_sha256=digest,
    )
