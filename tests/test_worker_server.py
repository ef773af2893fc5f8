"""TensorFlow workers forked from a server that imported TensorFlow once (worker_server.py and
tf_worker.py --serve). A stand-in TensorFlow on an existing Python's PYTHONPATH (the tests' own
Python as the toolchain's): it counts its imports in a file and answers an "inspect" request by
failing to load the SavedModel with what the worker sees (its directory, HOME, TMPDIR), or by
sleeping or dying as the SavedModel's file says. No toolchain needed: it runs under every Python.
The real TensorFlow takes this path in every toolchain test that checks or compiles."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfaot_dist import errors, worker_server
from tfaot_dist.toolchain import Toolchain, run_worker

STAND_IN = """
import os, signal, sys, tempfile, time
with open(IMPORTS, "a") as f:
    f.write(f"{os.getpid()}\\n")

class _Logger:
    def setLevel(self, level):
        pass

def get_logger():
    return _Logger()

class saved_model:
    @staticmethod
    def load(path, tags):
        what = open(os.path.join(path, "saved_model.pb")).read().split()
        print("stand-in loads", path)
        print("stand-in complains", file=sys.stderr)
        if what[0] == "sleep":
            time.sleep(float(what[1]))
        if what[0] == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError(
            f"cwd={os.getcwd()} home={os.environ['HOME']} tmp={tempfile.gettempdir()} pid={os.getpid()}"
        )
"""


@pytest.fixture(autouse=True)
def no_servers_left() -> Iterator[None]:
    """Each test starts and ends with no idle server in this process."""
    worker_server.stop_all()
    yield
    worker_server.stop_all()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Toolchain:
    site = tmp_path / "site"
    (site / "tensorflow").mkdir(parents=True)
    (site / "tensorflow" / "__init__.py").write_text(f"IMPORTS = {str(tmp_path / 'imports')!r}\n" + STAND_IN)
    monkeypatch.delenv("TFAOT_DIST_FORK_WORKERS", raising=False)
    return Toolchain("stand-in", tmp_path, (), (), Path(sys.executable), (("PYTHONPATH", str(site)),))


def imports(tmp_path: Path) -> list[str]:
    path = tmp_path / "imports"
    return path.read_text().split() if path.exists() else []


def model(tmp_path: Path, name: str, what: str) -> Path:
    saved_model = tmp_path / name
    saved_model.mkdir()
    (saved_model / "saved_model.pb").write_text(what)
    return saved_model


def inspect(toolchain: Toolchain, saved_model: Path, work: Path, **options: object) -> None:
    request = {"op": "inspect", "saved_model": str(saved_model), "serving_key": "serving_default"}
    run_worker(toolchain, request, work, **options)  # type: ignore[arg-type]


def seen_by_worker(message: str) -> dict[str, str]:
    """cwd, home, tmp and pid as the stand-in's error names them."""
    return dict(part.split("=", 1) for part in message.split(": cannot load SavedModel: ")[1].split())


def servers_of_this_process() -> list[int]:
    me = str(os.getpid())
    found = []
    for proc in Path("/proc").iterdir():
        try:
            parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1] if proc.name.isdigit() else ""
            if parent == me and b"--serve" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found


def test_requests_are_forked_from_one_import_each_in_its_own_directory(
    stand_in: Toolchain, tmp_path: Path
) -> None:
    """Three requests, one import of TensorFlow; each worker is a process of its own that runs in its
    work directory with HOME and TMPDIR there, and writes its output to its own log."""
    saved_model = model(tmp_path, "m", "fail")
    seen = []
    for n in range(3):
        work = tmp_path / f"work{n}"
        with pytest.raises(errors.InvalidInput, match="cannot load SavedModel") as failed:
            inspect(stand_in, saved_model, work)
        seen.append(seen_by_worker(str(failed.value)))
        assert seen[-1]["cwd"] == str(work)
        assert seen[-1]["home"] == seen[-1]["tmp"] == str(work / "tmp")
        log = (work / "worker.log").read_text()
        assert f"stand-in loads {saved_model}" in log and "stand-in complains" in log
        assert json.loads((work / "result.json").read_text())["ok"] is False
    assert len(imports(tmp_path)) == 1
    server = imports(tmp_path)[0]
    assert servers_of_this_process() == [int(server)]
    assert len({s["pid"] for s in seen} | {server}) == 4  # a fresh process per request


def test_another_environment_or_interpreter_gets_a_server_of_its_own(
    stand_in: Toolchain, tmp_path: Path
) -> None:
    """XLA's flags are read once per process: another set of flags is another server; the same set
    again is served by the one already running."""
    saved_model = model(tmp_path, "m", "fail")
    for n, flags in enumerate(
        [(), ("--xla_cpu_enable_fast_math=false",), (), ("--xla_cpu_enable_fast_math=false",)]
    ):
        with pytest.raises(errors.InvalidInput):
            inspect(stand_in, saved_model, tmp_path / f"work{n}", xla_flags=flags)
    assert len(imports(tmp_path)) == 2
    assert len(servers_of_this_process()) == 2


def test_a_venv_reached_through_a_linked_directory_shares_its_server(
    stand_in: Toolchain, tmp_path: Path
) -> None:
    """A test's or a user's cache whose toolchains/ links to another cache's reaches the same venv by
    another path: the same server. A link to the interpreter in another directory is another
    interpreter (another venv), so another server."""
    saved_model = model(tmp_path, "m", "fail")
    linked_dir = tmp_path / "linked-bin"
    linked_dir.symlink_to(Path(sys.executable).parent, target_is_directory=True)
    other_dir = tmp_path / "other-bin"
    other_dir.mkdir()
    (other_dir / "python").symlink_to(sys.executable)
    pythons = [Path(sys.executable), linked_dir / Path(sys.executable).name, other_dir / "python"]
    for n, python in enumerate(pythons):
        toolchain = Toolchain("stand-in", tmp_path, (), (), python, stand_in.path_environment)
        with pytest.raises(errors.InvalidInput, match="cannot load SavedModel"):
            inspect(toolchain, saved_model, tmp_path / f"work{n}")
        assert len(imports(tmp_path)) == [1, 1, 2][n]
    assert len(servers_of_this_process()) == 2


def test_an_overrun_is_killed_and_a_dead_worker_reported_while_the_server_serves_on(
    stand_in: Toolchain, tmp_path: Path
) -> None:
    with pytest.raises(errors.CompileFailed, match=r"TensorFlow worker did not finish in 1 s"):
        inspect(stand_in, model(tmp_path, "slow", "sleep 60"), tmp_path / "work0", timeout=1)
    with pytest.raises(errors.CompileFailed, match=r"TensorFlow worker died \(killed by SIGKILL\)"):
        inspect(stand_in, model(tmp_path, "dies", "die"), tmp_path / "work1")
    with pytest.raises(errors.InvalidInput, match="cannot load SavedModel"):
        inspect(stand_in, model(tmp_path, "m", "fail"), tmp_path / "work2")
    assert len(imports(tmp_path)) == 1


def test_without_tensorflow_each_request_starts_a_worker_that_says_so(
    stand_in: Toolchain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that cannot import TensorFlow is not kept: the worker started for the request
    reports it as it would have without servers."""
    (tmp_path / "site" / "tensorflow" / "__init__.py").write_text("raise ImportError('broken wheel')\n")
    saved_model = model(tmp_path, "m", "fail")
    messages = []
    for mode in ("1", "0"):
        monkeypatch.setenv("TFAOT_DIST_FORK_WORKERS", mode)
        with pytest.raises(errors.CompileFailed) as failed:
            inspect(stand_in, saved_model, tmp_path / f"work{mode}")
        messages.append(str(failed.value))
    assert messages[0] == messages[1] == "ImportError: broken wheel"
    assert servers_of_this_process() == []


def test_idle_servers_are_limited_and_stopped_with_the_process(stand_in: Toolchain, tmp_path: Path) -> None:
    saved_model = model(tmp_path, "m", "fail")
    for n in range(worker_server.MAX_IDLE + 1):
        with pytest.raises(errors.InvalidInput):
            inspect(
                stand_in, saved_model, tmp_path / f"work{n}", tf_xla_flags=(f"--tf_xla_min_cluster_size={n}",)
            )
    assert len(imports(tmp_path)) == worker_server.MAX_IDLE + 1
    assert sorted(servers_of_this_process()) == sorted(int(pid) for pid in imports(tmp_path)[1:])
    homes = list(Path(tempfile.gettempdir()).glob("tfaot-dist-tf-server-*"))
    assert len(homes) == worker_server.MAX_IDLE
    worker_server.stop_all()
    assert servers_of_this_process() == []
    assert not any(home.exists() for home in homes)
