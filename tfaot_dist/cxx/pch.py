"""A cached precompiled header for the C++ programs tfaot-dist builds against a package.

Every build compiles a verification harness (and `bench`/`tune` compile their
own programs). Most of that time is parsing the same headers: the Abseil, XLA
and TensorFlow headers that tfcompile's generated headers include, and the
tfaot interface. They do not depend on the model, so they are precompiled once
per (runtime, compiler, flags, interface headers) into

    CACHE/pch/<key>/tfaot_pch.h(.gch)

and a consumer compile gets `-include tfaot_pch.h` in front. If GCC finds the
.gch unusable (other flags) it reads tfaot_pch.h as text instead: slower, never
wrong, so the flags returned here are always safe to pass.
"""

import hashlib
import json
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.cache import COMPLETE, Cache, ensure_entry
from tfaot_dist.cxx import INTERFACE_INCLUDE, build_kit
from tfaot_dist.cxx.xla_runtime import CODEGEN_HEADERS, Log, XlaRuntime
from tfaot_dist.errors import TfaotError
from tfaot_dist.util.fs import sha256_file

HEADER = "tfaot_pch.h"
MARKER = COMPLETE
# The standard headers of the generated harnesses, after everything tfcompile's headers include.
_STD_HEADERS = (
    "cstdint",
    "cstdio",
    "cstdlib",
    "cstring",
    "chrono",
    "fstream",
    "iostream",
    "memory",
    "random",
    "stdexcept",
    "string",
    "tuple",
    "vector",
)


def header_text() -> str:
    lines = ["// Precompiled by tfaot-dist: what every consumer of a model package includes."]
    lines += [f'#include "{h}"' for h in CODEGEN_HEADERS]
    lines += ['#include "tfaot/Model.h"']
    lines += [f"#include <{h}>" for h in _STD_HEADERS]
    return "\n".join(lines) + "\n"


def _key(runtime: XlaRuntime, opt: str) -> str:
    version = build_kit.version_text(runtime.compiler)
    interface = {
        p.relative_to(INTERFACE_INCLUDE).as_posix(): sha256_file(p)
        for p in sorted(INTERFACE_INCLUDE.rglob("*.h"))
    }
    identity = {
        "runtime": runtime.key,
        "compiler": version,
        "flags": [*runtime.cxxflags, opt],
        "interface": interface,
        "header": header_text(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def flags(runtime: XlaRuntime, cache: Path, opt: str = "-O2", log: Log = lambda message: None) -> list[str]:
    """Compiler flags that include the cached precompiled header, building it on first use.

    Returns [] if it cannot be built (the consumer then compiles as before).
    """
    final = Cache(cache).pch / _key(runtime, opt)

    def build(staged: Path) -> None:
        log(f"precompiling the interface headers ({final.name})")
        (staged / HEADER).write_text(header_text())
        process.run(
            [
                runtime.compiler,
                *runtime.cxxflags,
                opt,
                "-w",
                f"-I{INTERFACE_INCLUDE}",
                f"-I{runtime.include_dir}",
                "-x",
                "c++-header",
                staged / HEADER,
                "-o",
                staged / f"{HEADER}.gch",
            ],
            what="precompiling the interface headers",
        )

    try:
        ensure_entry(final, build, marker=MARKER)
    except TfaotError as exc:  # not fatal: consumers compile without it
        log(f"precompiled header not built: {exc}")
        return []
    return [f"-I{final}", "-include", HEADER]


def probe_flags(runtime: XlaRuntime, cache: Path, log: Log = lambda message: None) -> list[str]:
    """Flags for the -O0 compile of a model's generated headers (runtime_parts.header_calls): the
    -O0 precompiled header, and the interface headers' directory for when GCC reads it as text."""
    return [*flags(runtime, cache, "-O0", log), f"-I{INTERFACE_INCLUDE}"]
