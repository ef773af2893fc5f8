"""The ONNX Runtime engine of `bench` (perf/ort_engine.py, worker/ort_bench.py): real tf2onnx, real ONNX
Runtime, outputs compared with TensorFlow's own. Kept small: the zoo's transformer at test size (Keras 3's
exact GELU, whose Erfc tf2onnx 1.17 cannot convert), a few calls. `tfaot-dist bench` with the engine is
exercised by test_perf.py's bench test.
"""

import json
from pathlib import Path

import pytest
from test_zoo import exported

from tfaot_dist.perf import ort_engine
from tfaot_dist.toolchain import Toolchain


@pytest.fixture(scope="module")
def transformer(toolchain: Toolchain) -> Path:
    return exported("zoo", "transformer", toolchain) / "saved_model"  # test_zoo.py's export


@pytest.fixture(scope="module")
def ort_env(toolchain: Toolchain, shared_cache: Path) -> Toolchain:
    return ort_engine.environment(toolchain, shared_cache, print)


def test_gelu_model_converts_and_matches_tensorflow(
    ort_env: Toolchain, transformer: Path, tmp_path: Path
) -> None:
    model = ort_engine.convert(ort_env, transformer, "serving_default", tmp_path / "convert")
    c = model.conversion
    assert c["versions"]["onnxruntime"] == "1.31.1" and c["versions"]["tf2onnx"] == "1.17.0"
    assert c["rewritten"]["Erfc"] == 1  # one GELU in the test-size transformer: written as 1 - Erf
    assert c["outputs_match"] and set(c["deviations"]) == {"probs"}
    assert 0 < c["deviations"]["probs"]["max_abs"] < 1e-5  # compared, and close
    assert [i["name"] for i in c["inputs"]] == ["particles"]
    assert "Erf" in c["op_types"] and "Erfc" not in c["op_types"] and "MatMul" in c["op_types"]

    rows, overhead = ort_engine.time_rows(model, [1, 4], 2, 10, tmp_path / "time")
    assert [(r["batch_size"], r["calls"], r["warmup"]) for r in rows] == [(1, 10, 2), (4, 10, 2)]
    assert all(r["seconds_per_call"] > 0 for r in rows)
    # A one-node model's Run() costs less than the transformer's, and is not free.
    assert 0 < overhead < rows[0]["seconds_per_call"]

    empty, one = (ort_engine.memory_row(model, n, tmp_path / f"mem{n}") for n in (0, 1))
    assert empty["instances"] == 0 and one["instances"] == 1
    assert one["vm_hwm_kb"] > empty["vm_hwm_kb"] > 1000 and one["heap_bytes"] > empty["heap_bytes"]


def test_without_the_erfc_rewrite_the_model_is_refused(
    ort_env: Toolchain, transformer: Path, tmp_path: Path
) -> None:
    # What the rewrite is for: tf2onnx 1.17 leaves Erfc unconverted and ONNX Runtime refuses the model.
    work = tmp_path / "plain"
    with pytest.raises(ort_engine.OrtUnavailable, match="Erfc"):
        ort_engine.request(
            ort_env,
            {
                "op": "convert",
                "saved_model": str(transformer),
                "serving_key": "serving_default",
                "onnx": str(tmp_path / "m.onnx"),
                "rewrite_erfc": False,
            },
            work,
        )
    assert json.loads((work / "result.json").read_text())["ok"] is False
