"""Bounds where they were missing, and clear errors (issue 27): batch sizes, declared input sizes,
publish cost in big channels, signature keys tfcompile refuses, git LFS pointers in place of a
SavedModel (one download deadline for all attempts: tests/test_security.py).

The TensorFlow cases (marked tf) make their hostile SavedModels with the toolchain here.
"""

import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, Cli, exported_by
from hostile import Channel, archive_bytes, model_files, refused

from tfaot_dist import config, limits
from tfaot_dist.channels.channel import ChannelPackage
from tfaot_dist.errors import InvalidInput
from tfaot_dist.toolchain import Toolchain

# ---------------------------------------------------------------- batch sizes


def test_batch_sizes_are_capped_with_an_override(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = ",".join(str(n) for n in range(1, 66))
    line = refused(
        run,
        tmp_path,
        "add-model",
        "x",
        "--source",
        "/nonexistent",
        "--aot-config",
        "a.yaml",
        "--batch-sizes",
        sizes,
        code=3,
    )
    assert "65 batch sizes, at most 64" in line and limits.BATCH_SIZES_ENV in line
    aot = tmp_path / "aot_config.yaml"
    aot.write_text(
        yaml.safe_dump(
            {
                "model": {"name": "m", "version": "1.0", "saved_model": "sm"},
                "compilation": {"batch_sizes": list(range(1, 1001))},
            }
        )
    )
    assert "1000 batch sizes, at most 64" in refused(run, tmp_path, "check", aot, code=3)


def test_batch_size_validation_is_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bound raised, 65,536 sizes validate at once (the quadratic check took 25 s)."""
    monkeypatch.setenv(limits.BATCH_SIZES_ENV, "100000")
    assert len(config.batch_sizes(list(range(65536, 0, -1)), "x")) == 65536
    with pytest.raises(InvalidInput, match=r"duplicate batch sizes \[7\]"):
        config.batch_sizes([*range(1, 60000), 7], "x")
    monkeypatch.setenv(limits.BATCH_SIZES_ENV, "many")
    with pytest.raises(InvalidInput, match="expected a positive integer"):
        config.batch_sizes([1], "x")


# ---------------------------------------------------------------- publish in big channels


def test_a_publish_renders_and_reads_only_what_it_adds(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel of 300 packages: one more publish writes one version page, reads one manifest
    (its own, from the archive), and leaves every other page as it was."""
    from tfaot_dist.channels import directory

    channel = Channel(tmp_path / "channel").runtime()
    for i in range(300):
        channel.model(f"m{i:03d}", index=i == 299)
    dist = tmp_path / "dist"
    dist.mkdir()
    files, extra = model_files("m300")
    (dist / "tfaot-model-m300-1.0.tar.gz").write_bytes(archive_bytes("tfaot-model-m300", "1.0", files, extra))
    first = tmp_path / "seed"
    first.mkdir()
    files, extra = model_files("m299", "1.1")
    (first / "tfaot-model-m299-1.1.tar.gz").write_bytes(
        archive_bytes("tfaot-model-m299", "1.1", files, extra)
    )
    run("publish", "--channel", channel.root, "--dist", first)  # writes the pages of a channel without them
    pages = {p: p.stat().st_mtime_ns for p in channel.root.rglob("index.html") if p.parent != channel.root}
    assert len(pages) == 302
    read: list[tuple[str, str]] = []
    real = directory.DirectoryChannel.manifest_bytes

    def recording(self: directory.DirectoryChannel, row: ChannelPackage) -> bytes:
        read.append(row.key)
        return real(self, row)

    monkeypatch.setattr(directory.DirectoryChannel, "manifest_bytes", recording)
    run("publish", "--channel", channel.root, "--dist", dist)
    assert read == []  # the new version's manifest came with its archive; the listing kept the others'
    after = {p: p.stat().st_mtime_ns for p in channel.root.rglob("index.html") if p.parent != channel.root}
    assert set(after) - set(pages) == {channel.root / "packages/tfaot-model-m300/1.0/index.html"}
    assert all(after[p] == pages[p] for p in pages)
    assert "tfaot-model-m300" in (channel.root / "index.html").read_text()
    doc = json.loads((channel.root / "index.json").read_text())
    assert len(doc["packages"]) == 303 and len((channel.root / "index.json").read_text().splitlines()) == 305


# ---------------------------------------------------------------- clear errors


def test_a_git_lfs_pointer_is_named_as_such(run: Cli, tmp_path: Path) -> None:
    saved = tmp_path / "saved_model"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 12345\n"
    )
    line = refused(run, tmp_path, "check", saved, code=3)
    assert "saved_model.pb: a git LFS pointer" in line and "git lfs" in line


@pytest.fixture(scope="module")
def hostile_models(toolchain: Toolchain) -> Path:
    return exported_by(toolchain, REPO / "tests" / "models" / "make_hostile_models.py", "hostile-models")


@pytest.mark.tf
def test_signature_keys_tfcompile_refuses_are_named_with_the_rule(run: Cli, hostile_models: Path) -> None:
    line = run.error("check", hostile_models / "keys", expect=3)
    assert "output key 'out-put'" in line and "letters, digits, '_' and '/' only" in line


@pytest.mark.tf
def test_declared_input_sizes_are_bounded(run: Cli, hostile_models: Path, tmp_path: Path) -> None:
    line = run.error("check", hostile_models / "huge", expect=3)
    assert "2147483648 elements per row" in line and limits.ROW_ELEMENTS_ENV in line
    # 4M float64 per row fits the row bound; at batch size 64 it is 2 GiB of inputs.
    aot = tmp_path / "aot_config.yaml"
    aot.write_text(
        yaml.safe_dump(
            {
                "model": {"name": "wide", "version": "1.0", "saved_model": str(hostile_models / "wide")},
                "compilation": {"batch_sizes": [1, 64]},
            }
        )
    )
    line = run.error("compile", "--aot-config", aot, "--output-directory", tmp_path / "out", expect=3)
    assert "at batch size" in line and limits.BATCH_BYTES_ENV in line
    assert not (tmp_path / "out" / "tfaot-model-wide-1.0").exists()


def test_the_worker_s_bounds_and_their_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks the worker runs before it allocates (no TensorFlow needed to call them)."""
    from tfaot_dist.documents import CheckRequest
    from tfaot_dist.worker import tf_worker

    signature = {"inputs": [{"name": "a", "dtype": "float64", "shape": [1024, 1024]}], "outputs": []}
    request = CheckRequest(
        saved_model="s",
        serving_key="k",
        max_row_elements=limits.max_row_elements(),
        max_batch_bytes=limits.max_batch_bytes(),
    ).to_json()
    tf_worker.check_bounds(signature, request, [64])  # 512 MiB: within the default
    with pytest.raises(tf_worker.WorkerError, match="at batch size 256"):
        tf_worker.check_bounds(signature, request, [256])
    monkeypatch.setenv(limits.BATCH_BYTES_ENV, str(4 << 30))
    monkeypatch.setenv(limits.ROW_ELEMENTS_ENV, "1000")
    raised = CheckRequest(
        saved_model="s",
        serving_key="k",
        max_row_elements=limits.max_row_elements(),
        max_batch_bytes=limits.max_batch_bytes(),
    ).to_json()
    with pytest.raises(tf_worker.WorkerError, match="1048576 elements per row"):
        tf_worker.check_bounds(signature, raised, [256])
    for bad in (["a-b"], ["a/b", "a_b"], ["x", "x_data"]):
        with pytest.raises(tf_worker.WorkerError, match="key"):
            tf_worker._check_keys("input", [{"name": n} for n in bad])
    tf_worker._check_keys("input", [{"name": "serving/x_1"}, {"name": "y"}])
