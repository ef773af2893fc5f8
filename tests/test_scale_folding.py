"""The worker's folding of inference BatchNormalization and per-channel scale and shift into the preceding
convolution's or product's weights (worker/scale_folding.py, through graph_rewrites.rewrite) against
TensorFlow on the same graph: both forms a frozen BatchNormalization takes (Keras 2's FusedBatchNormV3,
Keras 3's elementwise ops over constants), float32 and float64, and the graphs it must leave alone.

One toolchain process per TensorFlow version runs every case (SCRIPT) and prints one JSON line per case:
the rewrite's counts, the ops left between the graph's input and output, and the largest deviation of the
rewritten graph from the original, relative to the output's scale.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tfaot_dist.toolchain import WORKER_SOURCES, Toolchain, worker_env

SCRIPT = """
import importlib.util, json, sys
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants
spec = importlib.util.spec_from_file_location("graph_rewrites", sys.argv[1])
rewrites = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rewrites)
rng = np.random.default_rng(0)
tf1 = tf.compat.v1

def const(shape, dtype, low=None):
    v = rng.uniform(low, 2.0, shape) if low is not None else rng.normal(size=shape)
    return tf.constant(v.astype(dtype))

def stats(c, dtype):  # gamma, beta, mean, variance as a trained model's
    return const([c], dtype, 0.5), const([c], dtype), const([c], dtype), const([c], dtype, 0.5)

def fused(y, c, dtype):
    g, b, m, v = stats(c, dtype)
    return tf1.nn.fused_batch_norm(y, g, b, m, v, epsilon=1e-3, is_training=False)[0]

def elementwise(y, c, dtype):  # Keras 3: x * inv + (offset - mean * inv), inv = rsqrt(var + eps) * gamma
    g, b, m, v = stats(c, dtype)
    inv = tf.math.rsqrt(v + tf.constant(1e-3, dtype)) * g
    return y * inv + (b - m * inv)

def conv(x, dtype, bias=True, c=5):
    y = tf.nn.conv2d(x, const([3, 3, x.shape[-1], c], dtype), 1, "SAME")
    return tf.nn.bias_add(y, const([c], dtype)) if bias else y

def dense(x, dtype, c=5):
    return tf.nn.bias_add(tf.matmul(x, const([x.shape[-1], c], dtype)), const([c], dtype))

def tensordot(x, dtype, c=5):  # a Dense over the last axis of [2, 4, 6, 3]: Reshape, MatMul, Reshape
    y = tf.matmul(tf.reshape(x, [-1, 3]), const([3, c], dtype))
    return tf.reshape(y, [2, 4, 6, c])

def depthwise(x, dtype):
    return tf.nn.depthwise_conv2d(x, const([3, 3, 3, 2], dtype), [1, 1, 1, 1], "VALID")

def shared(x, dtype):  # the convolution's output is read twice: nothing may be folded
    y = conv(x, dtype)
    return elementwise(y, 5, dtype) + tf.nn.relu(y)

def keras_layers(x, dtype):  # what the installed Keras freezes a Conv2D + BatchNormalization + ReLU into
    layers = [tf.keras.layers.Conv2D(5, 3, padding="same"), tf.keras.layers.BatchNormalization()]
    model = tf.keras.Sequential(layers + [tf.keras.layers.ReLU()])
    model.build(x.shape)
    bn = model.layers[1]
    bn.set_weights([rng.uniform(0.5, 2.0, w.shape).astype("float32") for w in bn.get_weights()])
    return model

CASES = {
    "conv_bias_fused": ([2, 6, 6, 3], "float32", lambda x, t: tf.nn.relu(fused(conv(x, t), 5, t))),
    "conv_fused": ([2, 6, 6, 3], "float32", lambda x, t: fused(conv(x, t, bias=False), 5, t)),
    "conv_bias_elementwise": ([2, 6, 6, 3], "float32", lambda x, t: tf.nn.relu(elementwise(conv(x, t), 5, t))),
    "conv_elementwise_f64": ([2, 6, 6, 3], "float64", lambda x, t: elementwise(conv(x, t, bias=False), 5, t)),
    "dense_bias_elementwise": ([4, 7], "float32", lambda x, t: tf.nn.relu(elementwise(dense(x, t), 5, t))),
    "dense_bias_elementwise_f64": ([4, 7], "float64", lambda x, t: elementwise(dense(x, t), 5, t)),
    "dense_bias_fused": ([4, 7], "float32", lambda x, t: fused(tf.reshape(dense(x, t), [4, 1, 1, 5]), 5, t)),
    "tensordot_fused": ([2, 4, 6, 3], "float32", lambda x, t: fused(tensordot(x, t), 5, t)),
    "depthwise_fused": ([2, 6, 6, 3], "float32", lambda x, t: fused(depthwise(x, t), 6, t)),
    "scale_shift_sub": ([4, 7], "float32", lambda x, t: tf.matmul(x, const([7, 5], t)) * const([1, 5], t) - const([5], t)),
    "second_consumer": ([2, 6, 6, 3], "float32", shared),
    "after_relu": ([2, 6, 6, 3], "float32", lambda x, t: elementwise(tf.nn.relu(conv(x, t)), 5, t)),
    "after_relu_fused": ([2, 6, 6, 3], "float32", lambda x, t: fused(tf.nn.relu(conv(x, t)), 5, t)),
    "not_per_channel": ([2, 6, 6, 3], "float32", lambda x, t: conv(x, t) * const([6, 1, 5], t) + 1.0),
}

def run(graph_def, output, feed):
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return tf1.Session(graph=graph).run(output, {"x:0": feed})

def case_graph(shape, dtype, make):
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(dtype, shape, name="x")
        out = tf.identity(make(x, dtype), name="out")
    return graph.as_graph_def(), "out:0"

kept = []

def keras_graph(shape):  # saved and loaded as `compile` reads it: the weights' Consts get control inputs
    model = keras_layers(tf.TensorSpec(shape), "float32")
    serve = tf.function(lambda x: {"y": model(x)}, input_signature=[tf.TensorSpec(shape, tf.float32, name="x")])
    tf.saved_model.save(model, sys.argv[2], signatures={"serving_default": serve})
    kept.append(tf.saved_model.load(sys.argv[2]))  # its variables live as long as the object
    loaded = kept[-1].signatures["serving_default"]
    fn = tf.function(lambda x: loaded(x=x)).get_concrete_function(tf.TensorSpec(shape, tf.float32, name="x"))
    frozen = convert_to_constants.convert_variables_to_constants_v2(fn, lower_control_flow=False)
    return frozen.graph.as_graph_def(), frozen.outputs[0].name

def reached(graph_def, output):  # the ops the output depends on
    nodes = {n.name: n for n in graph_def.node}
    todo, seen = [output.split(":")[0]], set()
    while todo:
        name = todo.pop().lstrip("^").split(":")[0]
        if name not in seen:
            seen.add(name)
            todo.extend(nodes[name].input)
    return sorted({nodes[n].op for n in seen} - {"Const", "Identity", "Placeholder", "NoOp"})

graphs = {name: (case_graph(*case), case[0], case[1]) for name, case in CASES.items()}
graphs["keras"] = (keras_graph([2, 6, 6, 3]), [2, 6, 6, 3], "float32")
for name, ((graph_def, output), shape, dtype) in graphs.items():
    x = rng.normal(size=shape).astype(dtype)
    want = run(graph_def, output, x)
    controlled = any(i.startswith("^") for n in graph_def.node if n.op == "Const" for i in n.input)
    _, ops = rewrites.rewrite(tf, graph_def, False, False)
    got = run(graph_def, output, x)
    deviation = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    result = {"case": name, "ops": ops, "reached": reached(graph_def, output), "deviation": deviation}
    print(json.dumps({**result, "controlled": controlled}))
"""

FOLDED = {  # case -> (rewritten_ops, ops left between input and output)
    "conv_bias_fused": ({"FusedBatchNormV3": 1}, ["BiasAdd", "Conv2D", "Relu"]),
    "conv_fused": ({"FusedBatchNormV3": 1}, ["BiasAdd", "Conv2D"]),
    "conv_bias_elementwise": ({"ScaleShift": 1}, ["BiasAdd", "Conv2D", "Relu"]),
    "conv_elementwise_f64": ({"ScaleShift": 1}, ["BiasAdd", "Conv2D"]),
    "dense_bias_elementwise": ({"ScaleShift": 1}, ["BiasAdd", "MatMul", "Relu"]),
    "dense_bias_elementwise_f64": ({"ScaleShift": 1}, ["BiasAdd", "MatMul"]),
    "dense_bias_fused": ({"FusedBatchNormV3": 1}, ["BiasAdd", "MatMul", "Reshape"]),
    "tensordot_fused": ({"FusedBatchNormV3": 1}, ["BiasAdd", "MatMul", "Reshape"]),
    "depthwise_fused": ({"FusedBatchNormV3": 1}, ["BiasAdd", "DepthwiseConv2dNative"]),
    "scale_shift_sub": ({"ScaleShift": 1}, ["BiasAdd", "MatMul"]),
}
LEFT_ALONE = {  # case -> ops still computed: the BatchNorm's own
    "second_consumer": ["AddV2", "BiasAdd", "Conv2D", "Mul", "Relu", "Rsqrt", "Sub"],
    "after_relu": ["AddV2", "BiasAdd", "Conv2D", "Mul", "Relu", "Rsqrt", "Sub"],
    "after_relu_fused": ["BiasAdd", "Conv2D", "FusedBatchNormV3", "Relu"],
    "not_per_channel": ["AddV2", "BiasAdd", "Conv2D", "Mul"],
}


def _cases(python: Path, tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "scale_folding.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [str(python), "-I", str(script), str(WORKER_SOURCES[1]), str(tmp_path / "saved_model")],
        env=worker_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["case"]: r for r in map(json.loads, proc.stdout.splitlines())}


def _check(cases: dict[str, Any], keras_key: str, controlled: bool) -> None:
    for name, (ops, reached) in FOLDED.items():
        assert (cases[name]["ops"], cases[name]["reached"]) == (ops, reached), name
    for name, reached in LEFT_ALONE.items():
        assert (cases[name]["ops"], cases[name]["reached"]) == ({}, reached), name
    assert cases["keras"]["ops"] == {keras_key: 1}
    assert cases["keras"]["reached"] == ["BiasAdd", "Conv2D", "Relu"]
    assert cases["keras"]["controlled"] == controlled  # a weight's Const with a control input on the call
    for name, case in cases.items():  # float64 cases agree far closer; float32 within the zoo's 1e-5
        assert case["deviation"] <= (1e-12 if name.endswith("_f64") else 1e-5), (name, case["deviation"])


@pytest.mark.slow
def test_folding_equals_tensorflow_keras3(toolchain: Toolchain, tmp_path: Path) -> None:
    """TF 2.21, Keras 3: a frozen BatchNormalization is elementwise ops over constants (ScaleShift), and a
    loaded SavedModel's weights hang on the call's inputs by control edges (evaluated without them)."""
    _check(_cases(toolchain.python, tmp_path), "ScaleShift", True)


@pytest.mark.slow
def test_folding_equals_tensorflow_keras2(toolchain212: Toolchain, tmp_path: Path) -> None:
    """TF 2.12, Keras 2: a frozen BatchNormalization after a convolution is a FusedBatchNormV3."""
    _check(_cases(toolchain212.python, tmp_path), "FusedBatchNormV3", False)
