"""ONNX files for the tests, written with onnx.helper. Run in the ONNX Runtime environment:

python make_onnx_models.py OUT_DIR

ops/NAME.onnx  one small graph per op (or op family) the converter maps, each input with a dynamic batch
two_inputs     x f32[N,3,8] (Conv1d, BatchNorm, MaxPool, a shape computed with Shape/Gather/Concat,
               Gemm, TopK, GatherElements, Softmax) and seq f32[N,6,4] (a bidirectional LSTM, a GRU
               with linear_before_reset): the kinds of nodes of DeepJet- and ParticleNet-like exports
edge_conv      points f32[N,2,8], features f32[N,4,8]: ParticleNet's EdgeConv as torch.onnx.export writes it
               (also ops/EdgeConv.onnx)
unsupported    a Det node (named "det0"), an op the converter does not map
vendor         a com.microsoft Gelu node (named "gelu0")
quantized      a QuantizeLinear node (named "q0")
opset10        a Relu node (named "relu0") at opset 10
symbolic       x f32[N, n_part, 4]: a symbolic dimension other than the batch
"""

import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

# onnx's objects are Any here: tfaot-dist's venv has no onnx.
RNG = np.random.default_rng(7)
F = T.FLOAT


def weight(name: str, *shape: int, positive: bool = False) -> Any:
    value = RNG.normal(size=shape).astype(np.float32)
    return nh.from_array(np.abs(value) + 0.5 if positive else value, name)


def const(name: str, value: Any, dtype: Any = np.int64) -> Any:
    return nh.from_array(np.array(value, dtype), name)


def save(
    path: str, nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any], opset: int = 17
) -> None:
    graph = h.make_graph(nodes, os.path.basename(path), inputs, outputs, inits)
    # IR version 9: what ONNX Runtime 1.31 reads (onnx 1.23 writes 10 and newer by default).
    model = h.make_model(
        graph, opset_imports=[h.make_opsetid("", opset)], producer_name="tfaot-dist-tests", ir_version=9
    )
    onnx.checker.check_model(model)
    onnx.save(model, path)


def tensor(name: str, shape: list[Any], dtype: Any = F) -> Any:
    return h.make_tensor_value_info(name, dtype, shape)


def one_op(
    out: str,
    name: str,
    op: str,
    shape: list[int],
    out_shape: list[Any],
    extra: Sequence[Any] = (),
    outputs: int = 1,
    out_dtype: Any = F,
    **attrs: Any,
) -> None:
    """A graph of one node: input x f32[N, *shape] and the initializers extra as its other inputs."""
    names = ["x", *(e.name if e is not None else "" for e in extra)]
    outs = [f"y{i}" for i in range(outputs)]
    node = h.make_node(op, names, outs, name=f"{name}_node", **attrs)
    specs = [tensor(o, ["N", *out_shape], out_dtype if i == 0 else T.INT64) for i, o in enumerate(outs)]
    save(
        os.path.join(out, "ops", f"{name}.onnx"),
        [node],
        [tensor("x", ["N", *shape])],
        specs,
        [e for e in extra if e is not None],
    )


def chain(
    out: str,
    name: str,
    nodes: list[Any],
    shape: list[int],
    out_shape: list[Any],
    inits: Sequence[Any] = (),
    out_dtype: Any = F,
    opset: int = 17,
) -> None:
    """Several nodes from x f32[N, *shape] to y."""
    save(
        os.path.join(out, "ops", f"{name}.onnx"),
        nodes,
        [tensor("x", ["N", *shape])],
        [tensor("y", ["N", *out_shape], out_dtype)],
        list(inits),
        opset,
    )


def op_graphs(out: str) -> None:
    os.makedirs(os.path.join(out, "ops"))
    for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Abs", "Neg", "Exp", "Floor", "Ceil", "Sign", "Softplus"):
        one_op(out, op, op, [4, 5], [4, 5])
    one_op(out, "Elu", "Elu", [7], [7], alpha=0.7)
    one_op(out, "LeakyRelu", "LeakyRelu", [7], [7], alpha=0.2)
    chain(
        out,
        "SqrtLogPow",
        [
            h.make_node("Abs", ["x"], ["a"]),
            h.make_node("Sqrt", ["a"], ["s"]),
            h.make_node("Log", ["s"], ["l"]),
            h.make_node("Pow", ["a", "p"], ["q"]),
            h.make_node("Add", ["l", "q"], ["y"]),
        ],
        [6],
        [6],
        [const("p", 1.5, np.float32)],
    )
    one_op(out, "Reciprocal", "Reciprocal", [5], [5])
    for op in ("Sin", "Cos", "HardSigmoid"):
        one_op(out, op, op, [5], [5])
    one_op(out, "Selu", "Selu", [5], [5], alpha=1.5, gamma=1.1)
    one_op(out, "PRelu", "PRelu", [3, 4], [3, 4], [weight("slope", 3, 1)])
    one_op(out, "Mod", "Mod", [6], [6], [const("d", [0.7, -0.7, 1.5, -1.5, 2.0, 0.3], np.float32)], fmod=1)
    chain(out, "Gelu20", [h.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [5], [5], opset=20)
    one_op(out, "Tile", "Tile", [2, 3], [4, 3], [const("r", [1, 2, 1])])
    size = [
        h.make_node("Size", ["x"], ["s"]),
        h.make_node("Cast", ["s"], ["f"], to=T.FLOAT),
        h.make_node("Div", ["x", "f"], ["y"]),
    ]
    chain(out, "Size", size, [4], [4])
    for op in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Sum"):
        one_op(out, op, op, [3, 4], [3, 4], [weight("w", 4)])
    one_op(out, "Clip", "Clip", [8], [8], [const("lo", -0.5, np.float32), const("hi", 0.7, np.float32)])
    one_op(out, "MatMul", "MatMul", [3, 4], [3, 5], [weight("w", 4, 5)])
    one_op(out, "Gemm", "Gemm", [4], [5], [weight("w", 5, 4), weight("b", 5)], transB=1, alpha=0.5, beta=2.0)
    one_op(out, "Einsum", "Einsum", [3, 4], [4], [weight("w", 3, 4)], equation="bij,ij->bj")
    one_op(
        out,
        "Conv1d",
        "Conv",
        [3, 9],
        [4, 5],
        [weight("w", 4, 3, 3), weight("b", 4)],
        pads=[1, 1],
        strides=[2],
        dilations=[2],
    )
    one_op(
        out,
        "Conv2dGroups",
        "Conv",
        [4, 6, 6],
        [6, 6, 6],
        [weight("w", 6, 2, 3, 3)],
        group=2,
        auto_pad="SAME_UPPER",
    )
    one_op(out, "Conv3d", "Conv", [2, 4, 4, 4], [3, 2, 2, 2], [weight("w", 3, 2, 3, 3, 3)])
    one_op(
        out,
        "BatchNormalization",
        "BatchNormalization",
        [3, 5],
        [3, 5],
        [weight("s", 3), weight("b", 3), weight("m", 3), weight("v", 3, positive=True)],
        epsilon=1e-3,
    )
    one_op(
        out,
        "MaxPool",
        "MaxPool",
        [2, 7, 7],
        [2, 4, 4],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    one_op(
        out,
        "AveragePool",
        "AveragePool",
        [2, 7, 7],
        [2, 4, 4],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )
    one_op(out, "GlobalAveragePool", "GlobalAveragePool", [3, 4, 5], [3, 1, 1])
    one_op(out, "GlobalMaxPool", "GlobalMaxPool", [3, 6], [3, 1])
    one_op(out, "LayerNormalization", "LayerNormalization", [3, 8], [3, 8], [weight("s", 8), weight("b", 8)])
    one_op(out, "Softmax", "Softmax", [3, 5], [3, 5], axis=1)
    one_op(out, "LogSoftmax", "LogSoftmax", [3, 5], [3, 5])
    one_op(out, "SoftmaxDefaultAxis", "Softmax", [3, 5], [3, 5])  # the last axis from opset 13 on
    softmax11 = [h.make_node("Softmax", ["x"], ["y"], axis=1)]  # before opset 13: the axes from 1 on as one
    chain(out, "Softmax11Axis1", softmax11, [3, 5], [3, 5], opset=11)
    one_op(out, "Reshape", "Reshape", [3, 4], [2, 6], [const("s", [0, 2, 6])])
    one_op(out, "Flatten", "Flatten", [3, 4], [12])
    one_op(out, "Transpose", "Transpose", [3, 4], [4, 3], perm=[0, 2, 1])
    one_op(out, "Squeeze", "Squeeze", [1, 4], [4], [const("a", [1])])
    one_op(out, "Unsqueeze", "Unsqueeze", [4], [1, 4, 1], [const("a", [1, -1])])
    chain(out, "Concat", [h.make_node("Concat", ["x", "x"], ["y"], axis=-1)], [3], [6])
    chain(
        out,
        "Split",
        [h.make_node("Split", ["x", "parts"], ["a", "b"], axis=1), h.make_node("Sub", ["a", "b"], ["y"])],
        [4],
        [2],
        [const("parts", [2, 2])],
    )
    one_op(
        out,
        "Slice",
        "Slice",
        [6, 5],
        [3, 4],
        [const("s", [1, -1]), const("e", [6, 0]), const("a", [1, 2]), const("st", [2, -1])],
    )
    one_op(out, "Gather", "Gather", [5, 3], [2, 3], [const("i", [4, -2])], axis=1)
    one_op(
        out,
        "GatherElements",
        "GatherElements",
        [4, 3],
        [2, 3],
        [const("i", [[[0, 3, 1], [2, 2, 0]]])],
        axis=1,
    )
    gather_nd = [
        h.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
        h.make_node("GatherND", ["t", "i"], ["g"]),
        h.make_node("Transpose", ["g"], ["y"], perm=[1, 0]),
    ]
    chain(out, "GatherND", gather_nd, [4, 3], [2], [const("i", [[0, 1], [3, 2]])])
    one_op(out, "TopK", "TopK", [4, 6], [4, 3], [const("k", [3])], outputs=2, axis=-1)
    one_op(out, "TopKSmallestAxis1", "TopK", [6, 4], [3, 4], [const("k", [3])], outputs=2, axis=1, largest=0)
    one_op(out, "ArgMax", "ArgMax", [4, 6], [4], out_dtype=T.INT64, axis=2, keepdims=0)
    one_op(out, "CumSum", "CumSum", [5], [5], [const("a", 1)], exclusive=1, reverse=1)
    one_op(out, "PadReflect", "Pad", [4, 5], [6, 7], [const("p", [0, 1, 1, 0, 1, 1])], mode="reflect")
    one_op(out, "PadEdge", "Pad", [4], [7], [const("p", [0, 2, 0, 1])], mode="edge")
    one_op(out, "PadConstant", "Pad", [4], [6], [const("p", [0, 1, 0, 1]), const("v", 0.5, np.float32)])
    for op in ("ReduceMean", "ReduceMax", "ReduceMin"):
        chain(out, op, [h.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)], [4, 3], [3])
    one_op(out, "ReduceSum", "ReduceSum", [4, 3], [4, 1], [const("a", [-1])])
    chain(
        out,
        "ReduceProd18",
        [h.make_node("ReduceProd", ["x", "a"], ["y"], keepdims=1)],
        [4, 3],
        [1, 3],
        [const("a", [1])],
        opset=18,
    )
    chain(
        out,
        "CompareWhere",
        [
            h.make_node("Greater", ["x", "z"], ["g"]),
            h.make_node("Less", ["x", "one"], ["l"]),
            h.make_node("And", ["g", "l"], ["a"]),
            h.make_node("Not", ["a"], ["n"]),
            h.make_node("Equal", ["n", "n"], ["e"]),
            h.make_node("And", ["e", "n"], ["m"]),
            h.make_node("Where", ["m", "x", "z"], ["y"]),
        ],
        [6],
        [6],
        [const("z", 0.0, np.float32), const("one", 1.0, np.float32)],
    )
    compare = [
        h.make_node("GreaterOrEqual", ["x", "z"], ["g"]),
        h.make_node("LessOrEqual", ["x", "z"], ["l"]),
        h.make_node("Or", ["g", "l"], ["o"]),
        h.make_node("Where", ["g", "x", "z"], ["w"]),
        h.make_node("Where", ["o", "w", "x"], ["y"]),
    ]
    chain(out, "OrderedCompare", compare, [6], [6], [const("z", 0.25, np.float32)])
    chain(
        out,
        "CastIdentityDropout",
        [
            h.make_node("Cast", ["x"], ["i"], to=T.INT32),
            h.make_node("Cast", ["i"], ["f"], to=T.FLOAT),
            h.make_node("Identity", ["f"], ["d"]),
            h.make_node("Dropout", ["d"], ["y"]),
        ],
        [6],
        [6],
    )
    shape_nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["n"]),
        h.make_node("Unsqueeze", ["n", "ax"], ["nn"]),
        h.make_node("Concat", ["nn", "four"], ["shape"], axis=0),
        h.make_node("ConstantOfShape", ["shape"], ["c"], value=nh.from_array(np.array([2.0], np.float32))),
        h.make_node("Constant", [], ["lim"], value_int=4),
        h.make_node("Range", ["zero", "lim", "onei"], ["r"]),
        h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
        h.make_node("Expand", ["rf", "shape"], ["e"]),
        h.make_node("Mul", ["c", "e"], ["ce"]),
        h.make_node("Add", ["ce", "x"], ["y"]),
    ]
    chain(
        out,
        "ShapeRangeExpand",
        shape_nodes,
        [4],
        [4],
        [const("zero", 0), const("onei", 1), const("ax", [0]), const("four", [4])],
    )
    recurrent_graphs(out)


def recurrent_graphs(out: str) -> None:
    hidden = 5
    lstm = [weight("w", 2, 4 * hidden, 3), weight("r", 2, 4 * hidden, hidden), weight("b", 2, 8 * hidden)]
    nodes = [
        h.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        h.make_node(
            "LSTM", ["t", "w", "r", "b"], ["ys", "hs", "cs"], hidden_size=hidden, direction="bidirectional"
        ),
        h.make_node("Transpose", ["ys"], ["y"], perm=[2, 0, 1, 3]),
        h.make_node("Transpose", ["cs"], ["yc"], perm=[1, 0, 2]),
    ]
    save(
        os.path.join(out, "ops", "LSTMBidirectional.onnx"),
        nodes,
        [tensor("x", ["N", 6, 3])],
        [tensor("y", ["N", 6, 2, hidden]), tensor("yc", ["N", 2, hidden])],
        lstm,
    )
    gru = [weight("w", 1, 3 * hidden, 3), weight("r", 1, 3 * hidden, hidden), weight("b", 1, 6 * hidden)]
    for lbr in (0, 1):
        nodes = [
            h.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
            h.make_node("Transpose", ["h0"], ["h0t"], perm=[1, 0, 2]),
            h.make_node(
                "GRU",
                ["t", "w", "r", "b", "", "h0t"],
                ["ys", "hs"],
                hidden_size=hidden,
                direction="reverse",
                linear_before_reset=lbr,
            ),
            h.make_node("Transpose", ["ys"], ["y"], perm=[2, 0, 1, 3]),
            h.make_node("Transpose", ["hs"], ["yh"], perm=[1, 0, 2]),
        ]
        inputs = [tensor("x", ["N", 6, 3]), tensor("h0", ["N", 1, hidden])]
        save(
            os.path.join(out, "ops", f"GRUReverseLinearBeforeReset{lbr}.onnx"),
            nodes,
            inputs,
            [tensor("y", ["N", 6, 1, hidden]), tensor("yh", ["N", 1, hidden])],
            gru,
        )


def two_inputs(path: str) -> None:
    hidden = 4
    nodes = [
        h.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1], name="conv"),
        h.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"]),
        h.make_node("Relu", ["bn"], ["r"]),
        h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2], strides=[2]),
        h.make_node("Shape", ["p"], ["sh"]),
        h.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        h.make_node("Unsqueeze", ["n", "ax0"], ["nu"]),
        h.make_node("Concat", ["nu", "minus1"], ["newshape"], axis=0),
        h.make_node("Reshape", ["p", "newshape"], ["f"]),
        h.make_node("Transpose", ["seq"], ["t"], perm=[1, 0, 2]),
        h.make_node(
            "LSTM", ["t", "lw", "lr", "lb"], ["ys", "hs"], hidden_size=hidden, direction="bidirectional"
        ),
        h.make_node("GRU", ["t", "gw", "gr", "gb"], ["gy", "gh"], hidden_size=hidden, linear_before_reset=1),
        h.make_node("Transpose", ["hs"], ["ht"], perm=[1, 0, 2]),
        h.make_node("Flatten", ["ht"], ["hf"]),
        h.make_node("Squeeze", ["gh", "ax0"], ["g2"]),
        h.make_node("Concat", ["f", "hf", "g2"], ["all"], axis=1),
        h.make_node("Gemm", ["all", "dw", "db"], ["d"], transB=1),
        h.make_node("TopK", ["d", "k"], ["tv", "ti"], axis=1),
        h.make_node("GatherElements", ["d", "ti"], ["ge"], axis=1),
        h.make_node("Softmax", ["ge"], ["probs"], axis=-1),
        h.make_node("Cast", ["ti"], ["best"], to=T.FLOAT),
    ]
    inits = [
        *(weight(n, 4, 3, 3) for n in ["cw"]),
        *(weight(n, 4) for n in ("cb", "s", "bb", "m")),
        weight("v", 4, positive=True),
        weight("lw", 2, 4 * hidden, 4),
        weight("lr", 2, 4 * hidden, hidden),
        weight("lb", 2, 8 * hidden),
        weight("gw", 1, 3 * hidden, 4),
        weight("gr", 1, 3 * hidden, hidden),
        weight("gb", 1, 6 * hidden),
        weight("dw", 6, 16 + 3 * hidden),
        weight("db", 6),
        const("k", [3]),
        const("zero", 0),
        const("ax0", [0]),
        const("minus1", [-1]),
    ]
    inputs = [tensor("x", ["N", 3, 8]), tensor("seq", ["N", 5, 4])]
    save(path, nodes, inputs, [tensor("probs", ["N", 3]), tensor("best", ["N", 3])], inits)


def edge_conv(path: str) -> None:
    """ParticleNet's EdgeConv as torch.onnx.export writes it: kNN by TopK on pairwise distances, the
    neighbours gathered through flat indices offset per event (Shape, Range), a 1x1 Conv2d, BatchNorm,
    the mean over neighbours, a mask of empty particles, and a classifier."""
    parts, k, channels = 8, 3, 4
    distance = [
        h.make_node("Transpose", ["points"], ["pt"], perm=[0, 2, 1]),
        h.make_node("MatMul", ["pt", "points"], ["inner"]),
        h.make_node("Mul", ["points", "points"], ["sq"]),
        h.make_node("ReduceSum", ["sq", "one"], ["xx"], keepdims=1),
        h.make_node("Transpose", ["xx"], ["xxt"], perm=[0, 2, 1]),
        h.make_node("Mul", ["inner", "two"], ["inner2"]),
        h.make_node("Add", ["xx", "xxt"], ["sum"]),
        h.make_node("Sub", ["sum", "inner2"], ["dist"]),
        h.make_node("Neg", ["dist"], ["neg"]),
        h.make_node("TopK", ["neg", "k"], ["nv", "idx"], axis=-1),
    ]
    gather = [
        h.make_node("Shape", ["points"], ["shape"]),
        h.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        h.make_node("Range", ["zero", "n", "onei"], ["events"]),
        h.make_node("Mul", ["events", "parts"], ["base"]),
        h.make_node("Reshape", ["base", "col"], ["base3"]),
        h.make_node("Add", ["idx", "base3"], ["flat_idx"]),
        h.make_node("Reshape", ["flat_idx", "minus1"], ["flat"]),
        h.make_node("Transpose", ["features"], ["ft"], perm=[0, 2, 1]),
        h.make_node("Reshape", ["ft", "rows"], ["table"]),
        h.make_node("Gather", ["table", "flat"], ["picked"], axis=0),
        h.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        h.make_node("Concat", ["n1", "pkc"], ["knn_shape"], axis=0),
        h.make_node("Reshape", ["picked", "knn_shape"], ["knn"]),
        h.make_node("Unsqueeze", ["ft", "two1"], ["center"]),
        h.make_node("Expand", ["center", "knn_shape"], ["centers"]),
        h.make_node("Sub", ["knn", "centers"], ["rel"]),
        h.make_node("Concat", ["centers", "rel"], ["edges"], axis=-1),
        h.make_node("Transpose", ["edges"], ["edges_t"], perm=[0, 3, 1, 2]),
    ]
    head = [
        h.make_node("Conv", ["edges_t", "cw"], ["conv"], kernel_shape=[1, 1]),
        h.make_node("BatchNormalization", ["conv", "s", "b", "m", "v"], ["bn"]),
        h.make_node("Relu", ["bn"], ["act"]),
        h.make_node("ReduceMean", ["act"], ["agg"], axes=[-1], keepdims=0),
        h.make_node("Abs", ["points"], ["ap"]),
        h.make_node("ReduceSum", ["ap", "one"], ["mag"], keepdims=1),
        h.make_node("Equal", ["mag", "zerof"], ["empty"]),
        h.make_node("Not", ["empty"], ["full"]),
        h.make_node("Cast", ["full"], ["mask"], to=T.FLOAT),
        h.make_node("Mul", ["agg", "mask"], ["masked"]),
        h.make_node("GlobalAveragePool", ["masked"], ["pooled"]),
        h.make_node("Flatten", ["pooled"], ["pf"]),
        h.make_node("Gemm", ["pf", "dw", "db"], ["logits"], transB=1),
        h.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    inits = [
        const("one", [1]),
        const("two", 2.0, np.float32),
        const("k", [k]),
        const("zero", 0),
        const("onei", 1),
        const("parts", parts),
        const("col", [-1, 1, 1]),
        const("minus1", [-1]),
        const("rows", [-1, channels]),
        const("zero1", [0]),
        const("two1", [2]),
        const("pkc", [parts, k, channels]),
        const("zerof", 0.0, np.float32),
        weight("cw", 6, 2 * channels, 1, 1),
        *(weight(n, 6) for n in ("s", "b", "m")),
        weight("v", 6, positive=True),
        weight("dw", 3, 6),
        weight("db", 3),
    ]
    inputs = [tensor("points", ["N", 2, parts]), tensor("features", ["N", channels, parts])]
    save(path, distance + gather + head, inputs, [tensor("probs", ["N", 3])], inits)


def refused(out: str) -> None:
    det = [h.make_node("Reshape", ["x", "s"], ["m"]), h.make_node("Det", ["m"], ["y"], name="det0")]
    save(
        os.path.join(out, "unsupported.onnx"),
        det,
        [tensor("x", ["N", 9])],
        [tensor("y", ["N"])],
        [const("s", [-1, 3, 3])],
    )
    gelu = h.make_node("Gelu", ["x"], ["y"], name="gelu0", domain="com.microsoft")
    graph = h.make_graph([gelu], "vendor", [tensor("x", ["N", 4])], [tensor("y", ["N", 4])])
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    onnx.save(h.make_model(graph, opset_imports=opsets, ir_version=9), os.path.join(out, "vendor.onnx"))
    quantize = [h.make_node("QuantizeLinear", ["x", "scale"], ["y"], name="q0")]
    outputs = [tensor("y", ["N", 4], T.UINT8)]
    save(
        os.path.join(out, "quantized.onnx"),
        quantize,
        [tensor("x", ["N", 4])],
        outputs,
        [const("scale", 0.1, np.float32)],
    )
    relu = [h.make_node("Relu", ["x"], ["y"], name="relu0")]
    save(
        os.path.join(out, "opset10.onnx"),
        relu,
        [tensor("x", ["N", 4])],
        [tensor("y", ["N", 4])],
        [],
        opset=10,
    )
    add = [h.make_node("Add", ["x", "w"], ["y"], name="add0")]
    weights = [const("w", np.ones(4, np.float32), np.float32)]
    graph = h.make_graph(add, "external", [tensor("x", ["N", 4])], [tensor("y", ["N", 4])], weights)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    # its weights in external.bin beside it: a file the source's digest does not cover
    onnx.save(
        model,
        os.path.join(out, "external.onnx"),
        save_as_external_data=True,
        location="external.bin",
        size_threshold=0,
    )
    total = [h.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)]
    inputs = [tensor("x", ["N", "n_part", 4])]
    save(os.path.join(out, "symbolic.onnx"), total, inputs, [tensor("y", ["N", 4])], [const("a", [1])])


def main(out: str) -> None:
    op_graphs(out)
    two_inputs(os.path.join(out, "two_inputs.onnx"))
    edge_conv(os.path.join(out, "edge_conv.onnx"))
    shutil.copyfile(os.path.join(out, "edge_conv.onnx"), os.path.join(out, "ops", "EdgeConv.onnx"))
    refused(out)


if __name__ == "__main__":
    main(sys.argv[1])
