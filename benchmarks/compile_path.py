"""Compile path: tfaot-dist (one TensorFlow process per model) against one saved_model_cli
process per batch size (the upstream chain), side by side on the same model and machine.

    python benchmarks/compile_path.py [--batch-sizes 1,2,4] [--repeat 2]

Both paths start from the same dynamic-batch SavedModel (examples/make_models.py
simple). The upstream path first saves static-batch signatures in one process
(as cmsml does) and then runs `saved_model_cli aot_compile_cpu` once per batch
size. Prints the wall times and their ratio.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfaot_dist.cli import default_cache
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import ensure_toolchain, worker_env

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


def timed(cmd, **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="1,2,4")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    toolchain = ensure_toolchain(default_cache(), DEFAULT_REQUIREMENTS)
    py = str(toolchain.python)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        env = worker_env(tmp / "t")
        (tmp / "t").mkdir()
        subprocess.run([py, "-I", str(REPO / "examples/make_models.py"), str(tmp / "m"), "simple"], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = tmp / "m" / "simple" / "aot_config.yaml"
        config.write_text(config.read_text().replace("[1, 2, 4]", f"[{', '.join(map(str, sizes))}]"))
        ours, upstream = [], []
        for i in range(args.repeat):
            # tfaot-dist: fresh build cache (the toolchain is shared and warm for both paths).
            cache = tmp / f"cache{i}"
            cache.mkdir()
            (cache / "toolchains").symlink_to(default_cache() / "toolchains")
            ours.append(timed([sys.executable, "-m", "tfaot_dist", "compile", "--aot-config", str(config),
                               "--output-directory", str(tmp / f"out{i}")],
                              env={**env, "TFAOT_DIST_CACHE": str(cache), "PATH": "/usr/bin:/bin"}))
            t = timed([py, "-c", STATIC_SIGNATURES, str(config.parent / "saved_model"), str(tmp / f"static{i}"),
                       ",".join(map(str, sizes))], env=env)
            for bs in sizes:
                t += timed([py, "-m", "tensorflow.python.tools.saved_model_cli", "aot_compile_cpu",
                            "--dir", str(tmp / f"static{i}"), "--tag_set", "serve",
                            "--signature_def_key", f"serving_bs{bs}", "--output_prefix", f"up{i}/simple_bs{bs}",
                            "--cpp_class", f"tfaot_model::simple_bs{bs}"], env=env, cwd=tmp)
            upstream.append(t)
    best_ours, best_up = min(ours), min(upstream)
    print(f"batch sizes {sizes}, best of {args.repeat}")
    print(f"tfaot-dist compile (one process, incl. reference outputs and packaging): {best_ours:6.2f} s")
    print(f"static signatures + saved_model_cli per batch size:                      {best_up:6.2f} s")
    print(f"ratio upstream / tfaot-dist: {best_up / best_ours:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
