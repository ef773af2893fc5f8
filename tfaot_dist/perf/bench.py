"""`tfaot-dist bench`: the AOT study's measurements, AOT against TensorFlow, in one run.

Engines, all single-threaded, all fed the same uniform random inputs:

  aot        a C++ program built against the package (tfaot::Model::runFlat),
             compiled batch sizes and emulated ones (the package's batch rules),
             at the CPU level chosen automatically (the best this CPU runs);
             each lower level the package and the runtime carry is timed too,
             forced with TFAOT_CPU_LEVEL, as series "aot:LEVEL"
  tf-capi    the SavedModel in a TensorFlow C API session of the same wheel
             (TF_LoadSessionFromSavedModel / TF_SessionRun), as CMSSW runs it; with oneDNN on,
             also once per forced AOT level with oneDNN's instructions capped at that level's
             (ONEDNN_MAX_CPU_ISA), as series "tf-capi:LEVEL": what TensorFlow does on a machine of
             that level (the wheel's own Eigen kernels are not capped)
  ort        the SavedModel converted to ONNX (tf2onnx) in ONNX Runtime, one thread, every graph
             optimisation, inputs bound once, driven from Python (perf/ort_engine.py); its outputs are
             checked against TensorFlow's first, and the cost of one Run() of a one-node model is reported
             ("ort": "call_overhead_us"). A model it cannot convert or run gets "ort": "error" and no rows
  tf-python  the SavedModel's signature function called from Python

Protocol of the study: per batch size (2^0 .. 2^10) 100 warm-up calls, then
the mean of 500 timed calls; per-event time = time per call / batch size.
Rounds repeat the whole sequence and keep the fastest round of each point,
so a burst of load from other processes on a shared machine does not decide a
ratio. Memory: peak RSS (VmHWM), RSS and heap in use (mallinfo2) of one
process holding 1, 4 and 12 model instances (AOT: tfaot::Model objects;
TensorFlow: sessions), each evaluated once at batch size 1, and of the same
program holding none ("memory_baseline": libraries loaded, no model). A row's
"model_kb" is its peak RSS above that baseline: what the models themselves
cost a process that already runs C++ (or TensorFlow).

Speed against the hardware: TensorFlow's profiler counts the floating point
operations of one event; every timing row gets its GFLOP/s, and AOT rows the
fraction of the single-core peak of their level, measured on this machine by
bench_src/peak_flops.cc (multiply-add chains as wide as the level's vectors).

Results go to OUT/NAME.json, plots to OUT/NAME_time.png, NAME_gflops.png and NAME_memory.png
(drawn by plot_bench.py in a separate cached environment with matplotlib, so
neither the tool nor the TensorFlow toolchain depends on it).
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tfaot_dist import builder, process
from tfaot_dist import package as pkg
from tfaot_dist.cache import Cache, ensure_entry
from tfaot_dist.config import load_aot_config, load_source_config
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import INTERFACE_INCLUDE, build_kit, object_cache
from tfaot_dist.cxx.build_kit import CXX
from tfaot_dist.cxx.xla_runtime import XlaRuntime
from tfaot_dist.documents import JsonObject, ModelManifest
from tfaot_dist.errors import CompileFailed, InvalidInput
from tfaot_dist.onnx_source import converted
from tfaot_dist.perf import ort_engine
from tfaot_dist.registry import ModelEntry, Registry
from tfaot_dist.session import Session
from tfaot_dist.sources import fetch_source
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, worker_env
from tfaot_dist.util.fs import sha256_bytes, write_atomic
from tfaot_dist.util.progress import Log
from tfaot_dist.util.render import render

ENGINES = ("aot", "tf-capi", "ort", "tf-python")
STUDY_BATCH_SIZES = tuple(2**i for i in range(11))
PLOT_REQUIREMENTS = ("matplotlib==3.11.2",)
TF_BENCH = Path(__file__).parent.parent / "worker" / "tf_bench.py"
CAPI_SOURCE = Path(__file__).parent / "bench_src" / "tf_capi_bench.cc"
BENCH_TEMPLATE = "bench_aot.cc.j2"  # package_templates/: compiled against a built package
PEAK_SOURCE = Path(__file__).parent / "bench_src" / "peak_flops.cc"
LANES = {"x86-64": 4, "x86-64-v3": 8, "x86-64-v4": 16}  # floats per vector register of each level
# oneDNN's instruction cap (ONEDNN_MAX_CPU_ISA) nearest each forced level: SSE4.1 is its lowest.
ONEDNN_ISA = {"x86-64": "SSE41", "x86-64-v3": "AVX2"}
PLOT_SCRIPT = Path(__file__).parent.parent / "worker" / "plot_bench.py"


@dataclass(frozen=True)
class Protocol:
    warmup: int = 100
    calls: int = 500
    batch_sizes: tuple[int, ...] = STUDY_BATCH_SIZES
    instances: tuple[int, ...] = (1, 4, 12)
    engines: tuple[str, ...] = ENGINES
    rounds: int = 1
    tf_onednn: bool = True  # TensorFlow as installed (oneDNN on); False: TF_ENABLE_ONEDNN_OPTS=0


@dataclass(frozen=True)
class Target:
    """What is benchmarked: a built package and, for the TensorFlow engines, its SavedModel."""

    package_root: Path
    saved_model: Path | None
    serving_key: str = "serving_default"
    onnx: Path | None = None  # an ONNX source: ONNX Runtime runs this file itself, not a tf2onnx conversion
    onnx_dims: tuple[tuple[str, int], ...] = ()  # and the values of its symbolic dimensions (model.dims)

    @property
    def manifest(self) -> ModelManifest:
        return pkg.model_manifest(pkg.read_manifest_json(self.package_root), self.package_root / pkg.MANIFEST)


# ---------------------------------------------------------------- programs


def build_aot_program(target: Target, runtime: XlaRuntime, cache: Path, work: Path) -> Path:
    """The AOT benchmark program of the package (bench_aot.cc.j2), linked from its archive (its compile
    kept in the cache: cxx/object_cache.py)."""
    manifest = target.manifest
    comp = manifest.compilation
    src = work / "bench_aot.cc"
    src.write_text(
        render(
            BENCH_TEMPLATE,
            package=manifest.package,
            namespace=comp.namespace,
            class_name=comp.class_name,
            inputs=[t.to_json() for t in manifest.signature.inputs],
            outputs=[t.to_json() for t in manifest.signature.outputs],
        )
    )
    includes = [target.package_root / "include", INTERFACE_INCLUDE]
    archive = target.package_root / "lib" / f"lib{manifest.package}.a"
    return object_cache.program(runtime, src, includes, [archive], work / "bench_aot", cache)


def tensorflow_dir(toolchain: Toolchain) -> Path:
    out = process.run(
        [
            toolchain.python,
            "-I",
            "-c",
            "import importlib.util as u; print(list(u.find_spec('tensorflow')"
            ".submodule_search_locations)[0])",
        ],
        what="locate TensorFlow",
        error=CompileFailed,
    )
    # The real directory: a cache whose toolchains are a link to another cache's (Cache.share_into) then
    # keys and rpaths the one program they share, not one per link that may be gone tomorrow.
    return Path(out.strip()).resolve()


def build_capi_program(toolchain: Toolchain, cache: Path, cxx: str = CXX) -> Path:
    """tf_capi_bench linked against the wheel's libtensorflow_cc (rpath), cached per toolchain and source."""
    tf = tensorflow_dir(toolchain)
    version = build_kit.version_text(cxx)
    key = sha256_bytes(json.dumps([toolchain.key, str(tf), version, CAPI_SOURCE.read_text()]).encode())[:20]
    name = "tf_capi_bench"

    def build(staged: Path) -> None:
        cmd = [
            cxx,
            "-std=c++17",
            "-O2",
            f"-I{tf / 'include'}",
            str(CAPI_SOURCE),
            "-o",
            str(staged / name),
            str(tf / "libtensorflow_cc.so.2"),
            str(tf / "libtensorflow_framework.so.2"),
            f"-Wl,-rpath,{tf}",
        ]
        process.run(cmd, what="building the TensorFlow C API benchmark", error=CompileFailed)

    # No marker: entries made before this one had none; the program appears only with its directory.
    final = ensure_entry(
        Cache(cache).bench / f"tf-capi-{key}",
        build,
        marker=None,
        is_complete=lambda entry: (entry / name).is_file(),
    )
    return final / name


def peak_gflops(level: str, cache: Path, cxx: str = CXX) -> float:
    """The measured single-core GFLOP/s peak of a CPU level (its program cached per compiler and source)."""
    version = build_kit.version_text(cxx)
    key = sha256_bytes(json.dumps([level, version, PEAK_SOURCE.read_text()]).encode())[:20]
    name = "peak_flops"

    def build(staged: Path) -> None:
        cmd = [
            cxx,
            "-std=c++17",
            "-O2",
            "-ffp-contract=fast",
            f"-march={level}",
            f"-DLANES={LANES[level]}",
            str(PEAK_SOURCE),
            "-o",
            str(staged / name),
        ]
        process.run(cmd, what=f"building the {level} peak benchmark", error=CompileFailed)

    final = ensure_entry(
        Cache(cache).bench / f"peak-{key}",
        build,
        marker=None,
        is_complete=lambda entry: (entry / name).is_file(),
    )
    return float(_json_lines([str(final / name)], None, f"{level} peak benchmark")[0]["gflops"])


def aot_levels(manifest: ModelManifest, runtime: XlaRuntime) -> list[str]:
    """The CPU levels the AOT engine can be forced to here, lowest first.

    Those of the package's code and of the runtime's matrix kernels that this
    CPU runs. Forced to a level, each side runs its best code not above it.
    """
    levels = set(manifest.compilation.cpu_levels) | set(runtime.cpu_levels)
    return [lv for lv in LANES if lv in levels and cpu_target.check_host(lv).ok]


def tf_env(tmp: Path, protocol: Protocol) -> dict[str, str]:
    env = worker_env(tmp)
    if protocol.tf_onednn:
        env.pop("TF_ENABLE_ONEDNN_OPTS", None)  # TensorFlow's own default
    return env


# ---------------------------------------------------------------- runs


def _json_lines(
    cmd: list[str], env: dict[str, str] | None, what: str, timeout: float = 7200
) -> list[JsonObject]:
    out = process.run(cmd, what=what, error=CompileFailed, env=env, timeout=timeout)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def run_tf_python(
    toolchain: Toolchain, target: Target, protocol: Protocol, work: Path, sizes: Sequence[int]
) -> JsonObject:
    work.mkdir(parents=True, exist_ok=True)
    req = {
        "saved_model": str(target.saved_model),
        "serving_key": target.serving_key,
        "batch_sizes": list(sizes),
        "warmup": protocol.warmup,
        "calls": protocol.calls,
        "result": str(work / "result.json"),
    }
    (work / "request.json").write_text(json.dumps(req))
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    # The answer is result.json, whatever the exit status: the benchmark reports its own errors there.
    finished = process.probe(
        [toolchain.python, "-I", TF_BENCH, work / "request.json"], env=tf_env(tmp, protocol), timeout=7200
    )
    try:
        answer: JsonObject = json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        raise process.failure(finished, what="TensorFlow benchmark", error=CompileFailed) from None
    if not answer.get("ok"):
        raise CompileFailed(f"TensorFlow benchmark failed: {answer.get('message')}")
    return answer


def write_capi_spec(path: Path, target: Target, info: JsonObject) -> Path:
    manifest = target.manifest
    shapes = {t.name: t for t in manifest.signature.inputs}
    lines = [f"saved_model {target.saved_model}"]
    for t in info["signature"]["inputs"]:
        spec = shapes[t["name"]]
        lines.append(" ".join(["input", t["op"], str(t["index"]), spec.dtype, *map(str, spec.shape)]))
    for t in info["signature"]["outputs"]:
        lines.append(f"output {t['op']} {t['index']}")
    path.write_text("\n".join(lines) + "\n")
    return path


def model_data_bytes(binary: Path) -> dict[str, int]:
    """Bytes of the model's constant buffers (weights) linked into a program, each address counted once."""
    out = process.run(["nm", "-S", "--defined-only", binary], what=f"nm {binary.name}", error=CompileFailed)
    buffers = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3].endswith("_constant_buffer_contents"):
            buffers[parts[0]] = int(parts[1], 16)
    return {
        "constant_buffers": len(buffers),
        "bytes": sum(buffers.values()),
        "binary_bytes": binary.stat().st_size,
    }


def run(
    target: Target,
    protocol: Protocol,
    toolchain: Toolchain,
    runtime: XlaRuntime,
    cache: Path,
    out_dir: Path,
    log: Log = print,
    plots: bool = True,
) -> JsonObject:
    """Measure every engine of protocol on target; writes OUT/NAME.json (and plots); returns the result."""
    manifest = target.manifest
    name = manifest.package.removeprefix("tfaot-model-")
    engines = [e for e in protocol.engines if e == "aot" or target.saved_model is not None]
    unknown = sorted(set(protocol.engines) - set(ENGINES))
    if unknown:
        raise InvalidInput(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = aot_levels(manifest, runtime)
    forced = levels[:-1]  # the last, the best this CPU runs, is what "aot" picks by itself
    result = _new_result(manifest, protocol, engines, forced)
    with tempfile.TemporaryDirectory(prefix="tfaot-bench-") as tmp_dir:
        work = Path(tmp_dir)
        log(f"building the AOT benchmark of {manifest.package}")
        aot = build_aot_program(target, runtime, cache, work)
        result["binary"] = model_data_bytes(aot)
        info: JsonObject | None = None
        if target.saved_model is not None:
            # Signature tensors of the C API graph and the weights, from TensorFlow itself (no timing).
            info = run_tf_python(toolchain, target, Protocol(warmup=0, calls=0), work / "tf-info", [])
            result["weights"] = info["weights"]
            result["tensorflow_version"] = info["tensorflow_version"]
            result["flops_per_event"] = info.get("flops_per_event")
            result["binary"]["bytes_per_weight_byte"] = result["binary"]["bytes"] / max(
                1, info["weights"]["bytes"]
            )
        log(f"measuring the single-core peak of {', '.join(levels) or 'no CPU level'}")
        result["peak_gflops"] = {lv: peak_gflops(lv, cache) for lv in levels}
        ort = _ort_model(toolchain, target, cache, work, result, log) if "ort" in engines else None
        if "ort" in engines and ort is None:
            engines.remove("ort")
            del result["time"]["ort"], result["memory"]["ort"]
        capi = spec = None
        if "tf-capi" in engines:
            capi = build_capi_program(toolchain, cache)
            if info is None:  # engines other than aot run only with a SavedModel (engines above)
                raise InvalidInput("the tf-capi engine needs the model's SavedModel")
            spec = write_capi_spec(work / "capi.spec", target, info)
        programs = _Programs(work, aot, capi, spec, tf_env(work, protocol), ort)
        _time_engines(result, engines, forced, programs, toolchain, target, protocol, log)
        _measure_memory(result, programs, protocol, log)
    _per_event_figures(result, sorted(manifest.compilation.batch_sizes))
    result["ratios"] = ratios(result)
    path = out_dir / f"{name}.json"
    write_atomic(path, json.dumps(result, indent=1, sort_keys=True) + "\n")
    result["json"] = str(path)
    if plots:
        result["plots"] = [str(p) for p in plot(path, out_dir, cache, log)]
    return result


def _new_result(
    manifest: ModelManifest, protocol: Protocol, engines: list[str], forced: list[str]
) -> JsonObject:
    """The JSON report (NAME.json) before any measurement: what is measured, on what, and empty series."""
    result: JsonObject = {
        "package": manifest.package,
        "version": manifest.version,
        "compiled_batch_sizes": sorted(manifest.compilation.batch_sizes),
        "target_cpu": manifest.compilation.target_cpu or "generic",
        "cpu_levels": list(manifest.compilation.cpu_levels),  # [] for a single-target package
        "protocol": asdict(protocol),
        "engines": engines,
        "host": host_info(),
        "time": {e: [] for e in engines},
        "memory": {e: [] for e in engines if e != "tf-python"},
    }
    if "aot" in engines:
        result["time"].update({f"aot:{lv}": [] for lv in forced})
    if "tf-capi" in engines and protocol.tf_onednn:
        result["time"].update({f"tf-capi:{lv}": [] for lv in forced if lv in ONEDNN_ISA})
    return result


@dataclass(frozen=True)
class _Programs:
    """What the engines run, in one benchmark's work directory."""

    work: Path
    aot: Path
    capi: Path | None  # the TensorFlow C API program and its spec, when that engine runs
    spec: Path | None
    env: dict[str, str]  # TensorFlow's environment
    ort: ort_engine.OrtModel | None  # the converted model, when the ort engine runs


def _time_engines(
    result: JsonObject,
    engines: list[str],
    forced: list[str],
    programs: _Programs,
    toolchain: Toolchain,
    target: Target,
    protocol: Protocol,
    log: Log,
) -> None:
    """protocol.rounds rounds of every engine at every batch size, the fastest call of each kept."""
    sizes = [str(bs) for bs in protocol.batch_sizes]
    for r in range(protocol.rounds):
        for engine in engines:
            log(f"round {r + 1}/{protocol.rounds}: timing {engine} at batch sizes {','.join(sizes)}")
            if engine == "aot":
                for series, level in [("aot", None), *((f"aot:{lv}", lv) for lv in forced)]:
                    aot_env = None if level is None else {**os.environ, "TFAOT_CPU_LEVEL": level}
                    rows = _json_lines(
                        [str(programs.aot), "time", str(protocol.warmup), str(protocol.calls), *sizes],
                        aot_env,
                        f"AOT benchmark {level or ''}".strip(),
                    )
                    _keep_fastest(result["time"][series], rows)
                continue
            if engine == "tf-capi":
                for series in [s for s in result["time"] if s.split(":")[0] == "tf-capi"]:
                    level = series.partition(":")[2]
                    capped = {"ONEDNN_MAX_CPU_ISA": ONEDNN_ISA[level]} if level else {}
                    rows = _json_lines(
                        [
                            str(programs.capi),
                            "time",
                            str(programs.spec),
                            str(protocol.warmup),
                            str(protocol.calls),
                            *sizes,
                        ],
                        {**programs.env, **capped},
                        f"TensorFlow C API benchmark {level}".strip(),
                    )
                    _keep_fastest(result["time"][series], rows)
                continue
            if engine == "ort":
                if programs.ort is None:  # run() drops "ort" when the model was not converted
                    raise CompileFailed("ONNX Runtime benchmark (time): no converted model")
                rows, overhead = ort_engine.time_rows(
                    programs.ort,
                    protocol.batch_sizes,
                    protocol.warmup,
                    protocol.calls,
                    programs.work / f"ort{r}",
                )
                best = result["ort"].get("call_overhead_us", float("inf"))
                result["ort"]["call_overhead_us"] = min(best, overhead * 1e6)
            else:
                rows = run_tf_python(
                    toolchain, target, protocol, programs.work / f"py{r}", protocol.batch_sizes
                )["timings"]
            _keep_fastest(result["time"][engine], rows)


def _measure_memory(result: JsonObject, programs: _Programs, protocol: Protocol, log: Log) -> None:
    """Peak memory of 0 and of protocol.instances instances of each engine; a model's is over the 0 baseline."""
    result["memory_baseline"] = {}
    for engine in result["memory"]:
        for n in (0, *protocol.instances):
            log(f"memory of {n} {engine} instance(s)")
            if engine == "aot":
                rows = _json_lines([str(programs.aot), "mem", str(n), "1"], None, "AOT memory benchmark")
            elif engine == "ort":
                if programs.ort is None:  # run() drops "ort" when the model was not converted
                    raise CompileFailed("ONNX Runtime benchmark (memory): no converted model")
                rows = [ort_engine.memory_row(programs.ort, n, programs.work / f"ort-mem{n}")]
            else:
                rows = _json_lines(
                    [str(programs.capi), "mem", str(programs.spec), str(n), "1"],
                    programs.env,
                    "TensorFlow memory benchmark",
                )
            if n == 0:
                result["memory_baseline"][engine] = rows[0]
                continue
            for row in rows:
                row["model_kb"] = row["vm_hwm_kb"] - result["memory_baseline"][engine]["vm_hwm_kb"]
            result["memory"][engine] += rows


def _per_event_figures(result: JsonObject, compiled: list[int]) -> None:
    """Per-event time, GFLOP/s and the fraction of the CPU's peak, on every timed row."""
    flops = result.get("flops_per_event")
    for engine, rows in result["time"].items():
        for row in rows:
            row["us_per_event"] = row["seconds_per_call"] / row["batch_size"] * 1e6
            if flops:
                row["gflops"] = flops * row["batch_size"] / row["seconds_per_call"] / 1e9
            if engine.startswith("aot"):
                row["compiled"] = row["batch_size"] in compiled
                # The widest vectors in use: the model's kernels and the runtime's may run different levels.
                used = [lv for lv in (row.get("cpu_level"), row.get("runtime_cpu_level")) if lv in LANES]
                peak = result["peak_gflops"].get(max(used, key=list(LANES).index)) if used else None
                if flops and peak:
                    row["peak_fraction"] = row["gflops"] / peak


def _ort_model(
    toolchain: Toolchain, target: Target, cache: Path, work: Path, result: JsonObject, log: Log
) -> ort_engine.OrtModel | None:
    """The model converted for ONNX Runtime and checked against TensorFlow (result["ort"] says how), or None
    with result["ort"]["error"] when it cannot be."""
    assert target.saved_model is not None
    try:
        env = ort_engine.environment(toolchain, cache, log)
        if target.onnx is not None:
            requirement = next(r for r in ort_engine.REQUIREMENTS if r.startswith("onnxruntime=="))
            result["ort"] = {"original": target.onnx.name, "onnxruntime": requirement.split("==")[1]}
            return ort_engine.OrtModel(env, target.onnx, result["ort"], target.onnx_dims)
        log("converting the SavedModel to ONNX (tf2onnx) and checking ONNX Runtime against TensorFlow")
        model = ort_engine.convert(env, target.saved_model, target.serving_key, work / "ort")
    except ort_engine.OrtUnavailable as exc:
        log(f"ONNX Runtime not timed: {exc}")
        result["ort"] = {"error": str(exc)}
        return None
    result["ort"] = model.conversion
    return model


def _keep_fastest(rows: list[JsonObject], new: list[JsonObject]) -> None:
    by_bs = {r["batch_size"]: r for r in rows}
    for row in new:
        old = by_bs.get(row["batch_size"])
        if old is None:
            rows.append(row)
            by_bs[row["batch_size"]] = row
        elif row["seconds_per_call"] < old["seconds_per_call"]:
            old.update(row)


def ratios(result: JsonObject) -> dict[str, dict[str, float]]:
    """The study's comparisons: TF time / AOT time per batch size, TF memory / AOT memory per instances."""
    out: dict[str, dict[str, float]] = {}
    for series in (s for s in result["time"] if s.startswith("aot")):
        aot = {r["batch_size"]: r["seconds_per_call"] for r in result["time"][series]}
        capped = "tf-capi" + series[3:]  # "tf-capi:LEVEL" beside "aot:LEVEL"
        for engine in ("tf-capi", "ort", "tf-python", *([capped] if series != "aot" else [])):
            other = {r["batch_size"]: r["seconds_per_call"] for r in result["time"].get(engine, [])}
            common = sorted(set(aot) & set(other))
            if common:
                out[f"time_{engine}_over_{series}"] = {str(bs): other[bs] / aot[bs] for bs in common}
    mem_aot = {r["instances"]: r for r in result["memory"].get("aot", [])}
    for engine in ("tf-capi", "ort"):
        mem = {r["instances"]: r for r in result["memory"].get(engine, [])}
        common = sorted(set(mem_aot) & set(mem))
        if common:
            out[f"peak_rss_{engine}_over_aot"] = {
                str(n): mem[n]["vm_hwm_kb"] / mem_aot[n]["vm_hwm_kb"] for n in common
            }
            out[f"heap_{engine}_over_aot"] = {
                str(n): mem[n]["heap_bytes"] / max(1, mem_aot[n]["heap_bytes"]) for n in common
            }
            out[f"model_rss_{engine}_over_aot"] = {
                str(n): mem[n]["model_kb"] / max(1, mem_aot[n]["model_kb"]) for n in common
            }
    return out


def table(result: JsonObject, batch_sizes: Sequence[int]) -> list[str]:
    """The run as text: per batch size each series' per-event time [us] (AOT series named with the CPU level
    they ran), the automatic AOT's fraction of its level's peak, and each peer's time over the AOT's."""
    order = {e: i for i, e in enumerate(ENGINES)}

    def place(e: str) -> tuple[int, bool, int]:
        engine, _, level = e.partition(":")
        return order.get(engine, 0), bool(level), list(LANES).index(level) if level in LANES else 0

    series = sorted(result["time"], key=place)  # aot, aot:LEVEL lowest first, peers (each capped after)
    rows = {e: {r["batch_size"]: r for r in result["time"][e]} for e in series}

    def title(e: str) -> str:
        levels = sorted({r.get("cpu_level", "") for r in result["time"][e]} - {""})
        return f"aot {'/'.join(levels)}" if e == "aot" and levels else e

    peers = [e for e in ("tf-capi", "ort") if e in series and "aot" in series]
    heads = [title(e) for e in series] + (["peak"] if "aot" in series else []) + [f"{e}/aot" for e in peers]
    width = max(11, *(len(h) + 1 for h in heads))
    lines = ["batch" + "".join(f"{h:>{width}}" for h in heads)]
    for bs in batch_sizes:
        cells = [rows[e][bs]["us_per_event"] if bs in rows[e] else float("nan") for e in series]
        if "aot" in series:
            cells.append(rows["aot"].get(bs, {}).get("peak_fraction", float("nan")))
        cells += [result["ratios"].get(f"time_{e}_over_aot", {}).get(str(bs), float("nan")) for e in peers]
        lines.append(
            f"{bs:5}" + "".join(f"{c:>{width}.0f}" if c >= 1000 else f"{c:>{width}.4g}" for c in cells)
        )
    ort = result.get("ort")
    if ort and "error" in ort:
        lines.append(f"ort: not timed: {ort['error']}")
    elif ort and "original" in ort:
        lines.append(
            f"ort: onnxruntime {ort['onnxruntime']} on the original file {ort['original']}; one Run() of a "
            f"one-node model {ort.get('call_overhead_us', float('nan')):.2f} us from Python"
        )
    elif ort:
        worst = max((d["max_abs"] for d in ort.get("deviations", {}).values()), default=0.0)
        lines.append(
            f"ort: onnxruntime {ort['versions']['onnxruntime']}, tf2onnx {ort['versions']['tf2onnx']}, "
            f"opset {ort['opset']}; outputs within {worst:.2g} of TensorFlow; one Run() of a one-node "
            f"model {ort.get('call_overhead_us', float('nan')):.2f} us from Python"
            + "".join(f"; {op} rewritten: {n}" for op, n in ort["rewritten"].items() if n)
        )
    return lines


def host_info() -> JsonObject:
    cpu = ""
    try:
        m = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
        cpu = m.group(1) if m else ""
    except OSError:
        pass
    return {
        "machine": platform.machine(),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "load_average": list(os.getloadavg()),
    }


def plot(result_json: Path, out_dir: Path, cache: Path, log: Log = print) -> list[Path]:
    """Draw the study's plots with matplotlib from its own cached environment."""
    env = ensure_toolchain(cache, PLOT_REQUIREMENTS, log)
    with tempfile.TemporaryDirectory(prefix="tfaot-plot-") as tmp:
        out = process.run(
            [env.python, "-I", PLOT_SCRIPT, result_json, out_dir],
            what="plotting",
            error=CompileFailed,
            env={**worker_env(Path(tmp)), "MPLBACKEND": "Agg", "MPLCONFIGDIR": tmp},
        )
    return [Path(line) for line in out.split()]


def resolve_target(
    spec: str, registry: Registry, session: Session, dist: Path, saved_model: Path | None = None
) -> tuple[Target, ModelEntry | None]:
    """NAME (registry entry, built if needed), a package directory, or an aot_config.yaml (compiled into dist).

    Returns (Target, ModelEntry or None). A package directory has no SavedModel
    unless saved_model is given: then only the AOT engine runs.
    """
    path = Path(spec)
    if path.is_dir():
        if not (path / "manifest.json").is_file():
            raise InvalidInput(f"{path}: not a package directory (no manifest.json)")
        return Target(path.absolute(), saved_model.absolute() if saved_model else None), None
    if path.is_file():
        config = converted(load_aot_config(path.absolute()), session)
        package = builder.compile_config(path.absolute(), dist.absolute(), session)
        saved_model = saved_model or config.saved_model
        return Target(package.root, saved_model, config.serving_key, config.onnx, config.dims), None
    entry = registry.load(spec)
    built = builder.build_entry(entry, session, dist.absolute())
    if saved_model is None:
        config = load_source_config(
            fetch_source(entry.source, session.cache.root), entry.aot_config
        ).with_overrides(entry.overrides)
        config = converted(config, session)
        saved_model, key, onnx, dims = config.saved_model, config.serving_key, config.onnx, config.dims
    else:
        key, onnx, dims = "serving_default", None, ()
    return Target(built.package.root, saved_model, key, onnx, dims), entry


def bench_command(
    spec: str,
    registry: Registry,
    session: Session,
    dist: Path,
    protocol: Protocol,
    out_dir: Path,
    saved_model: Path | None = None,
    plots: bool = True,
) -> JsonObject:
    """`tfaot-dist bench`: resolve spec to a package (and SavedModel), then run()."""
    target, _ = resolve_target(spec, registry, session, dist, saved_model)
    tools = session.resolve()
    return run(
        target, protocol, tools.toolchain, tools.runtime, session.cache.root, out_dir, session.log, plots
    )
