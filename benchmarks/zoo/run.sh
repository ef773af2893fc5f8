#!/usr/bin/env bash
# The architecture zoo and the study models at benchmark size through `tfaot-dist bench`, one run per model:
#
#   benchmarks/zoo/run.sh [MODEL ...]        default: every architecture of examples/make_zoo.py,
#                                             then the study models study_l12_u128 and study_l12_u256
#
# Makes each zoo model with `examples/make_zoo.py --size bench` (Keras of the
# registry's toolchain) and each study model with `examples/make_models.py`,
# for the compiled batch sizes $SIZES (default 1, 2, 4, ..., 256; a model may
# name its own in $SIZES_<model>, e.g. SIZES_particlenet=1,4,32), then runs
# `tfaot-dist bench` on its aot_config.yaml: the package is built at the
# registry's CPU levels (registry/registry.yaml: x86-64, v3, v4) and timed at
# the best level this CPU runs and at each lower one, against the TensorFlow C
# API, ONNX Runtime and the Python call, at batch sizes $BENCH_SIZES (default
# $SIZES); memory of 1 and 4 instances. Results (JSON, PNG) go to $OUT/results
# (default _work/zoo); `python benchmarks/zoo/table.py $OUT/results` prints
# them as one table.
#
# BENCH_ARGS replaces the bench options (default: 20 warm-up and 100 timed
# calls, best of 3 rounds, 1 and 4 instances). Models and bench sizes:
# examples/make_zoo.py's docstring. Every figure names its CPU level: the
# JSON's "cpu_level" of each AOT row.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-_work/zoo}
SIZES=${SIZES:-1,2,4,8,16,32,64,128,256}
BENCH_SIZES=${BENCH_SIZES:-$SIZES}
BENCH_ARGS=${BENCH_ARGS:---warmup 20 --calls 100 --rounds 3 --instances 1,4}
models=("$@")
[ "${#models[@]}" -gt 0 ] || models=(deepjet deeptau deeptau_small particlenet transformer gru_tagger regression64 conv3d pooling
                                     recurrent study_l12_u128 study_l12_u256)
mkdir -p "$OUT/models" "$OUT/results"
py=$(python -m tfaot_dist toolchain --python)
for m in "${models[@]}"; do
    sizes_var="SIZES_$m"
    sizes=${!sizes_var:-$SIZES}
    if [[ $m == study_* ]]; then
        "$py" -I examples/make_models.py "$OUT/models" "$m" >/dev/null
        sed -i "s/^  batch_sizes: .*/  batch_sizes: [$sizes]/" "$OUT/models/$m/aot_config.yaml"
    else
        "$py" -I examples/make_zoo.py "$OUT/models" --size bench --batch-sizes "$sizes" "$m" >/dev/null
    fi
done
for m in "${models[@]}"; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    python -m tfaot_dist bench "$OUT/models/$m/aot_config.yaml" --dist "$OUT/dist" --out "$OUT/results" \
        --batch-sizes "$BENCH_SIZES" $BENCH_ARGS
    echo "$m: $(( $(date +%s) - start )) s (compile and bench)"
done
echo "results in $OUT/results"
