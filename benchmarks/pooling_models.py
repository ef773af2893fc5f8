"""The small graphs of benchmarks/pooling_rewrite.py (issue 39): one pooling layer of the zoo's `pooling` and
`conv3d` models at bench size, as Keras writes it (XLA's reduce_window: "pool"), as a reshape and a reduce over
the window axes ("reduce") and as the max or sum of the window's strided slices ("slices"), as SavedModels.

Run with a Python that has TensorFlow (a tfaot-dist toolchain environment):

    python benchmarks/pooling_models.py OUT_DIR

Writes OUT_DIR/CASE_FORM/saved_model for each case of CASES and form "pool" or "reduce".
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

keras = tf.keras
# case -> (Keras layer, input shape without the batch, window): the zoo's poolings at bench size
CASES: dict[str, tuple[Any, tuple[int, ...], int]] = {
    "maxpool1d": (keras.layers.MaxPooling1D, (62, 32), 2),
    "avgpool1d": (keras.layers.AveragePooling1D, (31, 32), 2),
    "avgpool2d": (keras.layers.AveragePooling2D, (14, 14, 32), 2),
    "maxpool3d": (keras.layers.MaxPooling3D, (16, 16, 16, 16), 2),
    "avgpool3d": (keras.layers.AveragePooling3D, (8, 8, 8, 16), 4),
}


def tiled_reduce(x: Any, window: int, is_max: bool) -> Any:
    """The pooling rewrite's form: drop the rows no window reads, split each spatial axis, reduce."""
    shape = x.shape.as_list()
    outputs = [s // window for s in shape[1:-1]]
    x = x[(slice(None), *[slice(0, o * window) for o in outputs])]
    tiles = [d for o in outputs for d in (o, window)]
    x = tf.reshape(x, [-1, *tiles, shape[-1]])
    axes = list(range(2, 2 * len(outputs) + 1, 2))
    return tf.reduce_max(x, axis=axes) if is_max else tf.reduce_mean(x, axis=axes)


def tiled_slices(x: Any, window: int, is_max: bool) -> Any:
    """The same as elementwise ops: the window's k^d strided slices, each [N, H/k, W/k, C], combined by
    max or added and scaled (one loop fusion over the output, the channels innermost)."""
    shape = x.shape.as_list()
    outputs = [s // window for s in shape[1:-1]]
    offsets: list[list[int]] = [[]]
    for _ in outputs:
        offsets = [[*o, i] for o in offsets for i in range(window)]
    parts = [
        x[(slice(None), *[slice(i, i + o * window, window) for i, o in zip(offset, outputs)])]
        for offset in offsets
    ]
    y = parts[0]
    for part in parts[1:]:
        y = tf.maximum(y, part) if is_max else y + part
    return y if is_max else y * (1.0 / len(parts))


FORMS = {"reduce": tiled_reduce, "slices": tiled_slices}


def model(case: str, form: str) -> Any:
    layer, shape, window = CASES[case]
    inp = keras.Input(shape, name="x")
    if form == "pool":
        y = layer(window)(inp)
    else:
        y = keras.layers.Lambda(lambda x: FORMS[form](x, window, case.startswith("max")))(inp)
    return keras.Model(inp, {"y": y})


def main(argv: list[str]) -> int:
    (out,) = argv
    for case in CASES:
        for form in ("pool", *FORMS):
            m = model(case, form)
            path = os.path.join(out, f"{case}_{form}", "saved_model")
            if hasattr(m, "export"):
                m.export(path, verbose=False)
            else:
                tf.saved_model.save(m, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
