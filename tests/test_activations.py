"""Selu and Elu are compiled with TensorFlow's CPU formula (exp(x) - 1 for x < 0), not XLA's expm1.

XLA's translation of both calls expm1, which XLA emits with a division; the
worker rewrites the frozen graph so the compiled code computes what
TensorFlow's own kernels compute. These tests compile the `activations` test
model (Selu and Elu of float32 and float64 inputs, and a Selu between other
ops), then feed it values where formulas part ways (NaN, infinities, signed
zeros, tiny and huge magnitudes, a dense sweep) and compare every output with
TensorFlow's on the same inputs.
"""

import json
import math
import re
import shutil
import subprocess
import sys
from array import array
from pathlib import Path

from conftest import Cli, tensorflow_answers

from tfaot_dist import harness
from tfaot_dist import package as pkg
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.documents import ReferenceCase
from tfaot_dist.toolchain import Toolchain

BATCH = 64  # rows of the special-value case: compiled sizes 1 and 4, stitched
SPECIALS = [
    math.nan,
    math.inf,
    -math.inf,
    0.0,
    -0.0,
    1e-30,
    -1e-30,
    -1e-8,
    1e-8,
    -0.3,
    -0.5,
    -1.0,
    -20.0,
    -87.0,
    -88.5,
    -104.0,
    -200.0,
    -1e30,
    1e30,
    3e38,
    -3e38,
    0.5,
    2.0,
    30.0,
    88.0,
    89.0,
    1000.0,
]
OUTPUTS = ["elu_f32", "elu_f64", "selu_between", "selu_f32", "selu_f64"]  # signature order (sorted)

# Writes TensorFlow's outputs for the inputs the test wrote (d: float64, x: float32; BATCH x 16 each).
TF_SCRIPT = """
import sys
import numpy as np
import tensorflow as tf
case = sys.argv[2]
model = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
d = np.fromfile(case + "/input_0.bin", dtype="<f8").reshape(-1, 16)
x = np.fromfile(case + "/input_1.bin", dtype="<f4").reshape(-1, 16)
out = model(d=tf.constant(d), x=tf.constant(x))
for k, name in enumerate(sorted(out)):
    out[name].numpy().tofile(case + "/output_%d.bin" % k)
"""


def special_inputs() -> list[float]:
    """BATCH * 16 values: the specials, then a sweep of [-12, 3] that crosses 0 and the small-|x| range."""
    count = BATCH * 16 - len(SPECIALS)
    return SPECIALS + [-12.0 + 15.0 * i / (count - 1) for i in range(count)]


def compile_model(run: Cli, test_models: Path, tmp_path: Path, **compilation: object) -> Path:
    cfg = tmp_path / "aot_config.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model": {
                    "name": "activations",
                    "version": "1.0.0",
                    "saved_model": str(test_models / "activations" / "saved_model"),
                },
                "compilation": {"batch_sizes": [1, 4], **compilation},
            }
        )
    )
    out = tmp_path / "out"
    run("compile", "--aot-config", cfg, "--output-directory", out)
    return out / "tfaot-model-activations-1.0.0"


def float_divisions(obj: Path) -> list[str]:
    """The single-precision division instructions of obj (XLA's float64 exp divides in both formulas)."""
    text = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(obj)], check=True, capture_output=True, text=True
    ).stdout
    return [line for line in text.splitlines() if re.search(r"\tv?div(ps|ss) ", line)]


def ulp_close(got: float, want: float, eps: float) -> bool:
    """Same NaN-ness, same infinities, zeros of the same sign, else within a few units in the last place."""
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    if want == 0.0 and got == 0.0:
        return math.copysign(1, got) == math.copysign(1, want)
    return abs(got - want) <= 4 * eps * max(1.0, abs(want))


def test_selu_and_elu_take_tensorflows_formula_and_match_it_on_special_values(
    run: Cli, toolchain: Toolchain, test_models: Path, shared_cache: Path, tmp_path: Path
) -> None:
    root = compile_model(run, test_models, tmp_path, cpu_levels=["x86-64", "x86-64-v3"])
    manifest_json = json.loads((root / "manifest.json").read_text())
    comp = manifest_json["compilation"]
    assert comp["activation_formulas"] == "tensorflow"
    assert comp["rewritten_activations"] == {"Elu": 2, "Selu": 3}
    # No float32 division left: XLA's expm1 is the only op of this model that divides.
    objects = [
        obj for obj in sorted((root / "lib").glob("activations_bs*.o")) if "_constants" not in obj.name
    ]
    assert len(objects) == 4  # 2 batch sizes x 2 levels
    for obj in objects:
        assert float_divisions(obj) == [], obj.name

    # The special values, through TensorFlow and through the package (run() and runFlat()).
    case = tmp_path / "reference" / f"bs{BATCH}"
    values = special_inputs()
    inputs = {  # little-endian on x86-64
        "input_0.bin": array("d", values).tobytes(),
        "input_1.bin": array("f", values).tobytes(),
    }
    saved_model = test_models / "activations" / "saved_model"
    shutil.copytree(tensorflow_answers(toolchain, "activations", TF_SCRIPT, saved_model, inputs), case)

    manifest = pkg.model_manifest(manifest_json, root / "manifest.json")
    runtime = ensure_runtime(toolchain.python, shared_cache, lambda m: print(m, file=sys.stderr))
    program = harness.build_harness(root, manifest, runtime, tmp_path, shared_cache)
    levels = [level for level in ("x86-64", "x86-64-v3") if cpu_target.check_host(level).ok]
    assert levels
    checked = 0
    for level in levels:
        out = tmp_path / "got" / level
        harness.run_harness(
            program,
            tmp_path / "reference",
            [ReferenceCase(batch_size=BATCH, dir=case.name)],
            [1, 4],
            out,
            level,
        )
        for k, name in enumerate(OUTPUTS):
            dtype, eps = ("float64", 2.0**-52) if name.endswith("f64") else ("float32", 2.0**-23)
            want = harness.read_array(case / f"output_{k}.bin", dtype)
            for mode in harness.MODES:
                got = harness.read_array(out / f"bs{BATCH}" / f"{mode}_output_{k}.bin", dtype)
                assert len(got) == len(want) == BATCH * 16
                bad = [
                    (values[i], got[i], want[i])
                    for i in range(len(want))
                    if not ulp_close(got[i], want[i], eps)
                ]
                assert bad == [], f"{level} {name} {mode}: (input, compiled, TensorFlow) {bad[:5]}"
                checked += len(want)
    assert checked == len(levels) * len(OUTPUTS) * len(harness.MODES) * BATCH * 16


def test_xla_formulas_keep_expm1(run: Cli, test_models: Path, tmp_path: Path) -> None:
    """activation_formulas: xla compiles XLA's own translation (expm1, with its division); it verifies too."""
    root = compile_model(run, test_models, tmp_path, cpu_levels=["x86-64"], activation_formulas="xla")
    comp = json.loads((root / "manifest.json").read_text())["compilation"]
    assert comp["activation_formulas"] == "xla"
    assert "rewritten_activations" not in comp
    assert float_divisions(root / "lib" / "activations_bs4.o")
