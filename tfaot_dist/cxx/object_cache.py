"""Objects of the programs tfaot-dist compiles against a package, kept in the cache by what makes
them (CACHE/objects/<key>/object.o).

Every build compiles its verification harness (harness.py), and `verify NAME` compiles it again:
an -O2 compile of one generated source against the package's headers, several seconds, the same
for the same model at another version or in another build. Only the compile is kept: the link,
which takes the package's own objects, is done every time. The key is the source, every file
under the include directories it is compiled with, the compiler's `--version` and the flags as
the caller states them (without this build's paths).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tfaot_dist.cache import Cache, ensure_entry
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
