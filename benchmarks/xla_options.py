"""XLA options: what target_cpu and xla_flags change in per-event time, side by side in one run.

    python benchmarks/xla_options.py [--model study_l12_u128] [--batch-sizes 1,8,64,512] [--calls 200]

Each variant is compiled (and verified against TensorFlow, as every build) for
batch sizes 1, 8, 64, 512 and timed with the AOT benchmark program; the timing
runs of all variants alternate, twice, the faster kept. Variants the host CPU
cannot run are skipped (tfaot_dist.dist.cpu_target).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tfaot_dist import builder
from tfaot_dist.cache import Cache
from tfaot_dist.cli import default_cache
from tfaot_dist.config import load_aot_config
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.dist import cpu_target
from tfaot_dist.perf import bench
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.session import Session
from tfaot_dist.toolchain import ensure_toolchain, worker_env

REPO = Path(__file__).resolve().parent.parent

VARIANTS = {
    "generic": ("", []),
    "x86-64-v3": ("x86-64-v3", []),
    "x86-64-v4": ("x86-64-v4", []),
    "x86-64-v4, 512-bit vectors": ("x86-64-v4", ["--xla_cpu_prefer_vector_width=512"]),
    "znver4 (this host)": ("znver4", []),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="study_l12_u128")
    ap.add_argument("--batch-sizes", default="1,8,64,512")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sizes = args.batch_sizes
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = ensure_runtime(toolchain.python, cache)
    results = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "t").mkdir()
        subprocess.run([str(toolchain.python), "-I", str(REPO / "examples/make_models.py"), str(tmp / "m"),
                        args.model], env=worker_env(tmp / "t"), check=True, stdout=subprocess.DEVNULL)
        base = load_aot_config(tmp / "m" / args.model / "aot_config.yaml")
        programs = {}
        for label, (cpu, flags) in VARIANTS.items():
            check = cpu_target.check_host(cpu)
            if not check.ok:
                print(f"skip {label}: {check.message}")
                continue
            cfg = tmp / f"v{len(programs)}.yaml"
            cfg.write_text(json.dumps({
                "model": {"name": args.model, "version": "1.0.0", "saved_model": str(base.saved_model)},
                "compilation": {"batch_sizes": [int(s) for s in sizes.split(",")], "target_cpu": cpu,
                                "xla_flags": flags}}))
            package = builder.compile_config(cfg, tmp / f"dist{len(programs)}", Session(Cache(cache), log=lambda m: None))
            work = tmp / f"w{len(programs)}"
            work.mkdir()
            programs[label] = bench.build_aot_program(bench.Target(package.root, None), runtime, cache, work)
            print(f"compiled and verified: {label}", flush=True)
        for _ in range(2):
            for label, program in programs.items():
                rows = bench._json_lines([str(program), "time", str(args.warmup), str(args.calls),
                                          *sizes.split(",")], None, label)
                best = results.setdefault(label, {})
                for r in rows:
                    us = r["seconds_per_call"] / r["batch_size"] * 1e6
                    best[r["batch_size"]] = min(us, best.get(r["batch_size"], us))
    print("per-event time [us]  " + "".join(f"{'bs ' + s:>10}" for s in sizes.split(",")))
    for label, row in results.items():
        ref = results["generic"]
        print(f"{label:27}" + "".join(f"{row[bs]:7.2f}({ref[bs] / row[bs]:.2f}x)" for bs in sorted(row)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
