"""Where the peers' time goes: ONNX Runtime's and the TF C API's profiles of one model (issue 39).

    python benchmarks/peer_profiles.py MODEL/aot_config.yaml --package PACKAGE_DIR [--batch-size 32]
        [--runs 200] [--seconds 5] [--out DIR]

For the figures below 1 in a `bench` table: what the peer runs in its place.

ONNX Runtime: the SavedModel converted as the bench converts it (perf/ort_engine.convert: tf2onnx, outputs
checked against TensorFlow), then benchmarks/ort_profile.py in the ONNX Runtime environment: a session
with the bench's options plus profiling, RUNS runs at the batch size, each op type's and the top 10 nodes'
share of the run time, and the op types of ORT's optimised graph (NCHWc convolutions, fused activations).

TF C API: the bench's tf_capi_bench program (perf/bench.py build_capi_program, cached; its SPEC from
write_capi_spec, hence PACKAGE_DIR: a package built from the config, e.g. the bench's --dist) under
`perf record -g`, attached for SECONDS once the program has loaded and warmed up: shares by DSO and by
symbol (oneDNN's JIT code named through ONEDNN_JIT_PROFILE=2, whose /tmp/perf-PID.map is removed
after, and counted as DSO "[JIT]"); then with ONEDNN_VERBOSE=1 the oneDNN primitives one call after
warm-up executes (kind, implementation, formats, post-ops, problem, ms). Both as installed (the CPU's
best ISA) and with ONEDNN_MAX_CPU_ISA=AVX2 (the bench's tf-capi:x86-64-v3 series).

Writes OUT/NAME-bsN.json and OUT/NAME-bsN.md (OUT default: ./peer-profiles) and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tfaot_dist.cache import default_cache
from tfaot_dist.config import AotConfig, load_aot_config
from tfaot_dist.perf import bench, ort_engine
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, worker_env

HERE = Path(__file__).resolve().parent
ISAS = {"native": None, "AVX2": "AVX2"}  # series name -> ONEDNN_MAX_CPU_ISA
PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\[JIT\] tid \d+|\S+)(?:\s+\[.\]\s+(.*?))?\s*$")


def ort_profile(toolchain: Toolchain, cfg: AotConfig, bs: int, runs: int, work: Path) -> dict[str, Any]:
    env = ort_engine.environment(toolchain, default_cache())
    model = ort_engine.convert(env, cfg.saved_model, cfg.serving_key, work / "ort")
    req = {
        "onnx": str(model.onnx),
        "batch_size": bs,
        "warmup": 10,
        "runs": runs,
        "dims": dict(cfg.dims),
        "out_dir": str(work / "ort"),
        "result": str(work / "ort" / "profile.json"),
    }
    (work / "ort" / "profile-request.json").write_text(json.dumps(req))
    (work / "ort" / "tmp").mkdir(exist_ok=True)
    cmd = [str(env.python), "-I", str(HERE / "ort_profile.py"), str(work / "ort" / "profile-request.json")]
    subprocess.run(cmd, env=worker_env(work / "ort" / "tmp"), check=True)
    answer: dict[str, Any] = json.loads((work / "ort" / "profile.json").read_text())
    answer["converted_op_types"] = model.conversion["op_types"]
    answer["versions"] = model.conversion["versions"]
    return answer


def capi_program(toolchain: Toolchain, config: Path, package: Path, work: Path) -> tuple[Path, Path]:
    """The bench's TF C API program and the SPEC of the config's SavedModel (as `bench` writes it)."""
    cfg = load_aot_config(config.absolute())
    target = bench.Target(package.absolute(), cfg.saved_model, cfg.serving_key)
    info = bench.run_tf_python(toolchain, target, bench.Protocol(warmup=0, calls=0), work / "tf-info", [])
    spec = bench.write_capi_spec(work / "capi.spec", target, info)
    return bench.build_capi_program(toolchain, default_cache()), spec


def perf_shares(data: Path, sort: str, limit: float) -> list[dict[str, Any]]:
    """`perf report` of data sorted by sort ("dso" or "dso,sym"): rows at or above limit percent; JIT code
    (an anonymous mapping or oneDNN's perf map) as DSO "[JIT]"."""
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g", "none"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows: dict[tuple[str, str], float] = defaultdict(float)
    for line in out.splitlines():
        m = PERF_LINE.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        dso = m.group(2)
        if dso.startswith(("[JIT]", "[unknown]", "perf-")):
            dso = "[JIT]"
        rows[(dso, (m.group(3) or "").strip()[:200])] += float(m.group(1))
    ranked = sorted(rows.items(), key=lambda kv: -kv[1])
    return [{"dso": d, "symbol": s, "percent": p} for (d, s), p in ranked if p >= limit]


def program_timing(capi: Path, spec: Path, bs: int, env: dict[str, str]) -> tuple[float, float]:
    """(seconds to start: load the SavedModel, warm up; seconds per call) from one short run."""
    start = time.perf_counter()
    out = subprocess.run(
        [str(capi), "time", str(spec), "10", "30", str(bs)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wall = time.perf_counter() - start
    per_call = float(
        json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])["seconds_per_call"]
    )
    return max(0.0, wall - 30 * per_call), per_call


def perf_profile(
    capi: Path, spec: Path, bs: int, env: dict[str, str], seconds: float, work: Path
) -> dict[str, Any]:
    """`seconds` of steady calls under perf record: the program started with far more calls than that,
    perf attached once it has loaded and warmed up (its start time, measured, plus a second), the program
    stopped when perf is done."""
    startup, per_call = program_timing(capi, spec, bs, env)
    calls = int(10 * (startup + 1 + seconds) / per_call) + 1000  # outlasts perf even if per_call was high
    data = work / "perf.data"
    program = subprocess.Popen(
        [str(capi), "time", str(spec), "10", str(calls), str(bs)],
        env={**env, "ONEDNN_JIT_PROFILE": "2"},  # oneDNN writes /tmp/perf-PID.map: its kernels by name
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(startup + 1)
        if program.poll() is not None:
            raise RuntimeError(f"{capi.name} ended before perf attached (exit status {program.returncode})")
        subprocess.run(
            [
                "perf",
                "record",
                "-q",
                "-g",
                "-p",
                str(program.pid),
                "-o",
                str(data),
                "--",
                "sleep",
                str(seconds),
            ],
            check=True,
            capture_output=True,
        )
        return {
            "seconds": seconds,
            "ms_per_call": 1000 * per_call,
            "by_dso": perf_shares(data, "dso", 0.5),
            "by_symbol": perf_shares(data, "dso,sym", 0.5),
        }
    finally:
        program.kill()
        program.wait()
        Path(f"/tmp/perf-{program.pid}.map").unlink(missing_ok=True)


def onednn_primitives(capi: Path, spec: Path, bs: int, env: dict[str, str]) -> list[dict[str, str]]:
    """The oneDNN primitives of one call after warm-up: the last period of the repeating exec lines."""
    out = subprocess.run(
        [str(capi), "time", str(spec), "3", "1", str(bs)],
        env={**env, "ONEDNN_VERBOSE": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        f = line.split(",")
        if not line.startswith("onednn_verbose") or "exec" not in f:
            continue
        i = f.index("exec")
        keys = ("engine", "kind", "impl", "prop", "formats", "attrs", "aux", "problem")
        rows.append({**dict(zip(keys, f[i + 1 : i + 9])), "ms": f[-1]})
    keys_only = [tuple(v for k, v in r.items() if k != "ms") for r in rows]
    for p in range(1, len(rows) // 2 + 1):
        if keys_only[-p:] == keys_only[-2 * p : -p]:
            return rows[-p:]
    return rows


def tf_profiles(capi: Path, spec: Path, bs: int, seconds: float, work: Path) -> dict[str, Any]:
    base = bench.tf_env(work / "tmp", bench.Protocol())
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    for name, isa in ISAS.items():
        env = {**base, **({"ONEDNN_MAX_CPU_ISA": isa} if isa else {})}
        (work / name).mkdir(exist_ok=True)
        out[name] = {
            **perf_profile(capi, spec, bs, env, seconds, work / name),
            "onednn": onednn_primitives(capi, spec, bs, env),
        }
    return out


def markdown(name: str, bs: int, result: dict[str, Any]) -> list[str]:
    lines = [f"## {name}, batch size {bs}", ""]
    o = result["ort"]
    lines += [
        f"ONNX Runtime {o['versions']['onnxruntime']}: {o['run_us']:.1f} us per run, kernels "
        f"{100 * o['kernels_share']:.1f} % of it.",
        "",
    ]
    lines += ["| op type | us | share |", "|---|---|---|"]
    lines += [f"| {r['op']} | {r['us']:.1f} | {100 * r['share']:.1f} % |" for r in o["ops"]]
    lines += ["", "| node (top 10) | op | us | share |", "|---|---|---|---|"]
    lines += [
        f"| {r['node']} | {r['op']} | {r['us']:.1f} | {100 * r['share']:.1f} % |" for r in o["top_nodes"]
    ]
    opt = ", ".join(f"{k} x{v}" for k, v in o["optimized_op_types"].items())
    lines += ["", f"Converted graph: {', '.join(o['converted_op_types'])}.", f"Optimised graph: {opt}.", ""]
    for series, p in result["tf"].items():
        lines += [
            f"TF C API ({series} ISA), perf over {p['seconds']} s of calls ({p['ms_per_call']:.2f} ms each unprofiled), by DSO: "
        ]
        lines[-1] += ", ".join(f"{r['dso']} {r['percent']:.1f} %" for r in p["by_dso"]) + "."
        lines += ["", "| DSO | symbol | share |", "|---|---|---|"]
        lines += [f"| {r['dso']} | `{r['symbol']}` | {r['percent']:.1f} % |" for r in p["by_symbol"][:15]]
        lines += [
            "",
            "| oneDNN kind | impl | prop | formats | attrs | problem | ms |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['kind']} | {r['impl']} | {r['prop']} | {r['formats']} | {r['attrs']} | {r['problem']} | {r['ms']} |"
            for r in p["onednn"]
        ]
        lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config", type=Path, help="the model's aot_config.yaml")
    ap.add_argument(
        "--package", type=Path, required=True, help="a package built from it (for the C API spec)"
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--runs", type=int, default=200, help="ONNX Runtime runs profiled")
    ap.add_argument("--seconds", type=float, default=5.0, help="about how long perf records the C API")
    ap.add_argument("--out", type=Path, default=Path("peer-profiles"))
    args = ap.parse_args()
    toolchain = ensure_toolchain(default_cache(), DEFAULT_REQUIREMENTS, offline=True)
    cfg = load_aot_config(args.config.absolute())
    name = cfg.name
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer-profiles-") as tmp_dir:
        work = Path(tmp_dir)
        result: dict[str, Any] = {"model": name, "batch_size": args.batch_size, "cpu": bench.host_info()}
        result["ort"] = ort_profile(toolchain, cfg, args.batch_size, args.runs, work)
        capi, spec = capi_program(toolchain, args.config, args.package, work)
        result["tf"] = tf_profiles(capi, spec, args.batch_size, args.seconds, work / "tf")
    stem = args.out / f"{name}-bs{args.batch_size}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = "\n".join(markdown(name, args.batch_size, result)) + "\n"
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
