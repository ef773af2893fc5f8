"""SavedModels whose signatures a check must refuse (tests/test_bounds.py). Run in a toolchain:

python make_hostile_models.py OUT_DIR

keys  an output key tfcompile cannot take ('out-put')
huge  2**31 elements per row
wide  4M float64 per row: within the row bound, 2 GiB of inputs at batch size 64
"""

import os
import sys
from typing import Any, Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf


def save(path: str, fn: Callable[[Any], dict[str, Any]], row: list[int], dtype: Any) -> None:
    module = tf.Module()
    module.serve = tf.function(fn, input_signature=[tf.TensorSpec([None, *row], dtype)])
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})


def main(out: str) -> None:
    save(f"{out}/keys", lambda x: {"out-put": x * 2.0}, [2], tf.float32)
    save(f"{out}/huge", lambda x: {"y": tf.reduce_sum(x, axis=1)}, [2147483648], tf.float32)
    save(f"{out}/wide", lambda x: {"y": tf.reduce_sum(x, axis=1)}, [4194304], tf.float64)


if __name__ == "__main__":
    main(sys.argv[1])
