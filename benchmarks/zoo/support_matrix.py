"""Which models work: every zoo model (examples/make_zoo.py, test size) exported with each Keras and compiled
with each TensorFlow, measured.

    python benchmarks/zoo/support_matrix.py [--out DIR] [--combo K3-TF2.21 ...] [MODEL ...]

Combinations (Keras that exports, TensorFlow that compiles): K3-TF2.21 (keras 3, the default toolchain),
K2-TF2.21 (tf_keras 2.21 in an environment of its own), K2-TF2.12 (tf.keras of TensorFlow 2.12; Keras 3
does not run on 2.12). Each model is compiled with `tfaot-dist compile` for batch sizes 1 and 2 at CPU level
x86-64 with verification against TensorFlow, which is what "works" means here. Writes DIR/matrix.json and
prints a Markdown table: "ok (max abs deviation)" or the one error line, and the compile time.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tfaot_dist.cache import default_cache
from tfaot_dist.toolchain import ensure_toolchain, worker_env

REPO = Path(__file__).resolve().parents[2]
# combination -> (requirements of the exporting environment, Keras major, TensorFlow that compiles)
COMBOS = {
    "K3-TF2.21": (("tensorflow-cpu==2.21.0",), 3, "tensorflow-cpu==2.21.0"),
    "K2-TF2.21": (("tensorflow-cpu==2.21.0", "tf-keras==2.21.0"), 2, "tensorflow-cpu==2.21.0"),
    "K2-TF2.12": (("tensorflow-cpu==2.12.0",), 2, "tensorflow-cpu==2.12.0"),
}
MODELS = [
    "rnn_lstm",
    "rnn_gru",
    "rnn_simple",
    "rnn_stacked",
    "rnn_bidirectional",
    "rnn_sequences",
    "rnn_masking",
    "recurrent",
    "deepjet",
    "deeptau",
    "deeptau_small",
    "particlenet",
    "transformer",
    "gru_tagger",
    "regression64",
    "conv3d",
    "pooling",
]


def export(combo: str, models: list[str], out: Path) -> None:
    requirements, keras, _ = COMBOS[combo]
    toolchain = ensure_toolchain(default_cache(), requirements, lambda m: print(m, file=sys.stderr))
    tmp = out / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            str(toolchain.python),
            "-I",
            str(REPO / "examples" / "make_zoo.py"),
            str(out),
            "--keras",
            str(keras),
            "--batch-sizes",
            "1,2",
            *models,
        ],
        env=worker_env(tmp),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def compile_one(combo: str, model_dir: Path, out: Path) -> dict[str, Any]:
    registry = out / "registry"
    registry.mkdir(parents=True, exist_ok=True)
    (registry / "registry.yaml").write_text(f'toolchain:\n  requirements: ["{COMBOS[combo][2]}"]\n')
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfaot_dist",
            "--registry",
            str(registry),
            "compile",
            "--aot-config",
            str(model_dir / "aot_config.yaml"),
            "--output-directory",
            str(out / "packages"),
            "--cpu-levels",
            "x86-64",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
        check=False,
    )
    seconds = round(time.perf_counter() - start, 1)
    if proc.returncode != 0:
        errors = [
            ln for ln in proc.stderr.splitlines() if ln.startswith("tfaot-dist: error:")
        ] or proc.stderr[-300:]
        return {"ok": False, "seconds": seconds, "error": errors[0] if isinstance(errors, list) else errors}
    package = Path(json.loads(proc.stdout)["dir"])
    manifest = json.loads((package / "manifest.json").read_text())
    deviation = max(o["max_abs"] for o in manifest["verification"]["outputs"].values())
    return {
        "ok": True,
        "seconds": seconds,
        "max_abs": deviation,
        "tensorflow": manifest["toolchain"]["tensorflow_version"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--out", type=Path, default=Path("_work/support-matrix"))
    parser.add_argument("--combo", action="append", choices=list(COMBOS))
    args = parser.parse_args(argv)
    out = args.out.absolute()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for combo in args.combo or list(COMBOS):
        models_dir = out / combo / "models"
        export(combo, args.models, models_dir)
        for model in args.models:
            row = compile_one(combo, models_dir / model, out / combo)
            results.setdefault(model, {})[combo] = row
            print(f"{combo} {model}: {row}", file=sys.stderr)
            (out / "matrix.json").write_text(json.dumps(results, indent=1))
    combos = args.combo or list(COMBOS)
    print("| model | " + " | ".join(combos) + " |")
    print("|---|" + "---|" * len(combos))
    for model, row in results.items():
        cells = [
            f"ok ({r['max_abs']:.0e}, {r['seconds']} s)" if r["ok"] else f"**no**: {r['error']}"
            for r in (row[c] for c in combos)
        ]
        print(f"| {model} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
