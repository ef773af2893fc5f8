"""Create the example SavedModels of the seed documentation, deterministically.

Run with a Python that has TensorFlow (a tfaot-dist toolchain environment):

    python examples/make_models.py OUTPUT_DIR [simple multi ...]

Without names it writes simple and multi; "study" stands for the four
feed-forward models of the AOT study (study_l12_u128 ... study_l25_u256),
which the benchmarks use.

Each model is written to OUTPUT_DIR/NAME/saved_model together with an
aot_config.yaml next to it. The models are untrained: their weights come from
fixed seeds, which is all tests and benchmarks need.
"""

import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

AOT_CONFIG = """\
model:
  name: {name}
  version: "1.0.0"
  author: tfaot-dist examples
  description: {description}

compilation:
  batch_sizes: [1, 2, 4]
"""


def make_simple() -> tuple[Any, str]:
    """f32(4) -> f32(2): BatchNorm, 5 x (Dense(128, tanh), BatchNorm), Dense(2, softmax)."""
    tf.keras.utils.set_random_seed(1)
    x = tf.keras.Input(shape=(4,), dtype=tf.float32, name="input_0")
    a = tf.keras.layers.BatchNormalization(axis=1, renorm=True)(x)
    for _ in range(5):
        a = tf.keras.layers.Dense(128, activation="tanh")(a)
        a = tf.keras.layers.BatchNormalization(axis=1, renorm=True)(a)
    y = tf.keras.layers.Dense(2, activation="softmax", name="output_0")(a)
    return tf.keras.Model(inputs=x, outputs=y), "f32(4) -> f32(2) feed-forward network"


class _Multi(tf.Module):
    """f32(4), f64(4) -> f32(2), bool(2), written as a plain tf.function model."""

    def __init__(self) -> None:
        super().__init__()
        rng = tf.random.Generator.from_seed(2)
        self.w0 = tf.Variable(rng.normal([8, 32]) * 0.3)
        self.b0 = tf.Variable(rng.normal([32]) * 0.1)
        self.w1 = tf.Variable(rng.normal([32, 2]) * 0.3)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, 4], tf.float32, name="input_0"),
            tf.TensorSpec([None, 4], tf.float64, name="input_1"),
        ]
    )
    def __call__(self, input_0: Any, input_1: Any) -> dict[str, Any]:
        a = tf.concat([input_0, tf.cast(input_1, tf.float32)], axis=1)
        a = tf.tanh(tf.matmul(a, self.w0) + self.b0)
        y = tf.nn.softmax(tf.matmul(a, self.w1))
        return {"output_0": y, "output_1": y > 0.5}


def make_multi() -> tuple[Any, str]:
    return _Multi(), "f32(4), f64(4) -> f32(2), bool(2)"


def make_study(layers: int, units: int) -> Callable[[], tuple[Any, str]]:
    """The feed-forward toy models of the AOT vs TensorFlow C++ study (CMS, 2023).

    f32(32) -> f32(10): layers x (Dense(units), BatchNorm, SELU), Dense(10, softmax).
    """

    def make() -> tuple[Any, str]:
        tf.keras.utils.set_random_seed(layers * 1000 + units)
        x = tf.keras.Input(shape=(32,), dtype=tf.float32, name="input_0")
        a = x
        for _ in range(layers):
            a = tf.keras.layers.Dense(units)(a)
            a = tf.keras.layers.BatchNormalization(axis=1)(a)
            a = tf.keras.layers.Activation("selu")(a)
        y = tf.keras.layers.Dense(10, activation="softmax", name="output_0")(a)
        return tf.keras.Model(
            inputs=x, outputs=y
        ), f"study model, {layers} layers of {units} units, BatchNorm, SELU"

    return make


MAKERS: dict[str, Callable[[], tuple[Any, str]]] = {"simple": make_simple, "multi": make_multi}
# The study's models (benchmarks): study_l12_u128, study_l12_u256, study_l25_u128, study_l25_u256.
STUDY = {f"study_l{n}_u{u}": make_study(n, u) for n in (12, 25) for u in (128, 256)}
MAKERS.update(STUDY)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, names = argv[0], argv[1:] or sorted(set(MAKERS) - set(STUDY))
    names = [n for name in names for n in (sorted(STUDY) if name == "study" else [name])]
    for name in names:
        model, description = MAKERS[name]()
        model_dir = os.path.join(out_dir, name)
        os.makedirs(model_dir, exist_ok=True)
        saved_model = os.path.join(model_dir, "saved_model")
        if isinstance(model, tf.Module) and not isinstance(model, tf.keras.Model):
            tf.saved_model.save(model, saved_model, signatures={"serving_default": model.__call__})
        else:
            try:
                model.export(saved_model, verbose=False)
            except TypeError:  # Keras 2 (TensorFlow 2.12 to 2.15): its call is the serving signature
                tf.saved_model.save(model, saved_model)
        with open(os.path.join(model_dir, "aot_config.yaml"), "w") as f:
            f.write(AOT_CONFIG.format(name=name, description=description))
        print(f"wrote {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
