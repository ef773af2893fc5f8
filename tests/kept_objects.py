"""C++ objects the tests compile, kept between runs by what the compiler reads (as ccache does).

compile_kept(flags, source, obj, env) compiles source into obj with g++ and flags (no -c, -o: added here),
in the environment env (default: this process's; CPATH and the like act on the preprocessor, so their
effect is in the key), and returns (exit code, stderr) as the compiler gave them. A clean compile (exit 0,
nothing on stderr) is kept in TEST_CACHE/fixtures/object-STEM-KEY/ (tests/kept.py) and copied from there
next time; with obj None (flags with -fsyntax-only: a check of the diagnostics alone) the entry,
syntax-STEM-KEY, holds nothing but says that it was clean. KEY digests the compiler's version, the flags
without their include directories, and the source as the preprocessor writes it (`g++ -E -P`: every
header it includes, by content, wherever it lies), with the pytest worker's directory (RUN_DIRECTORY,
which tests/conftest.py sets for the tests and the commands they start) replaced by a placeholder:
headers' __FILE__ (in assert messages) name the run's temporary copy of a package, so a kept object may
name an earlier run's. A compile that warns or fails is never kept: it runs again, so its diagnostics are
always the compiler's own.

The tests' programs include TensorFlow's, XLA's and Eigen's headers: several seconds per compile, while
preprocessing takes a fraction of one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kept import host_parts, kept

from tfaot_dist.cxx import xla_runtime

OBJECT = "object.o"
_PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")
_REPOSITORY = Path(__file__).resolve().parent.parent
# A CMake configure argument: the project's compiles kept the same way (tests/kept_launcher.py).
CMAKE_LAUNCHER = (
    f"-DCMAKE_CXX_COMPILER_LAUNCHER={sys.executable};{Path(__file__).with_name('kept_launcher.py')}"
)
# The variable naming the pytest worker's directory (its basetemp, which differs in every run).
RUN_DIRECTORY = "KEPT_OBJECTS_RUN_DIRECTORY"


def compile_kept(
    flags: Sequence[str], source: Path, obj: Path | None, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    if obj is None and "-fsyntax-only" not in flags:
        raise ValueError("compile_kept: no object file asked for, and no -fsyntax-only")
    key_flags = _without_paths(flags)
    # __FILE__ (the tests' CHECK macros, assert in tfaot/Model.h) names files from the repository or the
    # source's directory: the key is then the same in every clone (with the clone's path in it, each new
    # clone compiled everything anew).
    flags = [*flags, f"-fmacro-prefix-map={_REPOSITORY}/=", f"-fmacro-prefix-map={source.parent}/="]
    preprocessed = subprocess.run(["g++", *flags, "-E", "-P", str(source)], capture_output=True, env=env)
    if preprocessed.returncode != 0:  # the compile says why, in its own words
        return _compile(flags, source, obj, env)
    parts = {
        "compiler": host_parts()["g++"],
        "flags": key_flags,
        "preprocessed": hashlib.sha256(_without_run_directory(preprocessed.stdout)).hexdigest(),
    }
    result: list[tuple[int, str]] = []
    if obj is not None:
        obj.parent.mkdir(parents=True, exist_ok=True)

    def make(out: Path) -> None:
        # Into obj, where the caller wants it even when it is not kept (a compile that warns).
        result.append(_compile(flags, source, obj, env))
        if result[0] != (0, ""):
            raise _NotKept  # kept() then keeps nothing (the next attempt removes its .making directory)
        if obj is not None:
            shutil.copyfile(obj, out / OBJECT)

    try:
        entry = kept(f"{'syntax' if obj is None else 'object'}-{source.stem}", parts, make)
    except _NotKept:
        return result[0]
    if not result and obj is not None:  # kept by an earlier compile
        shutil.copyfile(entry / OBJECT, obj)
    return 0, ""


def kept_program(runtime: xla_runtime.XlaRuntime, source: Path, link_inputs: list[Path], exe: Path) -> None:
    """As xla_runtime.compile_object and link_consumer (the runtime's flags, -O2), the compile kept: a test
    program whose subject is what it links (kernels, parts), not the compile. The runtime's headers are system headers
    here: Eigen's warnings under GCC 12 would make every compile one that is not kept."""
    flags = [*runtime.cxxflags, "-O2", "-isystem", str(runtime.include_dir)]
    code, stderr = compile_kept(flags, source, exe.with_suffix(".o"))
    assert code == 0, stderr[-6000:]
    xla_runtime.link_consumer(runtime, [exe.with_suffix(".o")], link_inputs, exe)


class _NotKept(Exception):
    pass


def _compile(
    flags: Sequence[str], source: Path, obj: Path | None, env: Mapping[str, str] | None
) -> tuple[int, str]:
    output = [] if obj is None else ["-c", "-o", str(obj)]
    proc = subprocess.run(["g++", *flags, *output, str(source)], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stderr


def _without_run_directory(text: bytes) -> bytes:
    run = os.environ.get(RUN_DIRECTORY)
    return text.replace(os.fsencode(run.rstrip("/") + "/"), b"/<pytest>/") if run else text


def _without_paths(flags: Sequence[str]) -> list[str]:
    """flags without their include directories (what they contribute is in the preprocessed source)."""
    out: list[str] = []
    skip = False
    for flag in flags:
        if skip:
            skip = False
        elif flag in _PATH_FLAGS:
            skip = True
        elif not flag.startswith(_PATH_FLAGS):
            out.append(flag)
    return out
