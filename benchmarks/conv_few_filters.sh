#!/usr/bin/env bash
# Builds benchmarks/conv_few_filters.cc at -march=x86-64-v4 and x86-64-v3 (one thread, -O2 like the runtime)
# against the Eigen of the tfaot-dist runtime cache and runs it over the issue-39 shapes.
#   benchmarks/conv_few_filters.sh            (EIGEN=<dir with Eigen/> to choose the headers)
set -euo pipefail
cd "$(dirname "$0")/.."
EIGEN=${EIGEN:-$(dirname "$(ls -d ~/.cache/tfaot-dist/runtime/*/include/Eigen | head -1)")}
OUT=${OUT:-_work/conv_few_filters}
mkdir -p "$OUT"
for level in x86-64-v4 x86-64-v3; do
    g++ -O2 -std=c++17 -march="$level" -DNDEBUG -DEIGEN_DONT_PARALLELIZE -I"$EIGEN" \
        benchmarks/conv_few_filters.cc -o "$OUT/conv_$level"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)   nproc: $(nproc)   $(grep -m1 'model name' /proc/cpuinfo)"
for level in x86-64-v4 x86-64-v3; do
    echo "== -march=$level"
    for grid in 11 21; do
        for cf in "16 16" "24 24" "32 32" "16 32"; do
            for n in 4 32; do
                "$OUT/conv_$level" "$n" "$grid" "$grid" $cf
            done
        done
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
