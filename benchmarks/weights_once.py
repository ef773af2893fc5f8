"""Weights once: model data in a linked program and RSS against the number of compiled batch sizes,
before (every size's _constants.o as tfcompile wrote it) and after (tfaot_dist.cxx.weight_sharing).

    python benchmarks/weights_once.py [--model study_l12_u128] [--sizes 1,2,4,8,16,32]

For k = 1 .. len(sizes) it compiles a package for the first k sizes, links the
AOT benchmark program once against the package (after) and once against the
same package with tfcompile's original headers and constants objects
(before), and reports: bytes of constant buffers in the program (each address
once), the program's file size, and the peak RSS of one model evaluated once
at every compiled size.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfaot_dist import builder
from tfaot_dist.cache import Cache, default_cache
from tfaot_dist.config import load_aot_config
from tfaot_dist.cxx import build_kit
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.perf import bench
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.session import Session
from tfaot_dist.toolchain import ensure_toolchain, run_worker, worker_env

REPO = Path(__file__).resolve().parent.parent


def unshared_copy(package_root: Path, raw: Path, dest: Path, class_name: str, sizes: list[int]) -> Path:
    """The package with tfcompile's own headers and constants objects put back."""
    shutil.copytree(package_root, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    name = manifest["package"]
    for bs in sizes:
        shutil.copyfile(raw / f"{class_name}_bs{bs}.h", dest / "include" / name / f"{class_name}_bs{bs}.h")
        shutil.copyfile(
            raw / f"{class_name}_bs{bs}_constants.o", dest / "lib" / f"{class_name}_bs{bs}_constants.o"
        )
    archive = dest / "lib" / f"lib{name}.a"
    archive.unlink()
    build_kit.archive(archive, sorted((dest / "lib").glob("*.o")))  # as package.py archives a model's objects
    return dest


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="study_l12_u128")
    ap.add_argument("--sizes", default="1,2,4,8,16,32")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    all_sizes = [int(s) for s in args.sizes.split(",")]
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = ensure_runtime(toolchain.python, cache)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "t").mkdir()
        subprocess.run(
            [str(toolchain.python), "-I", str(REPO / "examples/make_models.py"), str(tmp / "m"), args.model],
            env=worker_env(tmp / "t"),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        config_path = tmp / "m" / args.model / "aot_config.yaml"
        config = load_aot_config(config_path)
        weights = None
        for k in range(1, len(all_sizes) + 1):
            sizes = all_sizes[:k]
            package = builder.compile_config(
                config_path,
                tmp / f"dist{k}",
                Session(Cache(cache), log=lambda m: None),
                batch_sizes=tuple(sizes),
            )
            raw = tmp / f"raw{k}"
            (raw / "out").mkdir(parents=True)
            run_worker(
                toolchain,
                {
                    "op": "compile",
                    "saved_model": str(config.saved_model),
                    "serving_key": config.serving_key,
                    "batch_sizes": sizes,
                    "namespace": "tfaot_model",
                    "class_name": config.name,
                    "output_dir": str(raw / "out"),
                    "target_triple": "x86_64-pc-linux",
                    "target_cpu": "",
                },
                raw,
            )
            before_root = unshared_copy(package.root, raw / "out", tmp / f"before{k}", config.name, sizes)
            row: dict[str, Any] = {"batch_sizes": sizes}  # a row of the JSON report
            for label, root in (("before", before_root), ("after", package.root)):
                target = bench.Target(root, config.saved_model)
                work = tmp / f"{label}{k}-work"
                work.mkdir()
                program = bench.build_aot_program(target, runtime, cache, work)
                data = bench.model_data_bytes(program)
                touch = subprocess.run(
                    [str(program), "touch", *map(str, sizes)], check=True, capture_output=True, text=True
                ).stdout
                row[label] = {**data, **json.loads(touch.splitlines()[-1])}
            if weights is None:
                info = bench.run_tf_python(
                    toolchain,
                    bench.Target(package.root, config.saved_model),
                    bench.Protocol(warmup=0, calls=0),
                    tmp / "info",
                    [],
                )
                weights = info["weights"]["bytes"]
            rows.append(row)
            print(
                f"{k} sizes {sizes}: model data before {row['before']['bytes']:>9} after {row['after']['bytes']:>9}"
                f" bytes ({row['after']['bytes'] / weights:.2f} x weights); program before "
                f"{row['before']['binary_bytes']:>9} after {row['after']['binary_bytes']:>9}; peak RSS before "
                f"{row['before']['vm_hwm_kb']} after {row['after']['vm_hwm_kb']} kB",
                flush=True,
            )
    print(f"weights of the SavedModel: {weights} bytes")
    if args.json:
        args.json.write_text(
            json.dumps({"model": args.model, "weights_bytes": weights, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
