"""Hostile and broken registry files: one error line naming file and field, exit 3, nothing changed."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Cli, snapshot

GOOD = {
    "name": "m",
    "version": "1.0.0",
    "source": {"git": "file:///srv/data.git", "ref": "main", "commit": "a" * 40},
    "aot_config": "simple/aot_config.yaml",
}


def entry(**changes: object) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(yaml.safe_dump(GOOD))
    for key, value in changes.items():
        target = data
        *path, last = key.split("__")
        for part in path:
            target = target[part]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return data


CASES = [
    ("unknown key", entry(colour="red"), "colour: unknown key"),
    ("missing name", entry(name=None), "name: required field is missing"),
    ("name differs from file", entry(name="other"), "does not match the file name"),
    ("uppercase name", entry(name="M"), "name: invalid model name"),
    ("bad version", entry(version="1.0.0; rm -rf /"), "version: invalid version"),
    ("version as float", entry(version=1.5), "version: expected a string"),
    ("ext:: url", entry(source__git="ext::sh -c id"), "source.git: unsupported git URL"),
    ("option url", entry(source__git="--upload-pack=id"), "source.git: unsupported git URL"),
    ("newline url", entry(source__git="https://h/x\n%define y"), "source.git: unsupported git URL"),
    ("ref with ..", entry(source__ref="a..b"), "source.ref: invalid git ref"),
    ("ref with $(", entry(source__ref="$(id)"), "source.ref: invalid git ref"),
    ("short commit", entry(source__commit="abc"), "source.commit: invalid commit"),
    ("missing commit", entry(source__commit=None), "source.commit: required field is missing"),
    ("unknown source key", entry(source__tag="x"), "source.tag: unknown key"),
    ("branch with $(", entry(source__branch="$(id)"), "source.branch: invalid git ref"),
    ("config path escapes", entry(aot_config="../x.yaml"), "aot_config: invalid relative path"),
    ("config path absolute", entry(aot_config="/etc/passwd"), "aot_config: invalid relative path"),
    ("override unknown", entry(overrides={"speed": 1}), "overrides.speed: unknown key"),
    ("override batch 0", entry(overrides={"batch_sizes": [0]}), "batch size 0 is not positive"),
    ("override batch huge", entry(overrides={"batch_sizes": [10**9]}), "is larger than"),
    (
        "override flag injection",
        entry(overrides={"xla_flags": ["--a`id`"]}),
        "overrides.xla_flags: invalid flag",
    ),
    (
        "override namespace",
        entry(overrides={"namespace": "a<b>"}),
        "overrides.namespace: invalid C++ identifier",
    ),
    (
        "override formulas",
        entry(overrides={"activation_formulas": "fast"}),
        "overrides.activation_formulas: expected one of tensorflow, xla",
    ),
    ("source not a mapping", entry(source="file:///x"), "source: expected a mapping"),
]


@pytest.mark.parametrize("data, message", [(d, m) for _, d, m in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["show", "build"])
def test_bad_entry(
    run: Cli, registry: Path, cache: Path, tmp_path: Path, data: dict[str, Any], message: str, command: str
) -> None:
    path = registry / "models" / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    before = snapshot(registry, cache, tmp_path / "dist")
    args = ["show", "m"] if command == "show" else ["build", "--all", "--dist", tmp_path / "dist"]
    line = run.error(*args, expect=3)
    assert line.startswith(f"tfaot-dist: error: {path}: "), line
    assert message in line
    assert snapshot(registry, cache, tmp_path / "dist") == before


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "toolchain: {requirements: ['tensorflow-cpu==2.21.0; echo']}",
            "toolchain.requirements: invalid requirement",
        ),
        ("toolchain: {requirements: []}", "toolchain.requirements: must not be empty"),
        ("toolchain: {python: '3.12'}", "toolchain.python: expected an absolute path"),
        ("toolchain: {python: /usr/bin/../bin/python3}", "toolchain.python:"),
        ("toolchain: {runtime: 'rel/dir'}", "toolchain.runtime: expected an absolute path"),
        ("toolchain: {interpreter: /usr/bin/python3}", "toolchain.interpreter: unknown key"),
        ("target_cpu: '$(id)'", "target_cpu: invalid target cpu"),
        ("target_triple: 'x86_64-pc-linux\\n'", "target_triple: invalid target triple"),
        ("[", "malformed YAML"),
    ],
)
def test_bad_registry_defaults(
    run: Cli, registry: Path, cache: Path, tmp_path: Path, text: str, message: str
) -> None:
    (registry / "models" / "m.yaml").write_text(yaml.safe_dump(GOOD))
    (registry / "registry.yaml").write_text(text)
    before = snapshot(registry, cache)
    line = run.error("build", "--all", "--dist", tmp_path / "dist", expect=3)
    assert f"{registry / 'registry.yaml'}: " in line and message in line
    assert snapshot(registry, cache) == before


def test_malformed_entry_yaml(run: Cli, registry: Path) -> None:
    path = registry / "models" / "m.yaml"
    path.write_text("name: m\nversion: [\n")
    line = run.error("list", expect=3)
    assert line.startswith(f"tfaot-dist: error: {path}: malformed YAML")


def test_unknown_model_and_usage_errors(run: Cli, registry: Path, tmp_path: Path) -> None:
    assert "no such model" in run.error("show", "nope", expect=3)
    assert "name models or give --all" in run.error("build", expect=2)
    assert "nope: no such model" in run.error("verify", "nope", expect=3)
    (registry / "models" / "m.yaml").write_text(yaml.safe_dump(GOOD))
    assert "m: no package tfaot-model-m-1.0.0 in" in run.error(
        "verify", "m", "--dist", tmp_path / "d", expect=3
    )


def test_compile_missing_config(run: Cli, tmp_path: Path) -> None:
    line = run.error(
        "compile", "--aot-config", tmp_path / "none.yaml", "--output-directory", tmp_path / "o", expect=3
    )
    assert "none.yaml: file not found" in line
    assert not (tmp_path / "o").exists()
