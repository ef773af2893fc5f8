#!/usr/bin/env bash
# The main job on the bundled examples: create a git data repository holding
# the models simple and multi, register both, build their packages, publish
# them to a channel served over HTTP on 127.0.0.1, set them up in a fresh user
# area from there, and build and run a C++ program (examples/consumer) against
# that area that prints the models' outputs next to TensorFlow's.
# Usage: examples/run_end_to_end.sh [WORK_DIR]   (default ./_work, recreated)
# Which tfaot-dist: this checkout's, installed editable into ./.venv by
# scripts/bootstrap; TFAOT_DIST=tfaot-dist (or a path) runs the one you
# installed instead. The first line of output names the one that runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${TFAOT_DIST:-}" ]]; then
  TOOL="$(command -v "$TFAOT_DIST")" || { echo "run_end_to_end.sh: TFAOT_DIST=$TFAOT_DIST: not found" >&2; exit 2; }
else
  scripts/bootstrap
  TOOL="$PWD/.venv/bin/tfaot-dist"
fi
# The tool's own Python (its script's #! line) runs the helpers that import tfaot_dist.
PYTHON="$(sed -n '1s/^#!//p' "$TOOL")"
"$PYTHON" -c 'import tfaot_dist' || { echo "run_end_to_end.sh: $TOOL: its Python $PYTHON has no tfaot_dist" >&2; exit 2; }
echo "run_end_to_end.sh: running $TOOL ($("$TOOL" --version), Python $PYTHON)"
tfaot-dist() { "$TOOL" "$@"; }
python() { "$PYTHON" "$@"; }
WORK="$(realpath -m "${1:-_work}")"
rm -rf "$WORK"
mkdir -p "$WORK"

URL="$(python examples/make_data_repo.py "$WORK/data")"
REG=(--registry "$WORK/registry")
tfaot-dist "${REG[@]}" add-model test-simple --source "$URL" --ref main --aot-config simple/aot_config.yaml
tfaot-dist "${REG[@]}" add-model test-multi --source "$URL" --ref main --aot-config multi/aot_config.yaml
tfaot-dist "${REG[@]}" list
tfaot-dist "${REG[@]}" build --all --dist "$WORK/dist"
# A second build finds everything up to date without starting TensorFlow.
tfaot-dist "${REG[@]}" build --all --dist "$WORK/dist"
ls -l "$WORK/dist"

# Publish every package (the two models and the runtime) into a channel: a plain directory tree.
tfaot-dist publish --channel "$WORK/channel" --dist "$WORK/dist"
# Serve it as any static HTTP server would, on 127.0.0.1; stopped when this script ends.
PORT="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$PYTHON" -m http.server "$PORT" --bind 127.0.0.1 --directory "$WORK/channel" >"$WORK/http-server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT
CHANNEL="http://127.0.0.1:$PORT/"
python - "$CHANNEL" <<'PY'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(sys.argv[1] + "index.json", timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit(f"channel server at {sys.argv[1]} did not start")
PY

# A fresh user area (a CMSSW area would be $CMSSW_BASE): newest versions, with their runtime.
tfaot-dist setup test-simple "test-multi>=1.0,<2" --channel "$CHANNEL" --area "$WORK/area"
tfaot-dist setup --list --area "$WORK/area"

# A user's C++ program against the area: CMake finds the packages under AREA/tfaot.
cmake -S examples/consumer -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/area/tfaot" -DCMAKE_BUILD_TYPE=Release
cmake --build "$WORK/consumer"
"$WORK/consumer/consumer" "$WORK/area/tfaot"
