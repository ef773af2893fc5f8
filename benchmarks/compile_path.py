"""Compile path: tfaot-dist against one saved_model_cli process per batch size (the upstream chain),
side by side on the same model and machine, interleaved, best of --repeat.

    python benchmarks/compile_path.py [--model study_l12_u128] [--batch-sizes 1,2,4,8] [--repeat 3]

All paths start from the same dynamic-batch SavedModel (examples/make_models.py):

  upstream        one process saves static-batch signatures (as cmsml does), then
                  `saved_model_cli aot_compile_cpu` once per batch size
  in-process      the previous worker: one TensorFlow import, static SavedModel,
                  saved_model_aot_compile per batch size (freeze in a session each)
  worker          tfaot-dist's worker alone (objects + reference outputs), one process
  worker+helpers  the same with tfcompile helper processes on the other cores (jobs=cores)
  build           `tfaot-dist compile`: worker, weights-once packaging, verification
                  against TensorFlow (precompiled headers warm), archive

Prints the seconds and the ratios upstream / path, and the worker's stage times.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tfaot_dist.cache import default_cache
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import ensure_toolchain, run_worker, worker_env

REPO = Path(__file__).resolve().parent.parent

STATIC_SIGNATURES = """
import sys, tensorflow as tf
src, dst, sizes = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
m = tf.saved_model.load(src)
fn = m.signatures["serving_default"]
specs = fn.structured_input_signature[1]
sigs = {}
for bs in sizes:
    s = {k: tf.TensorSpec([bs] + v.shape.as_list()[1:], v.dtype, name=k) for k, v in specs.items()}
    sigs[f"serving_bs{bs}"] = tf.function(lambda **kw: fn(**kw)).get_concrete_function(**s)
tf.saved_model.save(m, dst, signatures=sigs)
"""

# The worker before this change: static SavedModel, then saved_model_aot_compile per size, one import.
IN_PROCESS = (
    STATIC_SIGNATURES
    + """
from tensorflow.python.tools import saved_model_aot_compile as aot, saved_model_utils
import os
out = sys.argv[4]
os.makedirs(out, exist_ok=True)
os.chdir(out)
meta = saved_model_utils.get_meta_graph_def(dst, "serve")
for bs in sizes:
    os.environ.pop("XLA_FLAGS", None)
    aot.aot_compile_cpu_meta_graph_def(checkpoint_path=os.path.join(dst, "variables", "variables"),
        meta_graph_def=meta, output_prefix=f"m_bs{bs}", signature_def_key=f"serving_bs{bs}",
        cpp_class=f"tfaot_model::m_bs{bs}", target_triple="x86_64-pc-linux", target_cpu="")
"""
)


def timed(cmd: list[str], **kw: Any) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="study_l12_u128", help="a model of examples/make_models.py")
    ap.add_argument("--batch-sizes", default="1,2,4,8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    shared = default_cache()
    toolchain = ensure_toolchain(shared, DEFAULT_REQUIREMENTS)
    py = str(toolchain.python)
    times: dict[str, list[float]] = {
        k: [] for k in ("upstream", "in-process", "worker", "worker+helpers", "build")
    }
    stages = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        env = worker_env(tmp / "t")
        (tmp / "t").mkdir()
        subprocess.run(
            [py, "-I", str(REPO / "examples/make_models.py"), str(tmp / "m"), args.model],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        config = tmp / "m" / args.model / "aot_config.yaml"
        config.write_text(config.read_text().replace("[1, 2, 4]", f"[{', '.join(map(str, sizes))}]"))
        saved_model = config.parent / "saved_model"
        for i in range(args.repeat):
            t = timed(
                [
                    py,
                    "-c",
                    STATIC_SIGNATURES,
                    str(saved_model),
                    str(tmp / f"static{i}"),
                    ",".join(map(str, sizes)),
                ],
                env=env,
            )
            for bs in sizes:
                t += timed(
                    [
                        py,
                        "-m",
                        "tensorflow.python.tools.saved_model_cli",
                        "aot_compile_cpu",
                        "--dir",
                        str(tmp / f"static{i}"),
                        "--tag_set",
                        "serve",
                        "--signature_def_key",
                        f"serving_bs{bs}",
                        "--output_prefix",
                        f"up{i}/m_bs{bs}",
                        "--cpp_class",
                        f"tfaot_model::m_bs{bs}",
                    ],
                    env=env,
                    cwd=tmp,
                )
            times["upstream"].append(t)
            times["in-process"].append(
                timed(
                    [
                        py,
                        "-c",
                        IN_PROCESS,
                        str(saved_model),
                        str(tmp / f"ip{i}"),
                        ",".join(map(str, sizes)),
                        str(tmp / f"ipout{i}"),
                    ],
                    env=env,
                )
            )
            for path, jobs in (("worker", 1), ("worker+helpers", len(os.sched_getaffinity(0)))):
                work = tmp / f"{path}{i}"
                (work / "out").mkdir(parents=True)
                start = time.perf_counter()
                answer = run_worker(
                    toolchain,
                    {
                        "op": "compile",
                        "saved_model": str(saved_model),
                        "serving_key": "serving_default",
                        "batch_sizes": sizes,
                        "namespace": "tfaot_model",
                        "class_name": "m",
                        "output_dir": str(work / "out"),
                        "target_triple": "x86_64-pc-linux",
                        "target_cpu": "",
                        "reference_dir": str(work / "ref"),
                        "reference_sizes": sorted(set(sizes) | {3}),
                        "jobs": jobs,
                    },
                    work,
                )
                times[path].append(time.perf_counter() - start)
                stages[path] = answer.get("timings", {})
            # tfaot-dist compile: fresh build cache sharing the warm toolchain, runtime and precompiled headers.
            cache = tmp / f"cache{i}"
            cache.mkdir()
            for name in ("toolchains", "runtime", "abseil", "downloads", "pch"):
                (shared / name).mkdir(parents=True, exist_ok=True)
                (cache / name).symlink_to(shared / name)
            times["build"].append(
                timed(
                    [
                        sys.executable,
                        "-m",
                        "tfaot_dist",
                        "compile",
                        "--aot-config",
                        str(config),
                        "--output-directory",
                        str(tmp / f"out{i}"),
                    ],
                    env={**env, "TFAOT_DIST_CACHE": str(cache), "PATH": "/usr/bin:/bin"},
                )
            )
    best = {k: min(v) for k, v in times.items()}
    print(
        f"model {args.model}, batch sizes {sizes}, best of {args.repeat} (interleaved), load {os.getloadavg()}"
    )
    for path, seconds in best.items():
        print(f"  {path:15} {seconds:7.2f} s   upstream / {path}: {best['upstream'] / seconds:5.2f}")
    for path, st in stages.items():
        print(f"  {path} stages (last run): " + ", ".join(f"{k} {v:.2f}" for k, v in st.items()))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"model": args.model, "batch_sizes": sizes, "times": times, "best": best, "stages": stages},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
