"""A small C++ build kit: the compiler's identity, reproducible compiles in parallel, deterministic archives.

Reproducible means that the same sources built in another directory give the
same bytes: a unit is compiled from a relative path in its source root, with
-ffile-prefix-map mapping the build's own directories to fixed names (they
reach __FILE__ and debug strings) and -frandom-seed fixed per source (it
names anonymous namespaces); an archive is written by `ar` in deterministic
mode (zero times, uids and modes) with its members sorted.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.errors import CompileFailed, TfaotError

CXX = "g++"
AR = "ar"

# Bump when anything of the Abseil or runtime recipe changes the bytes of a
# build (flags, file selection, layout), so old cache entries are not reused.
RECIPE_VERSION = 1

# Flags a consumer must compile with; the runtime and Abseil use them too, so
# both sides agree on the std::string ABI and the language level.
CONSUMER_CXXFLAGS = ("-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1")

# No -g: debug info would embed build paths and grow the archives tenfold.
# NDEBUG matches TensorFlow's own optimized builds (Eigen asserts sit in the
# dot and convolution loops of the runtime).
BUILD_FLAGS = ("-O2", "-DNDEBUG", "-fPIC")

Log = Callable[[str], None]


@dataclass(frozen=True)
class Compiler:
    """What identifies a compiler in a cache key."""

    command: str
    version_text: str  # all of `--version`
    full_version: str  # -dumpfullversion: 12.2.0
    target: str  # -dumpmachine: x86_64-linux-gnu

    @property
    def version_line(self) -> str:
        return self.version_text.splitlines()[0].strip()

    @property
    def arch(self) -> str:
        return self.target.split("-", 1)[0]


def version_text(cxx: str, error: type[TfaotError] = CompileFailed) -> str:
    """The compiler's `--version` output."""
    text = process.run([cxx, "--version"], what="compiler version", error=error)
    if not text.strip():
        raise error(f"compiler version: {cxx} --version printed nothing")
    return text


def compiler(cxx: str = CXX, error: type[TfaotError] = CompileFailed) -> Compiler:
    return Compiler(
        command=cxx,
        version_text=version_text(cxx, error),
        full_version=process.run([cxx, "-dumpfullversion"], what="compiler version", error=error).strip(),
        target=process.run([cxx, "-dumpmachine"], what="compiler target", error=error).strip(),
    )


def accepts(cc: Compiler, flags: Iterable[str]) -> bool:
    """Whether the compiler takes these flags (an empty C++ file preprocessed with them)."""
    return process.probe([cc.command, *flags, "-x", "c++", "-E", "-o", os.devnull, os.devnull]).ok


@dataclass
class Unit:
    """One compiler run that makes one object."""

    cmd: list[str]
    cwd: Path
    obj: Path
    name: str  # the source, relative to cwd


def object_name(rel: str) -> str:
    """The object file of a source: flattened, because Abseil has several files with one basename
    (globals.cc) and ar keys members by basename."""
    return rel.removesuffix(".cc").replace("/", "__") + ".o"


def reproducible_flags(rel: str, maps: dict[Path, str]) -> list[str]:
    """Flags that keep the build's directories (mapped to fixed names) and randomness out of an object."""
    flags = [f"-ffile-prefix-map={path}={name}" for path, name in maps.items()]
    return [*flags, f"-frandom-seed={rel}"]


def compile_all(units: list[Unit], jobs: int, log: Log, error: type[TfaotError] = CompileFailed) -> None:
    """Compile units on `jobs` threads (the compilers are separate processes); raise the first failure
    and start no unit after it."""
    failed: list[TfaotError] = []
    done = 0
    lock = threading.Lock()
    step = max(1, len(units) // 8)  # about eight progress lines per stage
    t0 = time.monotonic()

    def one(unit: Unit) -> None:
        nonlocal done
        if failed:
            return
        try:
            process.run(unit.cmd, what=f"compile {unit.name}", error=error, cwd=unit.cwd)
        except TfaotError as exc:
            with lock:
                failed.append(exc)
            return
        with lock:
            done += 1
            if done % step == 0 or done == len(units):
                log(f"  compiled {done}/{len(units)} ({time.monotonic() - t0:.0f} s)")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, units))
    if failed:
        raise failed[0]


def check_link(
    cc: Compiler, inputs: list[str | Path], work: Path, error: type[TfaotError] = CompileFailed
) -> None:
    """Link an empty main() with inputs (objects, archives, flags, system libraries) in work and run it:
    everything the inputs pull in resolves."""
    work.mkdir(parents=True, exist_ok=True)
    main = work / "link.cc"
    main.write_text("int main() { return 0; }\n")
    exe = work / "link"
    process.run([cc.command, *CONSUMER_CXXFLAGS, main, *inputs, "-o", exe], what="link check", error=error)
    process.run([exe], what="run of the link check", error=error)


def archive(target: Path, objects: list[Path], error: type[TfaotError] = CompileFailed) -> None:
    """A static archive of objects with deterministic headers and members sorted by name (ar stores
    file names only: two objects of one name are refused)."""
    members = sorted(objects, key=lambda p: p.name)
    for a, b in zip(members, members[1:]):
        if a.name == b.name:
            raise error(f"archive {target.name}: two members named {a.name} ({a.parent}, {b.parent})")
    process.run(
        [AR, "rcsD", target.absolute(), *(p.absolute() for p in members)],
        what=f"archive {target.name}",
        error=error,
    )
