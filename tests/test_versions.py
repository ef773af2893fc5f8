"""Versions are PEP 440 values everywhere (issue 38): 1.0 and 1.0.0 are one version for publish,
yank, setup's pins and update. Channels that already list both spellings (published before this
rule) are hand-built (tests/hostile.py); no TensorFlow.
"""

import json
from pathlib import Path

import pytest
import yaml
from conftest import Cli, snapshot
from hostile import Channel, archive_bytes, hand_built_dist, model_files, one_error, refused

INVALID, INTEGRITY = 3, 7


def dist_of(directory: Path, *versions: str, description: str = "") -> Path:
    """A dist directory holding model x at each version (another build: another description)."""
    directory.mkdir(parents=True)
    for version in versions:
        files, extra = model_files("x", version)
        extra["model"] = {"description": description or f"x {version}"}
        (directory / f"tfaot-model-x-{version}.tar.gz").write_bytes(
            archive_bytes("tfaot-model-x", version, files, extra)
        )
    return directory


def test_publish_refuses_another_spelling_of_a_published_version(run: Cli, tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    run("publish", "--channel", channel, "--dist", hand_built_dist(tmp_path / "dist", models=()))
    run("publish", "--channel", channel, "--dist", dist_of(tmp_path / "a", "1.0.0"))
    line = refused(
        run,
        channel,
        "publish",
        "--channel",
        channel,
        "--dist",
        dist_of(tmp_path / "b", "1.0"),
        code=INTEGRITY,
    )
    assert "tfaot-model-x 1.0: published as 1.0.0" in line and "a published version never changes" in line
    # Both spellings in one publish: refused as well, before anything is written.
    line = refused(
        run,
        channel,
        "publish",
        "--channel",
        channel,
        "--dist",
        dist_of(tmp_path / "c", "2.0", "2.0.0"),
        code=INTEGRITY,
    )
    assert "tfaot-model-x 2.0.0 and 2.0 are one version" in line


@pytest.fixture
def two_spellings(tmp_path: Path) -> Channel:
    """A channel that lists x 0.9, and x 1.0 and 1.0.0 as two builds (as publish allowed before)."""
    return Channel(tmp_path / "channel").runtime().model("x", "0.9").model("x", "1.0").model("x", "1.0.0")


def test_a_pin_never_picks_a_spelling_by_index_order(
    run: Cli, two_spellings: Channel, tmp_path: Path
) -> None:
    area = tmp_path / "area"
    for pin in ("x==1.0", "x==1.0.0", "x>=1"):
        line = refused(
            run, tmp_path, "setup", pin, "--channel", two_spellings.root, "--area", area, code=INTEGRITY
        )
        assert "tfaot-model-x: 1.0 and 1.0.0 are one version listed 2 times" in line, line
        assert "'tfaot-model-x===1.0'" in line
    out, _ = run("setup", "x===1.0.0", "--channel", two_spellings.root, "--area", area)
    assert "tfaot-model-x 1.0.0: installed" in out


def test_a_yank_covers_every_spelling(run: Cli, two_spellings: Channel, tmp_path: Path) -> None:
    out, _ = run("yank", "x==1.0.0", "--reason", "wrong weights", "--channel", two_spellings.root)
    assert "tfaot-model-x 1.0 and 1.0.0: yanked (wrong weights)" in out
    rows = json.loads((two_spellings.root / "index.json").read_text())["packages"]
    assert {(r["version"], r.get("yanked")) for r in rows if r["name"] == "tfaot-model-x"} == {
        ("0.9", None),
        ("1.0", "wrong weights"),
        ("1.0.0", "wrong weights"),
    }
    out, _ = run("setup", "x>=0.5", "--channel", two_spellings.root, "--area", tmp_path / "area")
    assert "tfaot-model-x 0.9: installed" in out
    # One spelling named with ===: that row only.
    out, _ = run("yank", "x===1.0", "--undo", "--channel", two_spellings.root, "--json")
    assert json.loads(out)["versions"] == ["1.0"]
    out, _ = run("setup", "x>=0.5", "--channel", two_spellings.root, "--area", tmp_path / "area2")
    assert "tfaot-model-x 1.0: installed" in out


@pytest.mark.parametrize("text", ["x===foo", "x===1.0.0.0.0.0.0-what"])
def test_yank_of_something_that_is_no_version(
    run: Cli, two_spellings: Channel, text: str, tmp_path: Path
) -> None:
    line = refused(
        run, tmp_path, "yank", text, "--reason", "r", "--channel", two_spellings.root, code=INVALID
    )
    assert "is not a version (PEP 440)" in line


def test_update_refuses_a_new_build_under_another_spelling(run: Cli, registry: Path) -> None:
    """On a 1.0.0 entry, `--version 1.0 --new-build` names the same version: refused before anything
    is fetched (the source here does not even exist), the registry as it was."""
    entry = {
        "name": "m",
        "version": "1.0.0",
        "source": {"git": "https://127.0.0.1:9/none.git", "ref": "main", "commit": "0" * 40},
        "aot_config": "m/aot_config.yaml",
    }
    (registry / "models" / "m.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))
    before = snapshot(registry)
    line = run.error("update", "m", "--version", "1.0", "--new-build", expect=INVALID)
    assert "m: version 1.0.0 would stay while what it is built from changed" in line
    line = run.error("update", "m", "--version", "0.9.9", expect=INVALID)
    assert "--version: 0.9.9 is lower than the entry's 1.0.0" in line
    assert snapshot(registry) == before


def test_an_installed_version_is_the_channels_however_spelled(run: Cli, tmp_path: Path) -> None:
    """The area has x 1.0; the channel lists the same version as 1.0.0 with other bytes: not a new
    version to replace it with, but another build of the installed one (exit 7, area unchanged)."""
    first = Channel(tmp_path / "first").runtime().model("x", "1.0")
    area = tmp_path / "area"
    run("setup", "x", "--channel", first.root, "--area", area)
    second = Channel(tmp_path / "second").runtime().model("x", "1.0.0")
    _, err = run("setup", "x", "--channel", second.root, "--area", area, expect=INTEGRITY)
    assert "tfaot-model-x 1.0.0 is installed with sha256" in one_error(err)
