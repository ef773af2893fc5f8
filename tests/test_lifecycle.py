"""A model's life after add-model: update (re-pin, build numbers), rebuilds that never replace another
build in dist/, a starter config, and --offline builds that create nothing. Real git repositories and
the real TensorFlow toolchain."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Cli, DataRepo, git, snapshot
from hostile import RUNTIME, RUNTIME_VERSION, Channel, archive_bytes, hand_built_dist, model_files, refused
from httpserve import Server

from tfaot_dist.sources import GitSources
from tfaot_dist.util.fs import sha256_file

USAGE, INVALID, UNAVAILABLE, INTEGRITY = 2, 3, 4, 7


def entry_of(registry: Path, name: str) -> dict[str, Any]:
    entry: dict[str, Any] = yaml.safe_load((registry / "models" / f"{name}.yaml").read_text())
    return entry


@pytest.fixture
def model_repo(example_models: Path, tmp_path: Path) -> DataRepo:
    """A data repository of its own (tests here commit to it) holding the example model simple."""
    repo = DataRepo(tmp_path / "data")
    shutil.copytree(example_models / "simple", repo.work / "simple")
    repo.commit("simple 1.0.0")
    return repo


def add_simple(run: Cli, repo: DataRepo, *options: str) -> None:
    """`add-model m` for repo's simple/ at main."""
    run(
        "add-model",
        "m",
        "--source",
        repo.url,
        "--ref",
        "main",
        "--aot-config",
        "simple/aot_config.yaml",
        *options,
    )


def edit_config(repo: DataRepo, **model: object) -> str:
    """Change model fields of simple/aot_config.yaml and commit; returns the commit."""
    path = repo.work / "simple" / "aot_config.yaml"
    config = yaml.safe_load(path.read_text())
    config["model"].update(model)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return repo.commit(f"edit {sorted(model)}")


def test_update_repins_with_build_numbers(
    run: Cli, model_repo: DataRepo, registry: Path, cache: Path
) -> None:
    add_simple(run, model_repo)
    first = entry_of(registry, "m")
    assert first["version"] == "1.0.0"

    # Nothing new on the branch: the entry stays byte for byte.
    before = snapshot(registry)
    out, _ = run("update", "m")
    assert "m 1.0.0: up to date" in out.replace("tfaot-model-", "")
    assert snapshot(registry) == before

    # A new commit, same model.version: the next build number, and what changed is shown.
    second_commit = edit_config(model_repo, description="retrained")
    out, _ = run("update", "m", "--json")
    shown = json.loads(out)
    assert shown["status"] == "updated"
    assert {c["field"]: (c["old"], c["new"]) for c in shown["changes"]} == {
        "version": ("1.0.0", "1.0.0.post1"),
        "source.commit": (first["source"]["commit"], second_commit),
    }
    assert entry_of(registry, "m") == shown["entry"]
    assert entry_of(registry, "m")["source"]["commit"] == second_commit
    assert shown["path"] == str(registry / "models" / "m.yaml")  # the file written (was "None")

    edit_config(model_repo, description="retrained again")
    out, _ = run("update", "m")
    assert out.splitlines()[0] == (
        f"updated tfaot-model-m 1.0.0.post1 -> 1.0.0.post2 ({registry / 'models' / 'm.yaml'})"
    )
    assert entry_of(registry, "m")["version"] == "1.0.0.post2"

    # The AOT config's own version rises: it is taken as it is.
    edit_config(model_repo, version="1.1.0")
    out, _ = run("update", "m")
    assert entry_of(registry, "m")["version"] == "1.1.0"
    assert "1.0.0.post2 -> 1.1.0" in out

    # Same inputs built anew (e.g. another TensorFlow in registry.yaml): asked for explicitly.
    run("update", "m", "--new-build")
    assert entry_of(registry, "m")["version"] == "1.1.0.post1"

    # Refused, leaving registry and cache as they were: a lower version, the same version with
    # other inputs, a ref that does not exist.
    before = snapshot(registry, cache)
    assert "lower than the entry's 1.1.0.post1" in run.error(
        "update", "m", "--version", "1.0.5", expect=INVALID
    )
    edit_config(model_repo, description="third")
    line = run.error("update", "m", "--version", "1.1.0.post1", expect=INVALID)
    assert "version 1.1.0.post1 would stay while what it is built from changed" in line
    assert "1.1.0.post2" in line
    assert "'nope' not found" in run.error("update", "m", "--ref", "nope", expect=INVALID)
    assert "other: no such model" in run.error("update", "other", expect=INVALID)
    assert snapshot(registry, cache) == before


def test_new_build_keeps_the_signature(
    run: Cli, model_repo: DataRepo, example_models: Path, registry: Path, cache: Path
) -> None:
    add_simple(run, model_repo)
    # The model behind the config changes its inputs: a build number would break its consumers.
    shutil.rmtree(model_repo.work / "simple" / "saved_model")
    shutil.copytree(example_models / "multi" / "saved_model", model_repo.work / "simple" / "saved_model")
    model_repo.commit("another model")
    before = snapshot(registry, cache)
    line = run.error("update", "m", expect=INVALID)
    assert "the signature changed" in line and "give a higher --version" in line
    assert snapshot(registry, cache) == before
    run("update", "m", "--version", "2.0.0")
    assert entry_of(registry, "m")["version"] == "2.0.0"


class WorkerStarts:
    """The TensorFlow workers this process starts while in the with block, seen in /proc every 50 ms
    (a worker lives seconds): children whose command line runs tf_worker.py, and children of its
    servers (tf_worker.py --serve, which fork one per request; worker_server.py). Only this process's
    children and its servers' are read (each thread's /proc/PID/task/TID/children), not every
    process of the machine: that scan took a tenth of a core away from the command under test."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.05):
            for pid in _children(me):
                cmdline = _cmdline(pid)
                if b"tf_worker.py" not in cmdline:
                    continue
                if b"--serve" not in cmdline:
                    self.seen.add(pid)
                    continue
                self.seen.update(child for child in _children(pid) if b"tf_worker.py" in _cmdline(child))

    def __enter__(self) -> WorkerStarts:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _children(pid: int) -> list[int]:
    """The processes pid's threads started (gone ones drop out: their files are not there)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            found += map(int, Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_check_answers_are_kept_by_saved_model_digest(
    run: Cli, example_models: Path, cache: Path, tmp_path: Path
) -> None:
    """TensorFlow checks a SavedModel once: the same files elsewhere (a new checkout, the old pin
    of an update) get the kept answer; a changed file is checked again."""
    if (cache / "checks").is_symlink():  # this test's own answers, not the shared ones
        (cache / "checks").unlink()
    first = tmp_path / "a" / "saved_model"
    shutil.copytree(example_models / "simple" / "saved_model", first)
    with WorkerStarts() as starts:
        out, _ = run("check", first)
    assert len(starts.seen) == 1 and "cpu: all ops compatible" in out
    assert len(list((cache / "checks").glob("*.json"))) == 1

    again = tmp_path / "b" / "saved_model"
    shutil.copytree(first, again)
    with WorkerStarts() as starts:
        out_again, _ = run("check", again)
    assert starts.seen == set() and out_again == out.replace(str(first), str(again))

    (again / "assets").mkdir(exist_ok=True)
    (again / "assets" / "notes.txt").write_text("changed\n")
    with WorkerStarts() as starts:
        run("check", again)
    assert len(starts.seen) == 1 and len(list((cache / "checks").glob("*.json"))) == 2

    # An answer others could have written is not taken (the cache's trust rule): asked again, kept anew.
    for kept in (cache / "checks").glob("*.json"):
        kept.chmod(0o666)
    with WorkerStarts() as starts:
        assert run("check", first)[0] == out
    assert len(starts.seen) == 1
    with WorkerStarts() as starts:
        assert run("check", first)[0] == out
    assert starts.seen == set()


def test_compile_answers_are_kept_and_a_new_version_builds_without_tensorflow(
    run: Cli, model_repo: DataRepo, cache: Path, tmp_path: Path
) -> None:
    """A new version of an unchanged model takes TensorFlow's kept compile answer (no worker starts)
    and ships the same objects and reference outputs, verified by the kept compile of its harness
    (linked anew); `verify --rebuild` compiles again and gets the same bytes. (An entry cut short is
    made again: ensure_entry's seal, test_cache.py.)"""
    for kept in ("compiles", "objects"):  # this test's own, not the shared ones
        if (cache / kept).is_symlink():
            (cache / kept).unlink()
    add_simple(run, model_repo)
    dist = tmp_path / "dist"

    def build() -> tuple[set[int], str, dict[str, str]]:
        with WorkerStarts() as starts:
            _, err = run("build", "--all", "--dist", dist)
        version = entry_of(run.registry, "m")["version"]
        root = dist / f"tfaot-model-m-{version}"
        files = {
            p.relative_to(root).as_posix(): sha256_file(p)
            for p in root.rglob("*")
            if p.suffix in (".o", ".h", ".bin")
        }
        return starts.seen, err, files

    seen, _, first = build()
    assert len(seen) == 1 and len(first) > 10
    answers = [p for p in (cache / "compiles").iterdir() if p.is_dir()]
    harnesses = [p for p in (cache / "objects").iterdir() if p.is_dir()]
    assert len(answers) == 1 and len(harnesses) == 1

    edit_config(model_repo, description="retrained")  # not in the compile request
    run("update", "m")
    assert entry_of(run.registry, "m")["version"] == "1.0.0.post1"
    seen, err, second = build()
    assert seen == set() and "taken from the cache" in err
    assert second == first
    assert [p for p in (cache / "objects").iterdir() if p.is_dir()] == harnesses

    with WorkerStarts() as starts:
        out, _ = run("verify", "m", "--rebuild", "--dist", dist, "--json")
    assert len(starts.seen) == 1 and json.loads(out)["archive_sha256"]


def test_add_model_twice_points_at_update(
    run: Cli, model_repo: DataRepo, registry: Path, cache: Path
) -> None:
    run("add-model", "m", "--source", model_repo.url, "--aot-config", "simple/aot_config.yaml")
    line = run.error(
        "add-model", "m", "--source", model_repo.url, "--aot-config", "simple/aot_config.yaml", expect=INVALID
    )
    assert "already registered" in line and "tfaot-dist update m" in line


def test_build_never_replaces_another_build_in_dist(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """registry.yaml changed (another build key, the same version) while dist/ holds the old build:
    build refuses before compiling anything, names what is there, and leaves dist as it was. A new
    build number gives a package of its own."""
    from tfaot_dist import cli

    dist, registry = tmp_path / "dist", tmp_path / "registry"
    shutil.copytree(built / "dist", dist)
    shutil.copytree(built / "registry", registry)
    config = registry / "registry.yaml"
    config.write_text(
        config.read_text().replace("target_triple: x86_64-pc-linux", "target_triple: x86_64-unknown-linux")
    )
    assert "x86_64-unknown-linux" in config.read_text()
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    before = snapshot(dist, built / "cache" / "builds")
    code = cli.main(["--registry", str(registry), "build", "test-simple", "--dist", str(dist)])
    err = capsys.readouterr().err
    assert code == INTEGRITY, err
    assert (
        f"{dist / 'tfaot-model-test-simple-1.0.0'}: holds another build of tfaot-model-test-simple 1.0.0"
        in err
    )
    assert "tfaot-dist update test-simple --new-build" in err and "compiling" not in err
    assert snapshot(dist, built / "cache" / "builds") == before
    # Only the archive left (the directory removed by hand): its manifest tells the same.
    shutil.rmtree(dist / "tfaot-model-test-simple-1.0.0")
    code = cli.main(["--registry", str(registry), "build", "test-simple", "--dist", str(dist)])
    assert code == INTEGRITY
    assert f"{dist / 'tfaot-model-test-simple-1.0.0.tar.gz'}: holds another build" in capsys.readouterr().err


def test_build_into_a_dist_given_as_a_link(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`build --all --dist LINK` (a link to an empty directory): resolved once, at the start; the
    cached builds are copied into the directory it points to (copying them took a lock of the link:
    an IsADirectoryError traceback after compiling)."""
    from tfaot_dist import cli

    dist, link = tmp_path / "dist", tmp_path / "dist-link"
    dist.mkdir()
    link.symlink_to(dist)
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    code = cli.main(["--registry", str(built / "registry"), "build", "--all", "--dist", str(link), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    results = json.loads(out)["results"]
    assert len(results) == 2 and all(Path(r["archive"]).parent == dist for r in results), results
    assert sorted(p.name for p in dist.iterdir()) == sorted(p.name for p in (built / "dist").iterdir())
    assert link.is_symlink()


def test_dist_holds_packages_only(built: Path) -> None:
    """No lock or marker files beside the packages, and every package directory has one mode."""
    names = sorted(p.name for p in (built / "dist").iterdir())
    assert [n for n in names if n.startswith(".")] == []
    dirs = [p for p in (built / "dist").iterdir() if p.is_dir()]
    assert len(dirs) == 3 and {p.stat().st_mode & 0o777 for p in dirs} == {0o755}, names


def test_init_config_writes_a_config_that_checks(run: Cli, example_models: Path, tmp_path: Path) -> None:
    model = tmp_path / "tagger"
    shutil.copytree(example_models / "multi" / "saved_model", model / "saved_model")
    out, _ = run("init-config", model / "saved_model")
    config_path = model / "aot_config.yaml"
    assert f"wrote {config_path}" in out
    text = config_path.read_text()
    config = yaml.safe_load(text)
    assert config == {
        "model": {
            "name": "tagger",
            "version": "1.0.0",
            "saved_model": "./saved_model",
            "serving_key": "serving_default",
        },
        "compilation": {"batch_sizes": [1, 2, 4, 8], "namespace": "tfaot_model"},
    }
    # The signature, in the C++ order, as comments.
    rows = [line.split() for line in text.splitlines() if line.startswith("#     ")]
    assert rows == [
        ["#", "input_0", "float32[4]", "tfaot::FloatArrays,", "4", "per", "row"],
        ["#", "input_1", "float64[4]", "tfaot::DoubleArrays,", "4", "per", "row"],
        ["#", "output_0", "float32[2]", "tfaot::FloatArrays,", "2", "per", "row"],
        ["#", "output_1", "bool[2]", "tfaot::BoolArrays,", "2", "per", "row"],
    ]
    assert text.index("#     output_0") < text.index("#     output_1") < text.index("model:")
    out, err = run("check", config_path)
    assert "cpu: all ops compatible" in out and "warning" not in err

    # An existing file is kept unless --force; a misspelt key is named by check.
    before = snapshot(model)
    line = run.error("init-config", model / "saved_model", "--name", "other", expect=INVALID)
    assert f"{config_path}: exists (give --force" in line
    assert snapshot(model) == before
    run("init-config", model / "saved_model", "--name", "other", "--batch-sizes", "1,16", "--force")
    assert yaml.safe_load(config_path.read_text())["model"]["name"] == "other"
    config_path.write_text(config_path.read_text() + "  batch_size: [3]\n")
    _, err = run("check", config_path)
    assert f"warning: {config_path}: unknown keys ignored: compilation.batch_size" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--name", "class"], "--name: 'class' is reserved in C++"),
        (["--version", "one"], "--version: invalid version 'one'"),
        (["--serving-key", "a b"], "--serving-key: invalid serving key 'a b'"),
        (["--batch-sizes", "0"], "batch size 0 is not positive"),
        ([], "not a SavedModel directory (no saved_model.pb)"),
    ],
)
def test_init_config_refuses_bad_input(
    run: Cli, tmp_path: Path, args: list[object] | list[str], message: str
) -> None:
    """Refused before TensorFlow is asked anything; nothing is written."""
    model = tmp_path / "m" / "saved_model"
    model.mkdir(parents=True)
    if args:
        (model / "saved_model.pb").write_bytes(b"")
    before = snapshot(tmp_path / "m")
    assert message in run.error("init-config", model, *args, expect=INVALID)
    assert snapshot(tmp_path / "m") == before


def test_class_names_from_directories() -> None:
    from tfaot_dist.starter import class_name_for

    assert class_name_for(Path("/x/DeepJet-v2/saved_model")) == "deepjet_v2"
    assert class_name_for(Path("/x/2024_tagger")) == "model_2024_tagger"
    assert class_name_for(Path("/x/class/saved_model")) == "class_model"
    assert class_name_for(Path("/x/---/saved_model")) == "model"


def test_offline_build_creates_no_toolchain(run: Cli, registry: Path, cache: Path, tmp_path: Path) -> None:
    """`build --offline` with the source cached but no toolchain: exit 4 naming the toolchain, and
    nothing is created (no venv, no Abseil, no download)."""
    repo = DataRepo(tmp_path / "data")
    repo.write("m/aot_config.yaml", "model: {name: m, version: '1.0.0'}\ncompilation: {batch_sizes: [1]}\n")
    repo.write("m/saved_model/saved_model.pb", "")
    commit = repo.commit()
    GitSources(cache).fetch(repo.url, commit)
    (registry / "models" / "m.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "m",
                "version": "1.0.0",
                "source": {"git": repo.url, "ref": "main", "commit": commit},
                "aot_config": "m/aot_config.yaml",
            }
        )
    )
    before = snapshot(registry, cache)
    line = run.error("build", "m", "--offline", "--dist", tmp_path / "dist", expect=UNAVAILABLE)
    assert "offline: toolchain" in line and "is not in the cache" in line and "tensorflow-cpu==" in line
    assert snapshot(registry, cache) == before
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())
    assert git("rev-parse", "HEAD", cwd=repo.work) == commit


# ---------------------------------------------------------------- publish, yank, dry runs, remove
# Hand-built packages (tests/hostile.py): what publish and setup read, without a compiler.


def test_publish_takes_names_skips_what_is_published_and_names_every_conflict(
    run: Cli, tmp_path: Path
) -> None:
    dist = hand_built_dist(tmp_path / "dist", models=("a", "b"))
    channel = tmp_path / "channel"
    # Only a (and the runtime it requires): b stays unpublished.
    out, _ = run("publish", "a", "--channel", channel, "--dist", dist, "--json")
    assert sorted((p["name"], p["status"]) for p in json.loads(out)["packages"]) == [
        ("tfaot-model-a", "published"),
        (RUNTIME, "published"),
    ]
    # Everything: what is there with the same bytes is skipped, b is published.
    out, _ = run("publish", "--channel", channel, "--dist", dist, "--json")
    assert sorted((p["name"], p["status"]) for p in json.loads(out)["packages"]) == [
        ("tfaot-model-a", "unchanged"),
        ("tfaot-model-b", "published"),
        (RUNTIME, "unchanged"),
    ]
    # Other bytes under published versions: every one named, nothing written, exit 7.
    other = tmp_path / "other"
    other.mkdir()
    for model in ("a", "b"):
        files, extra = model_files(model)
        files[f"include/tfaot-model-{model}/model.h"] += b"// rebuilt\n"
        (other / f"tfaot-model-{model}-1.0.tar.gz").write_bytes(
            archive_bytes(f"tfaot-model-{model}", "1.0", files, extra)
        )
    line = refused(run, channel, "publish", "--channel", channel, "--dist", other, code=INTEGRITY)
    assert "2 package versions already in" in line and "nothing published" in line
    assert "tfaot-model-a 1.0: published sha256" in line and "tfaot-model-b 1.0: published sha256" in line
    assert "tfaot-dist update NAME --new-build" in line
    # A selection that matches nothing, and a model whose runtime would be missing.
    assert "no archive of tfaot-model-c" in refused(
        run, channel, "publish", "c", "--channel", channel, "--dist", dist, code=INVALID
    )
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(dist / "tfaot-model-a-1.0.tar.gz", lonely)
    line = refused(
        run,
        tmp_path / "new-channel-parent",
        "publish",
        "--channel",
        tmp_path / "new-channel-parent" / "c",
        "--dist",
        lonely,
        code=INVALID,
    )
    assert f"tfaot-model-a 1.0 requires {RUNTIME} {RUNTIME_VERSION}, which neither" in line


def test_yank_hides_a_version_from_ranges_but_not_from_an_exact_pin(run: Cli, tmp_path: Path) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a", "1.0").model("a", "1.1")
    run(
        "publish", "--channel", channel.root, "--dist", hand_built_dist(tmp_path / "dist", models=())
    )  # catalogue
    out, _ = run("yank", "a==1.1", "--reason", "wrong <normalisation>, use 1.0", "--channel", channel.root)
    assert "tfaot-model-a 1.1: yanked (wrong <normalisation>, use 1.0)" in out
    row = next(
        r for r in json.loads((channel.root / "index.json").read_text())["packages"] if r["version"] == "1.1"
    )
    assert row["yanked"] == "wrong <normalisation>, use 1.0" and row["revision"] == 1
    # The same yank again changes nothing.
    before = snapshot(channel.root)
    assert (
        "as it was"
        in run("yank", "a==1.1", "--reason", "wrong <normalisation>, use 1.0", "--channel", channel.root)[0]
    )
    assert snapshot(channel.root) == before

    # Names and ranges skip it; an exact pin takes it, with a warning naming the reason.
    area = tmp_path / "area"
    out, _ = run("setup", "a", "--channel", channel.root, "--area", area, "--json")
    assert [r["version"] for r in json.loads(out)["results"] if r["name"] == "tfaot-model-a"] == ["1.0"]
    out, err = run("setup", "a==1.1", "--channel", channel.root, "--area", area, "--json")
    assert [r["version"] for r in json.loads(out)["results"] if r["name"] == "tfaot-model-a"] == ["1.1"]
    assert "warning: tfaot-model-a 1.1 is yanked from" in err and "wrong <normalisation>, use 1.0" in err
    line = run.error(
        "setup", "a>1.0", "--channel", channel.root, "--area", tmp_path / "other-area", expect=INVALID
    )
    assert "available: 1.0, 1.1 (yanked)" in line

    # The catalogue: the version struck through with its reason (escaped), the listing shows 1.0.
    page = (channel.root / "packages" / "tfaot-model-a" / "1.1" / "index.html").read_text()
    assert (
        '<p id="yanked" class="yanked"><strong>Yanked:</strong> wrong &lt;normalisation&gt;, use 1.0.' in page
    )
    assert "<s>1.1</s>" in page
    listing = (channel.root / "index.html").read_text()
    assert "<td>1.0</td>" in listing and "(yanked: wrong &lt;normalisation&gt;, use 1.0)" in listing
    assert "2 packages in this channel: 1 model and 1 runtime they link against" in listing

    # Taken back: ranges see it again.
    run("yank", "a==1.1", "--undo", "--channel", channel.root)
    row = next(
        r for r in json.loads((channel.root / "index.json").read_text())["packages"] if r["version"] == "1.1"
    )
    assert "yanked" not in row and row["revision"] == 2
    out, _ = run("setup", "a", "--channel", channel.root, "--area", tmp_path / "third", "--json")
    assert [r["version"] for r in json.loads(out)["results"] if r["name"] == "tfaot-model-a"] == ["1.1"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["a>=1.0", "--reason", "x"], INVALID, "name one version exactly (NAME==VERSION)"),
        (["a==9.9", "--reason", "x"], INVALID, "tfaot-model-a 9.9 is not in"),
        (["a==1.0", "--reason", "two\nlines"], INVALID, "--reason: invalid text"),
        (["a==1.0", "--reason", ""], INVALID, "--reason: expected a reason of 1 to 500 characters"),
        (["a==1.0"], USAGE, "give --reason TEXT (or --undo"),
    ],
)
def test_yank_refusals(run: Cli, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a", "1.0")
    assert message in refused(run, channel.root, "yank", *args, "--channel", channel.root, code=code)


def test_yank_needs_a_channel_that_can_be_written(run: Cli, tmp_path: Path) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a", "1.0")
    server = Server(channel.root)
    try:
        line = refused(
            run, channel.root, "yank", "a==1.0", "--reason", "x", "--channel", server.url(""), code=USAGE
        )
    finally:
        server.close()
    assert "is read only over http(s); publish and yank write to the channel directory" in line


def test_setup_dry_run_says_what_would_change_and_changes_nothing(run: Cli, tmp_path: Path) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a", "1.0")
    area = tmp_path / "area"
    out, _ = run("setup", "a", "--dry-run", "--channel", channel.root, "--area", area)
    assert out.splitlines() == [
        f"would install {RUNTIME} {RUNTIME_VERSION}",
        "would install tfaot-model-a 1.0",
    ]
    assert not area.exists()
    run("setup", "a", "--channel", channel.root, "--area", area)
    channel.model("a", "1.1")
    before = snapshot(area)
    out, _ = run("setup", "a", "--dry-run", "--channel", channel.root, "--area", area, "--json")
    plan = json.loads(out)["plan"]
    assert [(p["name"], p["action"], p["previous"]) for p in plan] == [
        (RUNTIME, "keep", None),
        ("tfaot-model-a", "upgrade", "1.0"),
    ]
    assert snapshot(area) == before


def test_remove_takes_a_package_out_and_keeps_a_needed_runtime(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a").model("b")
    area = tmp_path / "area"
    tfaot = area / "tfaot"
    bin_dir, calls = tmp_path / "bin", tmp_path / "scram-calls"
    bin_dir.mkdir()
    (bin_dir / "scram").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scram").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    run("setup", "a", "b", "--channel", channel.root, "--area", area)
    assert calls.read_text().count("setup ") == 3

    before = snapshot(area)
    out, _ = run("remove", "a", "--dry-run", "--area", area)
    assert (
        out.strip()
        == f"would remove tfaot-model-a 1.0 ({tfaot / 'tfaot-model-a' / '1.0'}) and its scram tool"
    )
    assert snapshot(area) == before

    run("remove", "a", "--area", area)
    assert calls.read_text().splitlines()[-1] == "tool remove tfaot-model-a"
    installed = json.loads((tfaot / "installed.json").read_text())["packages"]
    assert sorted(installed) == ["tfaot-model-b", RUNTIME]
    for gone in (
        "tfaot-model-a",
        "scram.d/tfaot-model-a.xml",
        "lib/cmake/tfaot-model-a",
        "lib/pkgconfig/tfaot-model-a.pc",
    ):
        assert not (tfaot / gone).exists(), gone
    assert (tfaot / "tfaot-model-b" / "1.0" / "manifest.json").is_file()
    env = (tfaot / "env.sh").read_text()
    assert "tfaot-model-a" not in env and "tfaot-model-b" in env

    # The runtime b needs stays, with one line naming b; with b gone it may go, and the area is empty.
    line = refused(run, area, "remove", RUNTIME, "--area", area, code=INVALID)
    assert f"{RUNTIME} {RUNTIME_VERSION} is needed by tfaot-model-b 1.0" in line
    _, err = run("remove", "b", "--area", area)
    assert f"no installed model needs {RUNTIME} {RUNTIME_VERSION} any more" in err
    run("remove", RUNTIME, "--area", area)
    assert json.loads((tfaot / "installed.json").read_text())["packages"] == {}
    assert sorted(p.name for p in tfaot.iterdir() if not p.name.startswith(".")) == [
        "installed.json",
        "lib",
        "scram.d",
    ]
    assert not any(p.is_file() for p in (tfaot / "lib").rglob("*")) and not any((tfaot / "scram.d").iterdir())
    assert "not installed in" in refused(run, area, "remove", "a", "--area", area, code=INVALID)


def test_remove_never_follows_a_link(run: Cli, tmp_path: Path) -> None:
    channel = Channel(tmp_path / "channel").runtime().model("a")
    area = tmp_path / "area"
    run("setup", "a", "--channel", channel.root, "--area", area)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    pkg_dir = area / "tfaot" / "tfaot-model-a" / "1.0"
    shutil.rmtree(pkg_dir)
    pkg_dir.symlink_to(outside)
    refused(run, tmp_path, "remove", "a", "--area", area, code=INTEGRITY)
    assert (outside / "keep.txt").read_text() == "the user's"


def test_a_models_whole_life(
    run: Cli, model_repo: DataRepo, registry: Path, cache: Path, tmp_path: Path
) -> None:
    """The story of docs/how-to/update-yank-remove.md with real parts: register, build, publish (a directory served over HTTP and
    an OCI registry), set up, update to a new commit (the next build), rebuild, publish, yank the old
    version, upgrade the area, remove the model and its runtime."""
    from test_oci import Registry

    dist, channel = tmp_path / "dist", tmp_path / "channel"
    add_simple(run, model_repo, "--batch-sizes", "1")
    run("build", "--all", "--dist", dist)
    server, oci = Server(channel), Registry(tmp_path / "oci")
    try:
        oci_channel = oci.channel("tfaot/life")
        for where in (channel, oci_channel):
            run("publish", "--channel", where, "--dist", dist)
        area = tmp_path / "area"
        out, _ = run("setup", "m", "--channel", server.url(), "--area", area, "--json")
        assert {(r["name"], r["version"], r["status"]) for r in json.loads(out)["results"]} >= {
            ("tfaot-model-m", "1.0.0", "installed")
        }

        edit_config(model_repo, description="retrained")
        run("update", "m")
        out, _ = run("build", "--all", "--dist", dist, "--json")
        assert [(r["version"], r["status"]) for r in json.loads(out)["results"]] == [("1.0.0.post1", "built")]
        assert sorted(p.name for p in dist.glob("tfaot-model-m-*.tar.gz")) == [
            "tfaot-model-m-1.0.0.post1.tar.gz",
            "tfaot-model-m-1.0.0.tar.gz",
        ]
        for where in (channel, oci_channel):
            out, _ = run("publish", "--channel", where, "--dist", dist, "--json")
            assert {
                (p["version"], p["status"])
                for p in json.loads(out)["packages"]
                if p["name"] == "tfaot-model-m"
            } == {("1.0.0", "unchanged"), ("1.0.0.post1", "published")}
            run("yank", "m==1.0.0", "--reason", "superseded by its retrained build", "--channel", where)

        out, _ = run("setup", "m", "--channel", server.url(), "--area", area, "--json")
        assert [
            (r["version"], r["status"], r["previous"])
            for r in json.loads(out)["results"]
            if r["name"] == "tfaot-model-m"
        ] == [("1.0.0.post1", "upgraded", "1.0.0")]
        assert (
            "1.0.0.post1"
            in json.loads(run("setup", "--list", "--area", area, "--json")[0])["packages"][0]["path"]
        )
        out, _ = run("setup", "m", "--channel", oci_channel, "--area", tmp_path / "area2", "--json")
        assert "1.0.0.post1" in {r["version"] for r in json.loads(out)["results"]}
        assert (
            "yanked: superseded by its retrained build" in run("setup", "--list", "--channel", oci_channel)[0]
        )

        run("remove", "m", "--area", area)
        runtime = next(p.name for p in (area / "tfaot").iterdir() if p.name.startswith(RUNTIME))
        run("remove", runtime, "--area", area)
        assert json.loads((area / "tfaot" / "installed.json").read_text())["packages"] == {}
    finally:
        server.close()
        oci.stop()
