"""One failure of each class through the command line: its own exit code, one error line that
names what is wrong, and the registry, the finished builds of the cache, the output directory
and the channel exactly as they were. (A compile failure keeps the fetched source and the
toolchain in the cache: both are right, content-addressed, and expensive to get again; the
failures before any fetch, in test_hostile_registry.py and test_distribution.py, compare the
whole cache.)

The many cases of each class are in test_hostile_registry.py, test_add_model.py, test_config.py,
test_specs.py and test_distribution.py; this file is the table of the classes.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import Cli, DataRepo, snapshot

from tfaot_dist import errors
from tfaot_dist.util.fs import sha256_file

CODES = {
    "usage": 2,
    "invalid input": 3,
    "source unavailable": 4,
    "compile failed": 5,
    "verification failed": 6,
    "integrity": 7,
    "toolchain": 8,
}


def test_each_class_has_its_own_code() -> None:
    classes = [
        errors.UsageError,
        errors.InvalidInput,
        errors.SourceUnavailable,
        errors.CompileFailed,
        errors.VerificationFailed,
        errors.IntegrityError,
        errors.ToolchainError,
    ]
    assert [c.exit_code for c in classes] == list(CODES.values())


def copy_models(built: Path, registry: Path) -> None:
    for entry in (built / "registry" / "models").glob("*.yaml"):
        shutil.copyfile(entry, registry / "models" / entry.name)


def wrong_numbers(built: Path, dist: Path) -> None:
    """test-simple with one reference value changed and its manifest updated to match: every
    digest agrees, only the numbers do not."""
    root = dist / "tfaot-model-test-simple-1.0.0"
    shutil.copytree(built / "dist" / root.name, root)
    manifest = json.loads((root / "manifest.json").read_text())
    rel = f"{manifest['reference']['dir']}/bs2/output_0.bin"
    data = bytearray((root / rel).read_bytes())
    data[3] ^= 0x40  # the top byte of the first float32: its exponent changes
    (root / rel).write_bytes(bytes(data))
    manifest["files"][rel]["sha256"] = sha256_file(root / rel)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("case", list(CODES))
def test_one_failure_per_class(
    case: str, run: Cli, registry: Path, cache: Path, built: Path, tmp_path: Path, example_models: Path
) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    args: tuple[object, ...]
    if case == "usage":
        args, expected = ("build",), "name models or give --all"
    elif case == "invalid input":
        args, expected = (
            ("add-model", "Bad;Name", "--source", "file:///nowhere.git", "--aot-config", "a.yaml"),
            "'Bad;Name'",
        )
    elif case == "source unavailable":
        missing = tmp_path / "no-such-repo.git"
        args, expected = (
            ("add-model", "m", "--source", f"file://{missing}", "--aot-config", "a.yaml"),
            str(missing),
        )
    elif case == "compile failed":
        repo = DataRepo(tmp_path / "data")
        shutil.copytree(example_models / "simple", repo.work / "simple")
        config = yaml.safe_load((repo.work / "simple" / "aot_config.yaml").read_text())
        config["compilation"]["xla_flags"] = ["--xla_no_such_flag=1"]
        repo.write("simple/aot_config.yaml", yaml.safe_dump(config))
        repo.commit()
        run(
            "add-model",
            "bad-flags",
            "--source",
            repo.url,
            "--aot-config",
            "simple/aot_config.yaml",
            "--batch-sizes",
            "1",
        )
        args, expected = (
            ("build", "bad-flags", "--dist", dist),
            "Unknown flag in XLA_FLAGS: --xla_no_such_flag=1",
        )
    elif case == "verification failed":
        copy_models(built, registry)
        wrong_numbers(built, dist)
        args, expected = (
            ("verify", "test-simple", "--dist", dist),
            "tfaot-model-test-simple: batch size 2, output",
        )
    elif case == "integrity":
        archive = built / "dist" / "tfaot-model-test-multi-1.0.0.tar.gz"
        data = bytearray(archive.read_bytes())
        data[len(data) // 2] ^= 0xFF
        (dist / archive.name).write_bytes(bytes(data))
        args, expected = ("publish", "--channel", tmp_path / "channel", "--dist", dist), archive.name
    else:
        (registry / "registry.yaml").write_text(
            (registry / "registry.yaml")
            .read_text()
            .replace("tensorflow-cpu==2.21.0", "tensorflow-cpu==0.0.1")
        )
        args, expected = ("toolchain",), "tensorflow-cpu==0.0.1"
    # The finished builds in the cache: a failure adds none and changes none.
    (cache / "builds").mkdir(exist_ok=True)
    before = snapshot(registry, cache / "builds", dist, tmp_path / "channel")
    line = run.error(*args, expect=CODES[case])
    assert expected in line, line
    assert snapshot(registry, cache / "builds", dist, tmp_path / "channel") == before
    if case == "compile failed":
        log = Path(line.split("(log: ")[1].rstrip(")"))
        assert "Unknown flag in XLA_FLAGS" in log.read_text()  # the worker's log, kept outside the cache
        shutil.rmtree(log.parent.parent.parent)
