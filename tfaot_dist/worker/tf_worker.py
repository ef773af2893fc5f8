"""The compile worker: the only code of tfaot-dist that imports TensorFlow.

It runs inside a toolchain environment as `python -I tf_worker.py REQUEST.json`
and writes its answer as JSON to the path named in the request ("result").
It must stay a single file using only the standard library, TensorFlow and
NumPy, because `-I` keeps tfaot_dist itself off sys.path.

Requests ("op"):
  inspect  the serving signature (names, dtypes, shapes) in our fixed order
  check    the ops of the serving signature and whether XLA compiles each on CPU
  compile  AOT compile every batch size in one process, write reference outputs

Positional order: inputs and outputs are ordered by their signature key,
sorted as Python sorts str. TensorFlow itself orders them by iterating
protobuf maps, which changes from run to run, so the worker reorders the
tf2xla feeds and fetches before compiling and then checks the generated
header says the same.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import traceback
import zlib

# Error classes understood by the caller (tfaot_dist.errors).
INVALID_INPUT = "invalid-input"
COMPILE_FAILED = "compile-failed"

DTYPES = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64", "bool": "bool"}


class WorkerError(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _import_tf():
    import tensorflow as tf  # noqa: PLC0415 - the import is the expensive part

    tf.get_logger().setLevel("ERROR")
    return tf


def _load_signature(tf, saved_model, serving_key):
    if not os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
        raise WorkerError(INVALID_INPUT, f"{saved_model}: not a SavedModel (no saved_model.pb)")
    try:
        loaded = tf.saved_model.load(saved_model, tags=["serve"])
    except Exception as exc:  # TF raises many types for broken files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkerError(INVALID_INPUT, f"{saved_model}: cannot load SavedModel: {first}") from None
    if serving_key not in loaded.signatures:
        keys = ", ".join(sorted(loaded.signatures.keys())) or "none"
        raise WorkerError(
            INVALID_INPUT, f"serving_key '{serving_key}' is not a signature of {saved_model} (it has: {keys})"
        )
    return loaded, loaded.signatures[serving_key]


def _describe(name, dtype, shape):
    if dtype.name not in DTYPES:
        raise WorkerError(INVALID_INPUT, f"tensor '{name}' has dtype {dtype.name}; supported: {', '.join(DTYPES)}")
    dims = shape.as_list() if shape.rank is not None else None
    return {"name": name, "dtype": dtype.name, "dims": dims}


def _signature(fn):
    """Inputs and outputs of a signature function, sorted by name, with full dims (None = dynamic)."""
    specs = fn.structured_input_signature[1]
    inputs = [_describe(n, s.dtype, s.shape) for n, s in sorted(specs.items())]
    outputs = [_describe(n, t.dtype, t.shape) for n, t in sorted(fn.structured_outputs.items())]
    if not inputs or not outputs:
        raise WorkerError(INVALID_INPUT, "the serving signature needs at least one input and one output")
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for t in tensors:
            dims = t["dims"]
            if dims is None or not dims:
                raise WorkerError(INVALID_INPUT, f"{kind} '{t['name']}' has no batch dimension (shape {dims})")
            if dims[0] is not None:
                raise WorkerError(
                    INVALID_INPUT,
                    f"{kind} '{t['name']}' has a static leading dimension {dims[0]}; "
                    "the batch dimension must be dynamic (None)",
                )
            if any(d is None for d in dims[1:]):
                raise WorkerError(
                    INVALID_INPUT,
                    f"{kind} '{t['name']}' has a dynamic non-leading dimension (shape {dims}); "
                    "only the batch dimension may be dynamic",
                )
            t["shape"] = dims[1:]
            del t["dims"]
    return {"inputs": inputs, "outputs": outputs}


def _frozen_ops(tf, fn):
    from tensorflow.python.framework import convert_to_constants

    frozen = convert_to_constants.convert_variables_to_constants_v2(fn)
    graph_def = frozen.graph.as_graph_def()
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops.update(n.op for n in f.node_def)
    return sorted(ops)


# Ops that only move data into or out of the compiled function; tf2xla
# replaces them with arguments, results and constants.
_BOUNDARY_OPS = {"Placeholder", "NoOp", "Const", "Identity", "IdentityN"}


def op_support(tf, fn):
    from tensorflow.python.framework import kernels

    # XLA registers its CPU JIT kernels when it is first initialised.
    tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))
    table = []
    for op in _frozen_ops(tf, fn):
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
        table.append({"op": op, "xla_cpu": op in _BOUNDARY_OPS or "XLA_CPU_JIT" in devices})
    return table


def do_inspect(tf, req):
    _, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    return {"signature": _signature(fn)}


def do_check(tf, req):
    _, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    signature = _signature(fn)
    return {"signature": signature, "ops": op_support(tf, fn)}


def _static_saved_model(tf, loaded, fn, signature, batch_sizes, path):
    """Save one signature per batch size with the batch dimension fixed."""
    signatures = {}
    for bs in batch_sizes:
        specs = {
            t["name"]: tf.TensorSpec([bs] + t["shape"], getattr(tf, t["dtype"]), name=t["name"])
            for t in signature["inputs"]
        }
        signatures[f"tfaot_bs{bs}"] = tf.function(lambda **kw: fn(**kw)).get_concrete_function(**specs)
    tf.saved_model.save(loaded, path, signatures=signatures)


def _install_fixed_order(signature):
    """Make saved_model_aot_compile build its tf2xla config in our order."""
    from tensorflow.python.tools import saved_model_aot_compile as aot

    original = getattr(aot._signature_to_tf2xla_config, "__wrapped__", aot._signature_to_tf2xla_config)
    feed_rank = {"feed_" + t["name"].replace("/", "_"): i for i, t in enumerate(signature["inputs"])}
    fetch_rank = {"fetch_" + t["name"].replace("/", "_"): i for i, t in enumerate(signature["outputs"])}

    def ordered(signature_def, variable_nodes_to_feed):
        config = original(signature_def, variable_nodes_to_feed)
        for field, rank in (("feed", feed_rank), ("fetch", fetch_rank)):
            items = sorted(getattr(config, field), key=lambda x: rank[x.name])
            del getattr(config, field)[:]
            getattr(config, field).extend(items)
        return config

    ordered.__wrapped__ = original
    aot._signature_to_tf2xla_config = ordered
    return aot


def _header_names(header_text, function):
    """The names listed by StaticArgNames()/StaticResultNames() of a generated header."""
    match = re.search(function + r"\(\)\s*\{\s*static const char\* kNames\[\] = \{([^}]*)\}", header_text)
    if not match:
        raise WorkerError(COMPILE_FAILED, f"generated header has no {function}()")
    return re.findall(r'"([^"]*)"', match.group(1))


def _metadata_needed(header_text):
    """True if the header passes the metadata object's proto symbol to the runtime."""
    match = re.search(r"set_static_data_compilation_result_proto\(data, ([^)]*)\)", header_text)
    return bool(match) and match.group(1).strip() != "nullptr"


def _reference(tf, fn, signature, sizes, out_dir, seed):
    """Deterministic inputs and TensorFlow's outputs, as raw little-endian files."""
    import numpy as np

    records = []
    for bs in sizes:
        case_dir = os.path.join(out_dir, f"bs{bs}")
        os.makedirs(case_dir)
        feeds = {}
        for i, t in enumerate(signature["inputs"]):
            rng = np.random.default_rng([seed, bs, zlib.crc32(t["name"].encode())])
            shape = [bs] + t["shape"]
            dtype = np.dtype(t["dtype"])
            if t["dtype"] == "bool":
                value = rng.integers(0, 2, size=shape).astype(bool)
            elif dtype.kind in "iu":
                value = rng.integers(0, 10, size=shape).astype(dtype)
            else:
                value = rng.uniform(-2.0, 2.0, size=shape).astype(dtype)
            feeds[t["name"]] = value
            value.astype(dtype.newbyteorder("<")).tofile(os.path.join(case_dir, f"input_{i}.bin"))
        results = fn(**{k: tf.constant(v) for k, v in feeds.items()})
        for i, t in enumerate(signature["outputs"]):
            value = results[t["name"]].numpy()
            value.astype(value.dtype.newbyteorder("<")).tofile(os.path.join(case_dir, f"output_{i}.bin"))
        records.append({"batch_size": bs, "dir": f"bs{bs}"})
    return records


def do_compile(tf, req):
    loaded, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    signature = _signature(fn)
    out_dir = req["output_dir"]
    class_name, namespace = req["class_name"], req["namespace"]
    batch_sizes = req["batch_sizes"]

    work = tempfile.mkdtemp(prefix="static-", dir=os.environ.get("TMPDIR"))
    static_dir = os.path.join(work, "saved_model")
    _static_saved_model(tf, loaded, fn, signature, batch_sizes, static_dir)

    from tensorflow.python.tools import saved_model_utils

    aot = _install_fixed_order(signature)
    meta_graph_def = saved_model_utils.get_meta_graph_def(static_dir, "serve")
    checkpoint = os.path.join(static_dir, "variables", "variables")
    base_xla_flags = os.environ.get("XLA_FLAGS", "")

    files = {}
    # Relative output prefixes keep the header guard free of build paths.
    os.chdir(out_dir)
    for bs in batch_sizes:
        stem = f"{class_name}_bs{bs}"
        os.environ["XLA_FLAGS"] = base_xla_flags  # aot_compile appends to it on every call
        try:
            aot.aot_compile_cpu_meta_graph_def(
                checkpoint_path=checkpoint,
                meta_graph_def=meta_graph_def,
                output_prefix=stem,
                signature_def_key=f"tfaot_bs{bs}",
                cpp_class=f"{namespace}::{stem}",
                target_triple=req["target_triple"],
                target_cpu=req["target_cpu"],
            )
        except Exception as exc:
            text = str(exc).strip().splitlines()
            raise WorkerError(COMPILE_FAILED, f"batch size {bs}: {text[0] if text else type(exc).__name__}") from None
        header_text = open(stem + ".h").read()
        args = _header_names(header_text, "StaticArgNames")
        results = _header_names(header_text, "StaticResultNames")
        want_args = ["feed_" + t["name"].replace("/", "_") for t in signature["inputs"]]
        want_results = ["fetch_" + t["name"].replace("/", "_") for t in signature["outputs"]]
        if args != want_args or results != want_results:
            raise WorkerError(
                COMPILE_FAILED,
                f"batch size {bs}: compiled order {args} -> {results} differs from {want_args} -> {want_results}",
            )
        os.remove(stem + "_makefile.inc")
        keep = [stem + ".h", stem + ".o", stem + "_constants.o"]
        if _metadata_needed(header_text):
            keep.append(stem + "_metadata.o")
        else:
            os.remove(stem + "_metadata.o")
        files[str(bs)] = {"header": keep[0], "objects": keep[1:]}

    reference = []
    if req.get("reference_dir"):
        reference = _reference(
            tf, fn, signature, req["reference_sizes"], req["reference_dir"], req.get("reference_seed", 0)
        )
    shutil.rmtree(work, ignore_errors=True)
    return {
        "signature": signature,
        "files": files,
        "reference": reference,
        "tensorflow_version": tf.__version__,
    }


OPS = {"inspect": do_inspect, "check": do_check, "compile": do_compile}


def main(argv):
    with open(argv[1]) as f:
        req = json.load(f)
    try:
        tf = _import_tf()
        answer = {"ok": True, **OPS[req["op"]](tf, req)}
    except WorkerError as exc:
        answer = {"ok": False, "kind": exc.kind, "message": str(exc)}
    except Exception as exc:  # report, never hang the caller on a traceback
        answer = {"ok": False, "kind": COMPILE_FAILED, "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()}
    tmp = req["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, req["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
