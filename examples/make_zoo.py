"""A zoo of public architectures shaped like the networks CMS deploys, as SavedModels with aot configs.

Run with a Python that has TensorFlow (a tfaot-dist toolchain environment):

    python examples/make_zoo.py OUT_DIR [--size test|bench] [--keras 2|3] [--batch-sizes 1,4] [NAME ...]

Without names it writes every model. Each model NAME is written to
OUT_DIR/NAME/saved_model with OUT_DIR/NAME/aot_config.yaml beside it (the
aot config names the model zoo_NAME). Weights are untrained, from fixed seeds.

From Python (inside a toolchain), one function per model, each returning the
model's directory:

    import make_zoo
    make_zoo.deepjet(out_dir, size="bench", batch_sizes=(1, 4, 16, 64, 256))

Models (public architectures only; the shapes, not the trained networks):

    deepjet      DeepJet-like: four inputs (global features, charged and neutral candidates,
                 secondary vertices), 1x1 Conv1D stacks per candidate branch into LSTMs, dense head
    deeptau      DeepTau-like: grids of cells (inner 11x11, outer 21x21 at bench size) through
                 Conv2D + BatchNorm + MaxPooling2D, joined with tabular features
    deeptau_small  DeepTau-like with few filters (issue 39): grids of cells (inner 11x11, outer 21x21 at
                 bench size) through 3x3 "same" Conv2D of 16, 24 and 32 filters, each followed by ELU
                 then BatchNormalization, a 1x1 Conv2D, a dense head
    particlenet  ParticleNet-like: kNN on (eta, phi) by pairwise distances and top_k, neighbours
                 gathered (batch_dims=1), EdgeConv blocks, global average pooling; at bench size
                 verified within 1e-4 (verification.tolerance): at level x86-64, without FMA, a
                 near-tie of two distances picks another neighbour for one event of the 511 checked
                 (2.3e-5 from TensorFlow's probabilities; every other element within 1.2e-7)
    transformer  transformer encoder over particles: multi-head attention, LayerNorm, GELU feed-forward
    gru_tagger   int32 token ids -> Embedding(mask_zero) -> two stacked GRUs -> two outputs
                 (class probabilities and a regression value)
    regression64 float64 regression: where, cumsum and clip, then float64 dense layers
    conv3d       Conv3D, MaxPooling3D, AveragePooling3D over a 3-D grid
    pooling      Conv1D and Conv2D branches with Max/Average pooling 1-D and 2-D, global max pooling
    recurrent    every recurrent feature in one model: Masking (zero-padded sequences) into
                 stacked LSTMs, a bidirectional GRU, a SimpleRNN with return_sequences (an output per step)
    rnn_lstm, rnn_gru, rnn_simple, rnn_stacked, rnn_bidirectional, rnn_sequences, rnn_masking
                 one recurrent feature each (the support matrix in the README)

--size test makes small models of the same structure (the test suite
compiles them at three CPU levels); --size bench the sizes `benchmarks/zoo`
times. --keras 2 exports with Keras 2: `tf_keras` on TensorFlow 2.16 and
later, `tf.keras` before (TensorFlow 2.12); the default is the Keras that
`tf.keras` is (Keras 3 from TensorFlow 2.16 on).
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

SIZES = ("test", "bench")
DEFAULT_BATCH_SIZES = (1, 4)
# TensorFlow's and Keras's objects are Any here: tfaot-dist's venv has neither.
Built = tuple[Any, str]  # (a Keras model, its description)

AOT_CONFIG = """\
model:
  name: zoo_{name}
  version: "1.0.0"
  author: tfaot-dist examples
  description: "{description}"

compilation:
  batch_sizes: [{batch_sizes}]
"""
# verification.tolerance of a model at a size (see the model's line in the docstring).
TOLERANCES = {("particlenet", "bench"): 1e-4}

keras = tf.keras  # the Keras that exports; use_keras() changes it


def use_keras(major: int) -> Any:
    """Export with Keras `major` (2 or 3) from now on; returns the module."""
    global keras
    if major == 3:
        import keras as k3

        if not k3.__version__.startswith("3."):
            raise SystemExit(f"Keras 3 asked, this environment has Keras {k3.__version__}")
        keras = k3
    elif major == 2:
        if tf.__version__ >= "2.16":
            import tf_keras

            keras = tf_keras
        else:
            keras = tf.keras
    else:
        raise SystemExit(f"--keras: 2 or 3, not {major}")
    return keras


def keras_major() -> int:
    return int(keras.__version__.split(".")[0]) if hasattr(keras, "__version__") else 2


# ---------------------------------------------------------------- layers made of TensorFlow ops


def _layer(name: str, fn: Callable[..., Any]) -> Any:
    """A Keras layer that calls fn(tensors...) with TensorFlow ops (Keras 3 needs ops inside layers)."""

    layer: Any = keras.layers.Layer  # of the Keras use_keras() chose

    class _Ops(layer):
        def call(self, *args: Any) -> Any:
            return fn(*args)

    _Ops.__name__ = name
    return _Ops(name=name.lower())


def _knn_features(points: Any, features: Any, k: int) -> Any:
    """EdgeConv inputs: for each point its k nearest neighbours' features (by top_k over pairwise
    distances, gathered with batch_dims=1) beside its own: [batch, P, k, 2C]."""
    r = tf.reduce_sum(points * points, axis=-1, keepdims=True)
    distance = r - 2.0 * tf.matmul(points, points, transpose_b=True) + tf.transpose(r, [0, 2, 1])
    _, index = tf.math.top_k(-distance, k=k + 1)
    neighbours = tf.gather(features, index[:, :, 1:], batch_dims=1)
    centre = tf.tile(tf.expand_dims(features, 2), [1, 1, k, 1])
    return tf.concat([centre, neighbours - centre], axis=-1)


def _where_cumsum_clip(x: Any) -> Any:
    leaky = tf.where(x > 0.0, x, 0.1 * x)
    return tf.clip_by_value(tf.cumsum(leaky, axis=-1), -5.0, 5.0)


# ---------------------------------------------------------------- the models: (keras model, description)


def build_deepjet(size: str) -> Built:
    big = size == "bench"
    n_cpf, n_npf, n_sv = (25, 25, 4) if big else (8, 8, 3)
    conv = (64, 32, 32, 8) if big else (16, 8)
    lstm = (150, 50, 50) if big else (16, 8, 8)
    dense = (200,) + (100,) * 7 if big else (32, 32)
    inputs = {
        "global_features": keras.Input((15,), name="global_features"),
        "cpf": keras.Input((n_cpf, 16), name="cpf"),
        "npf": keras.Input((n_npf, 6), name="npf"),
        "sv": keras.Input((n_sv, 12), name="sv"),
    }
    branches = [inputs["global_features"]]
    for key, units in zip(("cpf", "npf", "sv"), lstm):
        a = keras.layers.BatchNormalization(name=f"{key}_norm")(inputs[key])
        for i, filters in enumerate(conv):
            a = keras.layers.Conv1D(filters, 1, activation="relu", name=f"{key}_conv{i}")(a)
        branches.append(keras.layers.LSTM(units, name=f"{key}_lstm")(a))
    a = keras.layers.Concatenate()(branches)
    for i, units in enumerate(dense):
        a = keras.layers.Dense(units, activation="relu", name=f"dense{i}")(a)
    probs = keras.layers.Dense(6, activation="softmax", name="probs")(a)
    return keras.Model(inputs, {"probs": probs}), "DeepJet-like: Conv1D branches into LSTMs, 4 inputs"


def build_deeptau(size: str) -> Built:
    big = size == "bench"
    grids = {"inner": (11, 24), "outer": (21, 24)} if big else {"inner": (5, 8)}
    filters = 64 if big else 16
    inputs = {"tau": keras.Input((20 if big else 6,), name="tau")}
    parts = [keras.layers.Dense(filters, activation="relu", name="tau_dense")(inputs["tau"])]
    for key, (cells, features) in grids.items():
        x = inputs[key] = keras.Input((cells, cells, features), name=key)
        a = keras.layers.Conv2D(filters, 1, name=f"{key}_reduce")(x)
        a = keras.layers.BatchNormalization(name=f"{key}_norm0")(a)
        a = keras.layers.Activation("relu")(a)
        for i in range(2):
            a = keras.layers.Conv2D(filters, 3, padding="same", name=f"{key}_conv{i}")(a)
            a = keras.layers.BatchNormalization(name=f"{key}_norm{i + 1}")(a)
            a = keras.layers.Activation("relu")(a)
        a = keras.layers.MaxPooling2D(2, name=f"{key}_pool")(a)
        a = keras.layers.Conv2D(filters, 3, activation="relu", padding="same", name=f"{key}_conv_last")(a)
        parts.append(keras.layers.Flatten()(a))
    a = keras.layers.Concatenate()(parts)
    a = keras.layers.Dense(filters, activation="relu", name="head")(a)
    probs = keras.layers.Dense(4, activation="softmax", name="probs")(a)
    return keras.Model(
        inputs, {"probs": probs}
    ), "DeepTau-like: Conv2D + BatchNorm + MaxPooling2D over cell grids"


def build_deeptau_small(size: str) -> Built:
    big = size == "bench"
    grids = {"inner": (11, 24), "outer": (21, 24)} if big else {"inner": (5, 4)}
    filters = (16, 24, 32) if big else (16, 24)
    inputs = {"tau": keras.Input((20 if big else 6,), name="tau")}
    parts = [keras.layers.Dense(32, activation="elu", name="tau_dense")(inputs["tau"])]
    for key, (cells, features) in grids.items():
        a = inputs[key] = keras.Input((cells, cells, features), name=key)
        for i, f in enumerate(filters):
            a = keras.layers.Conv2D(f, 3, padding="same", activation="elu", name=f"{key}_conv{i}")(a)
            a = keras.layers.BatchNormalization(name=f"{key}_norm{i}")(a)
        a = keras.layers.Conv2D(8, 1, activation="elu", name=f"{key}_reduce")(a)
        parts.append(keras.layers.Flatten()(a))
    a = keras.layers.Concatenate()(parts)
    for i, units in enumerate((64, 32) if big else (16,)):
        a = keras.layers.Dense(units, activation="elu", name=f"head{i}")(a)
    probs = keras.layers.Dense(4, activation="softmax", name="probs")(a)
    model = keras.Model(inputs, {"probs": probs})
    _as_if_trained(model)
    return model, "DeepTau-like with few filters: Conv2D + ELU + BatchNorm grids"


def _as_if_trained(model: Any) -> None:
    """BatchNormalization statistics and biases away from their initial values, as a trained model's are.

    Untrained, a BatchNormalization is x * one constant (gamma 1, beta 0, mean 0, variance 1) and the
    convolutions' biases are 0: XLA then compiles the ELU + BatchNorm passes into other, scalar loops
    (benchmarks/results/2026-11-27-elementwise-fusion.md), and a benchmark would time what no real model
    runs. Drawn from the seed save() sets.
    """
    for layer in model.layers:
        weights = layer.get_weights()
        if isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta, mean, variance = weights
            layer.set_weights(
                [
                    tf.random.uniform(gamma.shape, 0.5, 1.5).numpy(),
                    tf.random.normal(beta.shape, stddev=0.2).numpy(),
                    tf.random.normal(mean.shape, stddev=0.2).numpy(),
                    tf.random.uniform(variance.shape, 0.5, 2.0).numpy(),
                ]
            )
        elif isinstance(layer, keras.layers.Conv2D) and len(weights) == 2:
            layer.set_weights([weights[0], tf.random.normal(weights[1].shape, stddev=0.1).numpy()])


def build_particlenet(size: str) -> Built:
    big = size == "bench"
    points, k = (50, 16) if big else (16, 4)
    blocks = ((32, 32, 32), (64, 64, 64)) if big else ((16, 16),)
    inputs = {
        "points": keras.Input((points, 2), name="points"),
        "features": keras.Input((points, 4), name="features"),
    }
    coords, a = inputs["points"], keras.layers.BatchNormalization(name="features_norm")(inputs["features"])
    for b, channels in enumerate(blocks):
        edges = _layer(f"KnnEdges{b}", lambda p, f: _knn_features(p, f, k))(coords, a)
        e = edges
        for i, c in enumerate(channels):
            e = keras.layers.Dense(c, use_bias=False, name=f"edge{b}_dense{i}")(e)
            e = keras.layers.BatchNormalization(name=f"edge{b}_norm{i}")(e)
            e = keras.layers.Activation("relu")(e)
        e = _layer(f"EdgeMean{b}", lambda t: tf.reduce_mean(t, axis=2))(e)
        shortcut = keras.layers.Dense(channels[-1], name=f"edge{b}_shortcut")(a)
        a = keras.layers.Activation("relu")(keras.layers.Add()([e, shortcut]))
        coords = a  # later blocks find neighbours in feature space
    a = keras.layers.GlobalAveragePooling1D()(a)
    a = keras.layers.Dense(64 if big else 16, activation="relu", name="head")(a)
    probs = keras.layers.Dense(2, activation="softmax", name="probs")(a)
    return keras.Model(inputs, {"probs": probs}), "ParticleNet-like: kNN (top_k, gather) EdgeConv blocks"


def build_transformer(size: str) -> Built:
    big = size == "bench"
    particles, features = (32, 16) if big else (8, 8)
    width, heads, blocks, ffn = (64, 4, 2, 128) if big else (16, 2, 1, 32)
    x = keras.Input((particles, features), name="particles")
    a = keras.layers.Dense(width, name="embed")(x)
    for b in range(blocks):
        attention = keras.layers.MultiHeadAttention(heads, width // heads, name=f"attention{b}")(a, a)
        a = keras.layers.LayerNormalization(name=f"norm{b}a")(keras.layers.Add()([a, attention]))
        f = keras.layers.Dense(ffn, activation="gelu", name=f"ffn{b}a")(a)
        f = keras.layers.Dense(width, name=f"ffn{b}b")(f)
        a = keras.layers.LayerNormalization(name=f"norm{b}b")(keras.layers.Add()([a, f]))
    a = keras.layers.GlobalAveragePooling1D()(a)
    probs = keras.layers.Dense(5, activation="softmax", name="probs")(a)
    return keras.Model(x, {"probs": probs}), "transformer encoder: multi-head attention, LayerNorm, GELU"


def build_gru_tagger(size: str) -> Built:
    big = size == "bench"
    steps, vocabulary, width = (32, 100, 64) if big else (10, 20, 16)
    ids = keras.Input((steps,), dtype="int32", name="ids")
    a = keras.layers.Embedding(vocabulary, width, mask_zero=True, name="embedding")(ids)
    a = keras.layers.GRU(width, return_sequences=True, name="gru0")(a)
    a = keras.layers.GRU(width // 2, name="gru1")(a)
    probs = keras.layers.Dense(5, activation="softmax", name="probs")(a)
    value = keras.layers.Dense(1, name="value")(a)
    return (
        keras.Model(ids, {"probs": probs, "value": value}),
        "Embedding (mask_zero) + two stacked GRUs, two outputs",
    )


def build_regression64(size: str) -> Built:
    big = size == "bench"
    features, units, layers = (64, 256, 3) if big else (16, 32, 2)
    x = keras.Input((features,), dtype="float64", name="x")
    a = _layer("WhereCumsumClip", _where_cumsum_clip)(x)
    for i in range(layers):
        a = keras.layers.Dense(units, activation="tanh", dtype="float64", name=f"dense{i}")(a)
    y = keras.layers.Dense(1, dtype="float64", name="y")(a)
    return keras.Model(x, {"y": y}), "float64 regression: where, cumsum, clip, dense"


def build_conv3d(size: str) -> Built:
    big = size == "bench"
    cells, filters = (16, 16) if big else (6, 4)
    x = keras.Input((cells, cells, cells, 2), name="grid")
    a = keras.layers.Conv3D(filters, 3, padding="same", activation="relu", name="conv0")(x)
    a = keras.layers.MaxPooling3D(2, name="maxpool")(a)
    a = keras.layers.Conv3D(filters, 3, padding="same", activation="relu", name="conv1")(a)
    a = keras.layers.AveragePooling3D(cells // 4 if big else 1, name="avgpool")(a)
    a = keras.layers.Flatten()(a)
    probs = keras.layers.Dense(3, activation="softmax", name="probs")(a)
    return keras.Model(x, {"probs": probs}), "Conv3D, MaxPooling3D, AveragePooling3D"


def build_pooling(size: str) -> Built:
    big = size == "bench"
    steps, cells, filters = (64, 16, 32) if big else (16, 8, 4)
    seq = keras.Input((steps, 4), name="sequence")
    image = keras.Input((cells, cells, 3), name="image")
    a = keras.layers.Conv1D(filters, 3, activation="relu", name="conv1d")(seq)
    a = keras.layers.MaxPooling1D(2, name="maxpool1d")(a)
    a = keras.layers.AveragePooling1D(2, name="avgpool1d")(a)
    a = keras.layers.GlobalMaxPooling1D()(a)
    b = keras.layers.Conv2D(filters, 3, activation="relu", name="conv2d")(image)
    b = keras.layers.AveragePooling2D(2, name="avgpool2d")(b)
    b = keras.layers.GlobalMaxPooling2D()(b)
    probs = keras.layers.Dense(3, activation="softmax", name="probs")(keras.layers.Concatenate()([a, b]))
    return (
        keras.Model({"sequence": seq, "image": image}, {"probs": probs}),
        "Conv1D and Conv2D with max, average and global pooling",
    )


def _sequence_input(size: str) -> Any:
    return keras.Input((24 if size == "bench" else 6, 5), name="sequence")


def build_recurrent(size: str) -> Built:
    """Masking into stacked LSTMs, a bidirectional GRU and a SimpleRNN that returns sequences."""
    units = 32 if size == "bench" else 8
    x = _sequence_input(size)
    masked = keras.layers.Masking(0.0, name="masking")(x)
    a = keras.layers.LSTM(units, return_sequences=True, name="lstm0")(masked)
    a = keras.layers.LSTM(units, name="lstm1")(a)
    b = keras.layers.Bidirectional(keras.layers.GRU(units), name="bidirectional_gru")(masked)
    c = keras.layers.SimpleRNN(units, return_sequences=True, name="rnn")(masked)
    outputs = {
        "lstm": keras.layers.Dense(3, activation="softmax", name="lstm")(a),
        "bigru": keras.layers.Dense(2, name="bigru")(b),
        "steps": keras.layers.Dense(2, name="steps")(c),
    }
    return keras.Model(x, outputs), "Masking, stacked LSTMs, bidirectional GRU, SimpleRNN sequences"


def _one_recurrent(kind: str) -> Callable[[str], Built]:
    """A model of one recurrent feature (the support matrix's rows)."""

    def build(size: str) -> Built:
        units = 32 if size == "bench" else 8
        x = _sequence_input(size)
        layer: Callable[[], Any] = {
            "lstm": lambda: keras.layers.LSTM(units, name="lstm")(x),
            "gru": lambda: keras.layers.GRU(units, name="gru")(x),
            "simple": lambda: keras.layers.SimpleRNN(units, name="rnn")(x),
            "stacked": lambda: keras.layers.LSTM(units, name="lstm1")(
                keras.layers.LSTM(units, return_sequences=True, name="lstm0")(x)
            ),
            "bidirectional": lambda: keras.layers.Bidirectional(keras.layers.LSTM(units), name="bilstm")(x),
            "sequences": lambda: keras.layers.GRU(units, return_sequences=True, name="gru")(x),
            "masking": lambda: keras.layers.LSTM(units, name="lstm")(keras.layers.Masking(0.0)(x)),
        }[kind]
        y = keras.layers.Dense(2, name="y")(layer())
        return keras.Model(x, {"y": y}), f"recurrent support matrix: {kind}"

    return build


BUILDERS: dict[str, Callable[[str], Built]] = {
    "deepjet": build_deepjet,
    "deeptau": build_deeptau,
    "deeptau_small": build_deeptau_small,
    "particlenet": build_particlenet,
    "transformer": build_transformer,
    "gru_tagger": build_gru_tagger,
    "regression64": build_regression64,
    "conv3d": build_conv3d,
    "pooling": build_pooling,
    "recurrent": build_recurrent,
    **{
        f"rnn_{kind}": _one_recurrent(kind)
        for kind in ("lstm", "gru", "simple", "stacked", "bidirectional", "sequences", "masking")
    },
}
ZOO = [name for name in BUILDERS if not name.startswith("rnn_")]  # the architectures (the rnn_ rows: matrix)
# Seeds by position: a model added later goes at the end, so the others keep their weights.
SEED_ORDER = [*sorted(BUILDERS.keys() - {"deeptau_small"}), "deeptau_small"]


def save(
    name: str, out_dir: str, size: str = "test", batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES
) -> str:
    """Build model `name`, export OUT_DIR/NAME/saved_model and write OUT_DIR/NAME/aot_config.yaml; returns
    OUT_DIR/NAME. The serving signature's inputs and outputs are named as in the model's docstring."""
    if size not in SIZES:
        raise ValueError(f"size: one of {SIZES}, not {size!r}")
    keras.utils.set_random_seed(SEED_ORDER.index(name) + 1)
    model, description = BUILDERS[name](size)
    model_dir = os.path.join(out_dir, name)
    os.makedirs(model_dir, exist_ok=True)
    saved_model = os.path.join(model_dir, "saved_model")
    if keras_major() >= 3:
        model.export(saved_model, verbose=False)
    else:  # Keras 2: the model's call is the serving signature
        tf.saved_model.save(model, saved_model)
    with open(os.path.join(model_dir, "aot_config.yaml"), "w") as f:
        f.write(
            AOT_CONFIG.format(
                name=name, description=description, batch_sizes=", ".join(str(n) for n in batch_sizes)
            )
        )
        if (name, size) in TOLERANCES:
            f.write(f"\nverification:\n  tolerance: {TOLERANCES[name, size]!r}\n")
    return model_dir


def _function(name: str) -> Callable[..., str]:
    def make(out_dir: str, size: str = "test", batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES) -> str:
        return save(name, out_dir, size, batch_sizes)

    make.__name__ = name
    make.__doc__ = f"Write OUT_DIR/{name}/ (saved_model, aot_config.yaml); returns that directory."
    return make


deepjet, deeptau, deeptau_small, particlenet, transformer = map(
    _function, ("deepjet", "deeptau", "deeptau_small", "particlenet", "transformer")
)
gru_tagger, regression64, conv3d, pooling, recurrent = map(
    _function, ("gru_tagger", "regression64", "conv3d", "pooling", "recurrent")
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(BUILDERS)}")
    parser.add_argument("--size", choices=SIZES, default="test")
    parser.add_argument("--keras", type=int, choices=(2, 3), help="Keras major version to export with")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)))
    args = parser.parse_intermixed_args(argv)
    if args.keras:
        use_keras(args.keras)
    unknown = [n for n in args.names if n not in BUILDERS]
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    sizes = tuple(int(n) for n in args.batch_sizes.split(","))
    for name in args.names or list(BUILDERS):
        print(f"wrote {save(name, args.out_dir, args.size, sizes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
