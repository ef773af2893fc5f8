"""The interpreter matrix (issue 37): scripts/test-pythons and the CI jobs that run the fast tier under
every supported Python.

scripts/test-pythons is run for real on a copy of itself whose interpreters are stand-ins written
here (each answers its version, makes a "venv" whose python records the pytest run): which ones it
picks, the venvs it keeps in the cache, what it prints, and when it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs it there
    import tomli as tomllib

# scripts/test-pythons checked by itself: run once, under the main venv.
pytestmark = pytest.mark.tooling

REPO = Path(__file__).resolve().parent.parent

# A python stand-in: its version, `-m venv DIR` (a venv whose bin/python is this script again, in
# venv mode), and in a venv: pip and `import xdist` succeed, pytest records its arguments and prints
# a summary (failing for the version named in $FAIL_UNDER).
STAND_IN = r"""#!/bin/bash
here=$(dirname "$0")
version=$(cat "$here/VERSION")
case "$1" in
    -c)
        case "$2" in
            *python_version*) echo "$version" ;;
            *xdist*) exit 0 ;;
        esac ;;
    -m)
        case "$2" in
            venv)
                mkdir -p "$3/bin"
                cp "$0" "$3/bin/python"
                echo "$version" > "$3/bin/VERSION"
                echo "venv $version" >> "$LOG" ;;
            pip) shift 2; echo "pip $version $*" >> "$LOG" ;;
            pytest)
                shift 2
                echo "pytest $version FAST=$TFAOT_DIST_FAST $*" >> "$LOG"
                if [ "$version" = "${FAIL_UNDER:-}" ]; then
                    echo "1 failed, 11 passed, 3 deselected in 0.50s"
                    exit 1
                fi
                echo "12 passed, 1 skipped, 3 deselected in 0.50s" ;;
        esac ;;
esac
"""


def stand_in(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STAND_IN)
    path.chmod(0o755)
    (path.parent / "VERSION").write_text(version + "\n")
    return path


def matrix(tmp_path: Path, pyenv: list[str], system: str | None) -> tuple[Path, dict[str, str]]:
    """A copy of the script in a clone-like tmp_path/repo (its /usr/bin/python3 replaced by a stand-in
    of version system, or by a missing file), pyenv's versions as stand-ins."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    system_python = tmp_path / "system" / "python3"
    if system is not None:
        stand_in(system_python, system)
    text = (REPO / "scripts" / "test-pythons").read_text()
    assert text.count("/usr/bin/python3") >= 1
    (repo / "scripts" / "test-pythons").write_text(text.replace("/usr/bin/python3", str(system_python)))
    (repo / "scripts" / "test-pythons").chmod(0o755)
    for version in pyenv:
        stand_in(tmp_path / "pyenv" / "versions" / version / "bin" / "python", version)
    env = {
        "PATH": "/usr/bin:/bin",  # no pyenv command: PYENV_ROOT is where it looks
        "PYENV_ROOT": str(tmp_path / "pyenv"),
        "HOME": str(tmp_path),
        "TFAOT_DIST_CACHE": str(tmp_path / "cache"),
        "LOG": str(tmp_path / "log"),
    }
    return repo, env


def run(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(repo / "scripts" / "test-pythons"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_oldest_newest_and_the_system_python_each_in_a_cached_venv(tmp_path: Path) -> None:
    repo, env = matrix(tmp_path, ["3.8.18", "3.9.18", "3.10.13", "3.12.1", "3.13.0", "3.14.0"], "3.11.2")
    proc = run(repo, env, "-x")
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text().splitlines()
    pytest_runs = [line for line in log if line.startswith("pytest")]
    workers = len(os.sched_getaffinity(0)) + 1  # one more than cores, as scripts/test's fast tier
    xdist = f"-n {workers} --dist loadgroup --no-loadscope-reorder"  # a module's tests on one worker
    expected_args = f"-q -p no:cacheprovider -m not tf and not tooling {xdist} -x tests"
    assert pytest_runs == [f"pytest {v} FAST=1 {expected_args}" for v in ("3.9.18", "3.13.0", "3.11.2")]
    venvs = sorted(p.name for p in (tmp_path / "cache" / "test-venvs").iterdir() if p.is_dir())
    assert [re.sub(r"-[0-9a-f]{16}$", "-HASH", v) for v in venvs] == [
        "3.11.2-HASH",
        "3.13.0-HASH",
        "3.9.18-HASH",
    ]
    assert all((tmp_path / "cache" / "test-venvs" / v / ".complete").exists() for v in venvs)
    summary = proc.stderr.split("the fast tier ran under 3 interpreters:\n", 1)[1].splitlines()
    assert [re.sub(r"\(\d+ s\)", "(T s)", line) for line in summary] == [
        f"  3.9.18  {tmp_path}/pyenv/versions/3.9.18/bin/python: 12 passed, 1 skipped, 3 deselected (T s)",
        f"  3.13.0  {tmp_path}/pyenv/versions/3.13.0/bin/python: 12 passed, 1 skipped, 3 deselected (T s)",
        f"  3.11.2  {tmp_path}/system/python3: 12 passed, 1 skipped, 3 deselected (T s)",
    ]

    # Again: the venvs are reused (no venv, no pip).
    (tmp_path / "log").unlink()
    assert run(repo, env).returncode == 0
    assert not any(line.startswith(("venv", "pip")) for line in (tmp_path / "log").read_text().splitlines())
    # From another clone of the same pyproject.toml: the same venvs, their editable install pointed at it
    # (no dependencies installed); then back in the first clone, pointed back.
    other = tmp_path / "other-clone"
    shutil.copytree(repo, other, symlinks=True)
    relinks = [
        f"pip {v} install --disable-pip-version-check -q --no-deps --no-build-isolation -e ."
        for v in ("3.9.18", "3.13.0", "3.11.2")
    ]
    for clone, expected in ((other, relinks), (other, []), (repo, relinks)):
        (tmp_path / "log").unlink()
        assert run(clone, env).returncode == 0
        log = (tmp_path / "log").read_text().splitlines()
        assert [line for line in log if line.startswith(("venv", "pip"))] == expected
        assert {(tmp_path / "cache" / "test-venvs" / v / ".repo").read_text() for v in venvs} == {
            f"{clone}\n"
        }
    assert sorted(p.name for p in (tmp_path / "cache" / "test-venvs").iterdir() if p.is_dir()) == venvs
    # pyproject.toml changed: made again, the old ones gone.
    with open(repo / "pyproject.toml", "a") as f:
        f.write("# changed\n")
    assert run(repo, env).returncode == 0
    now = sorted(p.name for p in (tmp_path / "cache" / "test-venvs").iterdir() if p.is_dir())
    assert len(now) == 3 and not set(now) & set(venvs)


def test_fewer_than_three_interpreters_fail(tmp_path: Path) -> None:
    """No /usr/bin/python3, and pyenv's only version counts once: two ran, exit 1 naming why."""
    repo, env = matrix(tmp_path, ["3.12.1", "3.13.0"], None)
    proc = run(repo, env)
    assert proc.returncode == 1
    assert "the fast tier ran under 2 interpreters:" in proc.stderr
    wanted = f"fewer than three interpreters ran (3.9, 3.13 and {tmp_path}/system/python3 wanted)"
    assert proc.stderr.rstrip().endswith(wanted)
    repo, env = matrix(tmp_path / "one", ["3.12.1"], "3.11.2")
    proc = run(repo, env)
    assert proc.returncode == 1 and "the fast tier ran under 2 interpreters:" in proc.stderr


def test_a_failing_interpreter_fails_the_run_after_the_others(tmp_path: Path) -> None:
    repo, env = matrix(tmp_path, ["3.9.18", "3.13.0"], "3.11.2")
    proc = run(repo, {**env, "FAIL_UNDER": "3.9.18"})
    assert proc.returncode == 1
    assert (
        f"  3.9.18  {tmp_path}/pyenv/versions/3.9.18/bin/python: 1 failed, 11 passed, 3 deselected"
        in proc.stderr
    )
    assert (
        len([line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("pytest")]) == 3
    )


def test_besides_venv_leaves_out_the_interpreter_the_fast_tier_ran_under(tmp_path: Path) -> None:
    """scripts/test's call: the clone's .venv made of the distribution's python (scripts/bootstrap), so its
    fast tier ran there; that interpreter is neither run nor given a venv here, and counts among the
    three. Without the option (a run of its own) it runs as the others."""
    repo, env = matrix(tmp_path, ["3.9.18", "3.13.0"], "3.11.2")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(tmp_path / "system" / "python3")
    for args in (["--venvs-only"], []):
        proc = run(repo, env, "--besides-venv", *args)
        assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text().splitlines()
    assert [line.split()[:2] for line in log if line.startswith(("venv", "pytest"))] == [
        ["venv", "3.9.18"],
        ["venv", "3.13.0"],
        ["pytest", "3.9.18"],
        ["pytest", "3.13.0"],
    ]
    summary = proc.stderr.split("the fast tier ran under 3 interpreters:\n", 1)[1].splitlines()
    assert summary[2] == f"  3.11.2  {tmp_path}/system/python3: the fast tier of scripts/test (./.venv)"
    # scripts/test's call names its directory of the run: each interpreter's pytest directory in it.
    (tmp_path / "log").unlink()
    assert run(repo, env, "--besides-venv", "--tmp", str(tmp_path / "run"), "-x").returncode == 0
    calls = [
        line.split() for line in (tmp_path / "log").read_text().splitlines() if line.startswith("pytest")
    ]
    assert [(c[1], c[c.index("--basetemp") + 1], c[-2]) for c in calls] == [
        ("3.9.18", str(tmp_path / "run" / "3.9.18"), "-x"),
        ("3.13.0", str(tmp_path / "run" / "3.13.0"), "-x"),
    ]
    (tmp_path / "log").unlink()
    assert run(repo, env).returncode == 0
    runs = [
        line.split()[1] for line in (tmp_path / "log").read_text().splitlines() if line.startswith("pytest")
    ]
    assert runs == ["3.9.18", "3.13.0", "3.11.2"]


def test_a_cache_or_venv_others_can_write_is_refused_before_anything_in_it_runs(tmp_path: Path) -> None:
    """The cache's trust rules, as the tool's: a venv file group or others can write (anyone could have
    replaced it), or such a cache, ends the run with one line naming it; nothing of the venv ran."""
    repo, env = matrix(tmp_path, ["3.9.18", "3.13.0"], "3.11.2")
    assert run(repo, env).returncode == 0
    cache = tmp_path / "cache"
    (venv,) = [p for p in (cache / "test-venvs").iterdir() if p.name.startswith("3.9.18-") and p.is_dir()]
    advice = "not yours or writable by group or others; refusing to run code from it (chmod go-w it, or use another TFAOT_DIST_CACHE)"
    for path, mode in ((venv / "bin" / "python", 0o775), (cache, 0o777), (cache / "test-venvs", 0o757)):
        before = path.stat().st_mode
        path.chmod(mode)
        (tmp_path / "log").unlink(missing_ok=True)
        proc = run(repo, env)
        path.chmod(before)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [f"scripts/test-pythons: {path}: {advice}"]
        assert not (tmp_path / "log").exists()  # no venv made, no pip, no pytest
    assert run(repo, env).returncode == 0


# ---------------------------------------------------------------- the CI workflow


def load_ci() -> dict[Any, Any]:
    ci: dict[Any, Any] = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())
    return ci


def test_ci_runs_the_fast_tier_under_every_supported_python() -> None:
    """From pyproject's lowest Python to 3.13, the `tooling` tests left to the test job (one interpreter)."""
    job = load_ci()["jobs"]["pythons"]
    versions = job["strategy"]["matrix"]["python"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={versions[0]}"
    assert versions == [f"3.{minor}" for minor in range(9, 14)]
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert "scripts/install-test-tools" in runs
    assert any('-m "not tf and not tooling"' in run and run.startswith("python -m pytest") for run in runs)


def test_ci_runs_the_fast_tier_under_el9s_own_python() -> None:
    job = load_ci()["jobs"]["almalinux"]
    assert job["container"] == "almalinux:9"
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert any(
        "python3 -m venv /opt/tfaot-venv" in run for run in runs
    )  # the system python3, not setup-python
    assert not any("uses" in step and "setup-python" in step["uses"] for step in job["steps"])
    assert any('-m "not tf and not tooling"' in run for run in runs)


def test_the_script_is_executable() -> None:
    assert os.access(REPO / "scripts" / "test-pythons", os.X_OK)
    assert shutil.which("flock"), "scripts/test-pythons locks its venvs with flock (util-linux)"
