"""The compile worker: the only code of tfaot-dist that imports TensorFlow.

It runs inside a toolchain environment as `python -I tf_worker.py REQUEST.json`
and writes its answer as JSON to the path named in the request ("result").
It must stay a single file using only the standard library, TensorFlow and
NumPy, because `-I` keeps tfaot_dist itself off sys.path.

Requests ("op"):
  inspect  the serving signature (names, dtypes, shapes) in our fixed order
  check    the ops of the graph compile gets (batch size 1) and whether XLA has a CPU kernel for each;
           then a compile of that graph for generic x86-64 ("compile_error": None or tfcompile's error)
  compile  AOT compile every batch size (for each CPU level asked) in one process, write reference outputs;
           each frozen graph goes through graph_rewrites.py first (its docstring lists the rewrites)

Positional order: inputs and outputs are ordered by their signature key,
sorted as Python sorts str. TensorFlow itself orders them by iterating
protobuf maps, which changes from run to run, so the worker writes the
tf2xla feeds and fetches itself in that order and then checks the generated
header says the same.
"""

# Annotations are not evaluated: a release's older Python runs this file too.
from __future__ import annotations

import importlib
import json
import mmap
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    # A request, an answer, a signature, a tensor's description, a tfcompile job: JSON objects.
    # TensorFlow's objects (the module, functions, GraphDefs, NodeDefs) are Any: no types here.
    Json = dict[str, Any]

# Error classes understood by the caller (tfaot_dist.errors).
INVALID_INPUT = "invalid-input"
COMPILE_FAILED = "compile-failed"

# Wall seconds per stage of the request, returned as "timings" (for logs and benchmarks, never packaged).
TIMINGS: dict[str, float] = {}

DTYPES = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64", "bool": "bool"}


class WorkerError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _stage(name: str, start: float) -> float:
    """Add the time since start to stage name; returns now."""
    now = time.perf_counter()
    TIMINGS[name] = TIMINGS.get(name, 0.0) + now - start
    return now


def _release_paths() -> None:
    """Where an existing Python (a release's python3) finds TensorFlow: `-I` ignores PYTHONPATH and
    PYTHON3PATH, which the caller passes on only for such a Python, so they are applied here, as
    cmsdist's sitecustomize.py does for PYTHON3PATH (site.addsitedir)."""
    import site

    sys.path[0:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for path in [p for p in os.environ.get("PYTHON3PATH", "").split(os.pathsep) if p]:
        site.addsitedir(path)


def _import_tf() -> Any:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    return tf


def _load_signature(tf: Any, saved_model: str, serving_key: str) -> tuple[Any, Any]:
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


def _describe(name: str, dtype: Any, shape: Any) -> Json:
    if dtype.name not in DTYPES:
        raise WorkerError(
            INVALID_INPUT, f"tensor '{name}' has dtype {dtype.name}; supported: {', '.join(DTYPES)}"
        )
    dims = shape.as_list() if shape.rank is not None else None
    return {"name": name, "dtype": dtype.name, "dims": dims}


# Signature keys become tfcompile's feed and fetch names, "feed_KEY" and "fetch_KEY" with "/" as "_",
# which tfcompile checks as C++ identifiers (ValidateConfig of tf2xla_util.cc, tfcompile_util.cc in
# older TensorFlow: ValidateCppIdent [_a-zA-Z][_a-zA-Z0-9]*, no duplicates, not both X and X_data).
KEY_RULE = "letters, digits, '_' and '/' only (they become the C++ names feed_KEY and fetch_KEY, '/' as '_')"
DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}


def _check_keys(kind: str, tensors: list[Json]) -> None:
    seen: dict[str, str] = {}  # C++ name -> key
    for t in tensors:
        name = t["name"]
        if not re.fullmatch(r"[A-Za-z0-9_/]+", name):
            raise WorkerError(
                INVALID_INPUT, f"{kind} key {name[:100]!r}: not a name tfcompile accepts: {KEY_RULE}"
            )
        cpp = name.replace("/", "_")
        if cpp in seen:
            raise WorkerError(
                INVALID_INPUT,
                f"{kind} keys {seen[cpp]!r} and {name!r} give the same C++ name "
                f"{cpp!r} ('/' becomes '_'); rename one",
            )
        seen[cpp] = name
    for cpp, name in seen.items():
        if cpp + "_data" in seen:
            raise WorkerError(
                INVALID_INPUT,
                f"{kind} keys {name!r} and {seen[cpp + '_data']!r}: tfcompile refuses "
                "a name next to the same name + '_data'; rename one",
            )


def check_bounds(signature: Json, req: Json, batch_sizes: Sequence[int] = ()) -> None:
    """Declared sizes within the request's bounds (limits.py): elements of an input per row, and the
    bytes of all inputs at the largest batch size the worker will allocate."""
    most = req.get("max_row_elements")
    row_bytes = 0
    for t in signature["inputs"]:
        elements = 1
        for d in t["shape"]:
            elements *= d
        if most and elements > most:
            raise WorkerError(
                INVALID_INPUT,
                f"input '{t['name']}' declares {elements} elements per row "
                f"(shape {t['shape']}), at most {most} (TFAOT_DIST_MAX_ROW_ELEMENTS)",
            )
        row_bytes += elements * DTYPE_BYTES[t["dtype"]]
    budget = req.get("max_batch_bytes")
    largest = max(batch_sizes, default=0)
    if budget and largest and row_bytes * largest > budget:
        raise WorkerError(
            INVALID_INPUT,
            f"the inputs take {row_bytes * largest} bytes at batch size {largest} "
            f"({row_bytes} per row), at most {budget} (TFAOT_DIST_MAX_BATCH_BYTES)",
        )


def _signature(fn: Any, req: Json | None = None) -> Json:
    """Inputs and outputs of a signature function, sorted by name, with full dims (None = dynamic);
    keys and declared sizes checked (req: the request's bounds)."""
    specs = fn.structured_input_signature[1]
    inputs = [_describe(n, s.dtype, s.shape) for n, s in sorted(specs.items())]
    outputs = [_describe(n, t.dtype, t.shape) for n, t in sorted(fn.structured_outputs.items())]
    if not inputs or not outputs:
        raise WorkerError(INVALID_INPUT, "the serving signature needs at least one input and one output")
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for t in tensors:
            dims = t["dims"]
            if dims is None or not dims:
                raise WorkerError(
                    INVALID_INPUT, f"{kind} '{t['name']}' has no batch dimension (shape {dims})"
                )
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
        _check_keys(kind, tensors)
    signature = {"inputs": inputs, "outputs": outputs}
    check_bounds(signature, req or {}, (req or {}).get("batch_sizes") or ())
    return signature


def _freeze(concrete: Any) -> Any:
    """concrete with its variables folded in, its functional control flow kept.

    convert_variables_to_constants_v2 lowers While and If into TF1 control flow
    (Enter, Exit, Merge, Switch, NextIteration, LoopCond) by default; XLA has no
    kernel for those, and recurrent layers (LSTM, GRU, SimpleRNN) are While loops.
    tfcompile takes the functional While and If as they are.
    """
    from tensorflow.python.framework import convert_to_constants

    return convert_to_constants.convert_variables_to_constants_v2(concrete, lower_control_flow=False)


# Ops that only move data into or out of the compiled function; tf2xla
# replaces them with arguments, results and constants.
_BOUNDARY_OPS = {"Placeholder", "NoOp", "Const", "Identity", "IdentityN", "_Arg", "_Retval"}

# What to change when a model uses ops XLA cannot compile: (ops, advice).
_ADVICE = [
    (
        {
            "Enter",
            "Exit",
            "LoopCond",
            "Merge",
            "NextIteration",
            "Switch",
            "RefEnter",
            "RefExit",
            "RefMerge",
            "RefSwitch",
            "RefNextIteration",
        },
        "TF1 control flow (tf.compat.v1 while_loop/cond or a graph-mode export): export the model from "
        "TensorFlow 2 (tf.function or Keras), whose loops and conditions are functional While/If ops",
    ),
    (
        {
            "StringToNumber",
            "AsString",
            "StringSplit",
            "StringSplitV2",
            "StringJoin",
            "RegexReplace",
            "StringFormat",
            "Substr",
            "StringLength",
            "DecodeRaw",
        },
        "string processing: do it before the model and feed numbers",
    ),
    (
        {
            "HashTableV2",
            "LookupTableFindV2",
            "LookupTableImportV2",
            "MutableHashTableV2",
            "StaticRegexFullMatch",
        },
        "table lookups: map keys to integer ids before the model (an Embedding takes the ids)",
    ),
    ({"PyFunc", "EagerPyFunc", "PyFuncStateless"}, "Python functions: write the step with TensorFlow ops"),
    (
        {"RandomUniform", "RandomStandardNormal", "StatelessRandomUniformV2"},
        "random numbers: export the inference model (training=False) without random layers",
    ),
]
_DEFAULT_ADVICE = (
    "replace the layer that makes it with ops XLA compiles (README: Which models work), "
    "or compute that part outside the model"
)


def advice(op: str) -> str:
    return next((text for ops, text in _ADVICE if op in ops), _DEFAULT_ADVICE)


def _graph_ops(graph_def: Any) -> dict[str, list[str]]:
    """{op: [node names]} of graph_def and its function library ("FUNCTION/NODE" for function nodes)."""
    nodes: dict[str, list[str]] = {}
    for n in graph_def.node:
        nodes.setdefault(n.op, []).append(n.name)
    for f in graph_def.library.function:
        for n in f.node_def:
            nodes.setdefault(n.op, []).append(f"{f.signature.name}/{n.name}")
    return nodes


def op_support(tf: Any, graph_def: Any) -> list[Json]:
    """One row per op of graph_def: whether XLA has a CPU kernel for it; unsupported rows name their nodes."""
    from tensorflow.python.framework import kernels

    # XLA registers its CPU JIT kernels when it is first initialised.
    tf.function(lambda x: x + 1, jit_compile=True)(tf.constant(1.0))
    table = []
    for op, nodes in sorted(_graph_ops(graph_def).items()):
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
        row: Json = {"op": op, "xla_cpu": op in _BOUNDARY_OPS or "XLA_CPU_JIT" in devices}
        if not row["xla_cpu"]:
            row.update(nodes=sorted(nodes)[:MAX_NODES], advice=advice(op))
        table.append(row)
    return table


MAX_NODES = 5  # node names listed per unsupported op


def do_inspect(tf: Any, req: Json) -> Json:
    _, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    return {"signature": _signature(fn, req)}


def do_check(tf: Any, req: Json) -> Json:
    """The ops of the graph compile hands to tfcompile (frozen at batch size 1, activations rewritten), and,
    when XLA has a kernel for each, a compile of that graph for generic x86-64: a graph of supported ops
    can still fail (a shape XLA needs static, an op's attribute), and what compiles is what counts."""
    # XLA reads XLA_FLAGS once, when first used (op_support's jit call): the flags compile uses, set first.
    xla_flags = _xla_flags(tf, os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = " ".join(xla_flags)
    _, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    signature = _signature(fn, req)
    graph_def, config = _frozen(tf, fn, signature, 1)
    REWRITES.rewrite(tf, graph_def, True, _writes_no_conv3d(tf))
    ops = op_support(tf, graph_def)
    answer: Json = {"signature": signature, "ops": ops}
    if all(row["xla_cpu"] for row in ops):
        answer["compile_error"] = _explained(_trial_compile(graph_def, config, xla_flags))
    return answer


# What to change for tfcompile errors of graphs whose every op has a kernel: (text in the error, advice).
_COMPILE_ADVICE = [
    (
        "must be a compile-time constant",
        "a size or shape is computed from input values; XLA needs it fixed: use fixed sizes (pad to a maximum)",
    ),
]


def _explained(error: str | None) -> str | None:
    """tfcompile's error as one first line (the line that says what is wrong) with what to change."""
    if error is None:
        return None
    lines = [ln.strip() for ln in error.splitlines() if ln.strip()] or [error]
    advice = next((text for needle, text in _COMPILE_ADVICE if needle in error), _DEFAULT_ADVICE)
    return "\n".join([f"{lines[0]} What to change: {advice}", *lines[1:]])


def _trial_compile(graph_def: Any, config: Any, xla_flags: list[str]) -> str | None:
    """Compile graph_def for generic x86-64 in a scratch directory; returns None or tfcompile's error."""
    work = tempfile.mkdtemp(prefix="check-", dir=os.environ.get("TMPDIR"))
    try:
        graph, config_path = os.path.join(work, "graph.pb"), os.path.join(work, "config.pbtxt")
        with open(graph, "wb") as f:
            f.write(graph_def.SerializeToString())
        with open(config_path, "w") as f:
            f.write(str(config))
        job = {
            "stem": "check_bs1",
            "cpp_class": "tfaot_check::check_bs1",
            "graph": graph,
            "config": config_path,
            "target_triple": "x86_64-pc-linux",
            "target_cpu": "",
            "xla_flags": xla_flags,
        }
        cwd = os.getcwd()
        try:
            return _run_job(job, work, full=True)
        finally:
            os.chdir(cwd)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _frozen(tf: Any, fn: Any, signature: Json, bs: int) -> tuple[Any, Any]:
    """The serving function at batch size bs with its variables folded in, and its tf2xla config.

    This is the graph `saved_model_cli aot_compile_cpu` hands to tfcompile (a
    static signature, frozen), made without saving a SavedModel and restoring
    it in a session per batch size: the compiled files are byte-identical and
    this takes a fifth of the time. Feeds and fetches are listed in our order
    (by name), so the compiled argument order does not depend on protobuf map
    iteration.
    """
    from tensorflow.compiler.tf2xla import tf2xla_pb2

    specs = {
        t["name"]: tf.TensorSpec([bs] + t["shape"], getattr(tf, t["dtype"]), name=t["name"])
        for t in signature["inputs"]
    }
    concrete = tf.function(lambda **kw: fn(**kw)).get_concrete_function(**specs)
    frozen = _freeze(concrete)
    # Keyword inputs come first, flattened in sorted key order: the order of signature["inputs"].
    placeholders = frozen.inputs[: len(signature["inputs"])]
    # Outputs, flat, in the order nest.flatten gives the original's dict of outputs: sorted by key.
    outputs = dict(zip(sorted(concrete.structured_outputs), frozen.outputs))
    config = tf2xla_pb2.Config()
    for t, ph in zip(signature["inputs"], placeholders):
        shape = [bs] + t["shape"]
        if ph.dtype.name != t["dtype"] or ph.shape.as_list() != shape:
            raise WorkerError(
                COMPILE_FAILED,
                f"batch size {bs}: input '{t['name']}' froze to "
                f"{ph.dtype.name}{ph.shape.as_list()}, expected {t['dtype']}{shape}",
            )
        config.feed.append(
            tf2xla_pb2.Feed(
                id=tf2xla_pb2.TensorId(node_name=ph.op.name, output_index=ph.value_index),
                name="feed_" + t["name"].replace("/", "_"),
                type=ph.dtype.as_datatype_enum,
                shape=tf.TensorShape(shape).as_proto(),
            )
        )
    for t in signature["outputs"]:
        out = outputs[t["name"]]
        config.fetch.append(
            tf2xla_pb2.Fetch(
                id=tf2xla_pb2.TensorId(node_name=out.op.name, output_index=out.value_index),
                name="fetch_" + t["name"].replace("/", "_"),
                type=out.dtype.as_datatype_enum,
                shape=tf.TensorShape([bs] + t["shape"]).as_proto(),
            )
        )
    return frozen.graph.as_graph_def(), config


def _writes_no_conv3d(tf: Any) -> bool:
    """True if this toolchain's tfcompile cannot write 3-D convolutions into AOT code (TF 2.21's thunk
    serializer has 2-D ones only: "3D convolution is not implemented."); read from its library."""
    library = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_cc.so.2")
    return _file_contains(library, b"3D convolution is not implemented")


def _load_rewrites() -> Any:
    """graph_rewrites.py, beside this script (run with -I: its directory is not on sys.path)."""
    if __package__:  # imported as tfaot_dist.worker.tf_worker (by the tests)
        return importlib.import_module(__package__ + ".graph_rewrites")
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("graph_rewrites")


REWRITES = _load_rewrites()


def _load_tfcompile() -> Any:
    """The tfcompile extension module, without importing all of TensorFlow when possible.

    `_pywrap_tfcompile` needs only TensorFlow's shared libraries: loading it by
    itself takes a fifth of `import tensorflow`, which is what makes compile
    helpers cheap. Falls back to the normal import.
    """
    if "tensorflow" in sys.modules:
        from tensorflow.python import _pywrap_tfcompile

        return _pywrap_tfcompile
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    pkg = next(iter(spec.submodule_search_locations)) if spec and spec.submodule_search_locations else None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES if pkg else ():
        path = os.path.join(pkg or "", "python", "_pywrap_tfcompile" + suffix)
        if os.path.isfile(path):
            try:
                ext = importlib.util.spec_from_file_location("tensorflow.python._pywrap_tfcompile", path)
                if ext is None or ext.loader is None:  # not for an extension file that exists
                    raise ImportError(f"{path}: no loader")
                module = importlib.util.module_from_spec(ext)
                ext.loader.exec_module(module)
                return module
            except ImportError:
                break
    from tensorflow.python import _pywrap_tfcompile

    return _pywrap_tfcompile


# Compile helpers: processes that run tfcompile next to the worker (see _Helpers).
HELPERS: _Helpers | None = None
FORKED = False  # forked from a server that has imported TensorFlow and run nothing (serve())


def _helpers_wanted(req: Json) -> int:
    """Compile helpers for a request: one per idle core beside the worker's, fewer than batch sizes.

    "jobs" in the request fixes the number of compiling processes. Otherwise
    cores that other processes keep busy (load average) do not count: on a
    loaded machine a helper only takes CPU from the worker's own freezing.
    The compiled files are the same either way.
    """
    if req.get("op") != "compile":
        return 0
    jobs: int | None = req.get("jobs")
    if not jobs:
        jobs = round(len(os.sched_getaffinity(0)) - os.getloadavg()[0])
    compiles = len(req.get("batch_sizes", [])) * max(1, len(req.get("cpu_levels") or []))
    return max(0, min(jobs - 1, compiles - 1))


class _Helpers:
    """Processes that take tfcompile jobs from a queue while the worker freezes the next batch size.

    `_pywrap_tfcompile.Compile` holds the GIL, so threads do not compile in
    parallel; processes do. Helpers are never forked from a process that runs
    TensorFlow's threads: a worker started for its request starts them fresh
    ("spawn") before it imports TensorFlow, and they load only the tfcompile
    extension (a fifth of an import of TensorFlow); a worker forked from a
    server (serve()) forks them before it runs anything, from the state the
    server's import left. Once the worker has frozen every size and written the
    reference outputs it takes jobs from the same queue itself. The files are
    byte-identical to an in-process compile.
    """

    def __init__(self, count: int) -> None:
        import multiprocessing

        ctx: Any = multiprocessing.get_context("fork" if FORKED else "spawn")
        self.jobs, self.done = ctx.Queue(), ctx.Queue()
        self.procs = [
            ctx.Process(target=_helper_main, args=(self.jobs, self.done), daemon=True) for _ in range(count)
        ]
        for proc in self.procs:
            proc.start()
        self.submitted = 0

    def submit(self, job: Json, out_dir: str) -> None:
        self.jobs.put((job, out_dir))
        self.submitted += 1

    def finish(self) -> dict[str, str | None]:
        """Compile what no helper has taken yet, then wait for the rest; returns {job key: error or None}."""
        import queue

        results: dict[str, str | None] = {}
        while True:
            try:
                job, out_dir = self.jobs.get(timeout=0.05)
            except queue.Empty:
                break
            results[job["key"]] = _run_job(job, out_dir)
        while len(results) < self.submitted:
            try:
                key, error = self.done.get(timeout=1.0)
                results[key] = error
            except queue.Empty:
                dead = [p for p in self.procs if not p.is_alive()]
                if dead:
                    raise WorkerError(
                        COMPILE_FAILED, f"a tfcompile helper died (exit code {dead[0].exitcode})"
                    ) from None
        return results

    def close(self) -> None:
        for _ in self.procs:
            self.jobs.put(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def _helper_main(jobs: Queue[tuple[Json, str] | None], done: Queue[tuple[str, str | None]]) -> None:
    _load_tfcompile()  # while the worker imports TensorFlow
    while True:
        item = jobs.get()
        if item is None:
            return
        job, out_dir = item
        done.put((job["key"], _run_job(job, out_dir)))


def _run_job(job: Json, out_dir: str, full: bool = False) -> str | None:
    """Compile one job; returns None or the error (its first line unless full)."""
    try:
        os.chdir(out_dir)
        _tfcompile(job)
        return None
    except Exception as exc:
        text = str(exc).strip()
        if full:
            return text or type(exc).__name__
        return text.splitlines()[0] if text else type(exc).__name__


def _tfcompile(job: Json) -> None:
    """One batch size through tfcompile, as saved_model_aot_compile.aot_compile_cpu_meta_graph_def calls it.

    Runs in the worker or in a compile helper: it reads the frozen graph and
    config files and writes the outputs into the current directory.
    """
    _pywrap_tfcompile = _load_tfcompile()
    # XLA reads XLA_FLAGS once per process: every job of a request carries the same flags.
    os.environ["XLA_FLAGS"] = " ".join(job["xla_flags"])
    stem, cpp_class = job["stem"], job["cpp_class"]
    outputs = {
        "out_function_object": stem + ".o",
        "out_header": stem + ".h",
        "out_metadata_object": stem + "_metadata.o",
    }
    # Recent tfcompile writes the weights into an object of their own; older ones
    # (TF 2.12) keep them in the function object and have no such argument.
    if "out_constant_buffers_object" in (_pywrap_tfcompile.Compile.__doc__ or ""):
        outputs["out_constant_buffers_object"] = stem + "_constants.o"
    _pywrap_tfcompile.Compile(
        graph=job["graph"],
        config=job["config"],
        cpp_class=cpp_class,
        target_triple=job["target_triple"],
        target_cpu=job["target_cpu"],
        target_features=job.get("target_features", ""),
        entry_point=re.sub("[^0-9a-zA-Z]+", "_", "__xla_" + stem + "__" + cpp_class),
        gen_name_to_index=True,
        gen_program_shape=False,
        **outputs,
    )


# XLA's tiled product for small matrices (dense layers at batch sizes 2-32 when both other
# dimensions are at most 128) keeps one accumulator per row of an 11-row tile and one vector
# of columns (tile "11:9:1"): at batch size 2 that is two dependent FMA chains, and batch size 2
# ran slower per event than 1. Tiles of 4 rows x 2 vectors (8 accumulators) make 2-16 rows
# 1.1-1.7x faster (benchmarks/xla_options.py --study small-gemm). The vector count stays a power
# of two: XLA's column remainder loop overlaps (reads and writes past the result) for 3.
SMALL_GEMM_TILE = "4:8:2*vectwidth"


def _xla_flags(tf: Any, user_flags: str) -> list[str]:
    """All XLA flags tfcompile runs with: our defaults, the user's (they win), saved_model_cli's.

    What this toolchain supports is read from its files, never from its version: XLA aborts
    on a flag it does not know.
    """
    from tensorflow.python.tools import saved_model_aot_compile

    flags: list[str] = []
    framework = os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2")
    if _file_contains(framework, b"xla_backend_extra_options"):  # a field of XLA's DebugOptions
        flags.append("--xla_backend_extra_options=xla_llvm_ir_gemm_tile_size=" + SMALL_GEMM_TILE)
    flags += user_flags.split()
    # The XLA flags saved_model_cli adds: single-threaded kernels, no YNN fusions (TF 2.12 has none).
    flags.append("--xla_cpu_multi_thread_eigen=false")
    with open(saved_model_aot_compile.__file__) as f:
        if "--xla_cpu_experimental_ynn_fusion_type=" in f.read():
            flags.append("--xla_cpu_experimental_ynn_fusion_type=")
    return flags


# At x86-64-v4 LLVM turns the strided loads and stores of XLA's loops (softmax and LayerNorm over
# rows of a transposed tensor, pooling windows, gathers of kNN neighbours) into AVX-512 gathers and
# scatters: scatters are microcoded on every CPU that has them, gathers slow on Intel under the GDS
# mitigation. Measured at v4 on an AMD EPYC (zoo models at bench size, us/event): pooling bs 32
# 20.5 -> 17.2, ParticleNet-like bs 32 580 -> 495, transformer bs 256 102 -> 93, DeepJet-like bs 4
# 86 -> 82. The generic x86-64-v3 target emits none. LLVM names the CPUs it knows to be affected
# (skylake, icelake, ...) itself, not the generic levels.
LEVEL_TARGET_FEATURES = {"x86-64-v4": "+prefer-no-gather,+prefer-no-scatter"}


def _target_features(tf: Any, target_cpu: str) -> str:
    """The LLVM features tfcompile gets for target_cpu: LEVEL_TARGET_FEATURES's where this toolchain's
    LLVM knows them (TF 2.12's predates them: it would warn and ignore them), else none."""
    features = LEVEL_TARGET_FEATURES.get(target_cpu, "")
    libraries = [os.path.join(os.path.dirname(tf.__file__), name) for name in LLVM_LIBRARIES]
    names = [feature[1:].encode() for feature in features.split(",") if feature]
    if all(any(_file_contains(library, name) for library in libraries) for name in names):
        return features
    return ""


LLVM_LIBRARIES = ("libtensorflow_cc.so.2", "libtensorflow_framework.so.2")  # one of them links LLVM


def _file_contains(path: str, needle: bytes) -> bool:
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(needle) >= 0
    except (OSError, ValueError):
        return False


def _header_names(header_text: str, function: str) -> list[str]:
    """The names listed by StaticArgNames()/StaticResultNames() of a generated header."""
    match = re.search(function + r"\(\)\s*\{\s*static const char\* kNames\[\] = \{([^}]*)\}", header_text)
    if not match:
        raise WorkerError(COMPILE_FAILED, f"generated header has no {function}()")
    return re.findall(r'"([^"]*)"', match.group(1))


def _metadata_needed(header_text: str) -> bool:
    """True if the header passes the metadata object's proto symbol to the runtime."""
    match = re.search(r"set_static_data_compilation_result_proto\(data, ([^)]*)\)", header_text)
    return match is not None and match.group(1).strip() != "nullptr"


def _reference(tf: Any, fn: Any, signature: Json, sizes: list[int], out_dir: str, seed: int) -> list[Json]:
    """Deterministic inputs and TensorFlow's outputs, as raw little-endian files."""
    import numpy as np

    records: list[Json] = []
    for bs in sizes:
        case_dir = os.path.join(out_dir, f"bs{bs}")
        os.makedirs(case_dir)
        feeds: dict[str, Any] = {}  # name -> numpy array
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


def do_compile(tf: Any, req: Json) -> Json:
    t = time.perf_counter()
    _, fn = _load_signature(tf, req["saved_model"], req["serving_key"])
    signature = _signature(fn, req)
    check_bounds(signature, req, list(req["batch_sizes"]) + list(req.get("reference_sizes") or []))
    t = _stage("load", t)
    out_dir = req["output_dir"]

    work = tempfile.mkdtemp(prefix="frozen-", dir=os.environ.get("TMPDIR"))
    xla_flags = _xla_flags(tf, os.environ.get("XLA_FLAGS", ""))
    levels = list(req.get("cpu_levels") or [])
    targets = _compile_targets(levels, req["target_cpu"])
    features = {cpu: _target_features(tf, cpu) for cpu, _, _ in targets}
    formulas = req.get("activation_formulas", "tensorflow")
    if formulas not in ("tensorflow", "xla"):
        raise WorkerError(INVALID_INPUT, f"unknown activation formulas {formulas!r}")
    jobs, rewritten, rewritten_ops = _freeze_all(
        tf, fn, signature, req, work, targets, features, xla_flags, formulas == "tensorflow"
    )
    t = _stage("freeze", t)

    reference: list[Json] = []
    if req.get("reference_dir"):
        # TensorFlow's outputs are computed while the helpers compile.
        reference = _reference(
            tf, fn, signature, req["reference_sizes"], req["reference_dir"], req.get("reference_seed", 0)
        )
        t = _stage("reference", t)

    # Relative output prefixes keep the header guard free of build paths.
    errors = HELPERS.finish() if HELPERS is not None else {job["key"]: _run_job(job, out_dir) for job in jobs}
    t = _stage("tfcompile", t)
    os.chdir(out_dir)
    files = _compiled_files(jobs, errors, signature, bool(levels))

    shutil.rmtree(work, ignore_errors=True)
    return {
        "signature": signature,
        "files": files,
        "reference": reference,
        "tensorflow_version": tf.__version__,
        "xla_flags": xla_flags,
        "target_features": {cpu or "x86-64": given for cpu, given in features.items() if given},
        "rewritten_activations": rewritten,
        "rewritten_ops": rewritten_ops,
    }


def _compile_targets(levels: list[str], target_cpu: str) -> list[tuple[str, str, str]]:
    """(target_cpu, class name suffix, answer key suffix) of each compile of a batch size.

    Multi-level: one tfcompile per (batch size, level) of one frozen graph. The lowest level
    keeps the single-target names (CLASS_bsN), the others add the level (CLASS_bsN_x86_64_v3).
    Level x86-64 is compiled for tfcompile's default CPU (""), what packages got before levels: the
    same instructions (generic x86-64), byte-identical objects to a single-target package's.
    """
    targets: list[tuple[str, str, str]] = []
    for i, level in enumerate(levels):
        if not re.fullmatch(r"x86-64(-v[234])?", level):  # it becomes part of C++ names
            raise WorkerError(INVALID_INPUT, f"unknown CPU level {level!r}")
        cpu = "" if level == "x86-64" else level
        targets.append((cpu, "", "") if i == 0 else (cpu, "_" + level.replace("-", "_"), "@" + level))
    return targets or [(target_cpu, "", "")]


def _freeze_all(
    tf: Any,
    fn: Any,
    signature: Json,
    req: Json,
    work: str,
    targets: list[tuple[str, str, str]],
    features: dict[str, str],
    xla_flags: list[str],
    tensorflow_formulas: bool,
) -> tuple[list[Json], dict[str, int], dict[str, int]]:
    """Each batch size's graph frozen (and rewritten) into work, and its compile jobs, one per target (handed
    to the helpers at once, when there are helpers); returns the jobs and what the last graph's rewrites replaced."""
    rewritten: dict[str, int] = {}  # op -> nodes replaced in each batch size's graph
    rewritten_ops: dict[str, int] = {}
    no_conv3d = _writes_no_conv3d(tf)
    jobs: list[Json] = []
    class_name, namespace = req["class_name"], req["namespace"]
    for bs in req["batch_sizes"]:
        graph_def, config = _frozen(tf, fn, signature, bs)
        rewritten, rewritten_ops = REWRITES.rewrite(tf, graph_def, tensorflow_formulas, no_conv3d)
        graph, config_path = os.path.join(work, f"bs{bs}.pb"), os.path.join(work, f"bs{bs}.pbtxt")
        with open(graph, "wb") as f:
            f.write(graph_def.SerializeToString())
        with open(config_path, "w") as f:
            f.write(str(config))
        for target_cpu, suffix, key in targets:
            stem = f"{class_name}_bs{bs}{suffix}"
            job = {
                "key": f"{bs}{key}",
                "bs": bs,
                "stem": stem,
                "cpp_class": f"{namespace}::{stem}",
                "graph": graph,
                "config": config_path,
                "target_triple": req["target_triple"],
                "target_cpu": target_cpu,
                "target_features": features[target_cpu],
                "xla_flags": xla_flags,
            }
            if HELPERS is not None:  # a helper compiles it while the next size is frozen
                HELPERS.submit(job, req["output_dir"])
            jobs.append(job)
    return jobs, rewritten, rewritten_ops


def _compiled_files(
    jobs: list[Json], errors: dict[str, str | None], signature: Json, multi_level: bool
) -> dict[str, Json]:
    """What each job left in the current directory, checked (argument and result order) and kept: its header
    and objects by answer key. The first failed job is the error."""
    files: dict[str, Json] = {}
    for job in jobs:
        bs, stem, key = job["bs"], job["stem"], job["key"]
        if errors[key] is not None:
            where = f"batch size {bs}" + (
                f", CPU level {job['target_cpu'] or 'x86-64'}" if multi_level else ""
            )
            raise WorkerError(COMPILE_FAILED, f"{where}: {errors[key]}")
        with open(stem + ".h") as header:
            header_text = header.read()
        args = _header_names(header_text, "StaticArgNames")
        results = _header_names(header_text, "StaticResultNames")
        want_args = ["feed_" + t["name"].replace("/", "_") for t in signature["inputs"]]
        want_results = ["fetch_" + t["name"].replace("/", "_") for t in signature["outputs"]]
        if args != want_args or results != want_results:
            raise WorkerError(
                COMPILE_FAILED,
                f"batch size {bs}: compiled order {args} -> {results} differs from {want_args} -> {want_results}",
            )
        # What tfcompile wrote decides the layout, not the TensorFlow version.
        keep = [stem + ".h", stem + ".o"] + [stem + "_constants.o"] * os.path.isfile(stem + "_constants.o")
        if _metadata_needed(header_text):
            keep.append(stem + "_metadata.o")
        else:
            os.remove(stem + "_metadata.o")
        files[key] = {"header": keep[0], "objects": keep[1:]}
    return files


OPS: dict[str, Callable[[Any, Json], Json]] = {
    "inspect": do_inspect,
    "check": do_check,
    "compile": do_compile,
}


def answer(request_path: str) -> int:
    """Do the request in the file request_path; its answer goes to the file the request names."""
    global HELPERS
    with open(request_path) as f:
        req = json.load(f)
    try:
        t = time.perf_counter()
        if _helpers_wanted(req):
            HELPERS = _Helpers(_helpers_wanted(req))
            TIMINGS["helpers"] = len(HELPERS.procs)
        tf = _import_tf()
        _stage("import", t)
        answer: Json = {"ok": True, **OPS[req["op"]](tf, req), "timings": TIMINGS}
    except WorkerError as exc:
        answer = {"ok": False, "kind": exc.kind, "message": str(exc)}
    except Exception as exc:  # report, never hang the caller on a traceback
        answer = {
            "ok": False,
            "kind": COMPILE_FAILED,
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    if HELPERS is not None:
        HELPERS.close()
    tmp = req["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(answer, f)
    os.replace(tmp, req["result"])
    return 0


def serve() -> int:
    """`tf_worker.py --serve`: import TensorFlow once, then fork one child per request.

    The caller (tfaot_dist/worker_server.py) writes one JSON line per request on
    stdin: {"request": path, "cwd": dir, "log": path, "environ": {name: value},
    "timeout": seconds}. This process answers on stdout {"pid": N} once the child
    runs and {"status": S, "timed_out": bool} once it has ended (S: its exit code,
    or minus the signal that killed it; one that overran its timeout is killed).
    Each child starts from the state the import left, as a worker started for
    the request does: TensorFlow has run nothing yet and started no thread
    (a fork beside a thread could copy a lock it holds: then this process
    refuses to serve), and nothing of one request is left for the next.
    """
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever TensorFlow prints stays out of the replies
    try:
        _import_tf()
    except BaseException as exc:  # the caller starts a worker per request, which reports it
        _reply(replies, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        _reply(replies, {"ready": False, "error": f"TensorFlow runs {threads} threads after its import"})
        return 1
    _reply(replies, {"ready": True})
    for line in sys.stdin:
        order = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            _served_child(order)
        _reply(replies, {"pid": pid})
        status, timed_out = _wait(pid, order["timeout"])
        _reply(replies, {"status": status, "timed_out": timed_out})
    return 0


def _reply(replies: Any, message: Json) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code (minus its signal), after killing it if it overran timeout."""
    import select
    import signal

    timed_out = False
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3, Python 3.9: readable once the child has ended
    except (AttributeError, OSError):
        pidfd = None
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
            timed_out = True
            status = os.waitpid(pid, 0)[1]
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(left, 0.05))
    if pidfd is not None:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(status), timed_out


def _served_child(order: Json) -> None:
    """A forked child: its output to the request's log, its directory and environment the
    request's; the request done, it exits without returning."""
    global FORKED
    FORKED = True
    code = 1
    try:
        log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(order["cwd"])
        os.environ.update(order["environ"])
        tempfile.tempdir = None  # found again from TMPDIR
        code = answer(order["request"])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    _release_paths()  # first: the compile helpers are spawned with this sys.path
    if argv[1:] == ["--serve"]:
        return serve()
    return answer(argv[1])


if __name__ == "__main__":
    code = main(sys.argv)
    # The answer is on disk: skip TensorFlow's teardown at interpreter exit (over a second).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
