#!/usr/bin/env bash
# The ONNX zoo (examples/onnx-zoo: PyTorch exports, both exporters) through the whole line, then timed:
#
#   benchmarks/onnx_zoo.sh [FILE.onnx ...]     default: every file of the zoo that converts
#
# Commits each file with an aot_config.yaml (model.onnx; model.dims n_part=16 for the symbolic export;
# batch sizes $SIZES, default 1,3,32) into a git data repository, registers each with `add-model` in a
# registry with this project's defaults (registry/registry.yaml: levels x86-64, v3, v4), builds them all
# with `build --all` (each package verified against TensorFlow on the converted graph and against ONNX
# Runtime on the original file, at every batch size and every level this CPU runs), then runs
# `tfaot-dist bench NAME --engines aot,ort` per model: AOT at the best level against ONNX Runtime on the
# original file (Python API, IO binding, one thread). Results: $OUT/results/NAME.json (default
# _work/onnx-zoo), and one table on stdout (benchmarks/zoo/table.py: us per event per level, ORT/AOT).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-_work/onnx-zoo}
SIZES=${SIZES:-1,3,32}
BENCH_ARGS=${BENCH_ARGS:---warmup 20 --calls 200 --rounds 3 --instances 1}
tool=(.venv/bin/tfaot-dist)
files=("$@")
if [ "${#files[@]}" = 0 ]; then
    for f in examples/onnx-zoo/*.onnx; do
        [[ $f == *nonzero_refused* ]] || files+=("$f")   # NonZero: refused on purpose
    done
fi
rm -rf "$OUT"
mkdir -p "$OUT/data" "$OUT/registry/models" "$OUT/results"
cp registry/registry.yaml "$OUT/registry/"
git -C "$OUT/data" init -q
names=()
for f in "${files[@]}"; do
    base=$(basename "$f" .onnx)                      # e.g. particlenet_like.dynamo
    name=$(echo "onnx-$base" | tr '_.' '--')         # a registry name: onnx-particlenet-like-dynamo
    ident=$(echo "$base" | tr '.' '_')                # the model's C++ name: particlenet_like_dynamo
    mkdir -p "$OUT/data/$base"
    cp "$f" "$OUT/data/$base/model.onnx"
    dims=""
    [[ $base == particlenet_symbolic* ]] && dims=$'\n  dims: {n_part: 16}'
    cat >"$OUT/data/$base/aot_config.yaml" <<EOF
model:
  name: $ident
  version: "1.0"
  onnx: model.onnx$dims
compilation:
  batch_sizes: [$SIZES]
EOF
    names+=("$name:$base")
done
git -C "$OUT/data" add -A
git -C "$OUT/data" -c user.name=bench -c user.email=bench@localhost commit -q -m "ONNX zoo"
for entry in "${names[@]}"; do
    "${tool[@]}" --registry "$OUT/registry" add-model "${entry%%:*}" --source "$(realpath "$OUT/data")" \
        --aot-config "${entry#*:}/aot_config.yaml" >/dev/null
done
"${tool[@]}" --registry "$OUT/registry" build --all --dist "$OUT/dist" 2>&1 | grep -E "verified|error" || true
for entry in "${names[@]}"; do
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    "${tool[@]}" --registry "$OUT/registry" bench "${entry%%:*}" --dist "$OUT/dist" --out "$OUT/results" \
        --engines aot,ort --batch-sizes "$SIZES" --no-plots $BENCH_ARGS >/dev/null
done
.venv/bin/python benchmarks/zoo/table.py "$OUT/results" --batch-sizes "$SIZES"
