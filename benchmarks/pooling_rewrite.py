"""Is XLA's code for a tiled pooling faster as a reshape + reduce than as its reduce_window? (issue 39)

    python benchmarks/pooling_rewrite.py [--target-cpu x86-64-v4 ...] [--batch-size 32]
                                         [--calls 200] [--rounds 3] [--keep DIR]

The graphs are benchmarks/pooling_models.py's: each pooling layer of the zoo's `pooling` and `conv3d`
models at bench size, alone, as Keras writes it ("pool") and in the form the worker's pooling rewrite
(tfaot_dist/worker/pooling_rewrite.py) gives it ("reduce"); the toolchain's worker rewrites "pool" too
once that rewrite exists, so run this from a tree without it for the reduce_window side. Each is
compiled as `tfaot-dist compile` does (benchmarks/elementwise_fusion.py's way) at one batch size per
target CPU, and reported with the packed and scalar instructions of the package's code (all of its
functions) and the time per call, the AOT benchmark program's fastest of ROUNDS.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from elementwise_fusion import PACKED, SCALAR, _compile

from tfaot_dist.cache import default_cache
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.perf import bench
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import ensure_toolchain, worker_env

HERE = Path(__file__).resolve().parent
FORMS = ("pool", "reduce", "slices")
CASES = ("maxpool1d", "avgpool1d", "avgpool2d", "maxpool3d", "avgpool3d")


def code(archive: Path) -> dict[str, int]:
    """Counts of packed zmm / ymm / xmm and scalar instructions in the archive's model objects."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(archive)], capture_output=True, text=True, check=True
    ).stdout
    counts = {"zmm": 0, "ymm": 0, "xmm": 0, "scalar": 0}
    for line in out.splitlines():
        insn = line.split("\t", 1)[1] if "\t" in line else ""
        if SCALAR.search(insn):
            counts["scalar"] += 1
        elif PACKED.search(insn):
            reg = re.search(r"%([xyz]mm)", insn)
            if reg:
                counts[reg.group(1)] += 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target-cpu", action="append")
    ap.add_argument("--form", action="append", choices=FORMS, help="default: all")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="work in DIR and keep it (packages, objects)")
    args = ap.parse_args()
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = ensure_runtime(toolchain.python, cache)
    rows: list[dict[str, object]] = []
    programs: dict[int, Path] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = args.keep or Path(tmp_dir)
        (tmp / "t").mkdir(parents=True, exist_ok=True)
        maker = [str(toolchain.python), "-I", str(HERE / "pooling_models.py"), str(tmp / "m")]
        subprocess.run(maker, env=worker_env(tmp / "t"), check=True, capture_output=True)
        for target in args.target_cpu or ["x86-64-v4", "x86-64-v3"]:
            for case in CASES:
                for form in args.form or FORMS:
                    name = f"{case}_{form}_{target.replace('-', '')}"
                    compilation = {"batch_sizes": [args.batch_size], "target_cpu": target}
                    root, dev, _ = _compile(
                        tmp, name, tmp / "m" / f"{case}_{form}" / "saved_model", compilation, cache
                    )
                    rows.append({"target": target, "case": case, "form": form, "dev": dev})
                    rows[-1].update(code(next((root / "lib").glob("*.a"))))
                    work = tmp / f"w_{name}"
                    work.mkdir(exist_ok=True)
                    programs[len(rows) - 1] = bench.build_aot_program(
                        bench.Target(root, None), runtime, cache, work
                    )
                    print(f"{name}: compiled, deviation {dev:.2g}", flush=True)
        for _ in range(args.rounds):
            for i, program in programs.items():
                r = bench._json_lines(
                    [str(program), "time", "20", str(args.calls), str(args.batch_size)], None, str(i)
                )[0]
                us = r["seconds_per_call"] * 1e6
                rows[i]["us"] = min(us, float(rows[i].get("us", us)))  # type: ignore[arg-type]
    print(f"batch size {args.batch_size}, best of {args.rounds} rounds of {args.calls} calls")
    print(
        f"{'target':11}{'case':11}{'form':8}{'zmm':>6}{'ymm':>6}{'xmm':>6}{'ss':>6}{'us/call':>9}{'dev':>9}"
    )
    for row in rows:
        print(
            f"{row['target']:11}{row['case']:11}{row['form']:8}{row['zmm']:>6}{row['ymm']:>6}{row['xmm']:>6}"
            f"{row['scalar']:>6}{row['us']:9.1f}{row['dev']:9.2g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
