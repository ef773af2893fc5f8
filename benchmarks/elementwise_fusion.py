"""Is XLA's fused elementwise loop (ELU, BatchNormalization) vectorized, and what does it cost? (issue 39)

    python benchmarks/elementwise_fusion.py [--channels 16,24,32,64] [--variant NAME ...]
                                            [--flags LABEL ...] [--batch-size 32] [--target-cpu x86-64-v4]
                                            [--calls 200] [--rounds 3] [--json OUT] [--keep DIR]

The graphs are benchmarks/elementwise_models.py's (activation and/or inference BatchNormalization over
a [batch, 21, 21, C] float input). Each (variant, C) is compiled as `tfaot-dist compile` does it
(builder.compile_config: the worker's freezing and activation rewrites, tfcompile, verification against
TensorFlow) at one batch size and target CPU. Variant elu_bn is compiled again with each set of XLA
flags of FLAGS (--flags picks some). For each compile it reports:

  vector  instructions of the package's fusion symbols (objdump -d of its archive) on zmm / ymm / xmm
          registers as packed (ps) operations, and scalar (ss) operations: a vectorized loop has
          packed zmm/ymm arithmetic, a scalarized one vmovss/vaddss or xmm with masks
  time    per element (batch * 21 * 21 * C) of the whole compiled function, the AOT benchmark
          program's fastest of ROUNDS (its graph is the fusion alone, plus the call)
  rewritten  the ops the worker rewrote (the manifest's rewritten_ops: ScaleShift, a BN folded)
  dev     largest deviation from TensorFlow found by the compile's verification, plus the
          formula's own deviation from tf.nn.elu for the rewritten ELUs
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfaot_dist import builder
from tfaot_dist.cache import Cache, default_cache
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.perf import bench
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.session import Session
from tfaot_dist.toolchain import ensure_toolchain, worker_env

HERE = Path(__file__).resolve().parent
GRID = 21
ALONE = [
    "bn",
    "bn0",
    "elu",
    "elu_bn",
    "elu_bn0",
    "relu_bn",
    "eluclamp_bn",
    "elumaxmin_bn",
    "eluclampmaxmin_bn",
]
# the same after a 3x3 Conv2D (the runtime's convolution call), as in deeptau_small; "conv" is their baseline
# and between two of them (conv_V_conv, as in deeptau_small)
VARIANTS = (
    ALONE
    + ["conv"]
    + ["conv_" + v for v in ALONE]
    + ["conv_conv"]
    + ["conv_" + v + "_conv" for v in ALONE[3:]]
    + ["conv_bnrelu", "dense", "dense_bn", "dense_bnrelu"]  # what the worker folds (scale_folding.py)
)
FAST = "--xla_cpu_enable_fast_math=true"
# label -> XLA flags, each compiled with variants elu_bn and conv_elu_bn
FLAGS: dict[str, list[str]] = {
    "fast math": [FAST],
    "fast math, no NaN/inf": [
        FAST,
        "--xla_cpu_fast_math_honor_nans=false",
        "--xla_cpu_fast_math_honor_infs=false",
    ],
    "fast math, all loose": [
        FAST,
        "--xla_cpu_fast_math_honor_nans=false",
        "--xla_cpu_fast_math_honor_infs=false",
        "--xla_cpu_fast_math_honor_functions=false",
        "--xla_cpu_fast_math_honor_division=false",
    ],
    "512-bit vectors": ["--xla_cpu_prefer_vector_width=512"],
    "old fusion emitters": ["--xla_cpu_use_fusion_emitters=false"],
    "thunk runtime": ["--xla_cpu_use_thunk_runtime=true"],
    "no thunk runtime": ["--xla_cpu_use_thunk_runtime=false"],
}
PACKED = re.compile(r"\bv\w*p[sd]\b")  # vaddps, vfmadd213ps, vmovups, vmaxps, ...
SCALAR = re.compile(r"\bv\w*s[sd]\b")  # vmovss, vaddss, vfmadd231ss, ...


def fusion_code(archive: Path) -> dict[str, int]:
    """Counts of packed zmm / ymm / xmm and scalar instructions in the archive's fusion functions."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(archive)], capture_output=True, text=True, check=True
    ).stdout
    counts = {"zmm": 0, "ymm": 0, "xmm": 0, "scalar": 0, "fusions": 0}
    inside = False
    for line in out.splitlines():
        if line.endswith(">:"):  # a symbol's first line: 0000... <name>:
            inside = "fusion" in line
            counts["fusions"] += inside
            continue
        if not inside or "\t" not in line:
            continue
        insn = line.split("\t", 1)[1]
        if SCALAR.search(insn):
            counts["scalar"] += 1
        elif PACKED.search(insn):
            reg = re.search(r"%([xyz]mm)", insn)
            if reg:
                counts[reg.group(1)] += 1
    return counts


def _compile(
    tmp: Path, name: str, saved_model: Path, compilation: dict[str, Any], cache: Path
) -> tuple[Path, float, dict[str, int]]:
    """The package's root, the verification's largest deviation and the worker's rewritten ops."""
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model": {"name": name, "version": "1.0.0", "saved_model": str(saved_model)},
                "compilation": compilation,
            }
        )
    )
    package = builder.compile_config(cfg, tmp / f"dist_{name}", Session(Cache(cache), log=lambda m: None))
    verification = package.model_manifest.verification
    assert verification is not None  # compile verifies before it writes a package
    deviation = max(o.max_abs for o in verification.outputs.values())
    return package.root, deviation, dict(package.model_manifest.compilation.rewritten_ops)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--channels", default="16,24,32,64")
    ap.add_argument("--variant", action="append", choices=VARIANTS)
    ap.add_argument("--flags", action="append", choices=sorted(FLAGS))
    ap.add_argument("--no-flags", action="store_true", help="no flag variants")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--target-cpu", default="x86-64-v4")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, help="work in DIR and keep it (packages, objects)")
    args = ap.parse_args()
    variants = args.variant or VARIANTS
    flag_sets = {} if args.no_flags else {k: FLAGS[k] for k in (args.flags or FLAGS)}
    channels = [int(c) for c in args.channels.split(",")]
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = ensure_runtime(toolchain.python, cache)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = args.keep or Path(tmp_dir)
        (tmp / "t").mkdir(parents=True, exist_ok=True)
        flagged = ["elu_bn", "conv_elu_bn"]
        needed = sorted(set(variants) | (set(flagged) if flag_sets else set()))
        maker = [str(toolchain.python), "-I", str(HERE / "elementwise_models.py"), str(tmp / "m")]
        made = subprocess.run(
            [*maker, args.channels, ",".join(needed)],
            env=worker_env(tmp / "t"),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        formula_dev = {r["variant"]: r["formula_deviation"] for r in map(json.loads, made.splitlines()) if r}
        runs: list[tuple[str, str, list[str]]] = [(v, "", []) for v in variants] + [
            (v, k, f) for v in flagged for k, f in flag_sets.items()
        ]
        rows: list[dict[str, Any]] = []
        programs: dict[int, Path] = {}
        for variant, label, flags in runs:
            for c in channels:
                name = f"{variant}_c{c}" + (f"_f{list(FLAGS).index(label)}" if label else "")
                row: dict[str, Any] = {"variant": variant, "flags": label, "channels": c}
                rows.append(row)
                compilation: dict[str, Any] = {
                    "batch_sizes": [args.batch_size],
                    "target_cpu": args.target_cpu,
                }
                if flags:
                    compilation["xla_flags"] = flags
                try:
                    root, dev, row["rewritten"] = _compile(
                        tmp, name, tmp / "m" / f"{variant}_c{c}" / "saved_model", compilation, cache
                    )
                except Exception as e:  # a flag tfcompile rejects: recorded, the study goes on
                    row["error"] = (
                        str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                    )
                    print(f"{name}: not compiled: {row['error']}", flush=True)
                    continue
                row["deviation"] = dev + formula_dev.get(variant, 0.0)
                row["code"] = fusion_code(next((root / "lib").glob("*.a")))
                work = tmp / f"w_{name}"
                work.mkdir(exist_ok=True)
                programs[len(rows) - 1] = bench.build_aot_program(
                    bench.Target(root, None), runtime, cache, work
                )
                print(
                    f"{name}: compiled, {row['code']}, deviation {row['deviation']:.2g}, rewritten {row['rewritten']}",
                    flush=True,
                )
        for _ in range(args.rounds):
            for i, program in programs.items():
                r = bench._json_lines(
                    [str(program), "time", str(args.warmup), str(args.calls), str(args.batch_size)],
                    None,
                    str(i),
                )[0]
                elements = args.batch_size * GRID * GRID * rows[i]["channels"]
                ns = r["seconds_per_call"] / elements * 1e9
                rows[i]["ns_per_element"] = min(ns, rows[i].get("ns_per_element", ns))
    print(f"target {args.target_cpu}, batch size {args.batch_size}, best of {args.rounds} rounds")
    print(
        f"{'variant':20}{'flags':24}{'C':>4}{'zmm':>6}{'ymm':>6}{'xmm':>6}{'ss':>6}{'ns/elem':>9}{'us/call':>9}{'dev':>9}"
    )
    for row in rows:
        head = f"{row['variant']:20}{row['flags']:24}{row['channels']:>4}"
        if "error" in row:
            print(head + "  not compiled: " + row["error"][:100])
            continue
        k = row["code"]
        ns = row["ns_per_element"]
        us = ns * args.batch_size * GRID * GRID * row["channels"] / 1e3
        print(
            head
            + f"{k['zmm']:>6}{k['ymm']:>6}{k['xmm']:>6}{k['scalar']:>6}{ns:9.3f}{us:9.1f}{row['deviation']:9.2g}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
