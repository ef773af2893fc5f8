"""Performance commands: bench, tune."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.cli.common import Options, arg, command, emit, session_of


def _int_tuple_arg(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma separated integers, got {text!r}") from None


@dataclass(frozen=True)
class BenchOptions(Options):
    target: str = arg(metavar="NAME-OR-PATH", help="registry name, package directory or aot_config.yaml")
    out: Path = arg("--out", type=Path, default=Path("bench"), help="results directory (default: ./bench)")
    dist: Path = arg(
        "--dist", type=Path, default=Path("dist"), help="where packages are built (default: ./dist)"
    )
    warmup: int = arg("--warmup", type=int, default=100, help="warm-up calls per batch size (default: 100)")
    calls: int = arg("--calls", type=int, default=500, help="timed calls per batch size (default: 500)")
    batch_sizes: tuple[int, ...] = arg(
        "--batch-sizes",
        type=_int_tuple_arg,
        default=tuple(2**i for i in range(11)),
        help="batch sizes to time (default: 1,2,4,...,1024)",
    )
    instances: tuple[int, ...] = arg(
        "--instances",
        type=_int_tuple_arg,
        default=(1, 4, 12),
        help="model instances per process for the memory measurement (default: 1,4,12)",
    )
    engines: str = arg(
        "--engines", default="aot,tf-capi,ort,tf-python", help="subset of aot,tf-capi,ort,tf-python"
    )
    rounds: int = arg(
        "--rounds", type=int, default=1, help="repeat the timings, keep the fastest (default: 1)"
    )
    saved_model: Path | None = arg(
        "--saved-model", type=Path, help="the SavedModel of a package directory (TensorFlow engines)"
    )
    tf_no_onednn: bool = arg(
        "--tf-no-onednn", action="store_true", help="run TensorFlow with TF_ENABLE_ONEDNN_OPTS=0"
    )
    no_plots: bool = arg("--no-plots", action="store_true", help="write the JSON only")


@command(
    "bench",
    BenchOptions,
    summary="time and memory of a package against TensorFlow",
    description="Time a package's compiled model per batch size against a TensorFlow C API session of the same "
    "wheel and the Python call, and measure peak memory with several instances. Writes "
    "OUT/NAME.json and NAME_time.png / NAME_memory.png.",
    examples=(
        "tfaot-dist bench test-simple",
        "tfaot-dist bench dist/tfaot-model-test-simple-1.0.0 --saved-model data/simple/saved_model",
        "tfaot-dist bench my/aot_config.yaml --calls 50 "
        "--warmup 10 --batch-sizes 1,8 --engines aot,tf-capi --no-plots",
    ),
    uses_cache=True,
)
def cmd_bench(o: BenchOptions) -> int:
    from tfaot_dist.perf import bench
    from tfaot_dist.registry import Registry

    protocol = bench.Protocol(
        warmup=o.warmup,
        calls=o.calls,
        batch_sizes=o.batch_sizes,
        instances=o.instances,
        engines=tuple(o.engines.split(",")),
        rounds=o.rounds,
        tf_onednn=not o.tf_no_onednn,
    )
    result = bench.bench_command(
        o.target,
        Registry(o.registry),
        session_of(o),
        o.dist,
        protocol,
        o.out.absolute(),
        o.saved_model,
        plots=not o.no_plots,
    )
    lines = [
        f"{result['package']} {result['version']}: per-event time [us] (compiled: "
        f"{','.join(map(str, result['compiled_batch_sizes']))})",
        *bench.table(result, o.batch_sizes),
    ]
    for engine, rows in result["memory"].items():
        base = result["memory_baseline"][engine]["vm_hwm_kb"]
        lines += [
            f"memory {engine}: {r['instances']} instance(s): peak RSS {r['vm_hwm_kb']} kB "
            f"({r['model_kb']} kB above the same program without a model, {base} kB), "
            f"heap {r['heap_bytes'] / 1024:.0f} kB"
            for r in rows
        ]
    lines.append(f"results: {result['json']}" + "".join(f"\nplot: {p}" for p in result.get("plots", [])))
    emit(o, result, "\n".join(lines))
    return 0


@dataclass(frozen=True)
class TuneOptions(Options):
    target: str = arg(metavar="NAME-OR-PATH", help="registry name, package directory or aot_config.yaml")
    targets: str = arg(
        "--targets", default="1-64", help="target batch sizes, e.g. 1-64 or 3,5,9-12 (default: 1-64)"
    )
    out: Path = arg("--out", type=Path, default=Path("bench"), help="report directory (default: ./bench)")
    dist: Path = arg(
        "--dist", type=Path, default=Path("dist"), help="where packages are built (default: ./dist)"
    )
    warmup: int = arg("--warmup", type=int, default=100, help="warm-up calls per measurement (default: 100)")
    calls: int = arg("--calls", type=int, default=500, help="timed calls per measurement (default: 500)")
    dry_run: bool = arg(
        "--dry-run", action="store_true", help="report only; leave the registry entry as it is"
    )


@command(
    "tune",
    TuneOptions,
    summary="measure and set the batch rules of a model",
    description="Time each compiled batch size, pick the cheapest composition for every target batch size and "
    "keep only rules measured faster than the default. For a registry entry the rules are written "
    "to its overrides: batch_rules and the package is rebuilt.",
    examples=(
        "tfaot-dist tune test-simple --targets 1-64",
        "tfaot-dist tune test-simple --targets 3,5,9-12 --dry-run",
        "tfaot-dist tune my/aot_config.yaml --calls 100 --warmup 10",
    ),
    uses_cache=True,
)
def cmd_tune(o: TuneOptions) -> int:
    from tfaot_dist.perf import tune
    from tfaot_dist.registry import Registry

    report = tune.tune_command(
        o.target,
        Registry(o.registry),
        session_of(o),
        o.dist,
        tune.parse_targets(o.targets),
        o.warmup,
        o.calls,
        o.out.absolute(),
        write=not o.dry_run,
    )
    lines = ["target  default rule -> tuned rule: measured speed-up"]
    for t, e in sorted(report["targets"].items(), key=lambda kv: int(kv[0])):
        if e.get("kept"):
            lines.append(
                f"{t:>6}  {tune.short(e['default_rule'])} -> {tune.short(e['tuned_rule'])}: "
                f"{e['speedup']:.2f}x"
            )
    lines.append(
        f"{len(report['rules'])} tuned rules; other targets keep the default rule ({report['json']})"
    )
    emit(o, report, "\n".join(lines))
    return 0
