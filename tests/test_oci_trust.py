"""Signed OCI channels (issue 41): publish --sign on oci:// pushes the channel's TUF metadata as tags of
NAMESPACE/tfaot-tuf, and an area that trusts the channel's root refuses a forged archive and index row,
the metadata removed and an expired timestamp with one line and exit 7, the area as it was.

Against a real registry: Debian's docker-registry on 127.0.0.1 (test_oci.Registry). Packages are
assembled by hand (tests/hostile.py); no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from conftest import Cli
from hostile import archive_bytes, hand_built_dist, model_files, refused
from test_oci import Registry

from tfaot_dist.channels.channel import index_line, verify_archive
from tfaot_dist.channels.oci import Client, Location, OciTransaction

INTEGRITY = 7
MODEL_H = "tfaot/tfaot-model-x/1.0/include/tfaot-model-x/model.h"
_namespaces = itertools.count()


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFAOT_DIST_SIGNING_KEY", raising=False)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("oci-trust-registry"))
    yield server
    server.stop()


@pytest.fixture
def key(run: Cli, tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "channel.key"
    path.parent.mkdir()
    run("keys", "new", path)
    return path


@pytest.fixture
def namespace() -> str:
    return f"signed/c{next(_namespaces)}"


@pytest.fixture
def channel(run: Cli, tmp_path: Path, key: Path, registry: Registry, namespace: str) -> str:
    """A signed OCI channel: the runtime and model x 1.0, published with --sign."""
    location = registry.channel(namespace)
    run("publish", "--channel", location, "--dist", hand_built_dist(tmp_path / "dist"), "--sign", key)
    return location


def pulled(registry: Registry, namespace: str, tag: str) -> bytes:
    """A file of NAMESPACE/tfaot-tuf as any OCI client pulls it (manifest, then its one layer)."""
    base = f"http://127.0.0.1:{registry.port}/v2/{namespace}/tfaot-tuf"
    manifest = requests.get(
        f"{base}/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        timeout=10,
    )
    manifest.raise_for_status()
    (layer,) = manifest.json()["layers"]
    blob = requests.get(f"{base}/blobs/{layer['digest']}", timeout=10)
    blob.raise_for_status()
    return blob.content


@pytest.fixture
def root_json(channel: str, registry: Registry, namespace: str, tmp_path: Path) -> Path:
    """The channel's root as a user gets it out of band."""
    path = tmp_path / "root.json"
    path.write_bytes(pulled(registry, namespace, "root.json"))
    return path


def trusted_area(run: Cli, tmp_path: Path, channel: str, root_json: Path) -> Path:
    area = tmp_path / "area"
    run("setup", "x", "--channel", channel, "--area", area, "--trust", root_json)
    return area


def test_setup_from_a_signed_oci_channel(
    run: Cli, tmp_path: Path, channel: str, registry: Registry, namespace: str, root_json: Path
) -> None:
    for tag in ("1.root.json", "1.targets.json", "1.snapshot.json", "timestamp.json"):
        assert pulled(registry, namespace, tag).startswith(b"{")
    out, _ = run("setup", "--list", "--channel", channel)
    assert out.splitlines()[0] == f"{channel}: signed (TUF root version 1)"
    area = trusted_area(run, tmp_path, channel, root_json)
    assert (area / MODEL_H).is_file()
    (kept,) = (area / "tfaot" / "trust").iterdir()
    assert (kept / "root_history" / "1.root.json").read_bytes() == root_json.read_bytes()
    out, _ = run("setup", "x", "--channel", channel, "--area", area)
    assert "tfaot-model-x 1.0: already installed" in out
    # An area that trusts no root sets up offline from what the cache kept, as from an unsigned channel.
    out, _ = run("setup", "x", "--offline", "--channel", channel, "--area", tmp_path / "offline", "--json")
    assert [r["status"] for r in json.loads(out)["results"]] == ["installed", "installed"]


def test_an_archive_and_its_index_row_replaced_together_are_refused(
    run: Cli, tmp_path: Path, channel: str, root_json: Path
) -> None:
    # Whoever can push to the repository replaces model x 1.0: its artifact and an index part whose
    # row (a higher revision, so readers take it) has the forged archive's digests.
    files, extra = model_files("x", "1.0")
    files["include/tfaot-model-x/model.h"] = b"// forged\n"
    forged = tmp_path / "forged" / "tfaot-model-x-1.0.tar.gz"
    forged.parent.mkdir()
    forged.write_bytes(archive_bytes("tfaot-model-x", "1.0", files, extra))
    archive = verify_archive(forged)
    row = dataclasses.replace(index_line(archive), revision=1)
    tx = OciTransaction(Client(Location.parse(channel)))
    tx._signing_checked = True  # the attacker does not ask
    tx.store(archive, row)
    tx.commit([row], {})
    naive = tmp_path / "naive"
    run("setup", "x", "--channel", channel, "--area", naive)
    assert (naive / MODEL_H).read_bytes() == b"// forged\n"  # the digests all match
    area = tmp_path / "area"
    line = refused(
        run,
        tmp_path,
        "setup",
        "x",
        "--channel",
        channel,
        "--area",
        area,
        "--trust",
        root_json,
        code=INTEGRITY,
    )
    assert (
        "tfaot-model-x 1.0: packages/tfaot-model-x/1.0/tfaot-model-x-1.0.tar.gz: the index's sha256" in line
    )
    assert not area.exists()


def test_the_metadata_removed_is_refused_once_trusted(
    run: Cli, tmp_path: Path, channel: str, root_json: Path, registry: Registry, namespace: str
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    shutil.rmtree(registry.repositories(namespace) / "tfaot-tuf")  # the channel served unsigned
    out, _ = run("setup", "--list", "--channel", channel)
    assert "signed" not in out  # listed as an unsigned channel
    line = refused(run, tmp_path, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert "unsigned (no tuf/ metadata" in line and "this area trusts the channel's root: refused" in line


def test_an_expired_timestamp_is_refused_and_a_refreshed_one_accepted(
    run: Cli, tmp_path: Path, channel: str, root_json: Path, key: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    run("trust", "refresh-timestamp", "--channel", channel, "--sign", key, "--timestamp-expiry", "1s")
    time.sleep(1.2)
    line = refused(run, tmp_path, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert "signed metadata refused: expired" in line and "timestamp.json is expired" in line
    out, _ = run(
        "trust", "refresh-timestamp", "--channel", channel, "--sign", key, "--timestamp-expiry", "1h"
    )
    assert "timestamp version 3" in out
    run("setup", "x", "--channel", channel, "--area", area)


def test_unsigned_changes_to_a_signed_oci_channel_are_refused_before_any_push(
    run: Cli, tmp_path: Path, channel: str, registry: Registry, namespace: str
) -> None:
    line = refused(
        run,
        registry.repositories(namespace),
        "publish",
        "--channel",
        channel,
        "--dist",
        hand_built_dist(tmp_path / "more", ("y",)),
        code=2,
    )
    assert "is a signed channel (tuf/root.json): give --sign KEY" in line


def test_a_threshold_root_made_for_a_published_oci_channel(
    run: Cli, tmp_path: Path, registry: Registry, namespace: str
) -> None:
    location = registry.channel(namespace)
    run("publish", "--channel", location, "--dist", hand_built_dist(tmp_path / "dist"))  # unsigned
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("a", "b", "online"):
        run("keys", "new", keys / name)
    run(
        "trust",
        "init-root",
        "--channel",
        location,
        "--key",
        keys / "a.pub",
        "--key",
        keys / "b.pub",
        "--root-sign",
        keys / "a",
        "--root-sign",
        keys / "b",
        "--sign",
        keys / "online",
    )
    root = json.loads(pulled(registry, namespace, "root.json"))
    assert root["signed"]["roles"]["root"]["threshold"] == 2 and len(root["signatures"]) == 2
    (tmp_path / "root.json").write_bytes(pulled(registry, namespace, "root.json"))
    area = trusted_area(run, tmp_path, location, tmp_path / "root.json")  # the rows listed before: signed
    assert (area / MODEL_H).is_file()
