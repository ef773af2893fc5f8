"""Inference BatchNormalization and any per-channel scale and shift folded into the preceding convolution's
or dense layer's constant weights, as ONNX Runtime's optimizer does (issue 39).

Loaded by graph_rewrites.py from its own directory (the worker runs with -I), so like it this file uses only
the standard library, TensorFlow and NumPy.

A Conv2D, DepthwiseConv2dNative or MatMul with a constant filter, followed by a chain of per-output-channel
affine ops (BiasAdd, Add or Sub of a constant, Mul by a constant, an inference FusedBatchNorm), each
intermediate tensor read by the next node of the chain only, computes y = f(x, w) * s + t. That is
f(x, w * s) + t: one BiasAdd instead of a pass over memory per op, which XLA cannot fuse into the runtime's
convolution or product call. Reshapes that keep the last axis (Keras's Tensordot, a Dense on more than two
axes) may sit in the chain: a per-channel op commutes with them. The chain's last node keeps its name (its
consumers and the tf2xla fetches read it); the folded constants are computed in float64 and rounded once.
"""

# Annotations are not evaluated: a release's older Python runs this file too.
from __future__ import annotations

from typing import Any

PRODUCERS = {"Conv2D", "DepthwiseConv2dNative", "MatMul"}
BATCH_NORMS = {"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"}
AFFINE = {"BiasAdd", "Add", "AddV2", "Sub", "Mul"} | BATCH_NORMS
# Ops whose value is a function of their inputs only: a node of these over constants is a constant.
PURE = {
    "Const",
    "Identity",
    "Rsqrt",
    "Sqrt",
    "Reciprocal",
    "Neg",
    "Mul",
    "Add",
    "AddV2",
    "Sub",
    "RealDiv",
    "Reshape",
    "Squeeze",
    "ExpandDims",
    "Cast",
}


def fold_scale_shift(tf: Any, graph_def: Any) -> dict[str, int]:
    """Fold every chain of per-channel scale and shift into its producer, in place; returns
    {"FusedBatchNormV3" (the op folded): count, "ScaleShift": count of chains of elementwise ops}."""
    counts: dict[str, int] = {}
    while True:  # a second BatchNorm behind a folded one is found on the next pass
        found = _fold_once(tf, graph_def)
        for key, n in found.items():
            counts[key] = counts.get(key, 0) + n
        if not found:
            return counts


class _Chain:
    """A producer and the per-channel affine nodes after it: y = producer * scale + shift, as tensors."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.nodes: list[Any] = []  # every node after the producer, kept reshapes included
        self.steps: list[tuple[str, list[str], float]] = []  # (op, constant tensors, epsilon) per affine node
        self.scaled = False

    def absorbed(self) -> list[Any]:
        """The chain up to its last affine node (trailing reshapes are not part of it)."""
        last = max(i for i, n in enumerate(self.nodes) if n.op != "Reshape")
        return self.nodes[: last + 1]


def _fold_once(tf: Any, graph_def: Any) -> dict[str, int]:
    nodes = {n.name: n for n in graph_def.node}
    consumers: dict[str, list[str]] = {}
    for node in graph_def.node:
        for name in node.input:
            consumers.setdefault(_base(name), []).append(node.name)
            if not name.startswith("^") and name.partition(":")[2] not in ("", "0"):
                consumers[_base(name)].append("")  # another output is read: the node cannot go
    candidates = [
        n
        for n in graph_def.node
        if n.op in PRODUCERS
        and len(consumers.get(n.name, [])) == 1
        and nodes[consumers[n.name][0]].op in AFFINE | {"Reshape"}  # no graph import otherwise
        and _producer_ok(tf, n, nodes)
    ]
    if not candidates:
        return {}
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    chains = [c for c in (_chain(tf, p, nodes, consumers, graph) for p in candidates) if c is not None]
    if not chains:
        return {}
    wanted = sorted(
        {t for c in chains for _, ts, _ in c.steps for t in ts} | {c.producer.input[1] for c in chains}
    )
    values = _evaluated(tf, wanted, nodes)
    counts: dict[str, int] = {}
    replaced: dict[str, list[Any]] = {}
    removed: set[str] = set()
    for chain in chains:
        replaced.update(_folded(tf, chain, values, {n.name for n in graph_def.node}))
        removed.update(n.name for n in chain.absorbed() if n.op != "Reshape")
        key = next((op for op, _, _ in chain.steps if op in BATCH_NORMS), "ScaleShift")
        counts[key] = counts.get(key, 0) + 1
    kept: list[Any] = []
    for node in graph_def.node:
        if node.name in replaced:
            kept.extend(replaced[node.name])
        elif node.name not in removed:
            kept.append(node)
    del graph_def.node[:]
    graph_def.node.extend(kept)
    return counts


def _evaluated(tf: Any, tensors: list[str], nodes: dict[str, Any]) -> dict[str, Any]:
    """The values of constant tensors, from their constant subgraphs alone: without control inputs, which
    in a SavedModel's function tie even the weights to the call's inputs (placeholders nobody feeds here)."""
    from tensorflow.core.framework import graph_pb2

    needed: dict[str, Any] = {}
    todo = [_base(t) for t in tensors]
    while todo:
        name = todo.pop()
        if name not in needed:
            node = needed[name] = type(nodes[name])()
            node.CopyFrom(nodes[name])
            node.input[:] = [i for i in node.input if not i.startswith("^")]
            todo.extend(_base(i) for i in node.input)
    sub = graph_pb2.GraphDef()
    sub.node.extend(needed.values())
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(sub, name="")
    return dict(zip(tensors, tf.compat.v1.Session(graph=graph).run([_tensor(t) for t in tensors])))


def _producer_ok(tf: Any, node: Any, nodes: dict[str, Any]) -> bool:
    """A float producer with a constant filter whose output channels are its output's last axis."""
    floats = {tf.float32.as_datatype_enum, tf.float64.as_datatype_enum}
    if node.attr["T"].type not in floats or not _constant(node.input[1], nodes, {}):
        return False
    if node.op == "MatMul":
        return True
    return node.attr["data_format"].s in (b"", b"NHWC")


def _chain(tf: Any, producer: Any, nodes: dict[str, Any], consumers: dict[str, list[str]], graph: Any) -> Any:
    """The longest chain of per-channel affine nodes after producer (None without a scale in it)."""
    chain, current = _Chain(producer), producer
    channels = graph.get_tensor_by_name(producer.name + ":0").shape.as_list()[-1]
    if channels is None:
        return None
    constants: dict[str, bool] = {}
    while len(consumers.get(current.name, [])) == 1 and consumers[current.name][0]:
        node = nodes[consumers[current.name][0]]
        if node.op == "Reshape":
            if node.input[0] not in (current.name, current.name + ":0"):
                break
            shape = graph.get_tensor_by_name(node.name + ":0").shape.as_list()
            if not shape or shape[-1] != channels:
                break
            chain.nodes.append(node)
            current = node
            continue
        step = _affine_step(tf, node, current.name, channels, nodes, constants, graph)
        if step is None:
            break
        chain.nodes.append(node)
        chain.steps.append(step)
        chain.scaled = chain.scaled or step[0] in BATCH_NORMS or step[0] == "Mul"
        current = node
    return chain if chain.scaled else None


def _affine_step(
    tf: Any,
    node: Any,
    data: str,
    channels: int,
    nodes: dict[str, Any],
    constants: dict[str, bool],
    graph: Any,
) -> tuple[str, list[str], float] | None:
    """(op, its constant inputs) if node is a per-channel affine op of data (output 0 of node data), else None."""
    if node.op not in AFFINE or node.attr["T"].type not in (
        tf.float32.as_datatype_enum,
        tf.float64.as_datatype_enum,
    ):
        return None
    inputs = [i for i in node.input if not i.startswith("^")]
    if node.op in BATCH_NORMS:
        is_training = node.attr["is_training"].b if "is_training" in node.attr else True
        if is_training or node.attr["data_format"].s not in (b"", b"NHWC"):
            return None
        params = inputs[1:5]  # scale, offset, mean, variance
        ok = all(_constant(p, nodes, constants) and _per_channel(graph, p, channels, 1) for p in params)
        return (node.op, params, node.attr["epsilon"].f) if ok else None
    if node.op == "BiasAdd" and node.attr["data_format"].s not in (b"", b"NHWC"):
        return None
    data_first = inputs[0] in (data, data + ":0")
    if not data_first and (node.op in ("Sub", "BiasAdd") or inputs[1] not in (data, data + ":0")):
        return None
    other = inputs[1] if data_first else inputs[0]
    rank = len(graph.get_tensor_by_name(_tensor(data)).shape.as_list())
    if not _constant(other, nodes, constants) or not _per_channel(graph, other, channels, rank):
        return None
    return node.op, [other], 0.0


def _constant(name: str, nodes: dict[str, Any], memo: dict[str, bool]) -> bool:
    """True if tensor name is computed from Const nodes by pure ops only."""
    base = _base(name)
    if base not in memo:
        memo[base] = False  # a cycle (there is none in a frozen graph) is not constant
        node = nodes.get(base)
        memo[base] = (
            node is not None
            and node.op in PURE
            and all(_constant(i, nodes, memo) for i in node.input if not i.startswith("^"))
        )
    return memo[base]


def _per_channel(graph: Any, name: str, channels: int, rank: int) -> bool:
    """True if constant name broadcasts against a [..., channels] tensor of that rank along its last axis only
    (the result's shape stays the data's)."""
    shape = graph.get_tensor_by_name(_tensor(name)).shape
    if shape.rank is None or shape.rank > max(rank, 1):
        return False
    dims = shape.as_list()
    return all(d == 1 for d in dims[:-1]) and (not dims or dims[-1] in (1, channels))


def _folded(tf: Any, chain: _Chain, values: dict[str, Any], taken: set[str]) -> dict[str, list[Any]]:
    """The replacements: producer -> [scaled filter, producer reading it]; each kept reshape rewired to the
    producer's output; the chain's last node -> one BiasAdd (an Identity if the shift is 0) of its name."""
    import numpy as np

    producer, absorbed = chain.producer, chain.absorbed()
    end = absorbed[-1]
    dtype = producer.attr["T"].type
    weights = np.asarray(values[producer.input[1]], np.float64)
    scale, shift = np.ones(_channels(producer, weights.shape)), np.zeros(_channels(producer, weights.shape))
    for op, names, epsilon in chain.steps:
        constants = [np.asarray(values[n], np.float64) for n in names]
        scale, shift = _applied(op, constants, epsilon, scale, shift)
    weights = weights * _filter_scale(producer, scale, weights.shape)
    np_type = tf.as_dtype(dtype).as_numpy_dtype
    filter_node = _const(tf, _free(producer.name + "/tfaot_folded_filter", taken), weights.astype(np_type))
    filter_node.device = producer.device
    scaled = type(producer)()
    scaled.CopyFrom(producer)
    scaled.input[1] = filter_node.name
    out: dict[str, list[Any]] = {producer.name: [filter_node, scaled]}
    last = producer.name
    for node in absorbed[:-1]:
        if node.op == "Reshape":
            rewired = type(node)()
            rewired.CopyFrom(node)
            rewired.input[0] = last
            out[node.name] = [rewired]
            last = node.name
    controls = sorted({i for n in absorbed for i in n.input if i.startswith("^")})
    result = type(end)(name=end.name, device=end.device)
    result.attr["T"].type = dtype
    if np.any(shift != 0):
        bias = _const(tf, _free(end.name + "/tfaot_folded_bias", taken), shift.astype(np_type))
        bias.device = end.device
        result.op = "BiasAdd"
        result.input.extend([last, bias.name, *controls])
        out[end.name] = [bias, result]
    else:
        result.op = "Identity"
        result.input.extend([last, *controls])
        out[end.name] = [result]
    return out


def _applied(op: str, constants: list[Any], epsilon: float, scale: Any, shift: Any) -> tuple[Any, Any]:
    """(scale, shift) of (y * scale + shift) after one more affine op on it, in float64."""
    import numpy as np

    flat = [np.broadcast_to(c.reshape(-1) if c.ndim else c, scale.shape) for c in constants]
    if op in BATCH_NORMS:  # inference: (y - mean) * gamma / sqrt(variance + epsilon) + beta
        gamma, beta, mean, variance = flat
        factor = gamma / np.sqrt(variance + epsilon)
        return scale * factor, (shift - mean) * factor + beta
    if op == "Mul":
        return scale * flat[0], shift * flat[0]
    if op == "Sub":
        return scale, shift - flat[0]
    return scale, shift + flat[0]  # BiasAdd, Add, AddV2


def _channels(producer: Any, shape: tuple[int, ...]) -> int:
    """The producer's output channels, from its filter's shape."""
    if producer.op == "MatMul":
        return shape[0] if producer.attr["transpose_b"].b else shape[1]
    return shape[2] * shape[3] if producer.op == "DepthwiseConv2dNative" else shape[3]


def _filter_scale(producer: Any, scale: Any, shape: tuple[int, ...]) -> Any:
    """scale shaped to multiply the producer's filter per output channel."""
    if producer.op == "MatMul":
        return scale.reshape(-1, 1) if producer.attr["transpose_b"].b else scale
    if producer.op == "DepthwiseConv2dNative":
        return scale.reshape(shape[2], shape[3])  # output channel = input channel * multiplier + m
    return scale


def _const(tf: Any, name: str, value: Any) -> Any:
    from tensorflow.core.framework import node_def_pb2

    node = node_def_pb2.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    return node


def _free(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _base(name: str) -> str:
    return name.lstrip("^").split(":")[0]


def _tensor(name: str) -> str:
    return name if ":" in name else name + ":0"
