"""Only regular files are opened in SavedModel directories and package archives (issue 38): a FIFO
(which blocks whoever opens it for reading), a socket or a device is refused with one line.

The commands run in a subprocess with a timeout, so that a regression hangs no test run.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import hand_built_dist, one_error

TIMEOUT = 60  # seconds; the refusal takes about one


def tfaot_dist(tmp_path: Path, *args: object) -> subprocess.CompletedProcess[str]:
    """The command, with a registry whose toolchain is a Python that does not exist: should the
    refusal not come first, the command fails there instead of installing TensorFlow."""
    registry = tmp_path / "registry"
    (registry / "models").mkdir(parents=True, exist_ok=True)
    (registry / "registry.yaml").write_text(f"toolchain:\n  python: {tmp_path / 'no-python'}\n")
    env = {**os.environ, "TFAOT_DIST_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "--registry", registry, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=tmp_path,
        check=False,
    )


def saved_model_with(tmp_path: Path, special: str) -> Path:
    """A SavedModel directory (its files need not parse: the scan comes before TensorFlow) with a
    FIFO or socket at variables/notes."""
    saved = tmp_path / "tagger" / "saved_model"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"\x08\x01")
    (saved / "variables" / "variables.index").write_bytes(b"\0")
    notes = saved / "variables" / "notes"
    if special == "fifo":
        os.mkfifo(notes)
    else:
        # Bound through the directory's descriptor: a socket's path has at most 107 bytes, and
        # tmp_path alone may have more.
        directory = os.open(notes.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(f"/proc/self/fd/{directory}/{notes.name}")
        finally:
            os.close(directory)
        assert stat.S_ISSOCK(notes.lstat().st_mode)
    return saved


@pytest.mark.parametrize("special", ["fifo", "socket"])
@pytest.mark.parametrize("command", ["check", "init-config"])
def test_a_fifo_or_socket_in_a_saved_model_is_refused(tmp_path: Path, command: str, special: str) -> None:
    saved = saved_model_with(tmp_path, special)
    proc = tfaot_dist(tmp_path, command, saved)
    assert proc.returncode == 3, proc.stderr
    kind = "a FIFO" if special == "fifo" else "a socket"
    assert one_error(proc.stderr) == (
        f"tfaot-dist: error: {saved}/variables/notes: {kind}, not a regular file; refused"
    )
    assert not (saved.parent / "aot_config.yaml").exists()


def test_a_fifo_in_place_of_a_package_archive_is_refused(tmp_path: Path) -> None:
    dist = hand_built_dist(tmp_path / "dist")
    fifo = dist / "tfaot-model-y-1.0.tar.gz"
    os.mkfifo(fifo)
    channel = tmp_path / "channel"
    proc = tfaot_dist(tmp_path, "publish", "--channel", channel, "--dist", dist)
    assert proc.returncode == 3, proc.stderr
    assert one_error(proc.stderr) == f"tfaot-dist: error: {fifo}: a FIFO, not a regular file; refused"
    assert not channel.exists()
