"""The compile worker's rewrites of a frozen graph before tfcompile sees it.

Loaded by tf_worker.py from its own directory (the worker runs with -I: tfaot_dist is not on
sys.path), so like it this file uses only the standard library, TensorFlow and NumPy. Each rewrite
keeps the names the graph's consumers and the tf2xla fetches read, and returns {op: nodes replaced}:
the manifest records them, and verification against TensorFlow judges the rewritten graph.

- Selu and Elu are computed with TensorFlow's CPU formulas unless the request's "activation_formulas"
  is "xla";
- Conv3D becomes Conv2D over depth slices where tfcompile writes no 3-D convolution (TF 2.21);
- each TopKV2's indices go through max(indices, 0), so that XLA keeps its TopK call;
- inference BatchNormalization and other per-channel scale and shift after a Conv2D, depthwise convolution
  or MatMul are folded into its weights and one BiasAdd (scale_folding.py, beside this file);
- pooling whose window equals its stride leaves XLA's reduce_window where that is faster (pooling_rewrite.py).
"""

# Annotations are not evaluated: a release's older Python runs this file too.
from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def _beside(module: str) -> Any:
    """A module beside this file (the worker runs with -I: its directory is not on sys.path)."""
    if __package__:  # imported as tfaot_dist.worker.graph_rewrites (by the tests)
        return importlib.import_module(__package__ + "." + module)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(module)


SCALE_FOLDING = _beside("scale_folding")
POOLING = _beside("pooling_rewrite")


def rewrite(
    tf: Any, graph_def: Any, tensorflow_formulas: bool, no_conv3d: bool
) -> tuple[dict[str, int], dict[str, int]]:
    """Every rewrite, in place; returns (activations given TensorFlow's formulas, other ops replaced)."""
    activations = tensorflow_activations(tf, graph_def) if tensorflow_formulas else {}
    ops = SCALE_FOLDING.fold_scale_shift(tf, graph_def)
    ops.update(conv3d_as_conv2d(tf, graph_def) if no_conv3d else {})
    ops.update(top_k_kept_whole(tf, graph_def))
    ops.update(POOLING.tiled_pooling(tf, graph_def, spliced))
    return activations, ops


# Selu and Elu as TensorFlow's own CPU kernels compute them: for x < 0, Selu is
# scale_alpha * (exp(x) - 1) and Elu exp(x) - 1, else scale * x and x. XLA's translation of both
# calls expm1 instead, which XLA emits as an exp polynomial plus a tanh rational with a division,
# both evaluated for every element: at large batch sizes that pass was a third of a SELU model's
# time. op -> (scale, scale * alpha), TensorFlow's constants.
ELU_FORMULAS = {"Elu": (1.0, 1.0), "Selu": (1.0507009873554804934, 1.7580993408473768599)}


def tensorflow_activations(tf: Any, graph_def: Any) -> dict[str, int]:
    """Replace each float Selu and Elu node of graph_def by TensorFlow's CPU formula; returns {op: count}.

    The last node of a replacement keeps the replaced node's name, so its consumers, control
    dependencies and the tf2xla fetches that name it are unchanged.
    """
    floats = {tf.float32.as_datatype_enum, tf.float64.as_datatype_enum}
    taken = {n.name for n in graph_def.node}
    counts: dict[str, int] = {}
    nodes: list[Any] = []
    for node in graph_def.node:
        dtype = node.attr["T"].type if "T" in node.attr else None
        if node.op not in ELU_FORMULAS or dtype not in floats:
            nodes.append(node)
            continue
        prefix = node.name + "/tfaot_formula"
        while any(name.startswith(prefix + "/") for name in taken):
            prefix += "_"
        added = _formula_nodes(tf, node, prefix)
        nodes.extend(added)
        taken.update(n.name for n in added)
        counts[node.op] = counts.get(node.op, 0) + 1
    del graph_def.node[:]
    graph_def.node.extend(nodes)
    return counts


def _formula_nodes(tf: Any, node: Any, prefix: str) -> list[Any]:
    """The nodes computing node's op (Selu or Elu) as TensorFlow's kernel does; new names under prefix."""
    scale, scale_alpha = ELU_FORMULAS[node.op]
    dtype, data = node.attr["T"].type, node.input[0]
    controls = [i for i in node.input[1:] if i.startswith("^")]
    added: list[Any] = []

    def add(name: str, op: str, inputs: list[str], value: float | None = None) -> str:
        added.append(
            node_def(tf, prefix + "/" + name if name else node.name, op, inputs, dtype, node.device, value)
        )
        added_name: str = added[-1].name
        return added_name

    zero, one = add("zero", "Const", [], 0.0), add("one", "Const", [], 1.0)
    negative = add("negative", "Less", [data, zero])
    exp_minus_one = add("exp_minus_one", "Sub", [add("exp", "Exp", [data]), one])
    if scale != 1.0:
        exp_minus_one = add(
            "negative_side", "Mul", [add("scale_alpha", "Const", [], scale_alpha), exp_minus_one]
        )
        data = add("positive_side", "Mul", [add("scale", "Const", [], scale), data])
    add("", "SelectV2", [negative, exp_minus_one, data, *controls])
    return added


def node_def(
    tf: Any, name: str, op: str, inputs: list[str], dtype: int, device: str, value: float | None = None
) -> Any:
    """A NodeDef of one element type: a scalar Const of value, or op over inputs."""
    from tensorflow.core.framework import node_def_pb2

    node = node_def_pb2.NodeDef(name=name, op=op, input=inputs, device=device)
    if op == "Const":
        node.attr["dtype"].type = dtype
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.as_dtype(dtype)))
    else:
        node.attr["T"].type = dtype
    return node


def conv3d_as_conv2d(tf: Any, graph_def: Any) -> dict[str, int]:
    """Replace each float32 NDHWC Conv3D (dilation 1) of graph_def by one Conv2D over the input's depth
    slices, the slices that the kernel's depth taps read laid side by side as channels; returns
    {"Conv3D": count}. Same sums, other order: the results agree with TensorFlow's Conv3D to rounding.
    The last node keeps the replaced node's name."""
    targets = [
        n
        for n in graph_def.node
        if n.op == "Conv3D"
        and n.attr["T"].type == tf.float32.as_datatype_enum
        and n.attr["data_format"].s in (b"", b"NDHWC")
        and set(n.attr["dilations"].list.i) <= {1}
    ]
    if not targets:
        return {}
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    replaced: dict[str, list[Any]] = {}
    for node in targets:
        inputs = [i for i in node.input if not i.startswith("^")]
        shapes = [graph.get_tensor_by_name(i if ":" in i else i + ":0").shape.as_list() for i in inputs]
        if any(d is None for shape in shapes for d in shape):
            continue
        replaced[node.name] = _conv3d_nodes(tf, node, inputs, shapes)
    if not replaced:
        return {}
    nodes: list[Any] = []
    for node in graph_def.node:
        nodes.extend(replaced.get(node.name, [node]))
    del graph_def.node[:]
    graph_def.node.extend(nodes)
    return {"Conv3D": len(replaced)}


def _conv3d_nodes(tf: Any, node: Any, inputs: list[str], shapes: list[list[int]]) -> list[Any]:
    """The NodeDefs computing node (a Conv3D of inputs with static shapes) with Conv2D; new names below it."""
    (batch, depth, height, width, _), (kd, kh, kw, channels, filters) = shapes
    _, sd, sh, sw, _ = list(node.attr["strides"].list.i)
    scratch = tf.Graph()
    with scratch.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shapes[0], name="x")
        w = tf.compat.v1.placeholder(tf.float32, shapes[1], name="w")
        if node.attr["padding"].s == b"SAME":
            pads: list[list[int]] = []
            for size, k, stride in ((depth, kd, sd), (height, kh, sh), (width, kw, sw)):
                total = max((-(-size // stride) - 1) * stride + k - size, 0)
                pads.append([total // 2, total - total // 2])
            x = tf.pad(x, [[0, 0], *pads, [0, 0]])
            depth += sum(pads[0])
        out_depth = (depth - kd) // sd + 1
        # Depth tap i of output slice o reads input slice o * sd + i: the kd slices side by side as
        # channels (tap-major), with the kernel's taps moved beside its channels, make one Conv2D whose
        # patches and product are each made once (not kd products of shallow patches and their sum).
        slices = [x[:, i : i + (out_depth - 1) * sd + 1 : sd] for i in range(kd)]
        xs = tf.concat(slices, axis=-1) if kd > 1 else slices[0]
        xs = tf.reshape(xs, [batch * out_depth, *xs.shape.as_list()[2:]])
        w2 = tf.reshape(tf.transpose(w, [1, 2, 0, 3, 4]), [kh, kw, kd * channels, filters])
        y = tf.nn.conv2d(xs, w2, [1, sh, sw, 1], "VALID")
        tf.reshape(y, [batch, out_depth, *y.shape.as_list()[1:]], name="result")
    return spliced(
        scratch.as_graph_def(), node, {"x": inputs[0], "w": inputs[1]}, node.name + "/tfaot_conv2d"
    )


def spliced(scratch: Any, node: Any, rename: dict[str, str], prefix: str) -> list[Any]:
    """The nodes of a scratch GraphDef that computes node's replacement, ready to take its place: the
    placeholders named in rename read the tensors they map to, the node "result" takes node's name (and
    its control inputs), the rest move below prefix."""
    added: list[Any] = []
    for n in scratch.node:
        if n.name in rename:
            continue
        n.name = node.name if n.name == "result" else prefix + "/" + n.name
        n.input[:] = [_renamed(i, rename, prefix, node.name) for i in n.input]
        n.device = node.device
        added.append(n)
    added[-1].input.extend(i for i in node.input if i.startswith("^"))
    return added


def top_k_kept_whole(tf: Any, graph_def: Any) -> dict[str, int]:
    """Pass the indices of each TopKV2 through max(indices, 0) (they are never negative); {"TopKV2": count}.

    XLA writes a top_k as a sort of the whole row followed by a slice of the first k, and its CPU
    compiler turns exactly that pattern into its TopK runtime call (a partial sort). A slice after the
    top_k, as kNN models take it (`top_k(-distance, k + 1)` then `[:, :, 1:]`, dropping the point itself),
    is merged with that first slice by XLA's simplifier, the pattern is gone, and every row is sorted in
    full through a compiled comparator called per comparison: 40 % of a ParticleNet-like model's time.
    An elementwise op between the two slices, which the simplifier cannot drop, keeps them apart.
    The TopKV2 node is renamed; an IdentityN of its values and the kept indices takes its name, so
    consumers read the same outputs under the same names.
    """
    count = 0
    for node in [n for n in graph_def.node if n.op == "TopKV2"]:
        name, index_type = (
            node.name,
            node.attr["index_type"].type if "index_type" in node.attr else 3,
        )  # int32
        node.name = name + "/tfaot_top_k"
        zero = node_def(tf, name + "/tfaot_zero", "Const", [], index_type, node.device, 0)
        kept = node_def(
            tf, name + "/tfaot_indices", "Maximum", [node.name + ":1", zero.name], index_type, node.device
        )
        outputs = graph_def.node.add(
            name=name, op="IdentityN", device=node.device, input=[node.name, kept.name]
        )
        outputs.attr["T"].list.type.extend([node.attr["T"].type, index_type])
        graph_def.node.extend([zero, kept])
        count += 1
    return {"TopKV2": count} if count else {}


def _renamed(name: str, rename: dict[str, str], prefix: str, result: str) -> str:
    control, _, bare = name.rpartition("^")
    base, colon, index = bare.partition(":")
    if base in rename:
        new = rename[base] if not index or index == "0" else rename[base] + ":" + index
        return control + new
    base = result if base == "result" else prefix + "/" + base
    return control + base + colon + index
