"""tfaot-dist as users install it: an sdist and a wheel built with `python -m build` (the wheel from the
sdist, as pip does for a source download), installed into a fresh venv, and run from there."""

import platform
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, DataRepo
from kept import code_of, kept

# The wheel's build and contents do not depend on the interpreter that runs the build: run once.
pytestmark = pytest.mark.tooling

# Where the repository keeps what the wheel carries under tfaot_dist/ (pyproject's package-dir).
PACKAGE_DIRS = {
    "tfaot_dist": "tfaot_dist",
    "spec_templates": "tfaot_dist/spec_templates",
    "package_templates": "tfaot_dist/package_templates",
}


def tracked_package_files() -> set[str]:
    """Every file of the package in git, named as the wheel names it."""
    out = subprocess.run(
        ["git", "ls-files", "-z", *PACKAGE_DIRS], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    files = set()
    for name in filter(None, out.split("\0")):
        top, _, rest = name.partition("/")
        files.add(f"{PACKAGE_DIRS[top]}/{rest}")
    return files


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from the tracked files alone, as in a fresh clone: an editable install's egg-info in the
    work tree would otherwise tell setuptools about files the package configuration forgets."""
    root = tmp_path_factory.mktemp("packaging")
    tree, out = root / "tree", root / "dist"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(tree)],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out


PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]


def dependency_wheels(wheel: Path) -> Path:
    """The wheels of what the wheel requires, downloaded from the index once for its Requires-Dist and
    this Python (kept): installing from them takes 4 s, resolving against the index again took 15."""
    with zipfile.ZipFile(wheel) as z:
        (metadata,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line for line in z.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")
        ]

    def download(out: Path) -> None:
        subprocess.run(
            [*PIP, "download", "--only-binary=:all:", "--dest", out, wheel],
            check=True,
            capture_output=True,
            timeout=900,
        )
        (out / wheel.name).unlink(missing_ok=True)  # the tool's own wheel is the one under test: never kept

    parts = {"requires": requires, "python": sys.version, "machine": platform.machine()}
    return kept("dependency-wheels", {**parts, "code": code_of(dependency_wheels)}, download)


@pytest.mark.slow  # beside the test below, which installs these distributions: `python -m build` runs once
def test_the_wheel_carries_every_file_of_the_package(distributions: Path) -> None:
    (wheel,) = distributions.glob("tfaot_dist-*.whl")
    (sdist,) = distributions.glob("tfaot_dist-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        carried = {n for n in z.namelist() if not n.startswith("tfaot_dist-")}
    assert sorted(tracked_package_files() - carried) == []
    assert sdist.stat().st_size > 0


@pytest.mark.slow
def test_installed_wheel_runs_the_first_steps(
    distributions: Path, example_models: Path, tmp_path: Path, shared_cache: Path
) -> None:
    """--version, init, add-model and a compile from the installed wheel: its templates, headers,
    kernel sources and worker are all there (the compile reuses the shared cache's runtime,
    which is keyed by the content of those sources)."""
    (wheel,) = distributions.glob("tfaot_dist-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)  # installed into by this venv's pip (--python): no ensurepip
    subprocess.run(
        [
            *PIP,
            "--python",
            env_dir / "bin" / "python",
            "install",
            "--no-compile",  # the tool's runs below write the bytecode of what they import
            "--no-index",
            "--find-links",
            dependency_wheels(wheel),
            wheel,
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    tool = env_dir / "bin" / "tfaot-dist"
    from tfaot_dist import __version__

    def run(*args: object, cwd: Path = tmp_path) -> str:
        proc = subprocess.run(
            [str(tool), *map(str, args)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=900,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TFAOT_DIST_CACHE": str(shared_cache)},
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert run("--version").strip() == f"tfaot-dist {__version__}"
    assert "created registry" in run("init", "registry")
    repo = DataRepo(tmp_path / "data")
    shutil.copytree(example_models / "simple", repo.work / "simple")
    repo.commit()
    run(
        "--registry",
        "registry",
        "add-model",
        "simple",
        "--source",
        repo.url,
        "--aot-config",
        "simple/aot_config.yaml",
        "--batch-sizes",
        "1",
    )
    out = run(
        "compile",
        "--aot-config",
        repo.work / "simple" / "aot_config.yaml",
        "--output-directory",
        "out",
        "--batch-sizes",
        "1",
        "--cpu-levels",
        "x86-64",
    )
    assert "compiled tfaot-model-simple 1.0.0" in out
    assert (
        tmp_path / "out" / "tfaot-model-simple-1.0.0" / "include" / "tfaot-model-simple" / "model.h"
    ).is_file()
