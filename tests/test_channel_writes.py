"""Directory channels are written as areas are (issue 38): every file publish and yank write is
opened relative to the channel directory, never through a link; a link planted inside is refused
with one line before anything is written, and a channel given as a link is resolved once and works.

Packages are assembled by hand (tests/hostile.py); no TensorFlow.
"""

import json
from pathlib import Path

import pytest
from conftest import Cli, snapshot
from hostile import archive_bytes, hand_built_dist, model_files, refused

INTEGRITY = 7


@pytest.fixture
def channel(run: Cli, tmp_path: Path) -> Path:
    """A channel published by publish: the runtime and model x 1.0 (archives, pages, index)."""
    root = tmp_path / "channel"
    run("publish", "--channel", root, "--dist", hand_built_dist(tmp_path / "dist"))
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Where planted links point: a directory of the user's, which must stay as it is."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "keep.txt").write_text("the user's")
    return path


def new_version(tmp_path: Path, version: str = "1.1") -> Path:
    """A dist directory holding model x at version."""
    dist = tmp_path / f"dist-{version}"
    dist.mkdir()
    files, extra = model_files("x", version)
    (dist / f"tfaot-model-x-{version}.tar.gz").write_bytes(
        archive_bytes("tfaot-model-x", version, files, extra)
    )
    return dist


@pytest.mark.parametrize(
    "planted",
    [
        "packages/tfaot-model-x/1.1",  # the new version's directory: archive, manifest and page
        "packages/tfaot-model-x/1.1/tfaot-model-x-1.1.tar.gz",
        "packages/tfaot-model-x/1.1/index.html",
        "packages",
        "index.json",
        "index.html",
        "catalogue.css",
        ".catalogue.json",
    ],
)
def test_publish_never_writes_through_a_link_in_the_channel(
    run: Cli, channel: Path, outside: Path, tmp_path: Path, planted: str
) -> None:
    link = channel / planted
    if link.exists():  # a file or directory publish made: its link points at a copy outside
        target = outside / link.name
        link.rename(target)
    else:
        link.parent.mkdir(parents=True, exist_ok=True)
        target = outside / "empty"
        target.mkdir()
    link.symlink_to(target)
    line = refused(
        run, tmp_path, "publish", "--channel", channel, "--dist", new_version(tmp_path), code=INTEGRITY
    )
    assert f"{link}: a symbolic link inside the channel" in line, line


@pytest.mark.parametrize("planted", ["packages/tfaot-model-x/1.0", "packages/tfaot-model-x/1.0/index.html"])
def test_yank_never_writes_through_a_link_in_the_channel(
    run: Cli, channel: Path, outside: Path, tmp_path: Path, planted: str
) -> None:
    link = channel / planted
    target = outside / link.name
    link.rename(target)
    link.symlink_to(target)
    line = refused(run, tmp_path, "yank", "x==1.0", "--reason", "r", "--channel", channel, code=INTEGRITY)
    assert f"{link}: a symbolic link inside the channel" in line, line


def test_a_channel_given_as_a_link_works(run: Cli, tmp_path: Path) -> None:
    """publish, yank and setup --channel LINK: the directory it points to, resolved once."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    run("publish", "--channel", link, "--dist", hand_built_dist(tmp_path / "dist"))
    run("publish", "--channel", link, "--dist", new_version(tmp_path))
    out, _ = run("yank", "x==1.1", "--reason", "bad numbers", "--channel", link)
    assert "tfaot-model-x 1.1: yanked (bad numbers)" in out
    assert link.is_symlink() and link.resolve() == real
    rows = json.loads((real / "index.json").read_text())["packages"]
    assert sorted((r["name"], r["version"], r.get("yanked")) for r in rows) == [
        ("tfaot-model-x", "1.0", None),
        ("tfaot-model-x", "1.1", "bad numbers"),
        ("tfaot-xla-runtime", "2.21.0+b0.p0", None),
    ]
    assert (real / "packages/tfaot-model-x/1.1/tfaot-model-x-1.1.tar.gz").is_file()
    assert "bad numbers" in (real / "packages/tfaot-model-x/1.1/index.html").read_text()
    out, _ = run("setup", "x", "--channel", link, "--area", tmp_path / "area")
    assert "tfaot-model-x 1.0: installed" in out


def test_leftovers_of_killed_writes_are_removed_and_nothing_else(run: Cli, channel: Path) -> None:
    """The temporaries a publish killed half-way left (.NAME.XXXXXXXX.tmp) go with the next publish
    that writes NAME; a file of that pattern's look under another name stays."""
    stale = channel / ".index.json.abcd1234.tmp"
    stale.write_text("left by a killed publish")
    other = channel / ".index.json.1.tmp"
    other.write_text("not ours")
    run("yank", "x==1.0", "--reason", "r", "--channel", channel)
    assert not stale.exists() and other.exists()
    before = snapshot(channel)
    run("yank", "x==1.0", "--reason", "r", "--channel", channel)  # unchanged: nothing written
    assert snapshot(channel) == before
