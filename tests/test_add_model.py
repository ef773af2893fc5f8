"""add-model, list and show against real git repositories and a real TensorFlow toolchain."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import Cli, DataRepo, aot_config, git, snapshot

INVALID, UNAVAILABLE, USAGE = 3, 4, 2


def test_add_list_show(run: Cli, data_repo: DataRepo, registry: Path, cache: Path) -> None:
    out, _ = run(
        "add-model",
        "test-simple",
        "--source",
        data_repo.url,
        "--ref",
        "main",
        "--aot-config",
        "simple/aot_config.yaml",
        "--json",
    )
    added = json.loads(out)
    entry = yaml.safe_load((registry / "models" / "test-simple.yaml").read_text())
    assert entry == added["entry"]
    head = git("rev-parse", "main", cwd=data_repo.bare)
    assert entry["source"] == {"git": data_repo.url, "ref": "main", "commit": head}
    assert entry["version"] == "1.0.0" and entry["aot_config"] == "simple/aot_config.yaml"
    # The pinned source is in the cache, so builds need no network.
    assert (cache / "sources" / entry["source"]["commit"] / "tree" / "simple" / "saved_model").is_dir()

    out, _ = run("list", "--json")
    assert [m["name"] for m in json.loads(out)["models"]] == ["test-simple"]
    out, _ = run("show", "test-simple", "--json")
    shown = json.loads(out)
    assert shown["entry"] == entry and shown["package"] == "tfaot-model-test-simple"
    assert len(shown["build_key"]) == 64


def test_add_by_tag_with_version_and_batch_sizes(run: Cli, data_repo: DataRepo, registry: Path) -> None:
    run(
        "add-model",
        "multi",
        "--source",
        data_repo.url,
        "--ref",
        "v1",
        "--aot-config",
        "multi/aot_config.yaml",
        "--version",
        "2.0.1",
        "--batch-sizes",
        "1,8",
    )
    entry = yaml.safe_load((registry / "models" / "multi.yaml").read_text())
    assert entry["version"] == "2.0.1" and entry["overrides"] == {"batch_sizes": [1, 8]}
    assert entry["source"]["ref"] == "v1" and len(entry["source"]["commit"]) == 40


def test_config_without_serving_key_works(run: Cli, data_repo: DataRepo, registry: Path) -> None:
    # The upstream tool crashes on this with KeyError: 'serving_key'.
    cfg = yaml.safe_load((data_repo.work / "two_inputs" / "aot_config.yaml").read_text())
    assert "serving_key" not in cfg["model"]
    run("add-model", "two", "--source", data_repo.url, "--aot-config", "two_inputs/aot_config.yaml")
    # The default ref HEAD is no branch: the branch it points at is recorded (cmsBuild's git download
    # pulls a branch, then resets to the commit).
    source = yaml.safe_load((registry / "models" / "two.yaml").read_text())["source"]
    assert source["ref"] == "HEAD" and source["branch"] == "main"
    assert source["commit"] == git("rev-parse", "main", cwd=data_repo.bare)


def add(
    run: Cli,
    name: str = "m",
    source: str | None = None,
    ref: str = "main",
    config: str = "simple/aot_config.yaml",
    *extra: str,
) -> list[str | None]:
    return ["add-model", name, "--source", source, "--ref", ref, "--aot-config", config, *extra]


BAD_NAMES = ["Upper", "with space", "../up", "a;b", "a" * 64, "a_b", "a$(id)", "a\nb", "ü"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_name(run: Cli, data_repo: DataRepo, registry: Path, cache: Path, name: str) -> None:
    before = snapshot(registry, cache)
    line = run.error(*add(run, name, data_repo.url), expect=INVALID)
    assert "invalid model name" in line and repr(name) in line
    assert snapshot(registry, cache) == before


@pytest.mark.parametrize("version", ["one", "1.0-", "1..0", "v 1"])
def test_bad_version(run: Cli, data_repo: DataRepo, registry: Path, cache: Path, version: str) -> None:
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", data_repo.url), "--version", version, expect=INVALID)
    assert "--version" in line and "invalid version" in line
    assert snapshot(registry, cache) == before


@pytest.mark.parametrize(
    "sizes, message",
    [
        ("0", "not positive"),
        ("-1", "not positive"),
        ("1,1", "duplicate"),
        ("a", "expected comma separated integers"),
        ("", ""),
    ],
)
def test_bad_batch_sizes_option(
    run: Cli, data_repo: DataRepo, registry: Path, cache: Path, sizes: str, message: str
) -> None:
    if not sizes:
        pytest.skip("an empty option keeps the config's batch sizes")
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", data_repo.url), "--batch-sizes", sizes, expect=INVALID)
    assert message in line
    assert snapshot(registry, cache) == before


@pytest.mark.parametrize(
    "url, code, message",
    [
        ("ext::sh -c touch% /tmp/pwned", INVALID, "unsupported git URL"),
        ("fd::17", INVALID, "unsupported git URL"),
        ("--upload-pack=touch /tmp/pwned", INVALID, "unsupported git URL"),
        ("file:///nonexistent/repo.git", UNAVAILABLE, "cannot read git repository"),
    ],
)
def test_bad_source(run: Cli, registry: Path, cache: Path, url: str, code: int, message: str) -> None:
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", url), expect=code)
    assert message in line
    assert snapshot(registry, cache) == before


def test_ref_that_does_not_exist(run: Cli, data_repo: DataRepo, registry: Path, cache: Path) -> None:
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", data_repo.url, "no-such-branch"), expect=INVALID)
    assert "'no-such-branch' not found" in line
    assert snapshot(registry, cache) == before


def test_name_that_exists(run: Cli, data_repo: DataRepo, registry: Path, cache: Path) -> None:
    run(*add(run, "m", data_repo.url))
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", data_repo.url), expect=INVALID)
    assert "m: already registered" in line
    assert snapshot(registry, cache) == before


@pytest.mark.parametrize(
    "config, message",
    [
        ("nowhere/aot_config.yaml", "aot config 'nowhere/aot_config.yaml' not found"),
        ("../etc/passwd", "--aot-config: invalid relative path '../etc/passwd'"),
        (
            "outside/aot_config.yaml",
            "outside/aot_config.yaml: model.saved_model: '../../../..' points outside",
        ),
        ("static/aot_config.yaml", "input 'x' has a static leading dimension 2"),
        ("nonleading/aot_config.yaml", "input 'x' has a dynamic non-leading dimension"),
        ("no_batch/aot_config.yaml", "input 'x' has no batch dimension"),
        ("string_op/aot_config.yaml", "ops XLA cannot compile on CPU: AsString, StringToNumber"),
        ("value_shape/aot_config.yaml", "tfcompile cannot compile the model: Input 1 to node"),
        ("broken/aot_config.yaml", ": broken/aot_config.yaml: model.saved_model: SavedModel directory"),
        ("badkey2/aot_config.yaml", "serving_key 'nope' is not a signature of"),
        ("truncated/aot_config.yaml", "cannot load SavedModel"),
    ],
)
def test_bad_model_in_source(
    run: Cli, data_repo: DataRepo, registry: Path, cache: Path, config: str, message: str
) -> None:
    before = snapshot(registry, cache)
    line = run.error(*add(run, "m", data_repo.url, "bad-models", config), expect=INVALID)
    assert message in line
    assert snapshot(registry, cache) == before


@pytest.fixture(scope="module", autouse=True)
def bad_models_branch(data_repo: DataRepo) -> Iterator[None]:
    """A branch bad-models with configs that are wrong in one way each."""
    git("checkout", "-q", "-b", "bad-models", cwd=data_repo.work)
    data_repo.write("broken/aot_config.yaml", yaml.safe_dump(aot_config("broken")))
    data_repo.write(
        "badkey/aot_config.yaml",
        yaml.safe_dump(aot_config("badkey", saved_model="../simple/saved_model", serving_key="nope")),
    )
    data_repo.write(
        "outside/aot_config.yaml", yaml.safe_dump(aot_config("outside", saved_model="../../../.."))
    )
    data_repo.write("badkey2/aot_config.yaml", yaml.safe_dump(aot_config("badkey2", serving_key="nope")))
    shutil.copytree(data_repo.work / "simple" / "saved_model", data_repo.work / "badkey2" / "saved_model")
    data_repo.write("truncated/aot_config.yaml", yaml.safe_dump(aot_config("truncated")))
    pb = (data_repo.work / "simple" / "saved_model" / "saved_model.pb").read_bytes()
    data_repo.write("truncated/saved_model/saved_model.pb", "")
    (data_repo.work / "truncated" / "saved_model" / "saved_model.pb").write_bytes(pb[: len(pb) // 3])
    git("add", "-A", cwd=data_repo.work)
    git("commit", "-q", "-m", "bad models", cwd=data_repo.work)
    git("push", "-q", str(data_repo.bare), "bad-models", cwd=data_repo.work)
    git("checkout", "-q", "main", cwd=data_repo.work)
    yield
