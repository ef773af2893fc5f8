"""Objects of the programs tfaot-dist compiles against a package, kept in the cache by what makes
them (CACHE/objects/<key>/object.o).

Every build compiles its verification harness (harness.py), and `verify NAME` compiles it again;
`bench` compiles its timing program (perf/bench.py): an -O2 compile of one generated source
against the package's headers, several seconds, the same for the same model at another version,
in another build or bench. Only the compile is kept: the link, which takes the package's own
objects, is done every time. The key is the source, every file under the include directories it
is compiled with, the compiler's `--version` and the flags as the caller states them (without
this build's paths).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tfaot_dist.cache import Cache, ensure_entry
from tfaot_dist.cxx import build_kit, pch
from tfaot_dist.cxx.xla_runtime import XlaRuntime, compile_object, link_consumer
from tfaot_dist.util.fs import sha256_file

FORMAT = 1
OBJECT = "object.o"


def object_key(source: Path, include_dirs: Sequence[Path], identity: Mapping[str, object]) -> str:
    headers = [
        {p.relative_to(d).as_posix(): sha256_file(p) for p in sorted(d.rglob("*")) if p.is_file()}
        for d in include_dirs
    ]
    spec = {"format": FORMAT, "source": sha256_file(source), "include": headers, "identity": identity}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


def compiled_object(
    cache: Cache,
    source: Path,
    include_dirs: Sequence[Path],
    identity: Mapping[str, object],
    compile_to: Callable[[Path], None],
) -> Path:
    """The kept object of source, made by compile_to(path of the object) if there is none."""
    key = object_key(source, include_dirs, identity)
    entry = ensure_entry(cache.objects / key, lambda staged: compile_to(staged / OBJECT))
    return entry / OBJECT


def program(
    runtime: XlaRuntime,
    source: Path,
    include_dirs: list[Path],
    link_inputs: list[Path],
    output: Path,
    cache: Path,
) -> Path:
    """source compiled against include_dirs (with the cached precompiled header; the object kept) and
    linked with link_inputs and the runtime into output."""
    flags = pch.flags(runtime, cache)
    identity = {
        "compiler": build_kit.version_text(runtime.compiler),
        "flags": runtime.cxxflags,
        "runtime": runtime.key,
        # our runtime's key covers its headers; a release's names its library: its headers by place
        "runtime_headers": "" if runtime.kind == "tfaot" else os.path.realpath(runtime.include_dir),
        "pch": Path(flags[0][2:]).name if flags else "",  # its key (pch.flags: -I<entry> first)
    }
    obj = compiled_object(
        Cache(cache),
        source,
        include_dirs,
        identity,
        lambda out: compile_object(runtime, source, include_dirs, out, flags),
    )
    link_consumer(runtime, [obj], link_inputs, output)
    return output
