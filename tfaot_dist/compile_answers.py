"""The TensorFlow worker's compile answers, kept in the cache by what makes them (CACHE/compiles/<key>/).

A compile (worker/tf_worker.py do_compile: tfcompile at every batch size and CPU level, then
TensorFlow's reference outputs) starts TensorFlow: seconds for the smallest model, minutes for a
large one at several levels. A build whose SavedModel and AOT config
did not change asks the worker the same question: a new version of an entry (`update --version`),
an entry renamed, a build cache pruned, the same model in another registry. The key is everything
the answer is made of: every file of the SavedModel (check_answers.saved_model_digest), the
request without its paths, the XLA flags, the worker's code and environment, the toolchain (by
Toolchain.identity: not where its venv is), and
the host's CPU flags (TensorFlow computes the reference outputs on this CPU). An entry holds
answer.json, compiled/ and reference/; cache.ensure_entry makes it (lock: a second build of the
same answer waits for the first, then copies it; seal and trust checks as for every entry).

Compiles are bit-reproducible (docs/explanation/reproducibility.md), so a kept answer is the bytes
a compile would give; `verify --rebuild` compiles again in a cache without this directory. A
compile that fails keeps nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfaot_dist.cache import Cache, ensure_entry
from tfaot_dist.check_answers import saved_model_digest
from tfaot_dist.cpu.target import host_flags
from tfaot_dist.documents import CompileRequest
from tfaot_dist.toolchain import Toolchain, run_worker, worker_digest, worker_env
from tfaot_dist.util.fs import sha256_bytes, write_atomic

# Bumped when what is kept changes its meaning.
FORMAT = 1
ANSWER = "answer.json"
_PATHS = ("saved_model", "output_dir", "reference_dir")  # where this build's files are: not the question


def answer_key(
    request: CompileRequest, toolchain: Toolchain, tf_xla_flags: Sequence[str], xla_flags: Sequence[str]
) -> str | None:
    """The key of a compile request, or None if its SavedModel holds anything but directories and
    regular files (compiled every time, never kept)."""
    model = saved_model_digest(Path(request.saved_model))
    if model is None:
        return None
    env = worker_env(Path("/"), tf_xla_flags, xla_flags)
    spec = {
        "format": FORMAT,
        "saved_model": model,
        "request": {k: v for k, v in request.to_json().items() if k not in _PATHS},
        "environment": {k: v for k, v in env.items() if k not in ("HOME", "TMPDIR")},
        "worker": worker_digest(),
        "toolchain": toolchain.identity,
        "path_environment": [list(pair) for pair in toolchain.path_environment],
        "host": sorted(host_flags()),
    }
    return sha256_bytes(json.dumps(spec, sort_keys=True).encode())[:32]


def compile_answer(
    cache: Cache,
    request: CompileRequest,
    toolchain: Toolchain,
    work: Path,
    tf_xla_flags: Sequence[str],
    xla_flags: Sequence[str],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The worker's answer to request, its files in request.output_dir and request.reference_dir:
    the kept ones when there are, else from the worker (then kept)."""
    key = answer_key(request, toolchain, tf_xla_flags, xla_flags)
    if key is None:
        return run_worker(toolchain, request.to_json(), work, tf_xla_flags, xla_flags)
    compiled, reference = Path(request.output_dir), Path(request.reference_dir)
    made: list[dict[str, Any]] = []

    def build(staged: Path) -> None:
        answer = run_worker(toolchain, request.to_json(), work, tf_xla_flags, xla_flags)
        shutil.copytree(compiled, staged / "compiled")
        shutil.copytree(reference, staged / "reference")
        write_atomic(staged / ANSWER, json.dumps(answer, sort_keys=True))
        made.append(answer)

    entry = ensure_entry(cache.compiles / key, build, log=log)
    if made:
        return made[0]
    shutil.copytree(entry / "compiled", compiled, dirs_exist_ok=True)
    shutil.copytree(entry / "reference", reference, dirs_exist_ok=True)
    log(f"  TensorFlow's answer to the same request taken from the cache ({entry})")
    answer: dict[str, Any] = json.loads((entry / ANSWER).read_text())
    return answer
