"""Ruff and mypy, configured in pyproject.toml, are clean: run here so that scripts/test (and CI) runs them."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_is_clean():
    proc = run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean():
    proc = run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout
