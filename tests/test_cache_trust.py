"""A cache that is not ours is not trusted (issue 27): its root, its entries, its builds.

The attack: a shared TFAOT_DIST_CACHE (a /tmp-style directory) where another user plants
toolchains/KEY/bin/python (run by the next command) or builds/KEY/ (copied to dist and published).
The machines run as root, so "another user" is played by chown to nobody (uid 65534).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import NoReturn

import pytest
from conftest import Cli, unpack_package
from hostile import Channel, archive_bytes, model_files, refused

from tfaot_dist import cache as cache_mod
from tfaot_dist import toolchain as toolchain_mod
from tfaot_dist.errors import IntegrityError
from tfaot_dist.registry import DEFAULT_REQUIREMENTS

NOBODY = 65534
# The real function, out of reach of the fast tier's guard (which replaces module-level references):
# a planted toolchain must be refused before anything would build one.
REAL = {"ensure_toolchain": toolchain_mod.ensure_toolchain}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def channel(tmp_path: Path) -> Channel:
    return Channel(tmp_path / "channel").runtime().model("x")


def test_a_cache_others_can_write_is_refused(run: Cli, channel: Channel, tmp_path: Path) -> None:
    run.cache.chmod(0o777)
    line = refused(
        run, tmp_path, "setup", "x", "--channel", channel.root, "--area", tmp_path / "area", code=7
    )
    assert str(run.cache) in line and "writable by group or others (mode 777)" in line
    run.cache.chmod(0o775)
    assert "mode 775" in refused(
        run, tmp_path, "setup", "x", "--channel", channel.root, "--area", tmp_path / "a", code=7
    )


@needs_root
def test_a_cache_of_another_user_is_refused(run: Cli, channel: Channel, tmp_path: Path) -> None:
    os.chown(run.cache, NOBODY, NOBODY)
    line = refused(
        run, tmp_path, "setup", "x", "--channel", channel.root, "--area", tmp_path / "area", code=7
    )
    assert f"belongs to uid {NOBODY}" in line


def test_a_new_cache_is_made_for_us_alone(
    run: Cli, channel: Channel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made 0700 by the first command that keeps something in it (an HTTP channel's index); a command
    that failed, or kept nothing, leaves no cache behind."""
    from httpserve import Server

    fresh = tmp_path / "new" / "cache"
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(fresh))
    run(
        "setup", "x", "--channel", channel.root, "--area", tmp_path / "area"
    )  # a directory channel: nothing kept
    assert not fresh.exists()
    server = Server(channel.root)
    try:
        run("setup", "x", "--channel", server.url(), "--area", tmp_path / "area2")
    finally:
        server.close()
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700 and any(fresh.iterdir())


def plant_toolchain(cache: Path, owner: int | None = None) -> Path:
    """A venv-looking entry whose python, if ever run, leaves tmp/pwned (and answers like a real one)."""
    key = toolchain_mod.toolchain_key(DEFAULT_REQUIREMENTS)
    root = cache / "toolchains" / key
    (root / "bin").mkdir(parents=True)
    pwned = cache.parent / "pwned"
    (root / "bin" / "python").write_text(f"#!/bin/sh\ntouch {pwned}\n")
    (root / "bin" / "python").chmod(0o755)
    (root / "bin" / "activate").write_text(f'VIRTUAL_ENV="{(cache / "toolchains").resolve() / key}"\n')
    (root / toolchain_mod.READY).write_text(json.dumps({"key": key, "requirements": [], "installed": []}))
    if owner is not None:
        for path in [root, *root.rglob("*")]:
            os.lchown(path, owner, owner)
    return root


@needs_root
def test_a_planted_toolchain_is_never_run(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    plant_toolchain(cache, NOBODY)
    with pytest.raises(IntegrityError, match=f"belongs to uid {NOBODY}"):
        REAL["ensure_toolchain"](cache, DEFAULT_REQUIREMENTS, print)
    assert not (tmp_path / "pwned").exists()


class Rebuilding(Exception):
    pass


def test_a_toolchain_others_can_write_is_refused_and_a_changed_one_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    root = plant_toolchain(cache)
    (root / "bin" / "python").chmod(0o777)
    with pytest.raises(IntegrityError, match="writable by group or others"):
        REAL["ensure_toolchain"](cache, DEFAULT_REQUIREMENTS, print)
    assert not (tmp_path / "pwned").exists()
    (root / "bin" / "python").chmod(0o755)
    cache_mod.seal(root)  # as ensure_entry seals what it made
    (root / "bin" / "python").write_text(f"#!/bin/sh\ntouch {tmp_path / 'pwned'}\n# changed\n")

    def creating(*args: object, **kwargs: object) -> NoReturn:
        raise Rebuilding  # where a new venv would be made (no network here)

    monkeypatch.setattr(toolchain_mod, "_run", creating)
    with pytest.raises(Rebuilding):
        REAL["ensure_toolchain"](cache, DEFAULT_REQUIREMENTS, print)
    assert not (tmp_path / "pwned").exists()  # its Python never ran


def test_entries_are_sealed_and_checked(tmp_path: Path) -> None:
    made = []
    entry = cache_mod.ensure_entry(tmp_path / "kind" / "e", lambda d: made.append((d / "f").write_text("1")))
    assert json.loads((entry / cache_mod.SEAL).read_text())["listing"] == cache_mod.listing_digest(entry)
    (entry / "f").write_text("22")  # changed since it was made: made again, as an incomplete one is
    cache_mod.ensure_entry(entry, lambda d: made.append((d / "f").write_text("333")))
    assert made == [1, 3] and (entry / "f").read_text() == "333"
    # An entry made before seals existed: sealed on first use once it passes the ownership check.
    legacy = tmp_path / "kind" / "old"
    legacy.mkdir()
    (legacy / cache_mod.COMPLETE).write_text("old\n")
    cache_mod.ensure_entry(legacy, lambda d: made.append(0))
    assert (legacy / cache_mod.SEAL).is_file() and made == [1, 3]
    # __pycache__ (Python writes byte code as it imports) is not part of the listing, but must be ours.
    (legacy / "__pycache__").mkdir()
    (legacy / "__pycache__" / "m.pyc").write_bytes(b"x")
    cache_mod.check_entry(legacy)
    (legacy / "__pycache__" / "m.pyc").chmod(0o666)
    with pytest.raises(IntegrityError, match="writable by group or others"):
        cache_mod.check_entry(legacy)


@needs_root
def test_a_planted_entry_of_another_user_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / "builds" / "key"
    planted.mkdir(parents=True)
    (planted / cache_mod.COMPLETE).write_text("key\n")
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(IntegrityError, match=f"belongs to uid {NOBODY}"):
        cache_mod.ensure_entry(planted, lambda d: None)


def test_a_cached_build_is_verified_before_it_is_copied(tmp_path: Path) -> None:
    """builds/KEY/: a file changed after the build (or a planted package whose files differ from its
    manifest) is refused before anything reaches dist."""
    from tfaot_dist import builder
    from tfaot_dist import package as pkg

    files, extra = model_files("x")
    data = archive_bytes("tfaot-model-x", "1.0", files, extra)
    build = tmp_path / "builds" / "key"
    build.mkdir(parents=True)
    archive = build / "tfaot-model-x-1.0.tar.gz"
    archive.write_bytes(data)
    root = unpack_package(archive, build)
    found = pkg.Package("tfaot-model-x", "1.0", root, archive, pkg.read_manifest(root))
    builder._check_cached(found)  # as built: fine
    (root / "lib" / "libtfaot-model-x.a").write_bytes(b"!<arch>\nplanted")
    with pytest.raises(IntegrityError, match="sha256 differs from the manifest"):
        builder._check_cached(found)
