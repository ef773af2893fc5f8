"""ONNX files as sources (model.onnx): real ONNX files (onnx.helper, tests/models/make_onnx_models.py),
converted by worker/onnx_convert.py and compared with real ONNX Runtime, compiled by real tfcompile, the
C++ package run and compared with ONNX Runtime on the original file.
"""

from __future__ import annotations

import array
import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO, Cli, DataRepo, exported_by, run_in_toolchain, snapshot

from tfaot_dist import harness, onnx_source
from tfaot_dist.cache import Cache
from tfaot_dist.config import load_aot_config
from tfaot_dist.errors import InvalidInput
from tfaot_dist.package import model_manifest
from tfaot_dist.perf import ort_engine
from tfaot_dist.registry import Registry
from tfaot_dist.session import Session
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_file

WORKER_DIR = REPO / "tfaot_dist" / "worker"
MODELS = REPO / "tests" / "models"
INVALID_INPUT = 3  # errors.InvalidInput's exit code


@pytest.fixture(scope="module")
def ort_env(toolchain: Toolchain, shared_cache: Path) -> Toolchain:
    return ort_engine.environment(toolchain, shared_cache, print)


@pytest.fixture(scope="module")
def onnx_models(ort_env: Toolchain) -> Path:
    return exported_by(ort_env, MODELS / "make_onnx_models.py", "onnx-models")


def converted_ops() -> set[str]:
    """The op types of worker/onnx_ops.py's OPS table (read, not imported: it needs TensorFlow)."""
    tree = ast.parse((WORKER_DIR / "onnx_ops.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "OPS":
            assert isinstance(node.value, ast.Dict)
            return {
                k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
    raise AssertionError("no OPS table in onnx_ops.py")


def test_every_converted_op_matches_onnx_runtime(
    ort_env: Toolchain, onnx_models: Path, tmp_path: Path
) -> None:
    result = tmp_path / "result.json"
    work = tmp_path / "work"
    work.mkdir()
    run_in_toolchain(
        ort_env,
        MODELS / "convert_onnx_ops.py",
        WORKER_DIR,
        onnx_models / "ops",
        work,
        result,
        tmp=tmp_path / "tmp",
    )
    answers = json.loads(result.read_text())
    failed = {name: a.get("message") for name, a in answers.items() if not a["ok"]}
    assert not failed
    for name, answer in answers.items():
        assert answer["max_deviation"] <= 1e-5, (name, answer["deviations"])
        assert answer["opset"] in (11, 17, 18, 20) and answer["producer"] == "tfaot-dist-tests"
    # Each op of the table is in at least one graph that ONNX Runtime checked.
    assert converted_ops() - set().union(*(a["op_types"] for a in answers.values())) == set()
    assert answers["TopK"]["outputs"] == [
        {"name": "y0", "dtype": "float32"},
        {"name": "y1", "dtype": "int64"},
    ]


def write_source(root: Path, onnx: Path, **model: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx, root / "model.onnx")
    config = {
        "model": {"name": "onnx_model", "version": "1.0", "onnx": "model.onnx", **model},
        "compilation": {"batch_sizes": [1]},
    }
    (root / "aot_config.yaml").write_text(yaml.safe_dump(config))
    return root / "aot_config.yaml"


@pytest.mark.parametrize(
    "model, node",
    [
        ("unsupported", "node 'det0' (op Det, opset 17): not an op tfaot-dist converts"),
        ("vendor", "node 'gelu0' (op Gelu, opset 1): an op of the vendor domain 'com.microsoft'"),
        (
            "quantized",
            "node 'q0' (op QuantizeLinear, opset 17): a quantized op; export the model in floating point",
        ),
        ("opset10", "node 'relu0' (op Relu, opset 10): opset 10 is outside the opsets converted, 11-21"),
        ("external", "tensor 'w' keeps its data in an external file, which tfaot-dist does not read"),
    ],
)
def test_check_and_add_model_refuse_an_unconverted_node(
    run: Cli, onnx_models: Path, tmp_path: Path, cache: Path, registry: Path, model: str, node: str
) -> None:
    config = write_source(tmp_path / "local", onnx_models / f"{model}.onnx")
    assert node in run.error("check", config, expect=INVALID_INPUT)
    repo = DataRepo(tmp_path / "repo")
    write_source(repo.work / model, onnx_models / f"{model}.onnx")
    repo.commit()
    before = snapshot(cache, registry)
    line = run.error(
        "add-model",
        model,
        "--source",
        repo.url,
        "--aot-config",
        f"{model}/aot_config.yaml",
        expect=INVALID_INPUT,
    )
    assert node in line
    assert snapshot(cache, registry) == before


def test_symbolic_dimension_is_refused_until_model_dims_fixes_it(
    run: Cli, onnx_models: Path, tmp_path: Path
) -> None:
    config = write_source(tmp_path / "open", onnx_models / "symbolic.onnx")
    line = run.error("check", config, expect=INVALID_INPUT)
    assert "input 'x' dimension 1 is symbolic ('n_part')" in line and "model.dims: {n_part: VALUE}" in line
    fixed = write_source(tmp_path / "fixed", onnx_models / "symbolic.onnx", dims={"n_part": 5})
    out, _ = run("check", fixed, "--json")
    answer = json.loads(out)
    assert answer["signature"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [5, 4]}]


def read_floats(path: Path) -> list[float]:
    values = array.array("f")
    values.frombytes(path.read_bytes())
    return list(values)


@pytest.mark.slow
def test_add_model_and_build_match_onnx_runtime_on_the_original(
    run: Cli, onnx_models: Path, ort_env: Toolchain, tmp_path: Path, cache: Path, registry: Path
) -> None:
    repo = DataRepo(tmp_path / "repo")
    onnx = onnx_models / "two_inputs.onnx"
    config = write_source(repo.work / "tagger", onnx)
    data = yaml.safe_load(config.read_text())
    data["compilation"]["batch_sizes"] = [1, 3, 32]
    config.write_text(yaml.safe_dump(data))
    repo.commit()
    run("add-model", "tagger", "--source", repo.url, "--aot-config", "tagger/aot_config.yaml")
    _, err = run("build", "--all", "--dist", tmp_path / "dist")
    assert "verified tfaot-model-tagger against ONNX Runtime on model.onnx" in err
    root = tmp_path / "dist" / "tfaot-model-tagger-1.0"
    manifest = json.loads((root / "manifest.json").read_text())
    source = manifest["source"]
    assert source["onnx_sha256"] == sha256_file(onnx) == manifest["digests"]["onnx"]
    assert source["onnx_opset"] == "17" and source["onnx_producer"] == "tfaot-dist-tests"
    assert {"1", "3", "32"} <= set(source["onnx_runtime_verified_batch_sizes"].split(","))
    levels = manifest["compilation"]["cpu_levels"]
    assert source["onnx_runtime_verified_cpu_levels"] == ",".join(levels) and levels
    assert [t["name"] for t in manifest["signature"]["inputs"]] == ["seq", "x"]

    # Independently of the build's own check: the package, linked into the harness, run at 1, 3 and 32 on
    # the reference inputs, against ONNX Runtime's outputs on the original file for the same inputs.
    parsed = model_manifest(manifest, root / "manifest.json")
    session = Session(Cache(cache), Registry.existing(registry).defaults())
    work = tmp_path / "check"
    (work / "harness").mkdir(parents=True)
    binary = harness.build_harness(root, parsed, session.resolve().runtime, work / "harness", cache)
    cases = [c for c in parsed.reference.cases if c.batch_size in (1, 3, 32)]
    assert [c.batch_size for c in cases] == [1, 3, 32]
    harness.run_harness(
        binary, root / parsed.reference.dir, cases, parsed.compilation.batch_sizes, work / "out"
    )
    signature = parsed.signature
    request = {
        "op": "reference",
        "onnx": str(onnx),
        "cases": [c.to_json() for c in cases],
        "inputs": str(root / parsed.reference.dir),
        "out": str(work / "ort"),
        "input_names": [t.name for t in signature.inputs],
        "input_shapes": [list(t.shape) for t in signature.inputs],
        "input_dtypes": [t.dtype for t in signature.inputs],
        "output_names": [t.name for t in signature.outputs],
    }
    onnx_source._run(ort_env, request, work / "request", "ONNX Runtime reference")
    for case in cases:
        for k, _ in enumerate(signature.outputs):
            ort = read_floats(work / "ort" / case.dir / f"output_{k}.bin")
            aot = read_floats(work / "out" / f"bs{case.batch_size}" / f"flat_output_{k}.bin")
            assert len(aot) == len(ort) == 3 * case.batch_size
            assert max(abs(a - b) for a, b in zip(aot, ort)) <= 1e-5


def test_config_fields_of_an_onnx_source(tmp_path: Path) -> None:
    """model.onnx and model.dims as the loader reads them (no TensorFlow)."""
    (tmp_path / "m.onnx").write_bytes(b"not read here")

    def load(model: dict[str, object]) -> str:
        path = tmp_path / "aot_config.yaml"
        config = {"model": {"name": "m", "version": "1", **model}, "compilation": {"batch_sizes": [1]}}
        path.write_text(yaml.safe_dump(config))
        try:
            loaded = load_aot_config(path, within=tmp_path)
        except InvalidInput as exc:
            return str(exc)
        return f"ok {loaded.onnx} {loaded.dims}"

    assert (
        load({"onnx": "m.onnx", "dims": {"n": 4, "a": 2}}) == f"ok {tmp_path / 'm.onnx'} (('a', 2), ('n', 4))"
    )
    assert "give saved_model or onnx, not both" in load({"onnx": "m.onnx", "saved_model": "."})
    assert "ONNX file 'x.onnx' not found" in load({"onnx": "x.onnx"})
    assert "points outside the source tree" in load({"onnx": "../m.onnx"})
    assert "dims name symbolic dimensions of an ONNX file" in load({"dims": {"n": 4}})
    assert "model.dims.n: expected an integer from 1 to 65536, got 0" in load(
        {"onnx": "m.onnx", "dims": {"n": 0}}
    )
    assert "expected an integer" in load({"onnx": "m.onnx", "dims": {"n": True}})
