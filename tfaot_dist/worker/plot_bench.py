"""Plots of a `tfaot-dist bench` result, in the style of the AOT study.

Run in an environment with matplotlib (tfaot_dist.perf.bench makes a cached one):

    python plot_bench.py RESULT.json OUT_DIR

Writes NAME_time.png (time per event against batch size, log-log, one line per
engine; AOT solid with filled markers at compiled batch sizes and open ones
at emulated sizes, AOT forced to a lower CPU level dashed, TensorFlow dotted),
NAME_gflops.png (the same runs in GFLOP/s, with the measured single-core peak
of each CPU level) and NAME_memory.png (peak RSS and heap against the number
of model instances). Prints the paths written.
"""

import json
import sys
from pathlib import Path
from typing import Any, Union

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# A series' label, linestyle (a name, or an offset and a dash pattern) and color (None: matplotlib's choice).
Style = dict[str, Union[str, tuple[int, tuple[int, ...]], None]]

STYLE: dict[str, Style] = {
    "aot": {"label": "AOT (tfaot::Model, C++)", "linestyle": "-", "color": "tab:blue"},
    "tf-capi": {"label": "TensorFlow C API session", "linestyle": ":", "color": "tab:orange"},
    "tf-python": {"label": "TensorFlow, Python call", "linestyle": "-.", "color": "tab:green"},
    "ort": {"label": "ONNX Runtime (IO binding, Python)", "linestyle": (0, (5, 1, 1, 1)), "color": "tab:red"},
}


def style(engine: str) -> Style:  # label, linestyle and color of a series
    if engine.startswith("aot:"):  # the AOT program forced to a lower CPU level
        return {"label": f"AOT forced to {engine[4:]}", "linestyle": "--", "color": "tab:purple"}
    if engine.startswith("tf-capi:"):  # TensorFlow with oneDNN capped at a lower CPU level
        return {"label": f"TensorFlow C API, oneDNN at {engine[8:]}", "linestyle": "--", "color": "tab:brown"}
    return STYLE.get(engine, {"label": engine, "linestyle": "--", "color": None})


def save(fig: Any, path: Path) -> Path:  # a matplotlib Figure (no types here)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    result = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2])
    name = result["package"].removeprefix("tfaot-model-")
    title = f"{result['package']} {result['version']} (compiled: {','.join(map(str, result['compiled_batch_sizes']))})"
    written = [plot_time(result, title, out / f"{name}_time.png")]
    if result.get("flops_per_event"):
        written.append(plot_gflops(result, title, out / f"{name}_gflops.png"))
    if result.get("memory"):
        written.append(plot_memory(result, title, out / f"{name}_memory.png"))
    print("\n".join(str(p) for p in written))
    return 0


def plot_time(result: dict[str, Any], title: str, path: Path) -> Path:
    """Time per event against batch size, each engine a line; AOT's compiled batch sizes filled."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for engine, rows in result["time"].items():
        rows = sorted(rows, key=lambda r: r["batch_size"])
        look = style(engine)
        xs = [r["batch_size"] for r in rows]
        ys = [r["us_per_event"] for r in rows]
        ax.plot(xs, ys, linestyle=look["linestyle"], color=look["color"], label=look["label"])
        if engine.startswith("aot"):
            comp = [(x, y) for x, y, r in zip(xs, ys, rows) if r.get("compiled")]
            emul = [(x, y) for x, y, r in zip(xs, ys, rows) if not r.get("compiled")]
            main_series = engine == "aot"
            if comp:
                ax.plot(
                    *zip(*comp),
                    "o",
                    color=look["color"],
                    label="AOT compiled batch size" if main_series else None,
                )
            if emul:
                ax.plot(
                    *zip(*emul),
                    "o",
                    mfc="none",
                    color=look["color"],
                    label="AOT emulated (batch rules)" if main_series else None,
                )
        else:
            ax.plot(xs, ys, "s", ms=3, color=look["color"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size")
    ax.set_ylabel("time per event [µs]")
    proto = result["protocol"]
    ax.set_title(
        f"{title}\nsingle thread, {proto['warmup']} warm-up + {proto['calls']} timed calls", fontsize=9
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_gflops(result: dict[str, Any], title: str, path: Path) -> Path:
    """GFLOP/s against batch size, with each CPU level's single-core peak."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for engine, rows in result["time"].items():
        rows = sorted((r for r in rows if "gflops" in r), key=lambda r: r["batch_size"])
        look = style(engine)
        ax.plot(
            [r["batch_size"] for r in rows],
            [r["gflops"] for r in rows],
            marker="o",
            ms=3,
            linestyle=look["linestyle"],
            color=look["color"],
            label=look["label"],
        )
    for level, peak in result.get("peak_gflops", {}).items():
        ax.axhline(peak, color="grey", linewidth=0.8, linestyle="-.")
        ax.annotate(f"peak {level}: {peak:.0f}", (1, peak), fontsize=7, va="bottom", color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("GFLOP/s (one core)")
    ax.set_title(f"{title}\n{result['flops_per_event']:,} floating point operations per event", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_memory(result: dict[str, Any], title: str, path: Path) -> Path:
    """Peak RSS and heap against the number of model instances in one process."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.5))
    for engine, rows in result["memory"].items():
        rows = sorted(rows, key=lambda r: r["instances"])
        look = style(engine)
        xs = [r["instances"] for r in rows]
        ax1.plot(
            xs,
            [r["vm_hwm_kb"] / 1024 for r in rows],
            marker="o",
            linestyle=look["linestyle"],
            color=look["color"],
            label=look["label"],
        )
        ax2.plot(
            xs,
            [r["heap_bytes"] / 2**20 for r in rows],
            marker="o",
            linestyle=look["linestyle"],
            color=look["color"],
            label=look["label"],
        )
    for ax, what in ((ax1, "peak RSS of the process [MiB]"), (ax2, "heap in use [MiB]")):
        ax.set_yscale("log")
        ax.set_xlabel("model instances in the process (AOT models / TF sessions)")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
