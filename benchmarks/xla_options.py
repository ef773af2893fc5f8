"""XLA options: what CPU targets and XLA flags change in per-event time, side by side in one run.

    python benchmarks/xla_options.py [--study targets|small-gemm|elementwise] [--model study_l12_u128]
                                     [--batch-sizes 1,2,4] [--calls 200] [--rounds 3] [--json OUT]
                                     [--variant LABEL ...]

Studies (each a set of variants of the same model):

  targets      generic x86-64, x86-64-v3, x86-64-v4 (also with 512-bit vectors), the host's own name
               (the runtime's Eigen product, from 33 rows on, still picks its own level)
  small-gemm   XLA's tiles for small matrix products (11 rows x 1 vector) against ours (4 x 2, the
               default since it made batch sizes 2-16 faster), and other tile shapes; x86-64-v3
  elementwise  XLA's expm1 in Selu and Elu (before activation_formulas), fast-math variants, the old
               (non-MLIR) fusion emitters, the tiled IR product instead of the runtime's Eigen one;
               x86-64-v3, large batch sizes (the SELU passes between the products)

Each variant is compiled (and verified against TensorFlow, as every build: its largest
deviation is printed) and timed with the AOT benchmark program; the timing runs of all
variants alternate, ROUNDS times, the fastest kept. Variants the host CPU cannot run are
skipped (tfaot_dist.cpu.target).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfaot_dist import builder
from tfaot_dist.cache import Cache, default_cache
from tfaot_dist.config import load_aot_config
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.perf import bench
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.session import Session
from tfaot_dist.toolchain import ensure_toolchain, worker_env

REPO = Path(__file__).resolve().parent.parent
V3 = {"target_cpu": "x86-64-v3"}
TILES = "--xla_backend_extra_options=xla_llvm_ir_gemm_tile_size="  # rows:depth:vectors*vectwidth
FAST_MATH = ["--xla_cpu_enable_fast_math=true"]  # honours NaN, inf, division and functions by default
LOOSE = ["--xla_cpu_fast_math_honor_functions=false", "--xla_cpu_fast_math_honor_division=false"]
NO_NAN_INF = ["--xla_cpu_fast_math_honor_nans=false", "--xla_cpu_fast_math_honor_infs=false"]

# study -> (default batch sizes, {label: compilation keys}); the first variant is the reference.
# study -> (default batch sizes, {label: the compilation settings of a variant})
STUDIES: dict[str, tuple[str, dict[str, dict[str, Any]]]] = {
    "targets": (
        "1,8,64,512",
        {
            "generic": {"cpu_levels": ["x86-64"]},
            "x86-64-v3": V3,
            "x86-64-v4": {"target_cpu": "x86-64-v4"},
            "x86-64-v4, 512-bit vectors": {
                "target_cpu": "x86-64-v4",
                "xla_flags": ["--xla_cpu_prefer_vector_width=512"],
            },
            "znver4 (this host)": {"target_cpu": "znver4"},
        },
    ),
    "small-gemm": (
        "1,2,4,8,16,32,64",
        {
            "XLA's tiles 11:9:1": {**V3, "xla_flags": [TILES + "11:9:1*vectwidth"]},
            "ours 4:8:2 (default)": V3,
            "4:16:2": {**V3, "xla_flags": [TILES + "4:16:2*vectwidth"]},
            "6:16:2": {**V3, "xla_flags": [TILES + "6:16:2*vectwidth"]},
        },
    ),
    "elementwise": (
        "64,256,1024",
        {
            "default": V3,
            "XLA's expm1 in Selu and Elu": {**V3, "activation_formulas": "xla"},
            "fast math": {**V3, "xla_flags": FAST_MATH},
            "fast math, functions, division": {**V3, "xla_flags": FAST_MATH + LOOSE},
            "fast math, all": {**V3, "xla_flags": FAST_MATH + LOOSE + NO_NAN_INF},
            "no platform-dependent math": {
                **V3,
                "xla_flags": ["--xla_cpu_enable_platform_dependent_math=false"],
            },
            "old fusion emitters": {**V3, "xla_flags": ["--xla_cpu_use_fusion_emitters=false"]},
            "tiled IR product, no Eigen": {
                **V3,
                "xla_flags": ["--xla_backend_extra_options=xla_force_enable_experimental_llvm_ir_gemm"],
            },
        },
    ),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", choices=sorted(STUDIES), default="targets")
    ap.add_argument("--model", default="study_l12_u128")
    ap.add_argument("--batch-sizes")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--variant", action="append", help="a label of the study's variants to run (repeat it; default: all)"
    )
    args = ap.parse_args()
    default_sizes, variants = STUDIES[args.study]
    if args.variant:
        wanted = args.variant
        unknown = [w for w in wanted if w not in variants]
        if unknown:
            ap.error(f"unknown variants {unknown}; {args.study} has: {'; '.join(variants)}")
        variants = {label: v for label, v in variants.items() if label in wanted}
    sizes = (args.batch_sizes or default_sizes).split(",")
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = ensure_runtime(toolchain.python, cache)
    results: dict[str, dict[int, float]] = {}  # label -> batch size -> best microseconds per event
    deviations: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "t").mkdir()
        subprocess.run(
            [str(toolchain.python), "-I", str(REPO / "examples/make_models.py"), str(tmp / "m"), args.model],
            env=worker_env(tmp / "t"),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        base = load_aot_config(tmp / "m" / args.model / "aot_config.yaml")
        programs: dict[str, Path] = {}
        for label, compilation in variants.items():
            check = cpu_target.check_host(compilation.get("target_cpu", ""))
            if not check.ok:
                print(f"skip {label}: {check.message}")
                continue
            cfg = tmp / f"v{len(programs)}.yaml"
            cfg.write_text(
                json.dumps(
                    {
                        "model": {
                            "name": args.model,
                            "version": "1.0.0",
                            "saved_model": str(base.saved_model),
                        },
                        "compilation": {"batch_sizes": [int(s) for s in sizes], **compilation},
                    }
                )
            )
            package = builder.compile_config(
                cfg, tmp / f"dist{len(programs)}", Session(Cache(cache), log=lambda m: None)
            )
            verification = package.model_manifest.verification
            assert verification is not None  # compile verifies before it writes a package
            deviations[label] = max(o.max_abs for o in verification.outputs.values())
            work = tmp / f"w{len(programs)}"
            work.mkdir()
            programs[label] = bench.build_aot_program(bench.Target(package.root, None), runtime, cache, work)
            print(
                f"compiled and verified: {label} (largest deviation from TensorFlow {deviations[label]:.2g}, "
                f"tolerance {verification.tolerance:g})",
                flush=True,
            )
        for _ in range(args.rounds):
            for label, program in programs.items():
                rows = bench._json_lines(
                    [str(program), "time", str(args.warmup), str(args.calls), *sizes], None, label
                )
                best = results.setdefault(label, {})
                for r in rows:
                    us = r["seconds_per_call"] / r["batch_size"] * 1e6
                    best[r["batch_size"]] = min(us, best.get(r["batch_size"], us))
    print(f"per-event time [us] (speed-up over the first), best of {args.rounds} rounds")
    print(f"{'':32}" + "".join(f"{'bs ' + s:>16}" for s in sizes))
    ref = next(iter(results.values()))
    for label, row in results.items():
        print(f"{label:32}" + "".join(f"{row[bs]:8.2f} ({ref[bs] / row[bs]:.2f}x)" for bs in sorted(row)))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"study": args.study, "per_event_us": results, "max_abs_deviation": deviations}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
