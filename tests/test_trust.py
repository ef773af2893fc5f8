"""Signed channels (TUF, issue 41): publish --sign writes the channel's metadata; an area that trusts
the channel's root (setup --trust ROOT.json) installs only what that metadata signs, and refuses a
forged row, a rolled back or expired answer and an unsigned channel with one line and exit 7, the
area as it was; it follows a root rotated with the old key's signature, and no other. Every signed
archive has a signed provenance (in-toto, SLSA) naming its digest, checked before it is installed.

Packages are assembled by hand (tests/hostile.py); channels are real directories, also served by a
real HTTP server on 127.0.0.1 (tests/httpserve.py). No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cli, snapshot
from hostile import archive_bytes, hand_built_dist, model_files, refused
from httpserve import Server
from tuf.api.metadata import Metadata, Root

from tfaot_dist.channels.channel import index_line, parse_index, render_index, verify_archive
from tfaot_dist.errors import IntegrityError
from tfaot_dist.trust import provenance
from tfaot_dist.trust.keys import load_signer

INTEGRITY = 7
USAGE = 2
INVALID = 3
MODEL = "packages/tfaot-model-x/1.0/tfaot-model-x-1.0.tar.gz"


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFAOT_DIST_SIGNING_KEY", raising=False)


@pytest.fixture
def key(run: Cli, tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "channel.key"
    path.parent.mkdir()
    run("keys", "new", path)
    return path


@pytest.fixture
def channel(run: Cli, tmp_path: Path, key: Path) -> Path:
    """A signed channel: the runtime and model x 1.0, published with --sign."""
    root = tmp_path / "channel"
    run("publish", "--channel", root, "--dist", hand_built_dist(tmp_path / "dist"), "--sign", key)
    return root


@pytest.fixture
def root_json(channel: Path, tmp_path: Path) -> Path:
    """The channel's root as a user gets it out of band (a copy, not the channel's file)."""
    path = tmp_path / "root.json"
    shutil.copyfile(channel / "tuf" / "root.json", path)
    return path


@pytest.fixture
def server(channel: Path) -> Iterator[Server]:
    s = Server(channel)
    yield s
    s.close()


def trusted_area(run: Cli, tmp_path: Path, location: str | Path, root_json: Path) -> Path:
    """An area that set model x up from location, trusting root_json."""
    area = tmp_path / "area"
    run("setup", "x", "--channel", location, "--area", area, "--trust", root_json)
    return area


def forge_model_header(channel: Path) -> None:
    """What the issue's attacker did: model x 1.0 with another model.h, its archive, manifest and
    index row rewritten with matching digests (whoever can write the channel's host can)."""
    files, extra = model_files("x", "1.0")
    files["include/tfaot-model-x/model.h"] = b"// forged\n"
    base = channel / "packages" / "tfaot-model-x" / "1.0"
    (base / "tfaot-model-x-1.0.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.0", files, extra))
    archive = verify_archive(base / "tfaot-model-x-1.0.tar.gz")
    (base / "manifest.json").write_bytes(archive.manifest_bytes)
    rows = {r.key: r for r in parse_index((channel / "index.json").read_bytes(), "index.json")}
    row = index_line(archive)
    rows[row.key] = row
    (channel / "index.json").write_text(render_index(rows.values()))


def test_keys_new_writes_a_private_key_only_its_owner_reads_and_never_overwrites(
    run: Cli, tmp_path: Path
) -> None:
    path = tmp_path / "k"
    run("keys", "new", path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert (tmp_path / "k.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    before = snapshot(tmp_path)
    line = run.error("keys", "new", path, expect=INVALID)
    assert f"{path}: exists; a key is never overwritten" in line
    assert snapshot(tmp_path) == before
    path.chmod(0o644)  # a key others may read is refused, as ssh refuses one
    line = run.error(
        "publish", "--channel", tmp_path / "ch", "--dist", tmp_path, "--sign", path, expect=INVALID
    )
    assert "readable by others (mode 0644)" in line
    assert not (tmp_path / "ch").exists()


def test_a_signed_channel_sets_up_and_the_area_keeps_its_root(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path
) -> None:
    assert sorted(p.name for p in (channel / "tuf").iterdir()) == [
        "1.root.json",
        "1.snapshot.json",
        "1.targets.json",
        "root.json",
        "timestamp.json",
    ]
    targets = json.loads((channel / "tuf" / "1.targets.json").read_bytes())["signed"]["targets"]
    row = next(r for r in parse_index((channel / "index.json").read_bytes(), "i") if r.archive == MODEL)
    assert targets[MODEL] == {"length": row.size, "hashes": {"sha256": row.sha256}}
    assert targets[row.manifest]["hashes"] == {"sha256": row.manifest_sha256}
    out, _ = run("setup", "--list", "--channel", channel)
    assert out.splitlines()[0] == f"{channel}: signed (TUF root version 1)"
    area = trusted_area(run, tmp_path, channel, root_json)
    assert (area / "tfaot/tfaot-model-x/1.0/include/tfaot-model-x/model.h").is_file()
    (kept,) = (area / "tfaot" / "trust").iterdir()
    assert (kept / "root_history" / "1.root.json").read_bytes() == root_json.read_bytes()
    assert json.loads((kept / "timestamp.json").read_bytes())["signed"]["version"] == 1
    # From now on the area needs no --trust; the channel keeps working as before.
    out, _ = run("setup", "x", "--channel", channel, "--area", area)
    assert "tfaot-model-x 1.0: already installed" in out


def test_an_unsigned_channel_works_as_before_and_is_listed_unsigned(run: Cli, tmp_path: Path) -> None:
    channel = tmp_path / "plain"
    run("publish", "--channel", channel, "--dist", hand_built_dist(tmp_path / "dist"))
    assert not (channel / "tuf").exists()
    out, _ = run("setup", "--list", "--channel", channel)
    assert "signed" not in out  # the listing of an unsigned channel, as before
    out, _ = run("setup", "--list", "--channel", channel, "--json")
    assert json.loads(out)["signed"] == "unsigned"
    run("setup", "x", "--channel", channel, "--area", tmp_path / "area")


@pytest.mark.parametrize("transport", ["directory", "http"])
def test_an_archive_and_its_index_row_replaced_together_are_refused(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, server: Server, transport: str
) -> None:
    location = str(channel) if transport == "directory" else server.base
    forge_model_header(channel)
    # Without a trusted root the forgery installs without a word: the digests all match.
    naive = tmp_path / "naive"
    run("setup", "x", "--channel", location, "--area", naive)
    assert (naive / "tfaot/tfaot-model-x/1.0/include/tfaot-model-x/model.h").read_bytes() == b"// forged\n"
    area = tmp_path / "area"
    line = refused(
        run, area, "setup", "x", "--channel", location, "--area", area, "--trust", root_json, code=INTEGRITY
    )
    assert (
        f"tfaot-model-x 1.0: {MODEL}: the index's sha256 or size differs from the signed target's" in line
    ), line
    assert not area.exists()


def test_a_row_added_without_signing_is_refused(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    files, extra = model_files("x", "1.1")
    base = channel / "packages" / "tfaot-model-x" / "1.1"
    base.mkdir()
    (base / "tfaot-model-x-1.1.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.1", files, extra))
    archive = verify_archive(base / "tfaot-model-x-1.1.tar.gz")
    (base / "manifest.json").write_bytes(archive.manifest_bytes)
    rows = [*parse_index((channel / "index.json").read_bytes(), "i"), index_line(archive)]
    (channel / "index.json").write_text(render_index(rows))
    line = refused(run, area, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert (
        "tfaot-model-x 1.1: packages/tfaot-model-x/1.1/tfaot-model-x-1.1.tar.gz is not a signed target"
        in line
    )


@pytest.mark.parametrize("transport", ["directory", "http"])
def test_an_older_signed_snapshot_served_again_is_refused(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, key: Path, server: Server, transport: str
) -> None:
    location = str(channel) if transport == "directory" else server.base
    old = tmp_path / "old"
    shutil.copytree(channel, old)  # what a mirror kept: properly signed, then superseded
    run("yank", "x==1.0", "--reason", "wrong normalisation", "--channel", channel, "--sign", key)
    area = tmp_path / "area"
    run("setup", "x==1.0", "--channel", location, "--area", area, "--trust", root_json)  # sees version 2
    for name in ("index.json", "tuf/timestamp.json"):  # the old, unyanked state, served again
        shutil.copyfile(old / name, channel / name)
    line = refused(run, area, "setup", "x", "--channel", location, "--area", area, code=INTEGRITY)
    assert "signed metadata refused: older than the metadata this area accepted before (a rollback)" in line


def test_a_yank_is_signed_an_old_index_cannot_undo_it(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, key: Path
) -> None:
    old_index = (channel / "index.json").read_bytes()
    run("yank", "x==1.0", "--reason", "wrong normalisation", "--channel", channel, "--sign", key)
    (channel / "index.json").write_bytes(old_index)  # the row without its yank mark
    area = tmp_path / "area"
    line = refused(
        run, area, "setup", "x", "--channel", channel, "--area", area, "--trust", root_json, code=INVALID
    )
    assert "available: 1.0 (yanked)" in line


def test_an_expired_timestamp_is_refused_and_a_refreshed_one_accepted(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, key: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    run("trust", "refresh-timestamp", "--channel", channel, "--sign", key, "--timestamp-expiry", "1s")
    time.sleep(1.2)
    line = refused(run, area, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert "signed metadata refused: expired" in line and "timestamp.json is expired" in line
    out, _ = run(
        "trust", "refresh-timestamp", "--channel", channel, "--sign", key, "--timestamp-expiry", "12h"
    )
    assert "timestamp version 3" in out
    run("setup", "x", "--channel", channel, "--area", area)


@pytest.mark.parametrize("transport", ["directory", "http"])
def test_metadata_removed_is_refused_once_trusted(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, server: Server, transport: str
) -> None:
    location = str(channel) if transport == "directory" else server.base
    area = trusted_area(run, tmp_path, location, root_json)
    shutil.rmtree(channel / "tuf")  # the channel served unsigned
    line = refused(run, area, "setup", "x", "--channel", location, "--area", area, code=INTEGRITY)
    assert "unsigned (no tuf/ metadata" in line and "this area trusts the channel's root: refused" in line


def test_unsigned_or_foreign_changes_to_a_signed_channel_are_refused(
    run: Cli, tmp_path: Path, channel: Path, key: Path
) -> None:
    dist = tmp_path / "dist2"
    dist.mkdir()
    files, extra = model_files("x", "1.1")
    (dist / "tfaot-model-x-1.1.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.1", files, extra))
    line = refused(run, channel, "publish", "--channel", channel, "--dist", dist, code=USAGE)
    assert "is a signed channel (tuf/root.json): give --sign KEY" in line
    line = refused(run, channel, "yank", "x==1.0", "--reason", "r", "--channel", channel, code=USAGE)
    assert "is a signed channel" in line
    other = tmp_path / "other.key"
    run("keys", "new", other)
    line = refused(
        run, channel, "publish", "--channel", channel, "--dist", dist, "--sign", other, code=INVALID
    )
    assert "is not a targets key of the channel's root (version 1)" in line
    # The key from the environment, as CI gives it.
    os.environ["TFAOT_DIST_SIGNING_KEY"] = key.read_text()
    try:
        run("publish", "--channel", channel, "--dist", dist)
    finally:
        del os.environ["TFAOT_DIST_SIGNING_KEY"]
    assert (channel / "tuf" / "2.targets.json").is_file()


def test_a_rotated_root_is_followed(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, key: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    new = tmp_path / "new.key"
    run("keys", "new", new)
    out, _ = run("trust", "rotate", "--channel", channel, "--sign", key, "--new-key", new)
    assert "root version 2" in out
    root2 = json.loads((channel / "tuf" / "2.root.json").read_bytes())
    assert len(root2["signatures"]) == 2  # the old key and the new one
    run("setup", "x", "--channel", channel, "--area", area)
    (kept,) = (area / "tfaot" / "trust").iterdir()
    assert (kept / "root_history" / "2.root.json").read_bytes() == (
        channel / "tuf" / "2.root.json"
    ).read_bytes()
    # The old key no longer signs for the channel.
    line = refused(
        run, channel, "trust", "refresh-timestamp", "--channel", channel, "--sign", key, code=INVALID
    )
    assert "is not a timestamp key of the channel's root (version 2)" in line


def test_a_root_rotated_without_the_old_key_is_refused(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    attacker = tmp_path / "attacker.key"
    run("keys", "new", attacker)
    signer = load_signer(attacker)
    assert signer is not None
    root = Metadata[Root].from_bytes((channel / "tuf" / "root.json").read_bytes())
    for role in ("root", "targets", "snapshot", "timestamp"):  # every role handed to the attacker
        for keyid in list(root.signed.roles[role].keyids):
            root.signed.revoke_key(keyid, role)
        root.signed.add_key(signer.public_key, role)
    root.signed.version = 2
    root.sign(signer)
    (channel / "tuf" / "2.root.json").write_bytes(root.to_bytes())
    line = refused(run, area, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert "signed metadata refused: not signed by the keys of the root this area trusts" in line, line


def test_trust_with_another_root_for_a_trusted_channel_is_refused(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path
) -> None:
    area = trusted_area(run, tmp_path, channel, root_json)
    other = tmp_path / "other"
    run(
        "publish",
        "--channel",
        other,
        "--dist",
        hand_built_dist(tmp_path / "dist"),
        "--sign",
        tmp_path / "keys" / "channel.key",
    )
    key2 = tmp_path / "k2"
    run("keys", "new", key2)
    shutil.rmtree(other / "tuf")
    run("publish", "--channel", other, "--dist", hand_built_dist(tmp_path / "dist"), "--sign", key2)
    line = refused(
        run,
        area,
        "setup",
        "x",
        "--channel",
        channel,
        "--area",
        area,
        "--trust",
        other / "tuf" / "root.json",
        code=INTEGRITY,
    )
    assert "is trusted with another root by" in line
    run("setup", "x", "--channel", channel, "--area", area, "--trust", root_json)  # the same root: fine


def test_every_signed_archive_has_a_provenance_envelope_naming_its_digest(
    run: Cli, tmp_path: Path, channel: Path, key: Path
) -> None:
    signer = load_signer(key)
    assert signer is not None
    targets = json.loads((channel / "tuf" / "1.targets.json").read_bytes())["signed"]["targets"]
    rows = parse_index((channel / "index.json").read_bytes(), "index.json")
    assert len(rows) == 2
    for row in rows:
        rel = provenance.path(row)
        data = (channel / rel).read_bytes()
        assert targets[rel]["length"] == len(data)  # a TUF target like the archive
        envelope = json.loads(data)
        assert envelope["payloadType"] == "application/vnd.in-toto+json"
        statement = provenance.check(data, [signer.public_key], 1, row, rel)  # DSSE, by the channel's key
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
        assert statement["subject"] == [{"name": Path(row.archive).name, "digest": {"sha256": row.sha256}}]
        build = statement["predicate"]["buildDefinition"]
        assert build["externalParameters"]["package"] == row.name
        if row.kind == "model":
            assert build["internalParameters"]["requires"] == [
                {"name": "tfaot-xla-runtime", "version": "2.21.0+b0.p0"}
            ]
    other = tmp_path / "other.key"
    run("keys", "new", other)
    other_signer = load_signer(other)
    assert other_signer is not None
    with pytest.raises(IntegrityError, match="provenance not signed by the channel's keys"):
        provenance.check(
            (channel / provenance.path(rows[0])).read_bytes(), [other_signer.public_key], 1, rows[0], "x"
        )
    with pytest.raises(IntegrityError, match="does not name"):  # another archive's provenance
        provenance.check(
            (channel / provenance.path(rows[1])).read_bytes(), [signer.public_key], 1, rows[0], "x"
        )


def test_a_provenance_replaced_is_refused(run: Cli, tmp_path: Path, channel: Path, root_json: Path) -> None:
    attacker = tmp_path / "attacker.key"
    run("keys", "new", attacker)
    signer = load_signer(attacker)
    assert signer is not None
    (row,) = [r for r in parse_index((channel / "index.json").read_bytes(), "i") if r.archive == MODEL]
    (channel / provenance.path(row)).write_bytes(
        provenance.envelope(row, {"source": {"url": "forged"}}, signer)
    )
    area = tmp_path / "area"
    line = refused(
        run, area, "setup", "x", "--channel", channel, "--area", area, "--trust", root_json, code=INTEGRITY
    )
    assert f"tfaot-model-x 1.0: {provenance.path(row)} differs from its signed target" in line, line


def test_a_provenance_left_by_a_dead_publish_is_made_again(
    run: Cli, tmp_path: Path, channel: Path, root_json: Path, key: Path
) -> None:
    signer = load_signer(key)
    assert signer is not None
    files, extra = model_files("x", "1.1")
    dist = tmp_path / "dist-1.1"
    dist.mkdir()
    (dist / "tfaot-model-x-1.1.tar.gz").write_bytes(archive_bytes("tfaot-model-x", "1.1", files, extra))
    row = index_line(verify_archive(dist / "tfaot-model-x-1.1.tar.gz"))
    # What a publish of other bytes under 1.1 left before it died: a provenance naming them.
    stale = dataclasses.replace(row, sha256="0" * 64)
    (channel / provenance.path(row)).parent.mkdir(parents=True)
    (channel / provenance.path(row)).write_bytes(provenance.envelope(stale, {}, signer))
    run("publish", "--channel", channel, "--dist", dist, "--sign", key)
    assert provenance.names((channel / provenance.path(row)).read_bytes(), row)
    run("setup", "x==1.1", "--channel", channel, "--area", tmp_path / "area", "--trust", root_json)


def test_verify_checks_an_archive_against_its_signed_provenance(
    run: Cli, tmp_path: Path, channel: Path, key: Path
) -> None:
    rows = {r.kind: r for r in parse_index((channel / "index.json").read_bytes(), "index.json")}
    model, runtime = rows["model"], rows["runtime"]
    archive, envelope = channel / model.archive, channel / provenance.path(model)
    public = key.with_name(key.name + ".pub")
    out, _ = run("verify", archive, "--provenance", envelope, "--key", public, "--json")
    assert json.loads(out)["sha256"] == model.sha256
    other = tmp_path / "keys" / "other.key"
    run("keys", "new", other)
    # Any one of the keys given may have signed it.
    run(
        "verify",
        archive,
        "--provenance",
        envelope,
        "--key",
        other.with_name("other.key.pub"),
        "--key",
        public,
    )
    line = refused(
        run, channel, "verify", archive, "--provenance", envelope, "--key", f"{other}.pub", code=INTEGRITY
    )
    assert f"{envelope}: provenance not signed by the key of {other}.pub" in line, line
    # Another archive's provenance (the runtime's) does not name this one.
    line = refused(
        run,
        channel,
        "verify",
        archive,
        "--provenance",
        channel / provenance.path(runtime),
        "--key",
        public,
        code=INTEGRITY,
    )
    assert f"does not name {model.archive} with sha256 {model.sha256}" in line, line
    # A statement changed after signing: the signature no longer verifies.
    doc = json.loads(envelope.read_bytes())
    doc["payload"] = doc["payload"][:-8] + ("A" * 8 if doc["payload"][-8:] != "A" * 8 else "B" * 8)
    forged = tmp_path / "forged.dsse.json"
    forged.write_text(json.dumps(doc))
    line = refused(run, channel, "verify", archive, "--provenance", forged, "--key", public, code=INTEGRITY)
    assert "provenance not signed by the key of" in line, line
    line = refused(run, channel, "verify", archive, "--provenance", envelope, code=USAGE)
    assert "--provenance needs --key KEY.pub" in line
    line = refused(run, channel, "verify", archive, "--provenance", envelope, "--key", key, code=INVALID)
    assert f"--key: {key}: not an ed25519 public key in PEM" in line


def test_a_root_with_several_keys_and_a_threshold(run: Cli, tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    for name in ("a", "b", "online"):
        run("keys", "new", keys_dir / name)
    a, b, online = keys_dir / "a", keys_dir / "b", keys_dir / "online"
    channel = tmp_path / "channel"
    run("publish", "--channel", channel, "--dist", hand_built_dist(tmp_path / "dist"))  # unsigned so far
    init = ("trust", "init-root", "--channel", channel, "--key", f"{a}.pub", "--key", f"{b}.pub")
    # One signature where the threshold is two: a root every area would refuse is not written.
    line = refused(run, channel, *init, "--threshold", "2", "--root-sign", a, "--sign", online, code=INVALID)
    assert "--root-sign: 1 of the root's keys signed it, its threshold is 2" in line, line
    out, _ = run(*init, "--threshold", "2", "--root-sign", a, "--root-sign", b, "--sign", online)
    assert "2 of 2 root keys must sign its changes" in out
    signer = {name: load_signer(keys_dir / name) for name in ("a", "b", "online")}
    ids = {name: s.public_key.keyid for name, s in signer.items() if s is not None}
    root = Metadata[Root].from_bytes((channel / "tuf" / "root.json").read_bytes())
    assert set(root.signed.roles["root"].keyids) == {ids["a"], ids["b"]}
    assert root.signed.roles["root"].threshold == 2 and set(root.signatures) == {ids["a"], ids["b"]}
    assert root.signed.roles["targets"].keyids == [ids["online"]]
    root_json = tmp_path / "root.json"
    shutil.copyfile(channel / "tuf" / "root.json", root_json)
    # The rows published before the root are signed targets: setup installs them.
    area = trusted_area(run, tmp_path, channel, root_json)
    assert (area / "tfaot/tfaot-model-x/1.0/include/tfaot-model-x/model.h").is_file()
    run(
        "publish",
        "--channel",
        channel,
        "--dist",
        hand_built_dist(tmp_path / "dist-y", ("y",)),
        "--sign",
        online,
    )
    run("setup", "y", "--channel", channel, "--area", area)
    # A root key is not an online key; one root key cannot rotate a root of threshold two.
    refused(
        run,
        channel,
        "yank",
        "tfaot-model-y==1.0",
        "--reason",
        "r",
        "--channel",
        channel,
        "--sign",
        a,
        code=INVALID,
    )
    line = refused(
        run, channel, "trust", "rotate", "--channel", channel, "--sign", a, "--new-key", a, code=INVALID
    )
    assert "its root needs 2 of its keys to sign a new root" in line, line
    # A root signed by fewer than its threshold is refused by setup: given to a new area ...
    fewer = tmp_path / "fewer.json"
    doc = json.loads(root_json.read_bytes())
    doc["signatures"] = [s for s in doc["signatures"] if s["keyid"] == ids["a"]]
    fewer.write_text(json.dumps(doc))
    new_area = tmp_path / "new-area"
    line = refused(
        run,
        tmp_path,
        "setup",
        "x",
        "--channel",
        channel,
        "--area",
        new_area,
        "--trust",
        fewer,
        code=INTEGRITY,
    )
    assert "signed metadata refused: not signed by the keys of the root this area trusts" in line, line
    # ... and as the next root of the channel, written by whoever holds key a alone.
    grab = Metadata[Root].from_bytes(root_json.read_bytes())
    grab.signed.version = 2
    grab.signed.roles["root"].threshold = 1
    grab.signed.revoke_key(ids["b"], "root")
    assert signer["a"] is not None
    grab.signatures.clear()
    grab.sign(signer["a"])
    (channel / "tuf" / "2.root.json").write_bytes(grab.to_bytes())
    line = refused(run, area, "setup", "x", "--channel", channel, "--area", area, code=INTEGRITY)
    assert "not signed by the keys of the root this area trusts" in line, line
