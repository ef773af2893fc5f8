"""Ruff (check and format), mypy, codespell and clang-format, configured in pyproject.toml, are clean: run here so that scripts/test (and CI)
runs them in its fast tier. The pre-commit hooks (.pre-commit-config.yaml) run the same tools."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# The lint tools run under one interpreter, the main venv's (`tooling`: scripts/test-pythons leaves them out
# under the others); the test extra installs mypy and pre-commit from Python 3.10 on.
pytestmark = [
    pytest.mark.tooling,
    pytest.mark.skipif(sys.version_info < (3, 10), reason="the lint tools install from Python 3.10 on"),
]


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / tool), *args], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )


def test_ruff_checks_every_python_file() -> None:
    """Ruff skips folders named like build output (dist/, build/, ...) by default: every file must be seen."""
    proc = run("ruff", "check", "--no-cache", "--show-files", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    )
    ours = {(REPO / name).resolve() for name in tracked.stdout.split("\0") if name}
    assert ours, "git lists no Python file"
    assert sorted(map(str, ours - checked)) == []


def test_ruff_is_clean() -> None:
    proc = run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_is_applied() -> None:
    proc = run("ruff", "format", "--no-cache", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def mypy_cache() -> Path:
    """mypy's incremental cache, kept between runs (a cache under the test's tmp dir is always empty):
    one per mypy version and checkout, so that no two runs write one. A checkout's first starts from a
    copy of the newest of its mypy version (another clone's: a fresh clone's mypy took 13 CPU-s, the
    fast tier's longest test). Reusing it is correct: mypy checks each cached module against its
    source's size, and where the mtime or path differs (another clone), its hash."""
    version = importlib.metadata.version("mypy")  # installed in this interpreter's venv (BIN)
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfaot-dist-test"
    own = base / f"mypy-{version}-{checkout}"
    others = (
        []
        if own.exists()
        else [p for p in base.glob(f"mypy-{version}-*") if p.is_dir() and not p.is_symlink()]
    )
    if others:
        newest = max(others, key=lambda p: p.stat().st_mtime)
        staged = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))  # not matched by the glob above
        try:
            shutil.copytree(newest, staged / "copy", symlinks=True)
            os.rename(staged / "copy", own)  # whole or not at all (another run may have made it meanwhile)
        except OSError:
            pass  # mypy then starts from an empty cache
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    own.mkdir(parents=True, exist_ok=True)
    os.utime(own)  # the newest is the one used last
    return own


def test_a_checkouts_first_mypy_cache_is_a_copy_of_the_newest_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    version = importlib.metadata.version("mypy")
    base = tmp_path / "tfaot-dist-test"
    for name, age in (("older", 100), ("newer", 10)):
        (base / f"mypy-{version}-{name}" / "3.9").mkdir(parents=True)
        (base / f"mypy-{version}-{name}" / "3.9" / "m.meta.json").write_text(name)
        os.utime(base / f"mypy-{version}-{name}", (time.time() - age,) * 2)
    (base / "mypy-0.1-newest").mkdir()  # another mypy version: never copied
    own = mypy_cache()
    assert own.parent == base and (own / "3.9" / "m.meta.json").read_text() == "newer"
    (own / "3.9" / "m.meta.json").write_text("own")
    assert mypy_cache() == own and (own / "3.9" / "m.meta.json").read_text() == "own"  # copied once
    assert sorted(p.name for p in base.iterdir()) == sorted(
        ["mypy-0.1-newest", f"mypy-{version}-older", f"mypy-{version}-newer", own.name]
    )


def test_mypy_is_clean() -> None:
    proc = run("mypy", "--cache-dir", str(mypy_cache()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout


def tracked(pattern: str = "*") -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", pattern], cwd=REPO, capture_output=True, text=True, check=True
    )
    return [name for name in out.stdout.split("\0") if name]


def test_codespell_is_clean() -> None:
    proc = run("codespell", *tracked())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_clang_format_is_applied() -> None:
    """Every C++ source we ship or test is in the style of .clang-format (Google's, 120 columns)."""
    sources = tracked("*.cc") + tracked("*.h")
    assert len(sources) > 20, sources  # the runtime's kernels and headers, the benchmarks, the test programs
    proc = run("clang-format", "--style=file", "--dry-run", "--Werror", *sources)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pre_commit_runs_the_same_tools() -> None:
    """Each hook runs a tool from ./.venv (or the cached actionlint): nothing is fetched at commit time."""
    proc = run("pre-commit", "validate-config", ".pre-commit-config.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = {hook["id"]: hook for hook in config["repos"][0]["hooks"]}
    assert set(hooks) == {"ruff", "ruff-format", "mypy", "codespell", "clang-format", "actionlint"}
    for tool in ("ruff", "mypy", "codespell", "clang-format"):
        assert hooks[tool]["entry"].split()[0] == f".venv/bin/{tool}"
