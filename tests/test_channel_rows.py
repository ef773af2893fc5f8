"""One damaged row is that package's problem only (issue 38): publish stores again what a channel
lost, and a row that does not read, or whose files are gone, refuses its own package while the
channel's other packages set up and `setup --list` names the broken row. Directory channels and the
same directory served over HTTP on 127.0.0.1; packages assembled by hand (tests/hostile.py).
"""

import json
from pathlib import Path

import pytest
from conftest import Cli, snapshot
from hostile import RUNTIME, RUNTIME_VERSION, hand_built_dist, one_error, refused
from httpserve import Server

INVALID, UNAVAILABLE = 3, 4
X = "packages/tfaot-model-x/1.0"
Y = "packages/tfaot-model-y/1.0"


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    return hand_built_dist(tmp_path / "dist", models=("x", "y"))


@pytest.fixture
def channel(run: Cli, dist: Path, tmp_path: Path) -> Path:
    root = tmp_path / "channel"
    run("publish", "--channel", root, "--dist", dist)
    return root


def test_publish_restores_what_the_channel_lost(run: Cli, channel: Path, dist: Path) -> None:
    run("yank", "x==1.0", "--reason", "kept through the restore", "--channel", channel)
    before = snapshot(channel)
    (channel / X / "tfaot-model-x-1.0.tar.gz").unlink()
    (channel / Y / "manifest.json").unlink()
    (channel / Y / "index.html").unlink()
    out, _ = run("publish", "--channel", channel, "--dist", dist, "--json")
    assert {(p["name"], p["status"]) for p in json.loads(out)["packages"]} == {
        ("tfaot-model-x", "restored"),
        ("tfaot-model-y", "restored"),
        (RUNTIME, "unchanged"),
    }
    assert snapshot(channel) == before  # the same bytes, the yank mark and its page included
    out, _ = run("publish", "--channel", channel, "--dist", dist)
    assert "restored" not in out


def test_a_missing_archive_affects_only_its_package(run: Cli, channel: Path, tmp_path: Path) -> None:
    (channel / X / "tfaot-model-x-1.0.tar.gz").unlink()
    out, _ = run("setup", "y", "--channel", channel, "--area", tmp_path / "area")
    assert "tfaot-model-y 1.0: installed" in out
    out, _ = run("setup", "--list", "--channel", channel, "--json")
    listed = json.loads(out)
    assert sorted(p["name"] for p in listed["packages"]) == ["tfaot-model-y", RUNTIME]
    ((broken),) = listed["broken"]
    assert (broken["name"], broken["version"]) == ("tfaot-model-x", "1.0")
    assert f"lists {X}/tfaot-model-x-1.0.tar.gz, which is missing from the channel" in broken["reason"]
    out, _ = run("setup", "--list", "--channel", channel)
    assert "tfaot-model-x" in out and "broken:" in out
    line = refused(
        run, tmp_path, "setup", "x", "--channel", channel, "--area", tmp_path / "area2", code=UNAVAILABLE
    )
    assert f"{X}/tfaot-model-x-1.0.tar.gz, which is missing" in line and "other packages" in line


def test_a_broken_runtime_row_refuses_the_models_that_need_it(
    run: Cli, channel: Path, tmp_path: Path
) -> None:
    runtime = f"packages/{RUNTIME}/{RUNTIME_VERSION}"
    (channel / runtime / "manifest.json").unlink()
    line = refused(
        run, tmp_path, "setup", "y", "--channel", channel, "--area", tmp_path / "area", code=UNAVAILABLE
    )
    assert f"{runtime}/manifest.json, which is missing" in line


def test_a_row_that_does_not_read_over_http(run: Cli, channel: Path, tmp_path: Path) -> None:
    """A channel served over HTTP whose index has one row that does not read: the others set up."""
    index = channel / "index.json"
    doc = json.loads(index.read_text())
    for row in doc["packages"]:
        if row["name"] == "tfaot-model-x":
            row["size"] = "big"
    index.write_text(json.dumps(doc))
    server = Server(channel)
    try:
        out, _ = run("setup", "y", "--channel", server.url(""), "--area", tmp_path / "area")
        assert "tfaot-model-y 1.0: installed" in out
        out, _ = run("setup", "--list", "--channel", server.url(""))
        lines = out.splitlines()
        assert len(lines) == 3 and "tfaot-model-y" in lines[0]
        assert lines[2].startswith("tfaot-model-x") and "size: expected an integer" in lines[2]
        _, err = run("setup", "x", "--channel", server.url(""), "--area", tmp_path / "area2", expect=INVALID)
        assert "size: expected an integer" in one_error(err)
    finally:
        server.close()
