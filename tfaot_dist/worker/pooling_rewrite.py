"""Pooling whose window equals its stride, without XLA's reduce_window (issue 39).

Loaded by graph_rewrites.py from its own directory (the worker runs with -I), so like it this file
uses only the standard library, TensorFlow and NumPy.

XLA compiles MaxPool/AvgPool (and their 3-D forms) as a reduce_window: a loop over output elements
with the window inside, one float at a time. When the window equals the stride with VALID padding
(Keras' default), the windows tile the input (the trailing rows no window reads are dropped), and
the same numbers come from graphs XLA compiles into faster loops (form(): which one, measured):
the max, or sum times 1/window size, of the window's strided slices, one per window offset; or
the input reshaped to [N, H/kh, kh, W/kw, kw, C] and reduced over the window axes. XLA vectorizes
the slices' loop for 2-D and 3-D windows (packed ymm code; reduce_window and the reduce are scalar);
for a 1-D window it does not, and the reduce is the faster of the two. Max is exact; the mean adds
the same elements in another order (within rounding).
"""

# Annotations are not evaluated: a release's older Python runs this file too.
from __future__ import annotations

from collections.abc import Callable
from typing import Any

POOLS = {"MaxPool": 2, "AvgPool": 2, "MaxPool3D": 3, "AvgPool3D": 3}  # op -> spatial dimensions
CHANNELS_LAST = {2: (b"", b"NHWC"), 3: (b"", b"NDHWC")}


def tiled_pooling(tf: Any, graph_def: Any, splice: Callable[..., list[Any]]) -> dict[str, int]:
    """Replace each float32 channels-last pooling of graph_def whose window equals its stride, VALID
    padding and a static input shape, where form() names a faster graph, by that graph; returns
    {op: count}. splice (graph_rewrites.spliced) puts a scratch graph in a node's place; the last node
    of a replacement keeps the replaced node's name."""
    targets = [n for n in graph_def.node if _tiled(tf, n) and form(n)]
    if not targets:
        return {}
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    replaced: dict[str, list[Any]] = {}
    counts: dict[str, int] = {}
    for node in targets:
        data = node.input[0]
        shape = graph.get_tensor_by_name(data if ":" in data else data + ":0").shape
        if shape.rank is None or any(d is None for d in shape.as_list()):
            continue
        replaced[node.name] = _replacement(tf, node, data, shape.as_list(), splice)
        counts[node.op] = counts.get(node.op, 0) + 1
    nodes: list[Any] = []
    for node in graph_def.node:
        nodes.extend(replaced.get(node.name, [node]))
    del graph_def.node[:]
    graph_def.node.extend(nodes)
    return counts


def _tiled(tf: Any, node: Any) -> bool:
    """node is a float32 channels-last pooling, window = stride over batch and channels of 1, VALID."""
    dims = POOLS.get(node.op)
    if dims is None or node.attr["T"].type != tf.float32.as_datatype_enum:
        return False
    window, strides = list(node.attr["ksize"].list.i), list(node.attr["strides"].list.i)
    return (
        node.attr["data_format"].s in CHANNELS_LAST[dims]
        and node.attr["padding"].s == b"VALID"
        and window == strides
        and len(window) == dims + 2
        and window[0] == window[-1] == 1
    )


def form(node: Any) -> str:
    """How a tiled pooling is rewritten, from benchmarks/pooling_rewrite.py's figures (TF 2.21, batch 32,
    v4 and v3, CPU time per call; benchmarks/results/2026-11-27-pooling.md): windows over two or three
    axes as the max or sum of the window's strided slices (2.0-2.9x); one axis (1-D pooling) as a
    reshape and a reduce for AvgPool (1.5-1.8x); a 1-D MaxPool's reduce_window is as fast: "" (kept)."""
    axes = [k for k in list(node.attr["ksize"].list.i)[1:-1] if k > 1]
    if len(axes) >= 2:
        return "slices"
    return "reduce" if node.op.startswith("Avg") and axes else ""


def _replacement(
    tf: Any, node: Any, data: str, shape: list[int], splice: Callable[..., list[Any]]
) -> list[Any]:
    """The NodeDefs computing node (a tiled pooling of data, static shape) in its form()."""
    window = list(node.attr["ksize"].list.i)[1:-1]
    spatial = shape[1:-1]
    outputs = [size // k for size, k in zip(spatial, window)]
    scratch = tf.Graph()
    with scratch.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        if form(node) == "slices":
            y = _strided_slices(tf, x, node.op.startswith("Max"), window, outputs)
        else:
            y = _window_reduce(tf, x, node.op.startswith("Max"), window, outputs)
        tf.reshape(y, [shape[0], *outputs, shape[-1]], name="result")
    return splice(scratch.as_graph_def(), node, {"x": data}, node.name + "/tfaot_pooling")


def _strided_slices(tf: Any, x: Any, is_max: bool, window: list[int], outputs: list[int]) -> Any:
    """Max (or mean) of the window's strided slices, one per window offset, each of the output's shape."""
    offsets: list[list[int]] = [[]]
    for k in window:
        offsets = [[*offset, i] for offset in offsets for i in range(k)]
    parts = [
        x[(slice(None), *[slice(i, i + o * k, k) for i, o, k in zip(offset, outputs, window)])]
        for offset in offsets
    ]
    y = parts[0]
    for part in parts[1:]:
        y = tf.maximum(y, part) if is_max else y + part
    return y if is_max else y * (1.0 / len(parts))


def _window_reduce(tf: Any, x: Any, is_max: bool, window: list[int], outputs: list[int]) -> Any:
    """Max (or mean) over the window axes of x, each spatial axis split into (output, window)."""
    shape = x.shape.as_list()
    if any(o * k != size for o, k, size in zip(outputs, window, shape[1:-1])):  # rows no window reads
        x = tf.slice(x, [0] * len(shape), [shape[0], *[o * k for o, k in zip(outputs, window)], shape[-1]])
    tiles: list[int] = [shape[0]]
    axes: list[int] = []
    for o, k in zip(outputs, window):
        tiles.append(o)
        if k > 1:  # a window of 1 along an axis (1-D pooling as 2-D) adds no axis to reduce
            axes.append(len(tiles))
            tiles.append(k)
    x = tf.reshape(x, [*tiles, shape[-1]])
    return (tf.reduce_max if is_max else tf.reduce_mean)(x, axis=axes)
