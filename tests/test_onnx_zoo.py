"""The PyTorch exports of examples/onnx-zoo/ (export_zoo.py, both of torch's exporters): the committed files
are the ones MANIFEST.json records; each converts (worker/onnx_convert.py, in the ONNX Runtime environment)
to a graph that matches ONNX Runtime on the original at batch sizes 1, 3 and 32, but the NonZero model,
refused with one line naming its node; and one export packaged by add-model + build matches ONNX Runtime.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, Cli, DataRepo, run_in_toolchain

from tfaot_dist.perf import ort_engine
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_file

ZOO = REPO / "examples" / "onnx-zoo"
WORKER_DIR = REPO / "tfaot_dist" / "worker"


def manifest() -> dict[str, Any]:
    files: dict[str, Any] = json.loads((ZOO / "MANIFEST.json").read_text())["files"]
    return files


def test_committed_files_are_the_ones_the_manifest_records() -> None:
    files = manifest()
    assert sorted(files) == sorted(p.name for p in ZOO.glob("*.onnx"))
    for name, entry in files.items():
        path = ZOO / name
        assert entry["file"] == name and entry["exporter"] == name.split(".")[1]
        assert sha256_file(path) == entry["sha256"] and path.stat().st_size == entry["size"] < 300_000
        assert entry["max_deviation_from_torch"] <= 1e-5
        assert all(i["shape"][0] == "N" for i in entry["inputs"]), name  # the batch is dynamic
    assert {e["opset"] for e in files.values()} == {17, 20}


@pytest.fixture(scope="module")
def ort_env(toolchain: Toolchain, shared_cache: Path) -> Toolchain:
    return ort_engine.environment(toolchain, shared_cache, print)


@pytest.mark.tf
def test_every_export_converts_and_matches_onnx_runtime(ort_env: Toolchain, tmp_path: Path) -> None:
    result, work = tmp_path / "result.json", tmp_path / "work"
    work.mkdir()
    script = REPO / "tests" / "models" / "convert_onnx_zoo.py"
    run_in_toolchain(ort_env, script, WORKER_DIR, ZOO, work, result, tmp=tmp_path / "tmp")
    answers = json.loads(result.read_text())
    assert sorted(answers) == sorted(manifest())
    refused = {name: a["message"] for name, a in answers.items() if not a["ok"]}
    assert sorted(refused) == ["nonzero_refused.dynamo.onnx", "nonzero_refused.torchscript.onnx"], refused
    for message in refused.values():
        assert "(op NonZero, opset" in message and "not an op tfaot-dist converts" in message
    for name, answer in answers.items():
        assert answer["ops"] == manifest()[name]["ops"], name  # onnx.checker accepted it (the script)
        if answer["ok"]:
            assert answer["max_deviation"] <= 1e-5, (name, answer["deviations"])
            assert [o["name"] for o in answer["outputs"]] == [o["name"] for o in manifest()[name]["outputs"]]


@pytest.mark.tf
@pytest.mark.slow
def test_add_model_and_build_of_a_dynamo_export(run: Cli, tmp_path: Path) -> None:
    repo = DataRepo(tmp_path / "repo")
    (repo.work / "pn").mkdir(parents=True)
    onnx = ZOO / "particlenet_like.dynamo.onnx"
    shutil.copyfile(onnx, repo.work / "pn" / "model.onnx")
    config = {
        "model": {"name": "particlenet", "version": "1.0", "onnx": "model.onnx"},
        "compilation": {"batch_sizes": [1, 3, 32]},
    }
    (repo.work / "pn" / "aot_config.yaml").write_text(yaml.safe_dump(config))
    repo.commit()
    run("add-model", "particlenet", "--source", repo.url, "--aot-config", "pn/aot_config.yaml")
    _, err = run("build", "--all", "--dist", tmp_path / "dist")
    assert "verified tfaot-model-particlenet against ONNX Runtime on model.onnx" in err
    manifest_json = json.loads(
        (tmp_path / "dist" / "tfaot-model-particlenet-1.0" / "manifest.json").read_text()
    )
    source = manifest_json["source"]
    assert source["onnx_sha256"] == sha256_file(onnx) == manifest()[onnx.name]["sha256"]
    assert source["onnx_opset"] == "20" and source["onnx_producer"].startswith("pytorch")
    assert {"1", "3", "32"} <= set(source["onnx_runtime_verified_batch_sizes"].split(","))
    assert float(source["onnx_runtime_max_abs_deviation"]) <= 1e-5
    # the ONNX names, in the order of a SavedModel signature (sorted), as for any package
    assert [t["name"] for t in manifest_json["signature"]["inputs"]] == ["features", "mask", "points"]


@pytest.mark.tf
def test_symbolic_particle_axis_is_refused_until_model_dims_fixes_it(run: Cli, tmp_path: Path) -> None:
    shutil.copyfile(ZOO / "particlenet_symbolic.torchscript.onnx", tmp_path / "model.onnx")
    config = tmp_path / "aot_config.yaml"
    model: dict[str, Any] = {"name": "pn", "version": "1.0", "onnx": "model.onnx"}
    config.write_text(yaml.safe_dump({"model": model, "compilation": {"batch_sizes": [1]}}))
    line = run.error("check", config, expect=3)  # errors.InvalidInput
    assert "input 'points' dimension 2 is symbolic ('n_part')" in line
    model["dims"] = {"n_part": 16}
    config.write_text(yaml.safe_dump({"model": model, "compilation": {"batch_sizes": [1]}}))
    out, _ = run("check", config, "--json")
    inputs = json.loads(out)["signature"]["inputs"]
    assert [(t["name"], t["shape"]) for t in inputs] == [
        ("features", [4, 16]),
        ("mask", [1, 16]),
        ("points", [2, 16]),
    ]


@pytest.mark.tf
def test_bench_times_onnx_runtime_on_the_original_file_at_model_dims(run: Cli, tmp_path: Path) -> None:
    """bench of an ONNX source with a symbolic particle axis: ONNX Runtime runs the original file with the
    inputs the package takes (n_part from model.dims), beside the AOT package."""
    shutil.copyfile(ZOO / "particlenet_symbolic.dynamo.onnx", tmp_path / "model.onnx")
    config = tmp_path / "aot_config.yaml"
    model = {"name": "pn", "version": "1.0", "onnx": "model.onnx", "dims": {"n_part": 16}}
    # One CPU level: what is checked here is ONNX Runtime's side (test_perf.py times the levels).
    compilation = {"batch_sizes": [1, 3], "cpu_levels": ["x86-64"]}
    config.write_text(yaml.safe_dump({"model": model, "compilation": compilation}))
    bench = ("--warmup", "1", "--calls", "2", "--instances", "1", "--batch-sizes", "1,3", "--no-plots")
    out, _ = run("bench", config, "--engines", "aot,ort", *bench, "--dist", tmp_path / "dist", "--json")
    result = json.loads(out)
    assert result["ort"]["original"] == "model.onnx"
    assert [r["batch_size"] for r in result["time"]["ort"]] == [1, 3]
    assert all(r["seconds_per_call"] > 0 for r in result["time"]["ort"] + result["time"]["aot"])
