"""The Python side of `tfaot-dist bench`: a SavedModel called from Python with TensorFlow.

Runs inside a toolchain environment as `python -I tf_bench.py REQUEST.json`
(standard library, TensorFlow and NumPy only, like tf_worker.py) and writes its
answer as JSON to the path named in the request ("result"):

  signature   input and output tensors of the serving signature in the graph a
              C API session loads (op name and output index), for tf_capi_bench
  weights     number and bytes of the SavedModel's variables
  flops_per_event  floating point operations of one event (batch size 1), as
              TensorFlow's profiler counts them (a matrix product: 2 m n k)
  timings     seconds per call of the signature function for each batch size,
              single-threaded (intra- and inter-op parallelism 1)

Inputs are uniform random numbers in [-2, 2), like the C++ benchmarks.
"""

# Annotations are not evaluated: a release's older Python runs this file too.
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The request and the answer: JSON objects. TensorFlow's objects are Any: no types here.
    Json = dict[str, Any]


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        req = json.load(f)
    try:
        answer: Json = {"ok": True, **run(req)}
    except Exception as exc:  # report, never hang the caller on a traceback
        answer = {"ok": False, "message": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    tmp = req["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, req["result"])
    return 0


def run(req: Json) -> Json:
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    tf.get_logger().setLevel("ERROR")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    key = req["serving_key"]
    meta = saved_model_utils.get_meta_graph_def(req["saved_model"], "serve")
    sig = meta.signature_def[key]

    def tensor(info: Any) -> Json:
        op, _, index = info.name.partition(":")
        return {"op": op, "index": int(index or 0)}

    signature = {
        "inputs": [{"name": n, **tensor(sig.inputs[n])} for n in sorted(sig.inputs)],
        "outputs": [{"name": n, **tensor(sig.outputs[n])} for n in sorted(sig.outputs)],
    }
    loaded = tf.saved_model.load(req["saved_model"], tags=["serve"])
    fn = loaded.signatures[key]
    variables = list(getattr(loaded, "variables", []))
    weights = {"count": len(variables), "bytes": int(sum(v.numpy().nbytes for v in variables))}

    specs = fn.structured_input_signature[1]
    flops = flops_per_event(tf, fn, specs)
    timings: list[Json] = []
    for bs in req.get("batch_sizes", []):
        rng = np.random.default_rng(12345)
        feeds: dict[str, Any] = {}  # name -> tf.Tensor
        for name in sorted(specs):
            spec = specs[name]
            shape = [bs, *spec.shape.as_list()[1:]]
            values = rng.uniform(-2.0, 2.0, size=shape)
            feeds[name] = tf.constant(
                values > 0 if spec.dtype == tf.bool else values.astype(spec.dtype.as_numpy_dtype)
            )
        for _ in range(req["warmup"]):
            fn(**feeds)
        start = time.perf_counter()
        for _ in range(req["calls"]):
            fn(**feeds)
        seconds = (time.perf_counter() - start) / max(1, req["calls"])
        timings.append(
            {"batch_size": bs, "seconds_per_call": seconds, "calls": req["calls"], "warmup": req["warmup"]}
        )
    return {
        "signature": signature,
        "weights": weights,
        "timings": timings,
        "flops_per_event": flops,
        "tensorflow_version": tf.__version__,
    }


def flops_per_event(tf: Any, fn: Any, specs: dict[str, Any]) -> int | None:
    """The profiler's float operation count of the signature traced at batch size 1 (None if unknown)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    one = {name: tf.TensorSpec([1, *spec.shape.as_list()[1:]], spec.dtype) for name, spec in specs.items()}
    concrete = tf.function(lambda **kw: fn(**kw)).get_concrete_function(**one)
    graph = convert_variables_to_constants_v2(concrete).graph
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    total = tf.compat.v1.profiler.profile(graph=graph, options=options).total_float_ops
    return int(total) if total > 0 else None


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the answer is on disk: skip TensorFlow's slow teardown
