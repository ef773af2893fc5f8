#!/usr/bin/env bash
# The main job on the bundled examples: create a git data repository holding
# the models simple and multi, register both, and build their packages.
# Usage: examples/run_end_to_end.sh [WORK_DIR]   (default ./_work, recreated)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap
WORK="$(realpath -m "${1:-_work}")"
rm -rf "$WORK"
mkdir -p "$WORK"
export PATH="$PWD/.venv/bin:$PATH"

URL="$(python examples/make_data_repo.py "$WORK/data")"
REG=(--registry "$WORK/registry")
tfaot-dist "${REG[@]}" add-model test-simple --source "$URL" --ref main --aot-config simple/aot_config.yaml
tfaot-dist "${REG[@]}" add-model test-multi --source "$URL" --ref main --aot-config multi/aot_config.yaml
tfaot-dist "${REG[@]}" list
tfaot-dist "${REG[@]}" build --all --dist "$WORK/dist"
# A second build finds everything up to date without starting TensorFlow.
tfaot-dist "${REG[@]}" build --all --dist "$WORK/dist"
ls -l "$WORK/dist"
