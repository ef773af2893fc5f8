"""The TensorFlow worker's check answers, kept in the cache by what makes them (CACHE/checks/<key>.json).

A check (check.op_check: load the SavedModel, read its signature, list XLA op support, one trial
compile) starts TensorFlow, several seconds before it does anything. `update` checks the model at
its new pin and, for a new build, at its old one; `add-model`, `init-config` and `check` check it
again: the same SavedModel bytes give the same answer each time. The key is everything the answer
is made of: every file of the SavedModel (name and content), the request (serving key, batch
sizes, limits), the worker's code and the toolchain (its key, its Python, what is installed in it
and the PYTHONPATH a release's Python finds TensorFlow on). The SavedModel's path is not in it:
the same model checked out anew is the same model.

    answer_key()  the key of a check request, or None when the SavedModel cannot be digested
    load()        the answer kept under a key, or None (missing or not an answer: checked again)
    store()       keep an answer, written whole (temporary sibling, rename)

Only answers without a compile error are kept: tfcompile's error text names paths of the run
that made it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from tfaot_dist.documents import CheckAnswer
from tfaot_dist.errors import TfaotError
from tfaot_dist.toolchain import Toolchain, worker_digest
from tfaot_dist.util.fs import open_regular, sha256_bytes, sha256_stream, write_atomic

# Bumped when what is kept changes its meaning.
FORMAT = 1


def answer_key(saved_model: Path, request: dict[str, Any], toolchain: Toolchain) -> str | None:
    """The key of request (a CheckRequest's JSON) run in toolchain, or None if saved_model holds
    anything but directories and regular files (a link, a FIFO: checked every time, never kept)."""
    model = saved_model_digest(saved_model)
    if model is None:
        return None
    spec = {
        "format": FORMAT,
        "saved_model": model,
        "request": {k: v for k, v in request.items() if k != "saved_model"},
        "worker": worker_digest(),
        "toolchain": toolchain.identity,
        "path_environment": [list(pair) for pair in toolchain.path_environment],  # an existing Python's
    }
    return sha256_bytes(json.dumps(spec, sort_keys=True).encode())[:32]


def saved_model_digest(root: Path) -> str | None:
    digest = hashlib.sha256()
    for folder, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in dirnames:
            if Path(folder, name).is_symlink():
                return None
        for name in sorted(filenames):
            path = Path(folder, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    return None
                with open_regular(path) as f:
                    content = sha256_stream(f)
            except (OSError, TfaotError):
                return None
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + content.encode() + b"\n")
    return digest.hexdigest()


def _ours(path: Path) -> bool:
    """path is ours and neither group nor others can write it (the cache's trust rule, cache.py)."""
    st = os.stat(path)
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(checks: Path, key: str) -> CheckAnswer | None:
    """The kept answer; None if there is none, or if it or checks/ is not ours alone (then the
    answer could be another user's, and TensorFlow is asked again)."""
    path = checks / f"{key}.json"
    try:
        if not (_ours(checks) and _ours(path)):
            return None
        with open_regular(path) as f:
            answer = CheckAnswer.from_json(json.loads(f.read()), "kept check answer")
        os.utime(path)  # its last use, for `tfaot-dist cache --prune --older-than`
    except (OSError, ValueError, TfaotError):
        return None
    return answer


def store(checks: Path, key: str, answer: CheckAnswer) -> None:
    if answer.compile_error:
        return
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next check its time
        checks.mkdir(mode=0o755, exist_ok=True)  # the umask only takes bits away: never group-writable
        write_atomic(checks / f"{key}.json", json.dumps(answer.to_json(), sort_keys=True))
