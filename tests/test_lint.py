"""Ruff and mypy, configured in pyproject.toml, are clean: run here so that scripts/test (and CI) runs them."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_checks_every_python_file():
    """Ruff skips folders named like build output (dist/, build/, ...) by default: every file must be seen."""
    proc = run("ruff", "check", "--no-cache", "--show-files", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}
    tracked = subprocess.run(["git", "ls-files", "-z", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    ours = {(REPO / name).resolve() for name in tracked.stdout.split("\0") if name}
    assert ours, "git lists no Python file"
    assert sorted(map(str, ours - checked)) == []


def test_ruff_is_clean():
    proc = run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean():
    proc = run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout
