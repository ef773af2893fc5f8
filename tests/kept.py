"""Fixtures kept between test runs: a model export or a zoo build, reused while what makes it is the same.

kept(name, parts, make) is the directory TEST_CACHE/fixtures/NAME-KEY, made by make(directory) when it is
missing; KEY is a digest of parts, which must name everything that changes what make() writes: the
scripts' and the tool's source files (source_digest), the toolchain that runs them (toolchain_parts), the
host facts that a build records (host_parts). A fixture made by different code or on a different machine
has another key, so a kept directory is never stale; nothing in it is trusted beyond that key.

It is made in NAME-KEY.making and renamed into place (a run killed while making leaves no NAME-KEY), under
a lock per name, so the workers of one run and runs of other checkouts share it safely. Its users only
read it. A directory of the same name not used for PRUNE_AFTER is removed when another key of that name
is made (one in use by another checkout stays).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.registry import DEFAULT_CPU_LEVELS
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import file_lock

TEST_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfaot-dist-test"
PRUNE_AFTER = 7 * 24 * 3600.0
USED = ".used"  # touched at each use: how pruning tells a forgotten key from one in use


def kept(name: str, parts: Mapping[str, object], make: Callable[[Path], object]) -> Path:
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]
    base = TEST_CACHE / "fixtures"
    base.mkdir(parents=True, exist_ok=True)
    target = base / f"{name}-{key}"
    with file_lock(base / f"{name}.lock"):
        if not target.is_dir():
            _prune(base, name)
            work = base / f"{name}-{key}.making"
            shutil.rmtree(work, ignore_errors=True)  # a run killed while making it
            work.mkdir()
            make(work)
            os.rename(work, target)
        (target / USED).touch()
    return target


def _prune(base: Path, name: str) -> None:
    own = re.compile(re.escape(name) + r"-[0-9a-f]{20}")
    for old in base.iterdir():
        if not own.fullmatch(old.name):
            continue  # another name, a lock, one being made
        stamp = old / USED if (old / USED).exists() else old  # no stamp: killed between rename and touch
        if time.time() - stamp.stat().st_mtime > PRUNE_AFTER:
            shutil.rmtree(old, ignore_errors=True)


def source_digest(*paths: Path) -> str:
    """Names and contents of the files at paths (files or directories; bytecode left out)."""
    h = hashlib.sha256()
    for path in paths:
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def code_of(*functions: Callable[..., object] | type) -> str:
    """The source of the test code that makes a fixture (not of the whole file: an edit elsewhere in it
    leaves the fixture as it is)."""
    return hashlib.sha256("\0".join(inspect.getsource(f) for f in functions).encode()).hexdigest()


def toolchain_parts(toolchain: Toolchain) -> dict[str, object]:
    return {"key": toolchain.key, "installed": list(toolchain.installed)}


@cache
def host_parts() -> dict[str, object]:
    """What a build records of the machine: the CPU levels it verified, the compiler that built the
    harness and the runtime, the tool's Python."""
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout
    return {
        "levels": {level: cpu_target.check_host(level).ok for level in DEFAULT_CPU_LEVELS},
        "g++": compiler.splitlines()[0],
        "python": platform.python_version(),
    }
