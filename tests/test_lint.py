"""Ruff (check and format), mypy, codespell and clang-format, configured in pyproject.toml, are clean: run here so that scripts/test (and CI)
runs them in its fast tier. The pre-commit hooks (.pre-commit-config.yaml) run the same tools."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
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
    one per mypy version and checkout. Reusing it is correct: mypy checks each cached module against
    its source's size, mtime and hash."""
    version = importlib.metadata.version("mypy")  # installed in this interpreter's venv (BIN)
    checkout = hashlib.sha256(str(REPO).encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tfaot-dist-test" / f"mypy-{version}-{checkout}"


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
