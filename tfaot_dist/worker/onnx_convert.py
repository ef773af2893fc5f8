"""An ONNX file as a TensorFlow SavedModel, node by node, keeping the ONNX layout.

Runs inside the ONNX Runtime environment (the TensorFlow toolchain's requirements plus tf2onnx and
onnxruntime, so TensorFlow, onnx and ONNX Runtime) as `python -I onnx_convert.py REQUEST.json` and
writes its answer as JSON to the path named in the request ("result").

Requests ("op"):
  convert    the file as a SavedModel, below
  reference  ONNX Runtime's outputs on the original file for the inputs of a package's reference cases:
             "cases" [{"dir": D, "batch_size": N}] under "inputs" (input_I.bin, raw, in the order of
             "input_names" with "input_shapes" beyond the batch and "input_dtypes"), written as
             OUT/D/output_K.bin (the order of "output_names") under "out"

Convert: "onnx" (the file), "dims" ({symbolic dimension: value}, the batch excepted), "saved_model"
(the directory to write), "check_batch_sizes" (random inputs fed to ONNX Runtime on the original and
TensorFlow on the converted graph at these batch sizes).

Answer: {"ok": true, "opset", "producer", "inputs", "outputs", "deviations", "max_deviation"}; a
model we do not convert: {"ok": false, "refusal": ONE LINE naming the node, its op and opset}, with
nothing written; any other failure {"ok": false, "message", "traceback"}.

The first dimension of every input and output is the batch (dynamic in the signature); every other
dimension is fixed (a symbolic one from "dims"). Each node becomes TensorFlow ops of the same
semantics on tensors in ONNX's layout; convolutions and pools see channels-last only locally.
Shapes computed in the graph (Shape, Gather, Concat, Range...) stay TensorFlow ops: XLA compiles a
fixed batch, where they are constants.
"""

# Annotations are not evaluated, as in the other workers.
from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The modules of TensorFlow, onnx, ONNX Runtime and NumPy and their objects are Any: no types here.
    Json = dict[str, Any]

OPSETS = (11, 21)
QUANTIZED = {
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "ConvInteger",
    "MatMulInteger",
}


class Refused(Exception):
    """The model is not converted: the one line that says which node and why."""


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        req = json.load(f)
    try:
        answer: Json = {"ok": True, **(reference if req.get("op") == "reference" else convert)(req)}
    except Refused as exc:
        answer = {"ok": False, "refusal": str(exc)}
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


# ---------------------------------------------------------------- the model


def convert(req: Json) -> Json:
    import onnx

    # External data is refused, not read: its files are outside the digest that pins the source, and
    # their locations are paths a hostile file chooses.
    model = onnx.load(req["onnx"], load_external_data=False)
    refuse_external_data(model)
    opset = default_opset(model)
    refuse_unconverted(model, opset)
    inputs = [input_spec(v, req.get("dims") or {}) for v in graph_inputs(model.graph)]
    outputs = [output_spec(v) for v in model.graph.output]
    module = build_module(model.graph, opset, inputs)
    deviations = compare_with_ort(req["onnx"], module, inputs, req["check_batch_sizes"])
    save(module, req["saved_model"])
    producer = f"{model.producer_name} {model.producer_version}".strip()
    return {
        "opset": opset,
        "producer": producer,
        "inputs": inputs,
        "outputs": outputs,
        "deviations": deviations,
        # each element off by at most this much, absolute or relative to ONNX Runtime's value
        "max_deviation": max([d["off"] for d in deviations.values()] or [0.0]),
    }


def default_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise Refused("the model imports no opset of the default ONNX domain")


def refuse_external_data(model: Any) -> None:
    import onnx

    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        for attr in node.attribute:
            tensors.extend([attr.t] if attr.HasField("t") else [])
            tensors.extend(attr.tensors)
    for tensor in tensors:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise Refused(
                f"tensor {tensor.name!r} keeps its data in an external file, which tfaot-dist does not read: "
                "save the model with its weights inside (onnx.save(model, PATH, save_as_external_data=False))"
            )


def refuse_unconverted(model: Any, opset: int) -> None:
    """Every node is one we convert, in the default domain, at an opset we know: or one line why not."""
    versions = {entry.domain: entry.version for entry in model.opset_import}
    for node in model.graph.node:
        version = opset if node.domain in ("", "ai.onnx") else versions.get(node.domain, "?")
        where = f"node {node.name or node.output[0]!r} (op {node.op_type}, opset {version})"
        if node.domain not in ("", "ai.onnx"):
            raise Refused(f"{where}: an op of the vendor domain {node.domain!r}, which no converter reads")
        if not OPSETS[0] <= opset <= OPSETS[1]:
            raise Refused(f"{where}: opset {opset} is outside the opsets converted, {OPSETS[0]}-{OPSETS[1]}")
        if node.op_type in QUANTIZED:
            raise Refused(f"{where}: a quantized op; export the model in floating point")
        if node.op_type not in OPS:
            raise Refused(f"{where}: not an op tfaot-dist converts (see docs/how-to/onnx-sources.md)")


def graph_inputs(graph: Any) -> list[Any]:
    """The graph's real inputs (older exporters list initializers among the inputs too)."""
    initialized = {t.name for t in graph.initializer}
    return [v for v in graph.input if v.name not in initialized]


def input_spec(value: Any, dims: dict[str, int]) -> Json:
    """{name, dtype, shape} with the batch None; a symbolic other dimension from dims or refused."""
    from onnx import helper

    tensor = value.type.tensor_type
    shape: list[int | None] = []
    for i, dim in enumerate(tensor.shape.dim):
        if i == 0:
            shape.append(None)
        elif dim.HasField("dim_value"):
            shape.append(int(dim.dim_value))
        elif dim.dim_param in dims:
            shape.append(int(dims[dim.dim_param]))
        else:
            symbol = dim.dim_param or "?"
            raise Refused(
                f"input {value.name!r} dimension {i} is symbolic ({symbol!r}): XLA compiles fixed "
                f"shapes beyond the batch; set model.dims: {{{symbol}: VALUE}} in the AOT config"
            )
    if not shape:
        raise Refused(f"input {value.name!r} is a scalar: inputs need a leading batch dimension")
    return {
        "name": value.name,
        "dtype": helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
        "shape": shape,
    }


def output_spec(value: Any) -> Json:
    """{name, dtype}: an output's shape is what TensorFlow infers (exporters name its dimensions freely)."""
    from onnx import helper

    return {
        "name": value.name,
        "dtype": helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name,
    }


def build_module(graph: Any, opset: int, inputs: list[Json]) -> Any:
    import tensorflow as tf

    OPS_MODULE.load_tensorflow()
    specs = [tf.TensorSpec(i["shape"], i["dtype"], name=i["name"]) for i in inputs]
    names = [i["name"] for i in inputs]
    module = tf.Module()

    def serve(*args: Any) -> Any:
        return run_graph(graph, opset, dict(zip(names, args)))

    module.serve = tf.function(serve, input_signature=specs, autograph=False)
    return module


def run_graph(graph: Any, opset: int, values: dict[str, Any]) -> dict[str, Any]:
    """The graph's outputs by name, each node's TensorFlow ops applied in ONNX's (topological) order."""
    import tensorflow as tf
    from onnx import helper, numpy_helper

    for init in graph.initializer:
        values[init.name] = tf.constant(numpy_helper.to_array(init))
    for node in graph.node:
        args = [values[name] if name else None for name in node.input]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        with tf.name_scope(scope_name(node.name or node.op_type)):
            results = OPS[node.op_type](args, attrs, opset, len(node.output))
        if not isinstance(results, (list, tuple)):
            results = [results]
        for name, result in zip(node.output, results):
            if name:
                values[name] = result
    return {out.name: tf.identity(values[out.name], name=scope_name(out.name)) for out in graph.output}


def scope_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip("._-")
    return cleaned or "node"


def save(module: Any, path: str) -> None:
    import tensorflow as tf

    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})


def compare_with_ort(onnx_path: str, module: Any, inputs: list[Json], batch_sizes: list[int]) -> Json:
    """Per output, the largest absolute and relative deviation of TensorFlow from ONNX Runtime, and
    "off": the largest of each element's smaller one (the package verification's measure)."""
    import numpy as np

    session = ort_session(onnx_path)
    rng = np.random.default_rng(0)
    worst: Json = {}
    for batch in batch_sizes:
        feed = {i["name"]: random_input(rng, i, batch) for i in inputs}
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        got = module.serve(*[feed[i["name"]] for i in inputs])
        for name, want in expected.items():
            have = got[name].numpy()
            if have.shape != want.shape:
                raise ValueError(f"output {name!r}: shape {have.shape} against ONNX Runtime's {want.shape}")
            diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
            big = float(diff.max()) if diff.size else 0.0
            rel_all = diff / np.maximum(np.abs(want.astype(np.float64)), 1e-30)
            rel = float(rel_all.max()) if diff.size else 0.0
            off = float(np.minimum(diff, rel_all).max()) if diff.size else 0.0  # absolute or relative
            row = worst.setdefault(name, {"abs": 0.0, "rel": 0.0, "off": 0.0})
            row["abs"], row["rel"], row["off"] = (
                max(row["abs"], big),
                max(row["rel"], rel),
                max(row["off"], off),
            )
    return worst


def reference(req: Json) -> Json:
    import numpy as np

    session = ort_session(req["onnx"])
    for case in req["cases"]:
        source, out = os.path.join(req["inputs"], case["dir"]), os.path.join(req["out"], case["dir"])
        os.makedirs(out)
        feed = {}
        for i, name in enumerate(req["input_names"]):
            raw = np.fromfile(os.path.join(source, f"input_{i}.bin"), dtype=req["input_dtypes"][i])
            feed[name] = raw.reshape([case["batch_size"], *req["input_shapes"][i]])
        results = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
        for k, name in enumerate(req["output_names"]):
            np.ascontiguousarray(results[name]).tofile(os.path.join(out, f"output_{k}.bin"))
    return {}


def ort_session(path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def random_input(rng: Any, spec: Json, batch: int) -> Any:
    """Uniform in [-2, 2) as the other engines; integers truncated, booleans random."""

    shape = [batch, *spec["shape"][1:]]
    if spec["dtype"] == "bool":
        return rng.random(shape) < 0.5
    return rng.uniform(-2, 2, shape).astype(spec["dtype"])


def ops_module() -> Any:
    """onnx_ops, the table's module beside this script (run with -I: its directory is not on sys.path)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("onnx_ops")


OPS_MODULE = ops_module()
OPS: dict[str, Any] = OPS_MODULE.OPS

if __name__ == "__main__":
    sys.exit(main(sys.argv))
