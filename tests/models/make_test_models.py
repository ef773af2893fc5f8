"""SavedModels for the tests, each broken or special in one way. Run in a toolchain:

python make_test_models.py OUT_DIR

two_inputs   feats f32[5], ids i32[3] -> two outputs (argument order tests, as in FACTS.md)
static       input with a static batch dimension [2, 4]
nonleading   input [None, None]: a dynamic non-leading dimension
string_op    uses StringToNumber, which XLA cannot compile
no_batch     a scalar input (rank 0)
activations  x f32[16], d f64[16] -> Selu and Elu of each, and a Selu between other ops
value_shape  tf.range of a length computed from the input: every op has an XLA kernel, but XLA needs
             the length at compile time, so tfcompile refuses it
"""

import os
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf


# TensorFlow's objects are Any here: tfaot-dist's venv has no TensorFlow.
class Module(tf.Module):
    def __init__(self, fn: Any, specs: dict[str, Any]) -> None:
        super().__init__()
        self.w = tf.Variable(tf.linspace(-1.0, 1.0, 8))
        self.serve = tf.function(lambda **kw: fn(self, **kw), input_signature=None)
        self.specs = specs

    def signature(self) -> Any:
        return self.serve.get_concrete_function(**self.specs)


def two_inputs(m: Any, feats: Any, ids: Any) -> dict[str, Any]:
    s = tf.reduce_sum(feats, axis=1, keepdims=True) * m.w[0]
    return {"output_0": feats * 2.0 + s, "output_1": ids * 3 + tf.cast(s, tf.int32)}


def simple_linear(m: Any, x: Any) -> dict[str, Any]:
    return {"y": tf.tanh(x * m.w[1])}


def string_op(m: Any, x: Any) -> dict[str, Any]:
    text = tf.strings.as_string(x)
    return {"y": tf.strings.to_number(text) * m.w[2]}


def no_batch(m: Any, x: Any) -> dict[str, Any]:
    return {"y": x * m.w[3]}


def value_shape(m: Any, x: Any) -> dict[str, Any]:
    length = tf.cast(tf.reduce_max(tf.abs(x)), tf.int32) + 1
    return {"y": tf.reduce_sum(x * m.w, axis=1) + tf.cast(tf.reduce_sum(tf.range(length)), tf.float32)}


def activations(m: Any, x: Any, d: Any) -> dict[str, Any]:
    return {
        "elu_f32": tf.nn.elu(x),
        "selu_f32": tf.nn.selu(x),
        "elu_f64": tf.nn.elu(d),
        "selu_f64": tf.nn.selu(d),
        "selu_between": tf.nn.selu(x * m.w[4]) + m.w[5],
    }


MODELS = {
    "two_inputs": (
        two_inputs,
        {
            "feats": tf.TensorSpec([None, 5], tf.float32, name="feats"),
            "ids": tf.TensorSpec([None, 3], tf.int32, name="ids"),
        },
    ),
    "static": (simple_linear, {"x": tf.TensorSpec([2, 4], tf.float32, name="x")}),
    "nonleading": (simple_linear, {"x": tf.TensorSpec([None, None], tf.float32, name="x")}),
    "string_op": (string_op, {"x": tf.TensorSpec([None, 4], tf.float32, name="x")}),
    "no_batch": (no_batch, {"x": tf.TensorSpec([], tf.float32, name="x")}),
    "value_shape": (value_shape, {"x": tf.TensorSpec([None, 8], tf.float32, name="x")}),
    "activations": (
        activations,
        {
            "x": tf.TensorSpec([None, 16], tf.float32, name="x"),
            "d": tf.TensorSpec([None, 16], tf.float64, name="d"),
        },
    ),
}


def main(out_dir: str) -> int:
    for name, (fn, specs) in MODELS.items():
        module = Module(fn, specs)
        path = os.path.join(out_dir, name, "saved_model")
        tf.saved_model.save(module, path, signatures={"serving_default": module.signature()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
