"""SavedModels whose signatures a check must refuse (tests/test_bounds.py). Run in a toolchain:

python make_hostile_models.py OUT_DIR

keys  an output key tfcompile cannot take ('out-put')
huge  2**31 elements per row
wide  4M float64 per row: within the row bound, 2 GiB of inputs at batch size 64
"""

import os
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf


class Keys(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def serve(self, x: Any) -> Any:
        return {"out-put": x * 2.0}


class Huge(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 2147483648], tf.float32)])
    def serve(self, x: Any) -> Any:
        return {"y": tf.reduce_sum(x, axis=1)}


class Wide(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 4194304], tf.float64)])
    def serve(self, x: Any) -> Any:
        return {"y": tf.reduce_sum(x, axis=1)}


def main(out: str) -> None:
    for name, module in (("keys", Keys()), ("huge", Huge()), ("wide", Wide())):
        tf.saved_model.save(module, f"{out}/{name}", signatures={"serving_default": module.serve})


if __name__ == "__main__":
    main(sys.argv[1])
