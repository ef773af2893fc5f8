"""ONNX Runtime's own profile of one converted model (run by peer_profiles.py in the ONNX Runtime environment).

    python -I ort_profile.py REQUEST.json

REQUEST: {"onnx", "batch_size", "warmup", "runs", "dims", "out_dir", "result"}. The session has the bench's
options (tfaot_dist/worker/ort_bench.py make_session: one thread, sequential, every optimisation) plus
profiling; inputs are ort_bench's, bound once (IO binding), as the bench times them. The answer (JSON at
"result"): the mean run time, each op type's and the top 10 nodes' share of it (kernel time of the runs
after the warm-up), and the op types of the optimised graph, saved by a second session with the same
options (optimized_model_filepath) to out_dir/optimized.onnx.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections import defaultdict
from typing import Any

# ort_bench.py is a standard-library script too: its sessions' options and inputs are the bench's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tfaot_dist", "worker"))
ort_bench: Any = importlib.import_module("ort_bench")


def options(ort: Any) -> Any:
    """ort_bench.make_session's options: one thread, sequential execution, every graph optimisation."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return opts


def profile(req: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import onnx
    import onnxruntime as ort

    out_dir = req["out_dir"]
    optimized = os.path.join(out_dir, "optimized.onnx")
    saving = options(ort)
    saving.optimized_model_filepath = optimized
    ort.InferenceSession(req["onnx"], saving, providers=["CPUExecutionProvider"])
    graph = onnx.load(optimized).graph
    op_types: dict[str, int] = defaultdict(int)
    for node in graph.node:
        op_types[f"{node.domain or 'ai.onnx'}:{node.op_type}"] += 1

    profiled = options(ort)
    profiled.enable_profiling = True
    profiled.profile_file_prefix = os.path.join(out_dir, "ort_profile")
    session = ort.InferenceSession(req["onnx"], profiled, providers=["CPUExecutionProvider"])
    feeds = ort_bench.session_inputs(np, session, req["batch_size"], req.get("dims") or {})
    binding, _keep = ort_bench.bound(ort, np, session, feeds)
    for _ in range(req["warmup"] + req["runs"]):
        session.run_with_iobinding(binding)
    trace = session.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    return {
        "optimized_op_types": dict(sorted(op_types.items())),
        "trace": trace,
        **shares(events, req["runs"]),
    }


def shares(events: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per op type and per node (top 10): kernel microseconds of the last `runs` model runs and their share
    of those runs' time."""
    model_runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    timed = model_runs[-runs:]
    start = timed[0]["ts"]
    total = sum(e["dur"] for e in timed)
    per_op: dict[str, float] = defaultdict(float)
    per_node: dict[str, float] = defaultdict(float)
    node_op: dict[str, str] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < start:
            continue
        op = e["args"]["op_name"]
        node = e["name"][: -len("_kernel_time")]
        per_op[op] += e["dur"]
        per_node[node] += e["dur"]
        node_op[node] = op
    top = sorted(per_node.items(), key=lambda kv: -kv[1])[:10]
    return {
        "run_us": total / len(timed),
        "ops": [
            {"op": op, "us": us / len(timed), "share": us / total}
            for op, us in sorted(per_op.items(), key=lambda kv: -kv[1])
        ],
        "kernels_share": sum(per_op.values()) / total,
        "top_nodes": [
            {"node": n, "op": node_op[n], "us": us / len(timed), "share": us / total} for n, us in top
        ],
    }


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        req = json.load(f)
    answer = profile(req)
    with open(req["result"], "w") as f:
        json.dump(answer, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
