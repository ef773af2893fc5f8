"""A compiler launcher for the tests' CMake builds (CMAKE_CXX_COMPILER_LAUNCHER, kept_objects.CMAKE_LAUNCHER).

A compile (`COMPILER ... -o OBJECT -c SOURCE`, as CMake writes it for GCC) is kept by what the compiler
reads (kept_objects.compile_kept; the preprocessor writes CMake's dependency file each time). Anything else,
a link or another compiler than this host's g++, runs as given. The CMake project, its find_package and its
link are the test's; a compile that reads the same bytes as an earlier one need not run again.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from kept_objects import compile_kept


def main(argv: list[str]) -> int:
    compiler, *args = argv
    gxx = shutil.which("g++")
    plain_compile = len(args) >= 4 and args[-4] == "-o" and args[-2] == "-c"
    if (
        not plain_compile
        or gxx is None
        or os.path.realpath(shutil.which(compiler) or compiler) != os.path.realpath(gxx)
    ):
        os.execvp(compiler, argv)
    code, stderr = compile_kept(args[:-4], Path(args[-1]), Path(args[-3]))
    sys.stderr.write(stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
