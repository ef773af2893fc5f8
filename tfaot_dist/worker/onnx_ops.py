"""ONNX nodes as TensorFlow ops of the same semantics, in ONNX's layout (used by onnx_convert.py).

OPS maps an op type to fn(args, attrs, opset, n_outputs): args are the node's inputs as tensors (None
for an omitted optional one), attrs its attributes as Python values; it returns one tensor or a list.
Only this table's ops are converted: onnx_convert.py refuses any other before converting anything.
TensorFlow is imported by load_tensorflow(), not with this module: a refusal needs only the table's
names, and importing TensorFlow takes seconds.
"""

# Annotations are not evaluated, as in the other workers.
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

tf: Any = None  # the tensorflow module once load_tensorflow() has run


def load_tensorflow() -> None:
    global tf
    import tensorflow

    tf = tensorflow


def tf_op(name: str) -> Callable[..., Any]:
    """TensorFlow's function name ("nn.relu"), looked up when called: OPS is made before the import."""

    def call(*args: Any, **kwargs: Any) -> Any:
        function = tf
        for part in name.split("."):
            function = getattr(function, part)
        return function(*args, **kwargs)

    return call


Args = list[Any]
Attrs = dict[str, Any]
Op = Callable[[Args, Attrs, int, int], Any]

# ONNX TensorProto element types -> TensorFlow dtype names (Cast's "to").
DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


def static(x: Any) -> Any:
    """x's value as a NumPy array when it is known while tracing (constants, folded shapes), else None."""
    if x is None:
        return None
    return tf.get_static_value(x)


def ints(x: Any, what: str) -> list[int]:
    value = static(x)
    if value is None:
        raise ValueError(f"{what} must be known when the graph is converted")
    return [int(v) for v in np.reshape(value, [-1])]


def rank(x: Any) -> int:
    return int(x.shape.rank)


def axis_of(axis: int, r: int) -> int:
    return axis + r if axis < 0 else axis


# ---------------------------------------------------------------- elementwise


def binary(fn: Callable[[Any, Any], Any]) -> Op:
    return lambda a, at, o, n: fn(a[0], a[1])


def unary(fn: Callable[[Any], Any]) -> Op:
    return lambda a, at, o, n: fn(a[0])


def div(a: Args, at: Attrs, o: int, n: int) -> Any:
    if a[0].dtype.is_integer:
        return tf.math.truncatediv(a[0], a[1])
    return tf.math.divide(a[0], a[1])


def variadic(fn: Callable[[Any, Any], Any]) -> Op:
    def apply(a: Args, at: Attrs, o: int, n: int) -> Any:
        out = a[0]
        for x in a[1:]:
            out = fn(out, x)
        return out

    return apply


def clip(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    low = a[1] if len(a) > 1 and a[1] is not None else at.get("min")
    high = a[2] if len(a) > 2 and a[2] is not None else at.get("max")
    if low is not None:
        x = tf.maximum(x, tf.cast(low, x.dtype))
    if high is not None:
        x = tf.minimum(x, tf.cast(high, x.dtype))
    return x


def elu(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, alpha = a[0], at.get("alpha", 1.0)
    return tf.where(x > 0, x, alpha * (tf.exp(x) - 1))


def leaky_relu(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.nn.leaky_relu(a[0], at.get("alpha", 0.01))


def gelu(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.nn.gelu(a[0], approximate=at.get("approximate", b"none").decode() == "tanh")


def prelu(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.where(a[0] < 0, a[0] * a[1], a[0])


def selu(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, alpha, gamma = (
        a[0],
        at.get("alpha", 1.67326319217681884765625),
        at.get("gamma", 1.05070102214813232421875),
    )
    return gamma * tf.where(x > 0, x, alpha * (tf.exp(x) - 1))


def hard_sigmoid(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.clip_by_value(at.get("alpha", 0.2) * a[0] + at.get("beta", 0.5), 0.0, 1.0)


def mod(a: Args, at: Attrs, o: int, n: int) -> Any:
    return (tf.truncatemod if at.get("fmod", 0) else tf.math.floormod)(a[0], a[1])


def cast(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.cast(a[0], DTYPES[at["to"]])


def where(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.where(a[0], a[1], a[2])


# ---------------------------------------------------------------- linear algebra


def matmul(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, y = a
    if rank(x) == 1:
        return tf.squeeze(tf.matmul(x[None, :], y), -2)
    if rank(y) == 1:
        return tf.squeeze(tf.matmul(x, y[:, None]), -1)
    return tf.linalg.matmul(x, y)


def gemm(a: Args, at: Attrs, o: int, n: int) -> Any:
    out = tf.matmul(a[0], a[1], transpose_a=bool(at.get("transA")), transpose_b=bool(at.get("transB")))
    out = out * at.get("alpha", 1.0) if at.get("alpha", 1.0) != 1.0 else out
    if len(a) > 2 and a[2] is not None:
        out = out + at.get("beta", 1.0) * a[2]
    return out


def einsum(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.einsum(at["equation"].decode().replace(" ", ""), *a)


# ---------------------------------------------------------------- convolution and pooling


def channels_last(x: Any) -> Any:
    r = rank(x)
    return tf.transpose(x, [0, *range(2, r), 1])


def channels_first(x: Any) -> Any:
    r = rank(x)
    return tf.transpose(x, [0, r - 1, *range(1, r - 1)])


def explicit_pads(
    at: Attrs, x: Any, kernel: list[int], strides: list[int], dilations: list[int]
) -> list[int]:
    """ONNX pads [begin..., end...] of the spatial axes, auto_pad resolved (x channels-first)."""
    spatial = len(kernel)
    mode = at.get("auto_pad", b"NOTSET").decode()
    if mode in ("NOTSET", "VALID"):
        pads = list(at.get("pads", [0] * 2 * spatial)) if mode == "NOTSET" else [0] * 2 * spatial
        return [int(p) for p in pads]
    begin, end = [], []
    for i in range(spatial):
        size = int(x.shape[2 + i])
        out = -(-size // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin + end


def pad_spatial(x: Any, pads: list[int], value: float = 0.0) -> Any:
    """x channels-last padded by ONNX spatial pads."""
    spatial = len(pads) // 2
    if not any(pads):
        return x
    paddings = [[0, 0]] + [[pads[i], pads[i + spatial]] for i in range(spatial)] + [[0, 0]]
    return tf.pad(x, paddings, constant_values=value)


def conv(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, w = a[0], a[1]
    spatial = rank(x) - 2
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    strides = list(at.get("strides", [1] * spatial))
    dilations = list(at.get("dilations", [1] * spatial))
    pads = explicit_pads(at, x, kernel, strides, dilations)
    group = int(at.get("group", 1))
    xl = pad_spatial(channels_last(x), pads)
    # ONNX weights (M, C/group, k...) -> TensorFlow filters (k..., C/group, M).
    wl = tf.transpose(w, [*range(2, spatial + 2), 1, 0])
    xs = tf.split(xl, group, axis=-1) if group > 1 else [xl]
    ws = tf.split(wl, group, axis=-1) if group > 1 else [wl]
    # TensorFlow takes strides or dilations above 1, not both: then every stride-th output of stride 1.
    both = max(strides) > 1 and max(dilations) > 1
    step = [1] * spatial if both else strides
    outs = [tf.nn.convolution(xi, wi, step, "VALID", dilations=dilations) for xi, wi in zip(xs, ws)]
    out = tf.concat(outs, axis=-1) if group > 1 else outs[0]
    if both:
        out = out[(slice(None), *(slice(None, None, s) for s in strides), slice(None))]
    if len(a) > 2 and a[2] is not None:
        out = out + a[2]
    return channels_first(out)


def pool(kind: str) -> Op:
    def apply(a: Args, at: Attrs, o: int, n: int) -> Any:
        x = a[0]
        spatial = rank(x) - 2
        kernel = list(at["kernel_shape"])
        strides = list(at.get("strides", [1] * spatial))
        dilations = list(at.get("dilations", [1] * spatial))
        if at.get("ceil_mode", 0):
            raise ValueError("ceil_mode=1 pools are not converted")
        pads = explicit_pads(at, x, kernel, strides, dilations)
        xl = channels_last(x)
        if kind == "MAX":
            low = x.dtype.min
            out = tf.nn.pool(pad_spatial(xl, pads, low), kernel, "MAX", strides=strides, dilations=dilations)
        else:
            total = tf.nn.pool(pad_spatial(xl, pads), kernel, "AVG", strides=strides) * float(np.prod(kernel))
            ones = tf.ones_like(xl[:1, ..., :1])
            if at.get("count_include_pad", 0):
                ones = pad_spatial(ones, pads, 1.0)
            else:
                ones = pad_spatial(ones, pads, 0.0)
            count = tf.nn.pool(ones, kernel, "AVG", strides=strides) * float(np.prod(kernel))
            out = total / count
        return channels_first(out)

    return apply


def global_pool(fn: Callable[..., Any]) -> Op:
    return lambda a, at, o, n: fn(a[0], axis=list(range(2, rank(a[0]))), keepdims=True)


def batch_norm(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, scale, bias, mean, var = a[:5]
    shape = [-1] + [1] * (rank(x) - 2)
    factor = scale / tf.sqrt(var + at.get("epsilon", 1e-5))
    return x * tf.reshape(factor, shape) + tf.reshape(bias - mean * factor, shape)


def layer_norm(a: Args, at: Attrs, o: int, n: int) -> Any:
    if n > 1:
        raise ValueError("LayerNormalization's mean and inverse deviation outputs are not converted")
    x = a[0]
    axes = list(range(axis_of(at.get("axis", -1), rank(x)), rank(x)))
    mean, var = tf.nn.moments(x, axes, keepdims=True)
    out = (x - mean) / tf.sqrt(var + at.get("epsilon", 1e-5)) * a[1]
    return out + a[2] if len(a) > 2 and a[2] is not None else out


def softmax(fn: Callable[..., Any]) -> Op:
    def apply(a: Args, at: Attrs, o: int, n: int) -> Any:
        x = a[0]
        axis = axis_of(at.get("axis", -1 if o >= 13 else 1), rank(x))
        if o >= 13 or axis == rank(x) - 1:
            return fn(x, axis=axis)
        flat = tf.reshape(x, [tf.reduce_prod(tf.shape(x)[:axis]), -1])  # opsets < 13: 2-D semantics
        return tf.reshape(fn(flat, axis=-1), tf.shape(x))

    return apply


# ---------------------------------------------------------------- shapes and indexing


def reshape(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, shape = a[0], tf.cast(a[1], tf.int64)
    if not at.get("allowzero", 0):
        m = shape.shape[0]
        have = tf.shape(x, out_type=tf.int64)
        have = tf.concat([have, tf.zeros([tf.maximum(0, m - tf.size(have))], tf.int64)], 0)[:m]
        shape = tf.where(tf.equal(shape, 0), have, shape)
    return tf.reshape(x, shape)


def flatten(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    axis = axis_of(at.get("axis", 1), rank(x))
    dims = tf.shape(x)
    return tf.reshape(x, [tf.reduce_prod(dims[:axis]), tf.reduce_prod(dims[axis:])])


def transpose(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.transpose(a[0], at.get("perm", list(reversed(range(rank(a[0]))))))


def axes_from(a: Args, at: Attrs, o: int, since: int) -> list[int] | None:
    """An op's axes: the attribute before opset since, the second input from it (None: not given)."""
    if o < since:
        return list(at["axes"]) if "axes" in at else None
    return ints(a[1], "axes") if len(a) > 1 and a[1] is not None else None


def squeeze(a: Args, at: Attrs, o: int, n: int) -> Any:
    axes = axes_from(a, at, o, 13)
    return tf.squeeze(a[0], [axis_of(x, rank(a[0])) for x in axes] if axes is not None else None)


def unsqueeze(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    axes = axes_from(a, at, o, 13) or []
    out_rank = rank(x) + len(axes)
    for axis in sorted(axis_of(v, out_rank) for v in axes):
        x = tf.expand_dims(x, axis)
    return x


def concat(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.concat([x for x in a if x is not None], axis=at["axis"])


def split(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    axis = axis_of(at.get("axis", 0), rank(x))
    sizes = axes_from(a, {"axes": at["split"]} if "split" in at else {}, o, 13)
    if sizes is None:
        size = int(x.shape[axis])
        each = -(-size // n)
        sizes = [each] * (n - 1) + [size - each * (n - 1)]
    return tf.split(x, sizes, axis=axis)


def slice_(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    starts, ends = ints(a[1], "Slice starts"), ints(a[2], "Slice ends")
    axes = ints(a[3], "Slice axes") if len(a) > 3 and a[3] is not None else list(range(len(starts)))
    steps = ints(a[4], "Slice steps") if len(a) > 4 and a[4] is not None else [1] * len(starts)
    index: list[Any] = [slice(None)] * rank(x)
    big = 2**62
    for start, end, axis, step in zip(starts, ends, axes, steps):
        stop = None if end >= big or (step < 0 and end <= -big) else end
        index[axis_of(axis, rank(x))] = slice(start, stop, step)
    return x[tuple(index)]


def normalized_indices(indices: Any, size: Any) -> Any:
    size = tf.cast(size, indices.dtype)
    return tf.where(indices < 0, indices + size, indices)


def gather(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, indices = a
    axis = axis_of(at.get("axis", 0), rank(x))
    return tf.gather(x, normalized_indices(indices, tf.shape(x)[axis]), axis=axis)


def gather_elements(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, indices = a
    axis = axis_of(at.get("axis", 0), rank(x))
    indices = tf.cast(normalized_indices(indices, tf.shape(x)[axis]), tf.int64)
    shape = tf.shape(indices, out_type=tf.int64)
    grids = tf.meshgrid(*[tf.range(shape[i]) for i in range(rank(indices))], indexing="ij")
    grids[axis] = indices
    return tf.gather_nd(x, tf.stack(grids, axis=-1))


def gather_nd(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.gather_nd(a[0], a[1], batch_dims=at.get("batch_dims", 0))


def top_k(a: Args, at: Attrs, o: int, n: int) -> Any:
    x, k = a[0], tf.reshape(a[1], [])
    axis = axis_of(at.get("axis", -1), rank(x))
    last = axis == rank(x) - 1
    perm = [*[i for i in range(rank(x)) if i != axis], axis]
    xt = x if last else tf.transpose(x, perm)
    largest = at.get("largest", 1)
    values, indices = tf.math.top_k(xt if largest else -xt, k=tf.cast(k, tf.int32), sorted=True)
    values = values if largest else -values
    if not last:
        back = list(np.argsort(perm))
        values, indices = tf.transpose(values, back), tf.transpose(indices, back)
    return [values, tf.cast(indices, tf.int64)]


def arg_max(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    axis = axis_of(at.get("axis", 0), rank(x))
    if at.get("select_last_index", 0):
        size = tf.shape(x, out_type=tf.int64)[axis]
        out = size - 1 - tf.argmax(tf.reverse(x, [axis]), axis=axis)
    else:
        out = tf.argmax(x, axis=axis)
    return tf.expand_dims(out, axis) if at.get("keepdims", 1) else out


def shape(a: Args, at: Attrs, o: int, n: int) -> Any:
    dims = tf.shape(a[0], out_type=tf.int64)
    return dims[at.get("start", 0) : at.get("end", rank(a[0]))]


def tile(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.tile(a[0], tf.cast(a[1], tf.int64))


def size(a: Args, at: Attrs, o: int, n: int) -> Any:
    return tf.size(a[0], out_type=tf.int64)


def expand(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    target = tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), tf.cast(a[1], tf.int64))
    return tf.broadcast_to(x, target)


def constant_of_shape(a: Args, at: Attrs, o: int, n: int) -> Any:
    from onnx import numpy_helper

    value = numpy_helper.to_array(at["value"]).reshape([]) if "value" in at else np.float32(0)
    return tf.fill(tf.cast(a[0], tf.int64), tf.constant(value))


def constant(a: Args, at: Attrs, o: int, n: int) -> Any:
    from onnx import numpy_helper

    if "value" in at:
        return tf.constant(numpy_helper.to_array(at["value"]))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
        if key in at:
            return tf.constant(np.array(at[key], dtype))
    for key in ("value_int", "value_ints"):
        if key in at:
            return tf.constant(np.array(at[key], np.int64))
    raise ValueError(f"a Constant with {sorted(at)} is not converted")


def range_(a: Args, at: Attrs, o: int, n: int) -> Any:
    start, limit, delta = (tf.reshape(x, []) for x in a)
    return tf.range(start, limit, delta, dtype=start.dtype)


def pad(a: Args, at: Attrs, o: int, n: int) -> Any:
    x = a[0]
    pads = list(at["pads"]) if o < 11 else ints(a[1], "Pad pads")
    value = a[2] if len(a) > 2 and a[2] is not None else tf.zeros([], x.dtype)
    axes = ints(a[3], "Pad axes") if len(a) > 3 and a[3] is not None else list(range(rank(x)))
    paddings = [[0, 0] for _ in range(rank(x))]
    for i, axis in enumerate(axes):
        paddings[axis_of(axis, rank(x))] = [pads[i], pads[i + len(axes)]]
    mode = at.get("mode", b"constant").decode()
    if mode == "constant":
        return tf.pad(x, paddings, constant_values=tf.reshape(value, []))
    if mode == "reflect":
        return tf.pad(x, paddings, mode="REFLECT")
    return edge_pad(x, paddings)


def edge_pad(x: Any, paddings: list[list[int]]) -> Any:
    for axis, (before, after) in enumerate(paddings):
        if before or after:
            first = tf.gather(x, [0] * before, axis=axis)
            last = tf.gather(x, [int(x.shape[axis]) - 1] * after, axis=axis)
            x = tf.concat([first, x, last], axis=axis)
    return x


def cum_sum(a: Args, at: Attrs, o: int, n: int) -> Any:
    axis = ints(a[1], "CumSum axis")[0]
    return tf.cumsum(a[0], axis=axis, exclusive=bool(at.get("exclusive")), reverse=bool(at.get("reverse")))


def reduce(fn: Callable[..., Any], since: int = 18) -> Op:
    def apply(a: Args, at: Attrs, o: int, n: int) -> Any:
        axes = axes_from(a, at, o, since)
        if axes is None and at.get("noop_with_empty_axes", 0):
            return a[0]
        return fn(a[0], axis=axes, keepdims=bool(at.get("keepdims", 1)))

    return apply


# ---------------------------------------------------------------- recurrent layers


def recurrent(cell: Callable[[Any, Any, Any, int, Attrs], Any], gates: int, states: int) -> Op:
    """LSTM (gates iofc, states h and c) and GRU (gates zrh, state h) as one tf.scan per direction, a
    While loop XLA compiles; ONNX's outputs Y, Y_h (and Y_c) in its layout."""

    def apply(a: Args, at: Attrs, o: int, n: int) -> Any:
        x, w, r = a[0], a[1], a[2]
        opt: list[Any] = [
            a[i] if len(a) > i else None for i in range(3, 8)
        ]  # B, sequence_lens, initial h, c, P
        if opt[1] is not None or opt[4] is not None or "activations" in at or at.get("clip") is not None:
            raise ValueError("sequence_lens, peepholes, clip and other activations are not converted")
        if at.get("input_forget", 0):
            raise ValueError("input_forget is not converted")
        layout = at.get("layout", 0)
        if layout:  # time-major inside: [seq, batch, input] and states [dirs, batch, hidden]
            x = tf.transpose(x, [1, 0, 2])
            opt[2:4] = [tf.transpose(s, [1, 0, 2]) if s is not None else None for s in opt[2:4]]
        hidden = int(at["hidden_size"])
        direction = at.get("direction", b"forward").decode()
        dirs = (
            ["reverse"]
            if direction == "reverse"
            else ["forward", "reverse"][: 2 if direction == "bidirectional" else 1]
        )
        bias = opt[0] if opt[0] is not None else tf.zeros([len(dirs), 2 * gates * hidden], x.dtype)
        batch = tf.shape(x)[1]
        ys, finals = [], []
        for d, way in enumerate(dirs):
            init = [
                opt[2 + s][d] if opt[2 + s] is not None else tf.zeros([batch, hidden], x.dtype)
                for s in range(states)
            ]
            seq = tf.reverse(x, [0]) if way == "reverse" else x
            xw = tf.einsum("tbi,gi->tbg", seq, w[d]) + bias[d][: gates * hidden]
            rb = bias[d][gates * hidden :]

            def step(carry: Any, xt: Any, d: int = d, rb: Any = rb) -> Any:
                return cell(carry, xt, (r[d], rb), hidden, at)

            out = tf.scan(step, xw, initializer=tuple(init))
            hs = tf.reverse(out[0], [0]) if way == "reverse" else out[0]
            ys.append(hs)
            finals.append([state[-1] for state in out])
        y = tf.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
        if layout:
            y = tf.transpose(y, [2, 0, 1, 3])
        last = [tf.stack([f[s] for f in finals], axis=0) for s in range(states)]
        if layout:
            last = [tf.transpose(s, [1, 0, 2]) for s in last]
        return [y, *last][:n]

    return apply


def lstm_cell(carry: Any, xt: Any, rec: Any, hidden: int, at: Attrs) -> Any:
    h, c = carry
    gates = xt + tf.matmul(h, rec[0], transpose_b=True) + rec[1]
    i, o, f, cc = tf.split(gates, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(cc)
    return (tf.sigmoid(o) * tf.tanh(c), c)


def gru_cell(carry: Any, xt: Any, rec: Any, hidden: int, at: Attrs) -> Any:
    # One product by h per step where ONNX's formula allows it: all three gates with
    # linear_before_reset (PyTorch's GRU), the update and reset gates together without it (the
    # candidate's product then needs the reset gate first). At batch sizes of 32 and more a step is
    # mostly these products, and one wide product runs faster than three narrow ones.
    (h,), (rw, rb) = carry, rec
    xz, xr, xh = tf.split(xt, 3, axis=-1)
    if at.get("linear_before_reset", 0):
        hz, hr, hh = tf.split(tf.matmul(h, rw, transpose_b=True) + rb, 3, axis=-1)
        z, reset = tf.sigmoid(xz + hz), tf.sigmoid(xr + hr)
        candidate = tf.tanh(xh + reset * hh)
    else:
        hz, hr = tf.split(tf.matmul(h, rw[: 2 * hidden], transpose_b=True) + rb[: 2 * hidden], 2, axis=-1)
        z, reset = tf.sigmoid(xz + hz), tf.sigmoid(xr + hr)
        candidate = tf.tanh(xh + tf.matmul(reset * h, rw[2 * hidden :], transpose_b=True) + rb[2 * hidden :])
    return ((1 - z) * candidate + z * h,)


def identity(a: Args, at: Attrs, o: int, n: int) -> Any:
    return [tf.identity(a[0])] + [tf.ones_like(a[0], tf.bool)] * (n - 1)  # Dropout's mask: all kept


OPS: dict[str, Op] = {
    "Add": binary(tf_op("add")),
    "Sub": binary(tf_op("subtract")),
    "Mul": binary(tf_op("multiply")),
    "Div": div,
    "Pow": binary(lambda x, y: tf.pow(x, tf.cast(y, x.dtype))),
    "Min": variadic(tf_op("minimum")),
    "Max": variadic(tf_op("maximum")),
    "Sum": variadic(tf_op("add")),
    "Equal": binary(tf_op("equal")),
    "Less": binary(tf_op("less")),
    "LessOrEqual": binary(tf_op("less_equal")),
    "Greater": binary(tf_op("greater")),
    "GreaterOrEqual": binary(tf_op("greater_equal")),
    "And": binary(tf_op("logical_and")),
    "Or": binary(tf_op("logical_or")),
    "Not": unary(tf_op("logical_not")),
    "Where": where,
    "Relu": unary(tf_op("nn.relu")),
    "Sigmoid": unary(tf_op("sigmoid")),
    "Tanh": unary(tf_op("tanh")),
    "Elu": elu,
    "LeakyRelu": leaky_relu,
    "Softplus": unary(tf_op("nn.softplus")),
    "Erf": unary(tf_op("math.erf")),
    "Gelu": gelu,
    "PRelu": prelu,
    "Selu": selu,
    "HardSigmoid": hard_sigmoid,
    "Sin": unary(tf_op("sin")),
    "Cos": unary(tf_op("cos")),
    "Mod": mod,
    "Sqrt": unary(tf_op("sqrt")),
    "Reciprocal": unary(tf_op("math.reciprocal")),
    "Exp": unary(tf_op("exp")),
    "Log": unary(tf_op("math.log")),
    "Neg": unary(tf_op("negative")),
    "Abs": unary(tf_op("abs")),
    "Floor": unary(tf_op("floor")),
    "Ceil": unary(tf_op("math.ceil")),
    "Sign": unary(tf_op("sign")),
    "Clip": clip,
    "Cast": cast,
    "MatMul": matmul,
    "Gemm": gemm,
    "Einsum": einsum,
    "Conv": conv,
    "MaxPool": pool("MAX"),
    "AveragePool": pool("AVG"),
    "GlobalAveragePool": global_pool(tf_op("reduce_mean")),
    "GlobalMaxPool": global_pool(tf_op("reduce_max")),
    "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "Softmax": softmax(tf_op("nn.softmax")),
    "LogSoftmax": softmax(tf_op("nn.log_softmax")),
    "Reshape": reshape,
    "Flatten": flatten,
    "Transpose": transpose,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "TopK": top_k,
    "ArgMax": arg_max,
    "Shape": shape,
    "Expand": expand,
    "Tile": tile,
    "Size": size,
    "ConstantOfShape": constant_of_shape,
    "Constant": constant,
    "Range": range_,
    "Pad": pad,
    "CumSum": cum_sum,
    "ReduceMean": reduce(tf_op("reduce_mean")),
    "ReduceSum": reduce(tf_op("reduce_sum"), since=13),
    "ReduceMax": reduce(tf_op("reduce_max")),
    "ReduceMin": reduce(tf_op("reduce_min")),
    "ReduceProd": reduce(tf_op("reduce_prod")),
    "LSTM": recurrent(lstm_cell, 4, 2),
    "GRU": recurrent(gru_cell, 3, 1),
    "Identity": identity,
    "Dropout": identity,
}
