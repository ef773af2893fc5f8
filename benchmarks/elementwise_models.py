"""The small graphs of benchmarks/elementwise_fusion.py (issue 39): one activation and/or an inference-mode
BatchNormalization over a [batch, 21, 21, C] float input, as SavedModels.

Run with a Python that has TensorFlow (a tfaot-dist toolchain environment):

    python benchmarks/elementwise_models.py OUT_DIR C[,C...] VARIANT[,VARIANT...]

Writes OUT_DIR/VARIANT_cC/saved_model for each variant and channel count, and prints one JSON line per
variant: the largest deviation of its activation formula, as TensorFlow evaluates it in float32, from
tf.nn.elu (or relu) over random inputs (the compiled graph's own deviation from TensorFlow is what
`tfaot-dist compile` verifies; the two add up to the variant's deviation from the model's ELU).

Variants (BN = Keras BatchNormalization in inference mode, random moving statistics, as deeptau_small):
    bn          BN only (x * scale + shift per channel once frozen)
    elu         tf.nn.elu only (the worker rewrites it into select(x < 0, exp(x) - 1, x))
    elu_bn      tf.nn.elu then BN: the deeptau_small fusion
    relu_bn     relu then BN
    elu_bn0     tf.nn.elu then an untrained BN (its initial statistics: gamma 1, beta 0, mean 0, variance 1,
                as in the zoo's deeptau_small, whose weights are untrained): x * one constant, no shift
    bn0         the untrained BN only
    eluclamp_bn select(x < 0, exp(min(x, 0)) - 1, x) then BN: exp never sees a positive argument
    elumaxmin_bn  max(x, 0) + min(exp(x) - 1, 0) then BN: no select at all
    eluclampmaxmin_bn  max(x, 0) + (exp(min(x, 0)) - 1) then BN: neither select nor min after exp
    conv        a 3x3 "same" Conv2D of C filters (with bias) only: the baseline of the conv_ variants
    conv_V      that Conv2D, then variant V: the fusion on the output of the runtime's convolution call
    conv_conv   two such Conv2D: the baseline of the conv_V_conv variants
    conv_V_conv conv_V, then another such Conv2D: the fusion between two convolutions, as in deeptau_small
    bnrelu      BN then relu, as in deeptau (conv_bnrelu: what the worker folds into the convolution)
    dense       a Dense of C units over the grid's last axis (Tensordot: Reshape, MatMul, Reshape)
    dense_V     that Dense, then variant V (dense_bn: what the worker folds into the product)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

keras = tf.keras
GRID = 21


def _elu_clamp(x: Any) -> Any:
    return tf.where(x < 0, tf.exp(tf.minimum(x, 0.0)) - 1.0, x)


def _elu_maxmin(x: Any) -> Any:
    return tf.maximum(x, 0.0) + tf.minimum(tf.exp(x) - 1.0, 0.0)


def _elu_clamp_maxmin(x: Any) -> Any:
    return tf.maximum(x, 0.0) + (tf.exp(tf.minimum(x, 0.0)) - 1.0)


# variant -> (activation or None, BN after it?, the activation it stands for, for the deviation)
VARIANTS: dict[str, tuple[Callable[[Any], Any] | None, bool, Callable[[Any], Any] | None]] = {
    "bn": (None, True, None),
    "elu": (tf.nn.elu, False, None),
    "elu_bn": (tf.nn.elu, True, None),
    "relu_bn": (tf.nn.relu, True, None),
    "elu_bn0": (tf.nn.elu, True, None),
    "bn0": (None, True, None),
    "eluclamp_bn": (_elu_clamp, True, tf.nn.elu),
    "elumaxmin_bn": (_elu_maxmin, True, tf.nn.elu),
    "eluclampmaxmin_bn": (_elu_clamp_maxmin, True, tf.nn.elu),
    "bnrelu": (None, True, None),  # relu after the BN: AFTER_BN
}
AFTER_BN = {"bnrelu": tf.nn.relu}


def model(variant: str, channels: int) -> Any:
    x = inp = keras.Input((GRID, GRID, channels), name="x")
    if variant.startswith("conv"):
        x = keras.layers.Conv2D(channels, 3, padding="same")(x)
        variant = variant[len("conv_") :]
    elif variant.startswith("dense"):
        x = keras.layers.Dense(channels)(x)
        variant = variant[len("dense_") :]
    second = variant == "conv" or variant.endswith("_conv")  # conv_conv: two convolutions, nothing between
    variant = variant[: -len("conv")].rstrip("_") if second else variant
    activation, norm, _ = VARIANTS[variant] if variant else (None, False, None)
    if activation is not None:
        x = keras.layers.Lambda(activation)(x)
    if norm:
        layer = keras.layers.BatchNormalization()
        x = layer(x)
        rng = np.random.default_rng(channels)
        if not variant.endswith("bn0"):  # bn0: the initial weights, as in the untrained zoo models
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, channels).astype("float32"),  # gamma
                    rng.normal(0, 0.1, channels).astype("float32"),  # beta
                    rng.normal(0, 0.5, channels).astype("float32"),  # moving mean
                    rng.uniform(0.5, 2.0, channels).astype("float32"),  # moving variance
                ]
            )
    if variant in AFTER_BN:
        x = keras.layers.Lambda(AFTER_BN[variant])(x)
    if second:
        x = keras.layers.Conv2D(channels, 3, padding="same")(x)
    return keras.Model(inp, {"y": x})


def formula_deviation(variant: str) -> float:
    """Largest |formula(x) - tf.nn.elu(x)| in float32 over 1M normal(0, 3) inputs and the edges."""
    activation, _, stands_for = VARIANTS.get(
        variant.replace("conv_", "").replace("_conv", ""), (None, False, None)
    )
    if activation is None or stands_for is None:
        return 0.0
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 3, 1 << 20), [-1e30, -100, -1e-30, 0, 1e-30, 1e-7, 1e30]]).astype(
        "float32"
    )
    return float(np.max(np.abs(activation(tf.constant(x)).numpy() - stands_for(tf.constant(x)).numpy())))


def main(argv: list[str]) -> int:
    out, channel_list, variant_list = argv
    for variant in variant_list.split(","):
        for channels in (int(c) for c in channel_list.split(",")):
            m = model(variant, channels)
            path = os.path.join(out, f"{variant}_c{channels}", "saved_model")
            if hasattr(m, "export"):
                m.export(path, verbose=False)
            else:
                tf.saved_model.save(m, path)
        print(json.dumps({"variant": variant, "formula_deviation": formula_deviation(variant)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
