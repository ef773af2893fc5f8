"""Shared fixtures: one real TensorFlow toolchain, real example models, real git repositories.

The toolchain (and the XLA runtime) are expensive, so they live in the shared
cache ($TFAOT_DIST_CACHE, default ~/.cache/tfaot-dist) and are built on first
use. Each test that needs a cache of its own gets a fresh directory; for a test
marked `tf` its `toolchains` and `runtime` entries link to the shared ones, so
that checks like "the cache is unchanged" see only what the test did.

Two tiers: a test is marked `tf` when it needs the TensorFlow toolchain, either
explicitly or because a fixture it uses needs it (marked here at collection).
`scripts/test --fast` sets TFAOT_DIST_FAST=1 and runs `-m "not tf"`; there any
attempt to create or use a toolchain fails the test, so a missing marker shows.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Union

import pytest
import yaml

from tfaot_dist import builder, cli
from tfaot_dist.cache import SHARED, Cache, default_cache
from tfaot_dist.registry import DEFAULT_REQUIREMENTS, Defaults
from tfaot_dist.session import Session
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, worker_env
from tfaot_dist.util import download
from tfaot_dist.util.archives import PACKAGE, extract
from tfaot_dist.util.fs import file_lock

if TYPE_CHECKING:
    from test_distribution import Fleet

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "examples"))

import kept_objects  # noqa: E402
import make_data_repo  # noqa: E402
from kept import code_of, host_parts, kept, source_digest, toolchain_parts  # noqa: E402

GIT_ENV = {**os.environ, **make_data_repo.GIT_IDENTITY}
# Most tests build packages for the lowest CPU level only: three levels triple the compile time.
# test_cpu_levels.py and the examples build the registry's default levels.
SINGLE_LEVEL = "cpu_levels: [x86-64]"
FAST = os.environ.get("TFAOT_DIST_FAST") == "1"
# Retries in tests wait milliseconds, not the default half second doubled (tests/test_download.py checks
# the default); the commands the tests run as subprocesses inherit it.
os.environ.setdefault(download.BACKOFF_ENV, "0.01")
TF_MARKER = "tf"
# Each test's limit in seconds (its setup, call and teardown: pytest-timeout), unless --timeout is given; 0 for
# none. Generous: on a cold cache the first test that needs a toolchain waits for it, Abseil and the XLA
# runtime to be built (10-15 min on 2 busy cores). A test that hangs then fails, named, and the run goes on.
TIMEOUT_ENV = "TFAOT_DIST_TEST_TIMEOUT"
DEFAULT_TIMEOUT = 1800.0


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its settings
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("timeout", None) is None:
        config.option.timeout = per_test_timeout()


def per_test_timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV, "")
    if not value:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < math.inf:  # also NaN
        raise pytest.UsageError(f"{TIMEOUT_ENV}: {value!r} is not a number of seconds (0: no limit)")
    return seconds


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `tf` every test whose fixtures need the toolchain, and the `slow` ones (pyproject.toml).

    Under pytest-xdist (`--dist loadgroup`, scripts/test) a test runs on the worker of its group: by
    default its module's, so that module-scoped fixtures (built packages, servers) are made once; a
    module whose fixtures fall into independent families marks its tests with groups of their own
    (`@pytest.mark.xdist_group(NAME)`), which then run beside the rest. In the fast tier the workers take
    the groups in the order of the items, the long ones first (FAST_LONG_GROUPS; scripts/test passes
    --no-loadscope-reorder there). The toolchain tier takes pytest-xdist 3.8's own order, the groups with
    the most tests first: putting the longest groups first measured slower there (below).
    """
    for item in items:
        if "toolchain" in getattr(item, "fixturenames", ()) or item.get_closest_marker("slow"):
            item.add_marker(TF_MARKER)
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if FAST:  # a stable sort: a group's tests keep their order
        items.sort(key=lambda item: -FAST_LONG_GROUPS.get(group_of(item), 0))


# The toolchain tier's longest groups first (the seconds of a run, 2 cores) measured slower than
# pytest-xdist's order, on one machine, b69bf9a against a901f73: cold .ci/run 39.5 min against 36.1, the
# warm tier 602 s against 551 s (2026-11-27). So only the fast tier is ordered here.

# Seconds of the fast tier's longest groups (TFAOT_DIST_FAST=1; 2 workers, 2026-11-27, the machine otherwise
# quiet), started first: with 3 workers 55, 49 and 57 s against 49, 64, 64 and 62 s in pytest-xdist's order.
# (test_docs.py, 19 s then, left the list with its crawls: 4 s.)
FAST_LONG_GROUPS = {
    "tests/test_channel_secrets.py": 17,
    "tests/test_workflows.py": 16,
    "tests/test_totals.py": 15,
    "tests/test_security.py": 13,
    "tests/test_cli_imports.py": 10,
    "tests/test_specs.py": 9,
    "tests/test_request_deadline.py": 9,
    "tests/test_oci_trust.py": 8,
}


def group_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark and mark.args else ""


def refuse_toolchain(*args: Any, **kwargs: Any) -> None:
    if kwargs.get("offline"):  # may only say what is missing: finding a toolchain fails the test below
        refuse_toolchain.real(*args, **kwargs)  # type: ignore[attr-defined]
    pytest.fail(
        "this test needs the TensorFlow toolchain but runs in the fast tier (TFAOT_DIST_FAST=1): "
        f"mark it @pytest.mark.{TF_MARKER}",
        pytrace=True,
    )


refuse_toolchain.real = ensure_toolchain  # type: ignore[attr-defined]  # out of the guard's reach


@pytest.fixture(scope="session", autouse=True)
def fast_tier_guard() -> Iterator[None]:
    """In the fast tier, every reference to ensure_toolchain (in any loaded module) refuses."""
    if not FAST:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        for module in list(sys.modules.values()):
            for name, value in list(getattr(module, "__dict__", {}).items()):
                if value is ensure_toolchain:
                    patch.setattr(module, name, refuse_toolchain)
        yield


@pytest.fixture(scope="session", autouse=True)
def system_temp_in_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The system's temporary directory, for the code under test and every command it starts, is one
    inside the run's own (TMPDIR): what they put there (a failed build kept for inspection, a log the
    cache could not take, the copies of a publish a test kills) stays with the run, never in /tmp."""
    temp = tmp_path_factory.mktemp("system-temp", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(temp))
        patch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        yield temp


@pytest.fixture(scope="session", autouse=True)
def kept_objects_know_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The worker's directory, which tests/kept_objects.py leaves out of what keys a compile (the tests'
    CMake builds' launcher too): a header's path under it differs in every run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(kept_objects.RUN_DIRECTORY, str(tmp_path_factory.getbasetemp()))
        yield


@pytest.fixture(scope="session")
def shared_cache() -> Path:
    return default_cache()


@pytest.fixture(scope="session")
def toolchain(shared_cache: Path) -> Toolchain:
    if FAST:
        refuse_toolchain()
    return ensure_toolchain(shared_cache, DEFAULT_REQUIREMENTS, lambda m: print(m, file=sys.stderr))


# TensorFlow of CMSSW 14's releases, the other version the tests compile with.
TF212 = ("tensorflow-cpu==2.12.0",)


@pytest.fixture(scope="session")
def toolchain212(shared_cache: Path) -> Toolchain:
    if FAST:
        refuse_toolchain()
    return ensure_toolchain(shared_cache, TF212, lambda m: print(m, file=sys.stderr))


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The directory name, made by make(directory) once per test run: under pytest-xdist the first worker
    that asks makes it and the others wait for it (a lock) and share it. Read-only for its users."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    target, done = base / name, base / f"{name}.done"
    with file_lock(base / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)  # a worker that failed making it
            target.mkdir()
            make(target)
            done.touch()
    return target


def run_in_toolchain(
    toolchain: Toolchain, script: Path, *args: object, tmp: Path, stdout: int | IO[bytes] = subprocess.DEVNULL
) -> None:
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(toolchain.python), "-I", str(script), *map(str, args)],
        env=worker_env(tmp),
        check=True,
        stdout=stdout,
    )


def exported_by(toolchain: Toolchain, script: Path, name: str, *args: str) -> Path:
    """What script (a TensorFlow program writing SavedModels into the directory it is given, then args)
    exports, kept between runs while the script, args and the toolchain are the same (tests/kept.py).
    Kept, the SavedModel's bytes are too, so its compiles are answered from the shared cache."""
    parts = {"script": source_digest(script), "args": list(args), "toolchain": toolchain_parts(toolchain)}
    return kept(name, parts, lambda out: run_in_toolchain(toolchain, script, out, *args, tmp=out / ".tmp"))


def tensorflow_answers(
    toolchain: Toolchain, name: str, script: str, saved_model: Path, inputs: Mapping[str, bytes]
) -> Path:
    """A directory holding inputs (file name: bytes) and what script, a TensorFlow program run as
    `python SCRIPT SAVED_MODEL DIRECTORY`, writes there (what it prints: stdout.txt): TensorFlow's answers,
    kept between runs while the SavedModel, the inputs, the script and the toolchain are the same
    (tests/kept.py). Read-only: a test copies it to add files."""
    parts = {
        "saved_model": source_digest(saved_model),
        "inputs": {file: hashlib.sha256(data).hexdigest() for file, data in sorted(inputs.items())},
        "script": script,
        "toolchain": toolchain_parts(toolchain),
    }

    def make(out: Path) -> None:
        for file, data in inputs.items():
            (out / file).write_bytes(data)
        (out / ".script.py").write_text(script)
        with (out / "stdout.txt").open("wb") as stdout:
            run_in_toolchain(toolchain, out / ".script.py", saved_model, out, tmp=out / ".tmp", stdout=stdout)

    return kept(f"tf-answers-{name}", parts, make)


@pytest.fixture(scope="session")
def example_models(toolchain: Toolchain) -> Path:
    """simple/ and multi/ with saved_model/ and aot_config.yaml each."""
    return exported_by(toolchain, REPO / "examples" / "make_models.py", "examples")


@pytest.fixture(scope="session")
def examples212(toolchain212: Toolchain) -> Path:
    """simple/ and multi/ as TensorFlow 2.12 exports them (a SavedModel of 2.21 may not load in 2.12)."""
    return exported_by(toolchain212, REPO / "examples" / "make_models.py", "examples212")


@pytest.fixture(scope="session")
def study(toolchain: Toolchain) -> Path:
    """The study's 12-layer, 128-unit model (saved_model/ and aot_config.yaml: batch sizes 1, 2, 4)."""
    return (
        exported_by(toolchain, REPO / "examples" / "make_models.py", "study", "study_l12_u128")
        / "study_l12_u128"
    )


@pytest.fixture(scope="session")
def test_models(toolchain: Toolchain) -> Path:
    return exported_by(toolchain, REPO / "tests" / "models" / "make_test_models.py", "test-models")


@pytest.fixture(scope="session")
def simple_every_level(example_models: Path, shared_cache: Path, toolchain: Toolchain) -> Path:
    """The package root of the simple example compiled (`compile`, no registry) for every default CPU level
    and batch sizes 1, 2, 4, verified, for test_cpu_levels and test_cpp_interface, which compiled the same
    thing each; read-only for them."""
    return kept_simple_every_level(example_models, shared_cache, toolchain)


def kept_simple_every_level(example_models: Path, shared_cache: Path, toolchain: Toolchain) -> Path:
    """simple_every_level's package root, kept between runs while the export, the tool's code, the
    toolchain and the host are the same (tests/kept.py)."""

    def make(out: Path) -> None:
        cache = fresh_cache(out / "cache", shared_cache)
        config = example_models / "simple" / "aot_config.yaml"
        builder.compile_config(config, out / "dist", Session(Cache(cache), Defaults()))

    parts = {
        "export": source_digest(example_models / "simple"),
        "tool": source_digest(REPO / "tfaot_dist"),
        "tests": code_of(make, fresh_cache),
        "toolchain": toolchain_parts(toolchain),
        "host": host_parts(),
    }
    dist = kept("simple-every-level", parts, make) / "dist"
    (root,) = (p for p in dist.iterdir() if p.is_dir())
    return root


def git(*args: object, cwd: Path | str) -> str:
    return subprocess.run(
        ["git", *map(str, args)], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


class DataRepo:
    """A work repository plus its bare clone, the URL that tests register."""

    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.bare = root / "data-repo.git"
        self.work.mkdir(parents=True)
        git("init", "-q", "-b", "main", cwd=self.work)

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def add_model(self, name: str, saved_model: Path, config: dict[str, Any]) -> None:
        shutil.copytree(saved_model, self.work / name / "saved_model")
        self.write(f"{name}/aot_config.yaml", yaml.safe_dump(config, sort_keys=False))

    def write(self, rel: str, text: str) -> None:
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def commit(self, message: str = "update") -> str:
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work)
        if self.bare.exists():
            git("push", "-q", str(self.bare), "main", cwd=self.work)
        else:
            git("clone", "-q", "--bare", self.work, self.bare, cwd=self.work.parent)
        return git("rev-parse", "HEAD", cwd=self.work)


def aot_config(name: str, batch_sizes: Sequence[int] = (1, 2, 4), **model: object) -> dict[str, Any]:
    return {
        "model": {"name": f"m_{name}", "version": "1.0.0", **model},
        "compilation": {"batch_sizes": list(batch_sizes)},
    }


@pytest.fixture(scope="session")
def data_repo(example_models: Path, test_models: Path, tmp_path_factory: pytest.TempPathFactory) -> DataRepo:
    """Both example models and every special test model, in one git repository."""
    repo = DataRepo(tmp_path_factory.mktemp("data"))
    for name in ("simple", "multi"):
        shutil.copytree(example_models / name, repo.work / name)
    for name in ("two_inputs", "static", "nonleading", "string_op", "no_batch", "value_shape"):
        repo.add_model(name, test_models / name / "saved_model", aot_config(name))
    repo.commit("models")
    git("tag", "v1", cwd=repo.work)
    git("push", "-q", str(repo.bare), "v1", cwd=repo.work)
    return repo


def fresh_cache(path: Path, shared_cache: Path, compiles: bool = True) -> Path:
    """A new cache at path that shares the expensive toolchains and runtime builds, and TensorFlow's
    compile answers unless compiles is False (a test whose point is that TensorFlow compiles again)."""
    names = [name for name in SHARED if compiles or name != "compiles"]
    return Cache(shared_cache).share_into(path, names).root


@pytest.fixture
def cache(request: pytest.FixtureRequest, tmp_path: Path, shared_cache: Path) -> Path:
    """A fresh cache; for a test marked `tf` it shares the toolchain and runtime (created if need be)."""
    if request.node.get_closest_marker(TF_MARKER):
        request.getfixturevalue("toolchain")
        return fresh_cache(tmp_path / "cache", shared_cache)
    path = tmp_path / "cache"
    path.mkdir()
    return path


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "registry"
    (path / "models").mkdir(parents=True)
    copy_registry_yaml(path)
    return path


def copy_registry_yaml(registry: Path) -> None:
    """The repository's registry.yaml, with a single CPU level (SINGLE_LEVEL)."""
    text = (REPO / "registry" / "registry.yaml").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("cpu_levels:")]
    assert len(lines) == 1, "registry/registry.yaml: expected one cpu_levels line"
    (registry / "registry.yaml").write_text(text.replace(lines[0], SINGLE_LEVEL))


class Cli:
    """Runs tfaot-dist in this process, as a user would on the command line."""

    def __init__(
        self,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        cache: Path,
        registry: Path,
        cwd: Path,
    ) -> None:
        self.capsys, self.cache, self.registry = capsys, cache, registry
        monkeypatch.setenv("TFAOT_DIST_CACHE", str(cache))
        monkeypatch.chdir(cwd)

    def __call__(self, *args: object, expect: int = 0) -> tuple[str, str]:
        """(stdout, stderr) of `tfaot-dist ARGS`, which must exit with expect."""
        self.capsys.readouterr()
        code = cli.main(["--registry", str(self.registry), *map(str, args)])
        out, err = self.capsys.readouterr()
        assert code == expect, f"exit {code} (expected {expect})\nstdout: {out}\nstderr: {err}"
        return out, err

    def error(self, *args: object, expect: int) -> str:
        """Run a failing command; return its single error line."""
        _, err = self(*args, expect=expect)
        lines = [ln for ln in err.splitlines() if ln.startswith("tfaot-dist: error:")]
        assert len(lines) == 1, err
        return lines[0]


@pytest.fixture
def run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cache: Path,
    registry: Path,
    tmp_path: Path,
) -> Cli:
    return Cli(capsys, monkeypatch, cache, registry, tmp_path)


Snapshot = dict[
    str, Union[bytes, str, tuple[str, str], None]
]  # path -> bytes, "dir", ("link", target); None: absent


def snapshot(*roots: Path) -> Snapshot:
    """Every path below roots (not following links) with the bytes of each file."""
    state: Snapshot = {}
    for root in roots:
        if not root.exists():
            state[str(root)] = None
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath, name)
                if p.is_symlink():
                    state[str(p)] = ("link", os.readlink(p))
                    if name in dirnames:
                        dirnames.remove(name)
                elif p.is_file():
                    state[str(p)] = p.read_bytes()
                else:
                    state[str(p)] = "dir"
    return state


@pytest.fixture(scope="session")
def built(
    tmp_path_factory: pytest.TempPathFactory, data_repo: DataRepo, shared_cache: Path, toolchain: Toolchain
) -> Path:
    """Both example models registered (test-simple, test-multi) and built once into built/dist.

    built/cache shares the toolchain and XLA runtime of the shared cache;
    built/registry is the registry. Made once per run (made_once): its sources are the data repository of
    the worker that made it.
    """

    def make(root: Path) -> None:
        cache = fresh_cache(root / "cache", shared_cache)
        reg = root / "registry"
        reg.mkdir()
        copy_registry_yaml(reg)
        old = os.environ.get("TFAOT_DIST_CACHE")
        os.environ["TFAOT_DIST_CACHE"] = str(cache)
        try:
            for name, model in (("test-simple", "simple"), ("test-multi", "multi")):
                add = [
                    "add-model",
                    name,
                    "--source",
                    data_repo.url,
                    "--aot-config",
                    f"{model}/aot_config.yaml",
                ]
                assert cli.main(["--registry", str(reg), *add]) == 0
            assert cli.main(["--registry", str(reg), "build", "--all", "--dist", str(root / "dist")]) == 0
        finally:
            if old is None:
                os.environ.pop("TFAOT_DIST_CACHE")
            else:
                os.environ["TFAOT_DIST_CACHE"] = old

    return made_once(tmp_path_factory, "built", make)


@pytest.fixture(scope="session")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, data_repo: DataRepo, shared_cache: Path, toolchain: Toolchain
) -> Iterator[Fleet]:
    """test_distribution.make_fleet: the registry of TFAOT_DIST_TEST_MODELS models, built and published
    once for every test module that uses it (distribution tests, OCI channel tests)."""
    from test_distribution import make_fleet

    yield from make_fleet(tmp_path_factory, data_repo, shared_cache)


def unpack_package(archive: Path, into: Path) -> Path:
    """A package archive unpacked into the directory into (made if missing) as the tool unpacks one
    (archives.extract: the same on every Python, tarfile's filters or not); its top directory."""
    into.mkdir(parents=True, exist_ok=True)
    staged = into / f".unpack-{archive.name}"
    extract(archive, staged, kind=PACKAGE)
    (top,) = staged.iterdir()
    top = top.rename(into / top.name)
    staged.rmdir()
    return top
