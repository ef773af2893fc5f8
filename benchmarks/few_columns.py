"""Few-column products: the runtime's few_columns kernel against Eigen's general product, side by side.

    python benchmarks/few_columns.py [--rounds 5] [--json OUT]

At batch sizes 2-4 a dense layer whose product XLA hands to the runtime (layers
of more than 128 units) is out[units x n] = weights x inputs with n = the
batch size. Both paths are the shipped code of the runtime part dot_lib_f32
(cxx/runtime_kernels/level_kernels.cc), called through the level's own entry
point: with the inputs as they come (few_columns) and with the inputs given
transposed (the same product, which the kernel leaves to Eigen). Each case runs
12 layers of distinct weights in a row, as a model does, so the weights come
from the caches a model's would; best of --rounds, the paths alternating.
From 6 columns on both paths are Eigen's: those ratios show the noise.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tfaot_dist.cache import default_cache
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import runtime_kernels, xla_runtime
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import ensure_toolchain

PROGRAM = r"""
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" void ENTRY(float* out, const float* lhs, const float* rhs, int64_t m, int64_t n, int64_t k,
                      int transpose_lhs, int transpose_rhs);

int main(int argc, char** argv) {
  const long m = std::atol(argv[1]), n = std::atol(argv[2]), k = std::atol(argv[3]);
  const int rounds = std::atoi(argv[4]), layers = 12, calls = 50;
  std::vector<float> weights(layers * m * k), in(k * n), in_t(k * n), out(m * n), out_t(m * n);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37 * i);
  for (long p = 0; p < k; ++p) {
    for (long j = 0; j < n; ++j) in[p + j * k] = in_t[j + p * n] = std::cos(0.11 * (p + 7 * j));
  }
  double best[2] = {1e30, 1e30};
  for (int r = 0; r < rounds; ++r) {
    for (int transposed = 0; transposed < 2; ++transposed) {
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) {
        for (int l = 0; l < layers; ++l) {
          ENTRY(transposed ? out_t.data() : out.data(), weights.data() + l * m * k, transposed ? in_t.data() : in.data(),
                m, n, k, 0, transposed);
        }
      }
      const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
      best[transposed] = std::fmin(best[transposed], s.count() / calls);
    }
  }
  double diff = 0;
  for (long i = 0; i < m * n; ++i) diff = std::fmax(diff, std::fabs(out[i] - out_t[i]));
  std::printf("{\"few_columns_us\": %.3f, \"eigen_us\": %.3f, \"max_abs_difference\": %.3g}\n", best[0] * 1e6,
              best[1] * 1e6, diff);
  return 0;
}
"""

SHAPES = [(128, 128), (256, 256), (256, 32), (512, 512)]  # (units out, units in)
COLUMNS = [2, 3, 4, 6, 8]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cache = default_cache()
    toolchain = ensure_toolchain(cache, DEFAULT_REQUIREMENTS)
    runtime = xla_runtime.ensure_runtime(toolchain.python, cache)
    [part] = xla_runtime.ensure_parts(runtime, ["dot_lib_f32"], toolchain.python, cache, lambda m: None)
    results = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for level in runtime_kernels.LEVELS:
            if not cpu_target.check_host(level.name).ok:
                print(f"skip {level.name}: this CPU does not run it")
                continue
            src = tmp / f"{level.suffix}.cc"
            src.write_text(PROGRAM.replace("ENTRY", f"tfaot_matmul_f32_{level.suffix}"))
            exe = tmp / level.suffix
            xla_runtime.compile_object(runtime, src, [], exe.with_suffix(".o"))
            xla_runtime.link_consumer(runtime, [exe.with_suffix(".o")], part.objects, exe)
            print(f"{level.name}: per call of 12 layers [us], few_columns / Eigen's product (speed-up)")
            for m, k in SHAPES:
                row = []
                for n in COLUMNS:
                    out = subprocess.run(
                        [str(exe), str(m), str(n), str(k), str(args.rounds)],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                    r = json.loads(out)
                    results[f"{level.name} {m}x{k} n={n}"] = r
                    row.append(
                        f"n={n} {r['few_columns_us']:7.1f} / {r['eigen_us']:7.1f} "
                        f"({r['eigen_us'] / r['few_columns_us']:.2f}x)"
                    )
                print(f"  {m:4}x{k:<4} " + "  ".join(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
