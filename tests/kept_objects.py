"""C++ objects the tests compile, kept between runs by what the compiler reads (as ccache does).

compile_kept(flags, source, obj) compiles source into obj with g++ and flags (no -c, -o: added here) and
returns (exit code, stderr) as the compiler gave them. A clean compile (exit 0, nothing on stderr) is kept
in TEST_CACHE/fixtures/object-STEM-KEY/ (tests/kept.py) and copied from there next time; KEY digests the
compiler's version, the flags without their include directories, and the source as the preprocessor
writes it (`g++ -E -P`: every header it includes, by content, wherever it lies), with the run's pytest
directory replaced by a placeholder: headers' __FILE__ (in assert messages) name the run's temporary copy
of a package, so a kept object may name an earlier run's. A compile that warns or fails is never kept: it
runs again, so its diagnostics are always the compiler's own.

The tests' programs include TensorFlow's, XLA's and Eigen's headers: several seconds per compile, while
preprocessing takes a fraction of one.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kept import host_parts, kept

OBJECT = "object.o"
_PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter")
_REPOSITORY = Path(__file__).resolve().parent.parent
_RUN_DIRECTORY = re.compile(rb"/pytest-of-[^/]+/pytest-\d+/(popen-gw\d+/)?")


def compile_kept(flags: Sequence[str], source: Path, obj: Path) -> tuple[int, str]:
    key_flags = _without_paths(flags)
    # __FILE__ (the tests' CHECK macros, assert in tfaot/Model.h) names files from the repository or the
    # source's directory: the key is then the same in every clone (with the clone's path in it, each new
    # clone compiled everything anew).
    flags = [*flags, f"-fmacro-prefix-map={_REPOSITORY}/=", f"-fmacro-prefix-map={source.parent}/="]
    preprocessed = subprocess.run(["g++", *flags, "-E", "-P", str(source)], capture_output=True)
    if preprocessed.returncode != 0:  # the compile says why, in its own words
        return _compile(flags, source, obj)
    parts = {
        "compiler": host_parts()["g++"],
        "flags": key_flags,
        "preprocessed": hashlib.sha256(_RUN_DIRECTORY.sub(b"/<pytest>/", preprocessed.stdout)).hexdigest(),
    }
    result: list[tuple[int, str]] = []

    def make(out: Path) -> None:
        result.append(_compile(flags, source, out / OBJECT))
        if result[0] != (0, ""):
            raise _NotKept  # kept() then keeps nothing (the next attempt removes its .making directory)

    try:
        entry = kept(f"object-{source.stem}", parts, make)
    except _NotKept:
        return result[0]
    obj.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(entry / OBJECT, obj)
    return 0, ""


class _NotKept(Exception):
    pass


def _compile(flags: Sequence[str], source: Path, obj: Path) -> tuple[int, str]:
    proc = subprocess.run(["g++", *flags, "-c", str(source), "-o", str(obj)], capture_output=True, text=True)
    return proc.returncode, proc.stderr


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
