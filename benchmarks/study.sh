#!/usr/bin/env bash
# The AOT vs TensorFlow study (CMS, feed-forward toy models), reproduced in full:
#
#   benchmarks/study.sh [MODEL ...]          default: all four study models
#
# For each model (12/25 layers x 128/256 units, BatchNorm, SELU) it compiles a
# package for every power of two up to $MAX_BS, then runs `tfaot-dist bench`
# with the study's protocol (100 warm-up + 500 timed calls, batch sizes 2^0..2^10,
# single thread; memory of 1, 4 and 12 instances) against the TensorFlow C API
# and the Python call, and tunes the batch rules of a 1,2,4 package (targets
# 1-64, report only). Then the compile-path and weights-once benchmarks.
# Results (JSON, PNG) go to $OUT (default _work/study/results).
#
# Takes about an hour on a 2-core machine. BENCH_ARGS adds bench options,
# e.g. BENCH_ARGS="--calls 100 --rounds 2".
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-_work/study}
MAX_BS=${MAX_BS:-1024}
models=("$@")
[ "${#models[@]}" -gt 0 ] || models=(study_l12_u128 study_l12_u256 study_l25_u128 study_l25_u256)
mkdir -p "$OUT/models" "$OUT/results"
py=$(python -m tfaot_dist toolchain --python)
"$py" -I examples/make_models.py "$OUT/models" "${models[@]}" >/dev/null

sizes=1; bs=2
while [ "$bs" -le "$MAX_BS" ]; do sizes="$sizes, $bs"; bs=$((bs * 2)); done
for m in "${models[@]}"; do
    cfg="$OUT/models/$m/aot_config_all.yaml"
    sed "s/batch_sizes: \[1, 2, 4\]/batch_sizes: [$sizes]/" "$OUT/models/$m/aot_config.yaml" > "$cfg"
    # shellcheck disable=SC2086
    python -m tfaot_dist bench "$cfg" --dist "$OUT/dist" --out "$OUT/results" ${BENCH_ARGS:-}
done

# Batch rules of the usual small package (1, 2, 4) of the first model: what tuning would set.
python -m tfaot_dist bench "$OUT/models/${models[0]}/aot_config.yaml" --dist "$OUT/dist-small" \
    --out "$OUT/results/small" --engines aot ${BENCH_ARGS:-}
python -m tfaot_dist tune "$OUT/dist-small/tfaot-model-${models[0]//_/-}-1.0.0" --targets 1-64 \
    --out "$OUT/results/small"

python benchmarks/compile_path.py --model "${models[0]}" --json "$OUT/results/compile_path.json"
python benchmarks/weights_once.py --model "${models[0]}" --json "$OUT/results/weights_once.json"
echo "results in $OUT/results"
