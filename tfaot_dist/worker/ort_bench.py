"""The ONNX Runtime side of `tfaot-dist bench`: the same SavedModel converted with tf2onnx, run by ONNX Runtime.

Runs inside the ONNX Runtime environment (a toolchain with tf2onnx and
onnxruntime added) as `python -I ort_bench.py REQUEST.json` (standard library,
TensorFlow, tf2onnx, ONNX and ONNX Runtime only, like tf_worker.py) and writes
its answer as JSON to the path named in the request ("result").

Requests ("op"):
  convert   the serving signature (key "serving_key") to ONNX ("onnx", opset "opset") with tf2onnx; each
            Erfc node (Keras 3's exact GELU, which tf2onnx 1.17 does not convert) is first written as
            1 - Erf(x) ("rewrite_erfc": false leaves it); then ONNX Runtime and TensorFlow are fed the same random inputs at "check_batch_sizes"
            and their outputs compared (largest absolute and relative deviation per output; "ok" is false
            when an element is off by more than "tolerance", absolute and relative)
  time      seconds per call for each of "batch_sizes" ("warmup" calls, then the mean of "calls"), inputs
            and outputs bound once (IO binding); and the same for a one-node model ("call_overhead"):
            what one Run() from Python costs whatever the model
  memory    peak RSS (VmHWM), RSS and heap in use of this process holding "instances" sessions, each run
            once at batch size 1 (0: onnxruntime imported, no session)

Sessions are single-threaded (intra- and inter-op threads 1, sequential execution) with every graph
optimisation on. The time and memory requests import neither TensorFlow nor tf2onnx.
Inputs are uniform random numbers in [-2, 2) (integers truncated), as in the other engines.
"""

# Annotations are not evaluated, as in the other workers.
from __future__ import annotations

import ctypes
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The request and the answer: JSON objects. The modules of TensorFlow, tf2onnx, ONNX, ONNX Runtime and
    # NumPy and their objects (sessions, bindings, arrays, GraphDefs) are Any: no types here.
    Json = dict[str, Any]

OPSET = 17


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        req = json.load(f)
    try:
        answer: Json = {"ok": True, **OPS[req["op"]](req)}
    except Exception as exc:  # report, never hang the caller on a traceback
        answer = {
            "ok": False,
            "message": f"{type(exc).__name__}: {exc}".strip(),
            "traceback": traceback.format_exc(),
        }
    tmp = req["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, req["result"])
    return 0


# ---------------------------------------------------------------- convert


def convert(req: Json) -> Json:
    import numpy as np
    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx
    from tf2onnx import tf_loader
    from tf2onnx.convert import _convert_common  # what `python -m tf2onnx.convert` calls

    tf.get_logger().setLevel("ERROR")
    key = req["serving_key"]
    graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
        req["saved_model"],
        None,
        None,
        ["serve"],
        [key],
        return_initialized_tables=True,
        return_tensors_to_rename=True,
    )
    rewritten = {"Erfc": erfc_as_one_minus_erf(tf, graph_def) if req.get("rewrite_erfc", True) else 0}
    opset = req.get("opset", OPSET)
    with tf.device("/cpu:0"):
        _convert_common(
            graph_def,
            name=req["saved_model"],
            opset=opset,
            input_names=inputs,
            output_names=outputs,
            tensors_to_rename=renames,
            initialized_tables=tables,
            output_path=req["onnx"],
        )

    session = make_session(ort, req["onnx"])
    fn = tf.saved_model.load(req["saved_model"], tags=["serve"]).signatures[key]
    specs = fn.structured_input_signature[1]
    deviations: dict[str, dict[str, float]] = {}  # output name -> max_abs, max_rel
    ok = True
    tolerance = req.get("tolerance", 1e-5)
    for bs in req.get("check_batch_sizes", [1, 3]):
        feeds = random_inputs(
            np, {n: (s.dtype.as_numpy_dtype, s.shape.as_list()[1:]) for n, s in specs.items()}, bs, seed=bs
        )
        expected = {n: t.numpy() for n, t in fn(**{n: tf.constant(v) for n, v in feeds.items()}).items()}
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        for name, want in expected.items():
            have = got[name]
            if have.shape != want.shape:
                raise ValueError(
                    f"output {name}, batch size {bs}: ONNX Runtime gave shape {have.shape}, "
                    f"TensorFlow {want.shape}"
                )
            diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
            rel = np.where(want != 0, diff / np.maximum(np.abs(want.astype(np.float64)), 1e-300), 0.0)
            worst = deviations.setdefault(name, {"max_abs": 0.0, "max_rel": 0.0})
            worst["max_abs"] = max(worst["max_abs"], float(diff.max(initial=0.0)))
            worst["max_rel"] = max(worst["max_rel"], float(rel.max(initial=0.0)))
            exact = not np.issubdtype(want.dtype, np.floating)
            bad = diff != 0 if exact else (diff > tolerance) & (rel > tolerance)
            if bad.any() or (np.isnan(have) != np.isnan(want)).any():
                ok = False
    import onnx

    op_types = sorted({n.op_type for n in onnx.load(req["onnx"]).graph.node})
    return {
        "onnx": req["onnx"],
        "opset": opset,
        "rewritten": rewritten,
        "op_types": op_types,
        "outputs_match": ok,
        "tolerance": tolerance,
        "deviations": deviations,
        "versions": versions(ort, tf2onnx, tf),
        "inputs": [
            {"name": i.name, "type": i.type, "shape": [str(d) for d in i.shape]} for i in session.get_inputs()
        ],
    }


def erfc_as_one_minus_erf(tf: Any, graph_def: Any) -> int:
    """Each Erfc node of graph_def (not of its functions) becomes Sub(1, Erf(x)) under its own name; the count."""
    from tensorflow.core.framework import node_def_pb2

    count = 0
    for node in [n for n in graph_def.node if n.op == "Erfc"]:
        dtype = node.attr["T"].type
        data = [i for i in node.input if not i.startswith("^")]
        control = [i for i in node.input if i.startswith("^")]
        erf = node_def_pb2.NodeDef(
            name=f"{node.name}/tfaot_erf", op="Erf", input=data + control, device=node.device
        )
        erf.attr["T"].type = dtype
        one = node_def_pb2.NodeDef(name=f"{node.name}/tfaot_one", op="Const", device=node.device)
        one.attr["dtype"].type = dtype
        one.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(1.0, tf.as_dtype(dtype)))
        node.op = "Sub"
        del node.input[:]
        node.input.extend([one.name, erf.name])
        graph_def.node.extend([erf, one])
        count += 1
    return count


def versions(ort: Any, tf2onnx: Any, tf: Any) -> dict[str, str]:
    import onnx

    return {
        "onnxruntime": ort.__version__,
        "tf2onnx": tf2onnx.__version__,
        "onnx": onnx.__version__,
        "tensorflow": tf.__version__,
    }


# ---------------------------------------------------------------- sessions


def make_session(ort: Any, path: str | bytes) -> Any:  # path: or the serialised model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


NUMPY_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
}


def random_inputs(
    np: Any, specs: dict[str, tuple[Any, list[int]]], batch_size: int, seed: int = 12345
) -> dict[str, Any]:
    """{name: array} of uniform random numbers in [-2, 2) for specs {name: (numpy dtype, shape without batch)}."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}  # name -> numpy array
    for name in sorted(specs):
        dtype, shape = specs[name]
        values = rng.uniform(-2.0, 2.0, size=[batch_size, *shape])
        feeds[name] = values > 0 if np.dtype(dtype) == np.bool_ else values.astype(dtype)
    return feeds


def session_inputs(np: Any, session: Any, batch_size: int, dims: dict[str, int]) -> dict[str, Any]:
    """Random inputs at batch_size; a symbolic dimension other than the batch takes its value from dims
    (the AOT config's model.dims, as the package was compiled)."""
    specs: dict[str, tuple[Any, list[int]]] = {}
    for i in session.get_inputs():
        if i.type not in NUMPY_TYPES:
            raise ValueError(f"input {i.name}: element type {i.type} is not benchmarked")
        specs[i.name] = (NUMPY_TYPES[i.type], [d if isinstance(d, int) else dims[d] for d in i.shape[1:]])
    return random_inputs(np, specs, batch_size)


def bound(ort: Any, np: Any, session: Any, feeds: dict[str, Any]) -> tuple[Any, list[Any]]:
    """An IO binding of session with feeds as inputs and outputs allocated once (shapes from one run)."""
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, feeds)
    binding = session.io_binding()
    keep: list[Any] = []  # the OrtValues must outlive the binding
    for name, value in feeds.items():
        keep.append(ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value)))
        binding.bind_ortvalue_input(name, keep[-1])
    for name, value in zip(names, results):
        keep.append(ort.OrtValue.ortvalue_from_numpy(np.empty_like(value)))
        binding.bind_ortvalue_output(name, keep[-1])
    return binding, keep


def seconds_per_call(session: Any, binding: Any, warmup: int, calls: int) -> float:
    run = session.run_with_iobinding
    for _ in range(warmup):
        run(binding)
    start = time.perf_counter()
    for _ in range(calls):
        run(binding)
    return (time.perf_counter() - start) / max(1, calls)


# ---------------------------------------------------------------- time


def time_model(req: Json) -> Json:
    import numpy as np
    import onnxruntime as ort

    session = make_session(ort, req["onnx"])
    timings: list[Json] = []
    for bs in req["batch_sizes"]:
        binding, _keep = bound(ort, np, session, session_inputs(np, session, bs, req.get("dims") or {}))
        timings.append(
            {
                "batch_size": bs,
                "seconds_per_call": seconds_per_call(session, binding, req["warmup"], req["calls"]),
                "calls": req["calls"],
                "warmup": req["warmup"],
            }
        )
    return {
        "timings": timings,
        "call_overhead": call_overhead(ort, np, req.get("overhead_calls", 20000)),
        "onnxruntime_version": ort.__version__,
    }


def call_overhead(ort: Any, np: Any, calls: int) -> float:
    """Seconds per Run() of a one-node model (y = relu(x), one float), bound like the real models."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "one_node",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    session = make_session(ort, model.SerializeToString())
    binding, _keep = bound(ort, np, session, {"x": np.ones((1, 1), np.float32)})
    return seconds_per_call(session, binding, calls // 10, calls)


# ---------------------------------------------------------------- memory


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def memory(req: Json) -> Json:
    import numpy as np
    import onnxruntime as ort

    sessions: list[Any] = []
    for _ in range(req["instances"]):
        session = make_session(ort, req["onnx"])
        session.run(None, session_inputs(np, session, 1, req.get("dims") or {}))
        sessions.append(session)
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    heap = libc.mallinfo2()
    return {
        "row": {
            "instances": req["instances"],
            "vm_hwm_kb": status_kb("VmHWM"),
            "vm_rss_kb": status_kb("VmRSS"),
            "heap_bytes": heap.uordblks + heap.hblkhd,
        }
    }


OPS: dict[str, Callable[[Json], Json]] = {"convert": convert, "time": time_model, "memory": memory}

if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the answer is on disk: skip TensorFlow's slow teardown
