"""No tracebacks (issue 38): every command fed a closed stdout (a real pipe whose reader has gone, as
`| head -1` leaves it), a read-only target (a real read-only bind mount, as CVMFS is) or a target
given as a link ends with a documented exit code and at most one error line.

Packages and registry entries are written by hand (tests/hostile.py): no TensorFlow. The commands
that need it are fed a closed stdout through --help, which every command prints; their read-only
and link targets are checked before TensorFlow is asked anything, or in the `tf` tier.
"""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import Cli, snapshot
from hostile import archive_bytes, hand_built_dist, model_files, refused

from tfaot_dist import cli, errors

INVALID, INTEGRITY = 3, 7
CLOSED = errors.STDOUT_CLOSED
REPO = Path(__file__).resolve().parent.parent
ENTRY = {
    "name": "m",
    "version": "1.0.0",
    "source": {"git": "https://127.0.0.1:9/none.git", "ref": "main", "commit": "0" * 40},
    "aot_config": "m/aot_config.yaml",
}


def error_lines(err: str) -> list[str]:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return [line for line in err.splitlines() if line.startswith("tfaot-dist: error:")]


def closed_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: object
) -> tuple[int, str]:
    """cli.main(argv) with stdout the write end of a pipe whose read end is closed: (code, stderr)."""
    read, write = os.pipe()
    os.close(read)
    stream = io.TextIOWrapper(io.FileIO(write, "w"), encoding="utf-8")
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", stream)
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's own exits (a usage error)
            code = int(exc.code or 0)
    stream.close()  # stdout points at /dev/null by now: closing it has nothing left to complain about
    return code, capsys.readouterr().err


@pytest.fixture
def world(run: Cli, tmp_path: Path) -> dict[str, Path]:
    """A registry with one hand-written entry, a published channel and an area set up from it."""
    (run.registry / "models" / "m.yaml").write_text(yaml.safe_dump(ENTRY, sort_keys=False))
    channel, area = tmp_path / "channel", tmp_path / "area"
    run("publish", "--channel", channel, "--dist", hand_built_dist(tmp_path / "dist"))
    run("setup", "x", "--channel", channel, "--area", area)
    return {"channel": channel, "area": area, "dist": tmp_path / "dist"}


def subcommands() -> list[str]:
    import argparse

    (action,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


@pytest.mark.parametrize("command", ["", *subcommands()])
def test_help_into_a_closed_stdout(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = closed_stdout(monkeypatch, capsys, *([command] if command else []), "--help")
    assert code == CLOSED and error_lines(err) == [] and err == ""


def test_every_command_into_a_closed_stdout(
    run: Cli,
    world: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What each command has to do is done; only what it prints is cut (exit 141, nothing on stderr)."""
    channel, area = world["channel"], world["area"]
    reg = ["--registry", run.registry]
    files, extra = model_files("x", "1.1")
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "tfaot-model-x-1.1.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.1", files, extra))
    runs: list[list[object]] = [
        ["init", tmp_path / "reg2"],
        [*reg, "list"],
        [*reg, "show", "m"],
        [*reg, "specs", "--out", tmp_path / "specs"],
        ["toolchain", "--list"],
        ["publish", "--channel", channel, "--dist", newer],
        ["yank", "x==1.0", "--reason", "r", "--channel", channel],
        ["setup", "--list", "--channel", channel],
        ["setup", "--list", "--channel", channel, "--json"],
        ["setup", "--list", "--area", area],
        ["setup", "x==1.1", "--dry-run", "--channel", channel, "--area", area],
        ["setup", "x==1.1", "--channel", channel, "--area", area],
        ["setup", "--repair", "--area", area],
        ["remove", "x", "--dry-run", "--area", area],
        ["remove", "x", "--area", area],
    ]
    for argv in runs:
        code, err = closed_stdout(monkeypatch, capsys, *argv)
        assert (code, error_lines(err)) == (CLOSED, []), (argv, err)
    assert (tmp_path / "reg2" / "registry.yaml").is_file() and (
        tmp_path / "specs" / "tfaot-model-m.spec"
    ).is_file()
    rows = json.loads((channel / "index.json").read_text())["packages"]
    assert {(r["version"], r.get("yanked")) for r in rows if r["name"] == "tfaot-model-x"} == {
        ("1.0", "r"),
        ("1.1", None),
    }
    assert "tfaot-model-x" not in json.loads((area / "tfaot" / "installed.json").read_text())["packages"]
    # And a failing command into a closed stdout: its own error line and code, as ever.
    code, err = closed_stdout(monkeypatch, capsys, "setup", "nothing", "--channel", channel, "--area", area)
    assert code == INVALID and len(error_lines(err)) == 1


# ---------------------------------------------------------------- read-only targets


def read_only(paths: list[Path], *argv: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """tfaot-dist ARGV in a mount namespace of its own where each path is a read-only bind mount of
    itself (a real EROFS; the mounts go with the process)."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux)")
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "-m"]
    mounts = " && ".join(f'mount --bind -o ro "{p}" "{p}"' for p in paths)
    env = {**os.environ, "PIP_NO_INDEX": "1"}  # whatever happens, no TensorFlow is installed here
    done = subprocess.run(
        [
            *unshare,
            "sh",
            "-c",
            f'{mounts} && exec "$@"',
            "sh",
            sys.executable,
            "-m",
            "tfaot_dist",
            *map(str, argv),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount:" in done.stderr or "unshare:" in done.stderr:
        pytest.skip(f"no read-only bind mount here: {done.stderr.strip()}")
    return done


def test_read_only_targets(run: Cli, world: dict[str, Path], tmp_path: Path) -> None:
    channel, area = world["channel"], world["area"]
    saved_model = tmp_path / "sm" / "saved_model"
    saved_model.mkdir(parents=True)
    (saved_model / "saved_model.pb").write_bytes(b"not read: the config cannot be written anyway")
    (tmp_path / "ro").mkdir()
    reg = ["--registry", run.registry]
    cases: list[tuple[Path, list[object], str]] = [
        (channel, ["publish", "--channel", channel, "--dist", tmp_path / "newer"], "read-only"),
        (channel, ["yank", "x==1.0", "--reason", "r", "--channel", channel], "read-only"),
        (area, ["setup", "x==1.0", "--channel", channel, "--area", area], "read-only"),
        (area, ["remove", "x", "--area", area], "read-only"),
        (area, ["setup", "--repair", "--area", area], "read-only"),
        (
            tmp_path / "ro",
            ["setup", "x", "--channel", channel, "--area", tmp_path / "ro" / "area"],
            "read-only",
        ),
        (tmp_path / "ro", ["init", tmp_path / "ro" / "registry"], "read-only"),
        (tmp_path / "ro", [*reg, "specs", "--out", tmp_path / "ro" / "specs"], "read-only"),
        (tmp_path / "sm", ["init-config", saved_model], "read-only"),
    ]
    files, extra = model_files("x", "1.1")
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "tfaot-model-x-1.1.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.1", files, extra))
    before = snapshot(tmp_path)
    for target, argv, words in cases:
        done = read_only([target], *argv, cwd=tmp_path)
        lines = error_lines(done.stderr)
        assert done.returncode == INVALID and len(lines) == 1, (argv, done.returncode, done.stderr)
        assert words in lines[0].lower() and str(target) in lines[0], (argv, lines)
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- link targets


def test_targets_given_as_links(run: Cli, world: dict[str, Path], tmp_path: Path) -> None:
    """A registry, dist, output, channel or area given as a link to a directory: the directory."""
    links = {}
    for name, real in (("registry", run.registry), ("dist", world["dist"]), ("area", world["area"])):
        links[name] = tmp_path / f"{name}-link"
        links[name].symlink_to(real)
    (tmp_path / "specs-real").mkdir()
    links["specs"] = tmp_path / "specs-link"
    links["specs"].symlink_to(tmp_path / "specs-real")
    run("--registry", links["registry"], "list")
    run("--registry", links["registry"], "specs", "--out", links["specs"])
    assert (tmp_path / "specs-real" / "tfaot-model-m.spec").is_file() and links["specs"].is_symlink()
    out, _ = run("publish", "--channel", world["channel"], "--dist", links["dist"])
    assert "unchanged" in out
    run("setup", "--list", "--area", links["area"])
    run("remove", "x", "--area", links["area"])
    assert links["area"].is_symlink()


def test_a_manifest_tensor_shape_that_is_a_number(run: Cli, tmp_path: Path) -> None:
    """Refused at publish (it crashed the catalogue after the archive was stored): exit 7, the
    channel never made."""
    dist = tmp_path / "dist"
    dist.mkdir()
    files, extra = model_files("x", "1.0")
    extra["signature"] = {"inputs": [{"name": "a", "dtype": "float32", "shape": 4}], "outputs": []}
    (dist / "tfaot-model-x-1.0.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.0", files, extra))
    line = refused(
        run, tmp_path, "publish", "--channel", tmp_path / "channel", "--dist", dist, code=INTEGRITY
    )
    assert "signature.inputs[0].shape: expected a list" in line
    assert not (tmp_path / "channel").exists()
