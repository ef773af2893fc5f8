"""Isolated environments: created once, keyed by their requirements, rebuilt when broken."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tfaot_dist import cli
from tfaot_dist.toolchain import (
    Toolchain,
    _built_at,
    ensure_toolchain,
    list_toolchains,
    toolchain_key,
    worker_env,
)

SMALL = ("numpy",)  # a real, quick environment; the TensorFlow one is tested everywhere else


@pytest.mark.tf  # creates a toolchain (with numpy only)
def test_created_reused_rebuilt_when_broken_and_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(tmp_path))
    assert cli.main(["--registry", str(tmp_path / "none"), "toolchain", "--list"]) == 0
    assert capsys.readouterr().out.strip() == "no toolchain cached"
    log: list[str] = []
    first = ensure_toolchain(tmp_path, SMALL, log.append)
    assert first.root == tmp_path / "toolchains" / toolchain_key(SMALL)
    assert any(line.startswith("numpy==") for line in first.installed)
    assert len(log) == 1

    again = ensure_toolchain(tmp_path, SMALL, log.append)
    assert again == first and len(log) == 1  # reused, nothing installed
    # Reused, its Python started once to see that it runs (every command pays it: it was three times).
    started: list[str] = []
    counting = [True]  # an audit hook stays: it counts until this is emptied

    def count(event: str, args: tuple[Any, ...]) -> None:
        if event == "subprocess.Popen" and counting:
            started.append(str(args[1][0]))

    sys.addaudithook(count)
    assert ensure_toolchain(tmp_path, SMALL, log.append) == first and len(log) == 1
    counting.clear()
    assert started == [str(first.python)]

    (first.root / "bin" / "python").unlink()  # broken, e.g. the base Python was upgraded
    rebuilt = ensure_toolchain(tmp_path, SMALL, log.append)
    assert len(log) == 2
    out = subprocess.run(
        [str(rebuilt.python), "-I", "-c", "import numpy; print(numpy.__name__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "numpy"
    # Only the finished environment and its lock are left behind, no half-made sibling.
    assert sorted(p.name for p in (tmp_path / "toolchains").iterdir()) == sorted(
        [first.root.name, f"{first.root.name}.lock"]
    )

    (tmp_path / "toolchains" / ".half-made.tmp").mkdir()  # a dead writer's sibling: not listed
    assert [t.key for t in list_toolchains(tmp_path)] == [first.key]
    assert cli.main(["--registry", str(tmp_path / "none"), "toolchain", "--list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"key": first.key, "root": str(first.root), "requirements": list(SMALL), "tensorflow": "unknown"}
    ]
    assert len(log) == 2  # listing created nothing

    # Its scripts and activate point at the final directory (was test_scripts_and_activate_point_at_the_
    # final_directory, which made a numpy venv of its own in the fast tier: one venv now, not two).
    _venv_works_as_a_venv(rebuilt.root)
    f2py = subprocess.run([str(rebuilt.root / "bin" / "f2py"), "-v"], capture_output=True, text=True)
    assert f2py.returncode == 0 and f2py.stdout.strip()[0].isdigit(), f2py.stderr
    # A cache that shares the toolchains through a symlink (as the tests' caches do) leaves them naming
    # the real directory, which outlives the symlink.
    other = tmp_path / "other"
    other.mkdir()
    (other / "toolchains").symlink_to(tmp_path / "toolchains")
    ensure_toolchain(other, SMALL)
    _venv_works_as_a_venv(rebuilt.root)


def test_key_depends_on_requirements_only_as_a_set() -> None:
    assert toolchain_key(("a==1", "b==2")) == toolchain_key(("b==2", "a==1"))
    assert toolchain_key(("a==1",)) != toolchain_key(("a==2",))


def test_worker_environment_is_sanitized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/evil")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = worker_env(tmp_path, ("--tf_xla_min_cluster_size=4",), ("--xla_cpu_enable_fast_math=false",))
    assert "PYTHONPATH" not in env
    assert env["PYTHONHASHSEED"] == "0" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["TMPDIR"] == str(tmp_path) and env["TF_CPP_MIN_LOG_LEVEL"] == "3"
    assert env["TF_XLA_FLAGS"] == "--tf_xla_min_cluster_size=4"
    assert env["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false"


def _venv_works_as_a_venv(root: Path) -> None:
    """Its scripts run and its activate script names the directory it lives in."""
    shell = subprocess.run(
        [
            "bash",
            "-c",
            '. "$1/bin/activate" && echo "$VIRTUAL_ENV" && command -v python',
            "activate",
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert shell == [str(root), str(root / "bin" / "python")]
    for script in (root / "bin").iterdir():
        if script.is_file() and not script.is_symlink() and script.read_bytes().startswith(b"#!"):
            shebang = script.read_text().splitlines()[0]
            assert shebang.startswith(f"#!{root}/bin/python") or "python" not in shebang, (script, shebang)


def test_tensorflow_toolchain_scripts_run(toolchain: Toolchain) -> None:
    _venv_works_as_a_venv(toolchain.root)
    out = subprocess.run(
        [str(toolchain.root / "bin" / "saved_model_cli"), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # absl's --help exits 1 after printing its usage; a script whose interpreter is gone exits 127.
    assert out.returncode in (0, 1) and "USAGE:" in out.stdout and "saved_model_cli" in out.stdout, (
        out.stderr[-500:]
    )


def test_the_directory_a_venv_names_is_read_from_its_activate_script(tmp_path: Path) -> None:
    """A venv made by this Python (the tool makes toolchains with its own), then renamed: its scripts still
    name where it was made. Python 3.13's activate sets VIRTUAL_ENV indented, in a case whose first branch
    runs cygpath; read wrong, every later use of a toolchain took its lock again (and waited on its own
    hold: a hang under 3.13)."""
    made = tmp_path / "staged"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(made)], check=True)
    moved = made.rename(tmp_path / "final")  # as a cache entry is made: built aside, then renamed
    assert _built_at(moved) == str(made)
