"""The worker's pooling rewrite (tfaot_dist/worker/pooling_rewrite.py) against TensorFlow's own pooling, in the
toolchain's Python: which nodes it replaces, the counts it returns, and the rewritten graph's numbers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tfaot_dist.toolchain import WORKER_SOURCES, Toolchain, worker_env

TOLERANCE = 1e-6  # the mean of a few floats in another order; max is exact

# Through graph_rewrites.rewrite(), loaded from its file as the worker loads it (not as a package module).
POOLING_SCRIPT = """
import importlib.util, json, sys
import numpy as np
import tensorflow as tf
spec = importlib.util.spec_from_file_location("graph_rewrites", sys.argv[1])
rewrites = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rewrites)
rng = np.random.default_rng(0)
# (op, input shape, window, stride, padding, rewritten?)
CASES = [
    (tf.nn.max_pool1d, (3, 62, 5), 2, 2, "VALID", False),  # 1-D max: reduce_window is as fast
    (tf.nn.avg_pool1d, (3, 31, 5), 2, 2, "VALID", True),  # 31: the last row is read by no window
    (tf.nn.avg_pool1d, (3, 30, 5), 3, 3, "VALID", True),
    (tf.nn.max_pool2d, (2, 14, 14, 6), 2, 2, "VALID", True),
    (tf.nn.max_pool2d, (2, 15, 13, 6), (3, 2), (3, 2), "VALID", True),
    (tf.nn.avg_pool2d, (2, 15, 13, 6), 3, 3, "VALID", True),
    (tf.nn.avg_pool2d, (2, 14, 9, 6), (2, 3), (2, 3), "VALID", True),
    (tf.nn.max_pool3d, (2, 8, 9, 7, 4), 2, 2, "VALID", True),
    (tf.nn.avg_pool3d, (2, 8, 8, 8, 4), 4, 4, "VALID", True),
    (tf.nn.avg_pool3d, (2, 9, 6, 5, 4), (3, 2, 1), (3, 2, 1), "VALID", True),
    (tf.nn.max_pool2d, (2, 14, 14, 6), 3, 2, "VALID", False),  # window != stride: windows overlap
    (tf.nn.avg_pool1d, (3, 31, 5), 2, 1, "VALID", False),
    (tf.nn.max_pool3d, (2, 8, 8, 8, 4), 2, 1, "VALID", False),
    (tf.nn.max_pool2d, (2, 15, 15, 6), 2, 2, "SAME", False),  # SAME: partial windows at the edge
    (tf.nn.avg_pool3d, (2, 9, 8, 8, 4), 2, 2, "SAME", False),
]
for op, shape, window, stride, padding, rewritten in CASES:
    x = rng.normal(size=shape).astype("float32")
    graph = tf.Graph()
    with graph.as_default():
        fed = tf.compat.v1.placeholder(tf.float32, x.shape, name="x")
        tf.identity(op(fed, window, stride, padding), name="pooled")
    graph_def = graph.as_graph_def()
    pools = [n.op for n in graph_def.node if "Pool" in n.op]
    want = tf.compat.v1.Session(graph=graph).run("pooled:0", {"x:0": x})
    _, ops = rewrites.rewrite(tf, graph_def, False, False)
    left = [n.op for n in graph_def.node if "Pool" in n.op]
    rewritten_graph = tf.Graph()
    with rewritten_graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    got = tf.compat.v1.Session(graph=rewritten_graph).run("pooled:0", {"x:0": x})
    worst = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
    case = f"{op.__name__} {shape} window {window} stride {stride} {padding}"
    print(json.dumps({"case": case, "expect": rewritten, "pools": pools, "ops": ops, "left": left, "worst": worst}))
"""


def test_pooling_rewrite_equals_tensorflows_pooling(toolchain: Toolchain, tmp_path: Path) -> None:
    """Max and average pooling, 2-D and 3-D, and 1-D average pooling (a 2-D pooling with a window of 1),
    whose window equals its stride with VALID padding, sizes divisible by the window or not, are rewritten
    with TensorFlow's results (max exactly) and counted per op; 1-D max pooling (as fast as it is),
    overlapping windows and SAME padding stay as they are."""
    script = tmp_path / "pooling.py"
    script.write_text(POOLING_SCRIPT)
    proc = subprocess.run(
        [str(toolchain.python), "-I", str(script), str(WORKER_SOURCES[1])],
        env=worker_env(tmp_path),
        check=True,
        capture_output=True,
        text=True,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == 15, proc.stdout
    assert sum(r["expect"] for r in results) == 9
    for r in results:
        (pool,) = r["pools"]
        assert r["ops"] == ({pool: 1} if r["expect"] else {}), r
        assert r["left"] == ([] if r["expect"] else [pool]), r
        assert r["worst"] <= (0.0 if pool.startswith("Max") else TOLERANCE), r
