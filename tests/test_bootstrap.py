"""scripts/bootstrap and scripts/install-uv: the tool's .venv made with uv (pinned by its wheel's hash,
kept in the cache under the cache's trust rules), with pip where uv cannot be had.

The scripts run for real; the interpreter that downloads uv is a stand-in that logs what pip was asked
and writes a wheel holding a uv of ours, and bootstrap's uv and pip are stand-ins that log their
arguments. The real download and install happen in every run of scripts/test (it bootstraps first).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import snapshot

# The repository's scripts: run once, under the main venv.
pytestmark = pytest.mark.tooling

REPO = Path(__file__).resolve().parent.parent
UV_PIN = re.search(r'^pin="uv==([0-9.]+)"$', (REPO / "scripts" / "install-uv").read_text(), re.M)
UV_SHA256 = re.search(r'^wheel_sha256="([0-9a-f]{64})"', (REPO / "scripts" / "install-uv").read_text(), re.M)

# `-m pip download ... -r FILE -d DIR`: logs the arguments and FILE, writes DIR/uv-V-...whl holding
# uv-V.data/scripts/uv; anything else (the script's own extraction) goes to the real Python.
DOWNLOADER = r"""#!/bin/bash
if [ "$1" = "-m" ]; then
    echo "pip $*" >> "$LOG"
    while [ $# -gt 0 ]; do
        case "$1" in
            -r) cat "$2" >> "$LOG"; shift ;;
            -d) dest="$2"; shift ;;
        esac
        shift
    done
    mkdir -p "$dest"
    exec "$REAL_PYTHON" -c '
import sys, zipfile
dest, version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(f"{dest}/uv-{version}-py3-none-manylinux_2_17_x86_64.whl", "w") as z:
    z.writestr(f"uv-{version}.data/scripts/uv", "#!/bin/sh\necho our uv\n")
' "$dest" "$VERSION"
fi
exec "$REAL_PYTHON" "$@"
"""


def install_uv(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    python = tmp_path / "python"
    python.write_text(DOWNLOADER)
    python.chmod(0o755)
    assert UV_PIN and UV_SHA256
    env = {
        **os.environ,
        "TFAOT_DIST_CACHE": str(tmp_path / "cache"),
        "LOG": str(tmp_path / "log"),
        "REAL_PYTHON": sys.executable,
        "VERSION": UV_PIN.group(1),
    }
    env.pop("TFAOT_DIST_TOOLS", None)
    return [str(REPO / "scripts" / "install-uv"), str(python)], env


def test_uv_comes_from_the_pinned_wheel_and_is_kept(tmp_path: Path) -> None:
    command, env = install_uv(tmp_path)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert UV_PIN and UV_SHA256
    uv = tmp_path / "cache" / "tools" / f"uv-{UV_PIN.group(1)}" / "uv"
    assert proc.stdout == f"{uv}\n"
    assert subprocess.run([uv], capture_output=True, text=True, check=True).stdout == "our uv\n"
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700  # made as the tool makes a cache
    assert sorted(p.name for p in uv.parent.iterdir()) == ["uv"]  # the wheel and the list removed
    log = (tmp_path / "log").read_text().splitlines()
    assert log[0].startswith("pip -m pip download ") and "--require-hashes" in log[0].split()
    assert log[1:] == [f"uv=={UV_PIN.group(1)} --hash=sha256:{UV_SHA256.group(1)}"]
    # Kept: the next run downloads nothing.
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and again.stdout == proc.stdout
    assert len((tmp_path / "log").read_text().splitlines()) == 2
    # An incomplete one (no binary) is made again.
    uv.unlink()
    again = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and again.stdout == proc.stdout and uv.is_file(), again.stderr
    assert len((tmp_path / "log").read_text().splitlines()) == 4


@pytest.mark.parametrize("writable", ["cache", "tools", "binary"])
def test_uv_is_not_run_from_a_cache_others_can_write(tmp_path: Path, writable: str) -> None:
    command, env = install_uv(tmp_path)
    assert subprocess.run(command, env=env, capture_output=True, check=False).returncode == 0
    (tmp_path / "log").unlink()
    uv = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.strip()
    path = {"cache": tmp_path / "cache", "tools": tmp_path / "cache" / "tools", "binary": Path(uv)}[writable]
    path.chmod(0o777)
    before = snapshot(tmp_path / "cache")
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"install-uv: {path}: not yours or writable by group or others; refusing to run code from it "
        "(chmod go-w it, or use another TFAOT_DIST_CACHE or TFAOT_DIST_TOOLS)"
    ]
    assert not (tmp_path / "log").exists() and snapshot(tmp_path / "cache") == before


def bootstrap_clone(tmp_path: Path, install_uv_body: str) -> tuple[Path, dict[str, str]]:
    """A clone-like directory with scripts/bootstrap, a stand-in install-uv, and a .venv whose python logs
    pip (and whose pre-commit exists); uv is a stand-in that logs its arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "bootstrap", repo / "scripts" / "bootstrap")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    log = tmp_path / "log"
    stubs = {
        repo / "scripts" / "install-uv": install_uv_body,
        tmp_path / "uv": f'echo "uv $*" >> {log}',
        repo
        / ".venv"
        / "bin"
        / "python": f'case "$1" in -VV) echo "Python 3.11.2" ;; *) echo "python $*" >> {log} ;; esac',
    }
    for path, body in stubs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return repo, {**os.environ, "UV": str(tmp_path / "uv")}


def test_bootstrap_installs_with_uv_then_not_again(tmp_path: Path) -> None:
    repo, env = bootstrap_clone(tmp_path, 'echo "$UV"')
    for _ in range(2):
        proc = subprocess.run([repo / "scripts" / "bootstrap"], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "log").read_text().splitlines() == [
        "uv pip install -q --compile-bytecode --python .venv/bin/python -e .[test]"
    ]
    assert (repo / ".venv" / "bootstrapped").is_file()


@pytest.mark.parametrize("uv_fails", ["install-uv", "uv"])
def test_bootstrap_falls_back_to_pip(tmp_path: Path, uv_fails: str) -> None:
    repo, env = bootstrap_clone(tmp_path, "exit 1" if uv_fails == "install-uv" else 'echo "$UV"')
    if uv_fails == "uv":
        (tmp_path / "uv").write_text(f'#!/bin/sh\necho "uv $*" >> {tmp_path / "log"}\nexit 2\n')
    proc = subprocess.run([repo / "scripts" / "bootstrap"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "scripts/bootstrap: uv did not install the venv; pip does" in proc.stderr
    pip = "python -m pip install --disable-pip-version-check -q -e .[test]"
    assert [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("python")] == [
        pip
    ]


# Stand-ins for the distribution's python3 and the one on PATH: `-c` (bootstrap's version question)
# answers $WHO_MINOR; `-m venv DIR` logs which made it and copies the clone's logging python into DIR/bin
# (the distribution's fails half-way where $SYSTEM_VENV_FAILS is set).
MAKER = r"""#!/bin/sh
case "$1" in
    -c) echo "$WHO_MINOR" ;;
    -m)
        echo "venv by WHO" >> "$LOG"
        mkdir -p "$3/bin"
        if [ WHO = SYSTEM ] && [ -n "${SYSTEM_VENV_FAILS:-}" ]; then touch "$3/half-made"; exit 1; fi
        cp "$VENV_PYTHON" "$3/bin/python" ;;
esac
"""


@pytest.mark.parametrize(
    "system, path, made_by",
    [
        ("3.11", "3.11", ["SYSTEM"]),
        ("3.10", "3.11", ["PATH"]),  # another version chosen (pyenv, setup-python): the user's choice
        ("3.9", "3.9", ["PATH"]),  # the lint tools need 3.10
        ("3.14", "3.14", ["PATH"]),
        ("", "3.11", ["PATH"]),  # no /usr/bin/python3 that runs
        ("3.11 venv fails", "3.11", ["SYSTEM", "PATH"]),
    ],
)
def test_the_venv_is_made_of_the_distributions_build_of_the_python3_on_path(
    tmp_path: Path, system: str, path: str, made_by: list[str]
) -> None:
    """/usr/bin/python3 makes .venv when it is the X.Y of the python3 on PATH, 3.10-3.13, and can make a
    venv (scripts/test-pythons then leaves it out); otherwise the python3 on PATH does, and nothing
    half-made of the other is left."""
    repo, env = bootstrap_clone(tmp_path, 'echo "$UV"')
    venv_python = tmp_path / "venv-python"
    shutil.move(str(repo / ".venv" / "bin" / "python"), venv_python)
    shutil.rmtree(repo / ".venv")
    script = repo / "scripts" / "bootstrap"
    text = script.read_text()
    assert text.count("system_python=/usr/bin/python3\n") == 1
    script.write_text(text.replace("system_python=/usr/bin/python3\n", f"system_python={tmp_path}/system\n"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for who, maker in (("SYSTEM", tmp_path / "system"), ("PATH", bin_dir / "python3")):
        maker.write_text(MAKER.replace("WHO", who))
        maker.chmod(0o755)
    env = {
        **env,
        "PATH": f"{bin_dir}:{env['PATH']}",
        "LOG": str(tmp_path / "log"),
        "VENV_PYTHON": str(venv_python),
        "SYSTEM_MINOR": system.split()[0] if system else "",
        "PATH_MINOR": path,
    }
    if system.endswith("venv fails"):
        env["SYSTEM_VENV_FAILS"] = "1"
    proc = subprocess.run([script], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    made = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("venv")]
    assert made == [f"venv by {who}" for who in made_by]
    assert (repo / ".venv" / "bin" / "python").read_bytes() == venv_python.read_bytes()
    assert not (repo / ".venv" / "half-made").exists()
    assert (repo / ".venv" / "bootstrapped").is_file()
