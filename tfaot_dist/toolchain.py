"""Isolated TensorFlow environments, and running the compile worker inside one.

This is the only module that creates virtual environments or builds the
environment of a subprocess that runs TensorFlow. An environment lives at
CACHE/toolchains/<key>/ where key digests the requirements and the Python it
was made with; it is built in a temporary sibling and renamed into place, so
an environment that exists is complete. One that no longer runs is rebuilt.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfaot_dist import errors, process, worker_server
from tfaot_dist.cache import Cache, check_entry, ensure_entry, entry_lock, release_in_use, seal
from tfaot_dist.util.fs import file_lock, sha256_bytes, sha256_file, write_atomic
from tfaot_dist.util.textsafe import one_line

WORKER = Path(__file__).parent / "worker" / "tf_worker.py"
WORKER_SOURCES = tuple(
    WORKER.parent / name
    for name in ("tf_worker.py", "graph_rewrites.py", "scale_folding.py", "pooling_rewrite.py")
)  # the worker and what it loads beside it
READY = "toolchain.json"


def worker_digest() -> str:
    """What a compile's result depends on in the worker's code: a cache key part."""
    return sha256_bytes("".join(sha256_file(path) for path in WORKER_SOURCES).encode())


# A release's Python (cmsdist's python3) finds py3-tensorflow through PYTHONPATH and PYTHON3PATH (its
# sitecustomize.py adds PYTHON3PATH entries with site.addsitedir). `python -I` ignores both, so code
# run in an existing Python starts with this: the paths of the caller's environment, applied explicitly.
# The worker applies the same variables itself (it is one stdlib-only file).
RELEASE_PATH_VARIABLES = ("PYTHONPATH", "PYTHON3PATH")
PathEnvironment = tuple[tuple[str, str], ...]  # (variable, value) of RELEASE_PATH_VARIABLES
RELEASE_PATHS = r"""
import os as _os, site as _site, sys as _sys
_sys.path[0:0] = [p for p in _os.environ.get("PYTHONPATH", "").split(_os.pathsep) if p]
for _p in [p for p in _os.environ.get("PYTHON3PATH", "").split(_os.pathsep) if p]:
    _site.addsitedir(_p)
"""


@dataclass(frozen=True)
class Toolchain:
    key: str
    root: Path
    requirements: tuple[str, ...]
    installed: tuple[str, ...]  # `pip freeze` of the environment
    executable: Path | None = None  # an existing Python (--toolchain-python), not a venv of ours
    # An existing Python's PYTHONPATH and PYTHON3PATH (where a release's TensorFlow is found), passed on
    # to the worker; empty for our venvs, whose environment inherits nothing.
    path_environment: PathEnvironment = ()

    @property
    def python(self) -> Path:
        return self.executable or self.root / "bin" / "python"

    @property
    def identity(self) -> list[object]:
        """What a kept answer's key takes of the toolchain: our venv by its key and contents, not by
        where it is (a cache that links to another's toolchains has it under another path), an
        existing Python by its path as well."""
        return [self.key, str(self.executable or ""), list(self.installed)]

    @property
    def tensorflow_version(self) -> str:
        for line in self.installed:
            name, _, version = line.partition("==")
            if name.lower().replace("_", "-") in ("tensorflow", "tensorflow-cpu", "tensorflow-intel"):
                return version
        return "unknown"


def toolchain_key(requirements: tuple[str, ...]) -> str:
    spec = {
        "requirements": sorted(requirements),
        "python": sysconfig.get_python_version(),
        "machine": platform.machine(),
    }
    return sha256_bytes(json.dumps(spec, sort_keys=True).encode())[:20]


def ensure_toolchain(
    cache: Path, requirements: tuple[str, ...], log: Callable[[str], None] = print, offline: bool = False
) -> Toolchain:
    """The cached venv of requirements, created (pip, network) if missing; offline: never created."""
    key = toolchain_key(requirements)
    toolchains = Cache(cache).toolchains
    root = toolchains / key
    # Scripts name the real directory: CACHE/toolchains may be a symlink to a shared one.
    real = toolchains.resolve() / key

    loaded: dict[tuple[int, int], Toolchain | None] = {}

    def load(entry: Path) -> Toolchain | None:
        """_load once per READY file in this call: it starts the environment's Python, which
        the checks below ask about up to three times."""
        try:
            st = (entry / READY).stat()
        except OSError:
            return None
        made = (st.st_ino, st.st_mtime_ns)  # another READY: the environment was made again
        if made not in loaded:
            loaded[made] = _load(entry, requirements)
        return loaded[made]

    def usable(entry: Path) -> bool:
        return load(entry) is not None and _built_at(entry) == str(real)

    # Before its Python runs: ours alone (else refused), as it was made (else made again below).
    as_made = check_entry(root)
    if offline and not (as_made and usable(root)):  # said before any lock or directory is made
        raise errors.SourceUnavailable(
            f"offline: toolchain {key} ({' '.join(requirements)}) is not in the cache "
            f"{Cache(cache).root} (run once without --offline to create it)"
        )
    if as_made and not usable(root) and load(root):
        release_in_use(entry_lock(root))  # our own shared hold (an earlier call) would keep the lock from us
        with file_lock(entry_lock(root)):  # environments made before the scripts were fixed
            if load(root):
                _point_scripts_at(root, _built_at(root), real)
                seal(root)

    def create(staged: Path) -> None:
        log(f"creating toolchain {key}: {' '.join(requirements)}")
        _run([sys.executable, "-m", "venv", str(staged)], "create venv")
        py = str(staged / "bin" / "python")
        _run(
            [py, "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements],
            f"pip install {' '.join(requirements)}",
        )
        frozen = _run([py, "-m", "pip", "freeze", "--all"], "pip freeze").split()
        write_atomic(
            staged / READY,
            json.dumps(
                {"key": key, "requirements": list(requirements), "installed": sorted(frozen)}, indent=1
            ),
        )
        _point_scripts_at(staged, str(staged), real)  # its scripts name where it is renamed to

    # READY is the marker (it holds what pip installed); a venv whose Python does not run is made again.
    ensure_entry(root, create, marker=None, is_complete=usable, as_made=as_made)
    toolchain = load(root)
    if not toolchain:
        raise errors.ToolchainError(f"toolchain {key} at {root} does not run after creation")
    return toolchain


# Runs in the given Python: the TensorFlow distribution it has, without importing TensorFlow.
_TF_VERSION_QUERY = r"""
import importlib.metadata as md, sys
for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-intel"):
    try:
        print(dist + "==" + md.version(dist)); break
    except md.PackageNotFoundError:
        pass
else:
    sys.exit("no TensorFlow distribution installed")
"""


def existing_toolchain(python: Path, where: str = "--toolchain-python") -> Toolchain:
    """An existing Python that has TensorFlow (a release's py3-tensorflow): used as is, nothing installed.

    where: how errors name its origin (the option, or the registry's toolchain.python)."""
    python = Path(python)
    if not python.is_file():
        raise errors.ToolchainError(f"{where} {python}: no such file")
    paths = tuple((name, os.environ[name]) for name in RELEASE_PATH_VARIABLES if os.environ.get(name))
    found = process.run(
        [python, "-I", "-c", RELEASE_PATHS + _TF_VERSION_QUERY],
        what=f"{where} {python}",
        error=errors.ToolchainError,
        timeout=120,
    ).strip()
    return Toolchain(
        "existing", python.parent.parent, (), (found,), executable=python, path_environment=paths
    )


def list_toolchains(cache: Path) -> list[Toolchain]:
    """The complete toolchains in the cache, by key (half-made ones have no READY file)."""
    found = []
    for ready in sorted(Cache(cache).toolchains.glob(f"*/{READY}")):
        try:
            data = json.loads(ready.read_text())
            found.append(
                Toolchain(data["key"], ready.parent, tuple(data["requirements"]), tuple(data["installed"]))
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: not listed, rebuilt when used
    return found


NUMPY_FOUND = "import importlib.util, sys; sys.exit(importlib.util.find_spec('numpy') is None)"


def _load(root: Path, requirements: tuple[str, ...]) -> Toolchain | None:
    """The environment at root if it is complete and its Python still runs."""
    try:
        data = json.loads((root / READY).read_text())
    except (OSError, ValueError):
        return None
    python = root / "bin" / "python"
    # It starts and finds its packages (numpy is in every toolchain); importing them would cost ten times more.
    if not process.probe([python, "-I", "-c", NUMPY_FOUND], timeout=60).ok:
        return None
    return Toolchain(data["key"], root, tuple(requirements), tuple(data["installed"]))


def _built_at(venv: Path) -> str:
    """The directory the venv's scripts name (VIRTUAL_ENV in bin/activate: `VIRTUAL_ENV="DIR"` up to
    Python 3.12; 3.13 writes `export VIRTUAL_ENV="DIR"` after a `$(cygpath "DIR")` for Windows shells)."""
    try:
        for line in (venv / "bin" / "activate").read_text().splitlines():
            name, equals, value = line.strip().removeprefix("export ").partition("=")
            value = value.strip().strip("'\"")
            if name == "VIRTUAL_ENV" and equals and value.startswith("/"):
                return value
    except OSError:
        pass
    return str(venv)


def _point_scripts_at(venv: Path, built_at: str, final: Path | None = None) -> None:
    """Venvs hard-code the directory they were made in (script shebangs, activate's VIRTUAL_ENV):
    rewrite it to the directory the venv lives in once renamed, so its scripts run."""
    final = final or venv
    if built_at == str(final):
        return
    old, new = built_at.encode(), str(final).encode()
    for path in sorted((venv / "bin").iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data:
            # Executable before the rename: another process may run this script at any moment.
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data.replace(old, new))
                os.fchmod(f.fileno(), path.stat().st_mode & 0o7777)
            os.replace(tmp, path)


def _run(cmd: list[str], what: str) -> str:
    return process.run(cmd, what=what, error=errors.ToolchainError)


def worker_env(
    tmpdir: Path, tf_xla_flags: Sequence[str] = (), xla_flags: Sequence[str] = ()
) -> dict[str, str]:
    """A clean environment for TensorFlow: nothing inherited that changes its results."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmpdir),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmpdir),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "TF_ENABLE_ONEDNN_OPTS": "0",  # reference outputs from plain kernels, stable across CPUs
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    if tf_xla_flags:
        env["TF_XLA_FLAGS"] = " ".join(tf_xla_flags)
    if xla_flags:
        env["XLA_FLAGS"] = " ".join(xla_flags)
    return env


def run_worker(
    toolchain: Toolchain,
    request: dict[str, Any],
    work_dir: Path,
    tf_xla_flags: Sequence[str] = (),
    xla_flags: Sequence[str] = (),
    timeout: float = 3600,
) -> dict[str, Any]:
    """Run one worker request in the toolchain; returns its answer or raises its error."""
    tmp = work_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    request = dict(request, result=str(work_dir / "result.json"))
    req_path = work_dir / "request.json"
    req_path.write_text(json.dumps(request, indent=1))
    log_path = work_dir / "worker.log"  # written while it runs; kept in the work directory of a failed build
    finished = worker_server.run(
        toolchain.python,
        WORKER,
        req_path,
        log_path,
        cwd=work_dir,
        env={**worker_env(tmp, tf_xla_flags, xla_flags), **dict(toolchain.path_environment)},
        timeout=timeout,
        sources=WORKER_SOURCES,
    )
    if finished.status == process.TIMED_OUT:
        raise errors.CompileFailed(f"TensorFlow worker did not finish in {timeout:.0f} s (log: {log_path})")
    if finished.status == process.NOT_RUN:
        raise errors.CompileFailed(f"TensorFlow worker: {finished.stderr}")
    try:
        answer: dict[str, Any] = json.loads((work_dir / "result.json").read_text())
    except (OSError, ValueError):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise errors.CompileFailed(
            f"TensorFlow worker died ({finished.describe_status()}): {one_line(tail[0])} (log: {log_path})"
        ) from None
    if not answer.get("ok"):
        kind = errors.InvalidInput if answer.get("kind") == "invalid-input" else errors.CompileFailed
        raise kind(answer.get("message", "worker failed"))
    return answer
