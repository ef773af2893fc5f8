"""Create a git data repository holding the example models, like a CMS data repository.

    python examples/make_data_repo.py OUT_DIR

writes OUT_DIR/models/{simple,multi}/ (SavedModel + aot_config.yaml, made by
make_models.py inside the tfaot-dist toolchain, so TensorFlow is never needed
in the calling Python), commits them to the work repository OUT_DIR/models
with a fixed author and date, and clones it bare to OUT_DIR/data-repo.git.
Prints the file:// URL of the bare repository.
"""

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tfaot_dist.cache import default_cache
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import ensure_toolchain, worker_env

HERE = Path(__file__).resolve().parent
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tfaot-dist examples",
    "GIT_AUTHOR_EMAIL": "examples@tfaot-dist.invalid",
    "GIT_COMMITTER_NAME": "tfaot-dist examples",
    "GIT_COMMITTER_EMAIL": "examples@tfaot-dist.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def make_models(out: Path, names: Sequence[str] = ("simple", "multi")) -> None:
    toolchain = ensure_toolchain(
        default_cache(), DEFAULT_REQUIREMENTS, lambda m: print(f"make_data_repo: {m}", file=sys.stderr)
    )
    tmp = out / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(toolchain.python), "-I", str(HERE / "make_models.py"), str(out), *names],
        env=worker_env(tmp),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(tmp)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]).absolute()
    work, bare = out / "models", out / "data-repo.git"
    if bare.exists():
        print(f"make_data_repo: {bare} exists; remove {out} first", file=sys.stderr)
        return 1
    make_models(work)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "example models simple and multi", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare), cwd=out)
    print(f"file://{bare}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
