"""Performance work (issue 6): weights once, bench against TensorFlow, tuned batch rules, CPU targets.

Real TensorFlow, real g++ links and runs, reduced call counts. Timing
assertions compare engines measured side by side in one run, never absolute
times, and only where the margin is wide (the study's AOT vs TF C API at
batch size 1 is about ten times).
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import Cli

from tfaot_dist import config as config_mod
from tfaot_dist.cache import Cache
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.documents import Compilation, JsonObject
from tfaot_dist.errors import InvalidInput
from tfaot_dist.perf import bench, tune
from tfaot_dist.toolchain import Toolchain, ensure_toolchain


def nm_defined(path: Path) -> dict[str, tuple[str, str]]:
    out = subprocess.run(
        ["nm", "-S", "--defined-only", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return {p[3]: (p[0], p[1]) for p in (line.split() for line in out.splitlines()) if len(p) == 4}


# ---------------------------------------------------------------- weights once


def test_each_constant_buffer_is_defined_once(built: Path) -> None:
    root = built / "dist" / "tfaot-model-test-simple-1.0.0"
    manifest = json.loads((root / "manifest.json").read_text())
    report = manifest["constants"]
    # FACTS.md: the constants of batch sizes 2 and 4 are byte-identical, batch size 1 differs.
    assert report["per_batch_size"]["4"] == {"defined": 0, "shared": 8}
    assert report["per_batch_size"]["1"]["shared"] == 0
    assert report["bytes"] < report["original_bytes"] / 3
    assert not [s for s in nm_defined(root / "lib" / "simple_bs4_constants.o") if s.endswith("_contents")]
    header = (root / "include" / "tfaot-model-test-simple" / "simple_bs4.h").read_text()
    labels = re.findall(r'asm\("(\w+_constant_buffer_contents)"\)', header)
    # Every buffer of batch size 4 is read from batch size 2's (or 1's, for identical small ones) symbols.
    assert labels and not [label for label in labels if "_simple_bs4_" in label]
    # The payload keeps the alignment tfcompile gave it (64 bytes after a 64 byte aligned symbol).
    for symbol, (_address, _) in nm_defined(root / "lib" / "simple_bs2_constants.o").items():
        if symbol.endswith("_constant_buffer_contents"):
            readelf = subprocess.run(
                ["readelf", "-SW", str(root / "lib" / "simple_bs2_constants.o")],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            assert re.search(rf"\.rodata\.{symbol} .* 64$", readelf, re.MULTILINE), symbol


def test_six_batch_sizes_cost_two_copies_of_the_weights(run: Cli, study: Path, tmp_path: Path) -> None:
    """Goal: a package for 1, 2, 4, 8, 16, 32 links into a binary whose model data is <= 2.2 x the weights."""
    cfg = tmp_path / "aot_config.yaml"
    cfg.write_text(
        f"model:\n  name: study_l12_u128\n  version: '1.0.0'\n  saved_model: {study / 'saved_model'}\n"
        "compilation:\n  batch_sizes: [1, 2, 4, 8, 16, 32]\n"
    )
    # --engines aot: only the AOT program runs; TensorFlow still reports the SavedModel's weights.
    out, _ = run(
        "bench",
        cfg,
        "--dist",
        tmp_path / "dist",
        "--out",
        tmp_path / "bench",
        "--engines",
        "aot",
        "--batch-sizes",
        "1,32",
        "--warmup",
        "1",
        "--calls",
        "2",
        "--instances",
        "1",
        "--no-plots",
        "--json",
    )
    six = json.loads(out)
    assert six["compiled_batch_sizes"] == [1, 2, 4, 8, 16, 32]
    weights = six["weights"]["bytes"]
    assert weights > 700_000  # 773 kB: the study's 768 kB of trainable weights plus BatchNorm statistics
    assert six["binary"]["bytes"] <= 2.2 * weights, six["binary"]
    manifest = json.loads(
        (tmp_path / "dist" / "tfaot-model-study-l12-u128-1.0.0" / "manifest.json").read_text()
    )
    assert [manifest["constants"]["per_batch_size"][str(bs)]["defined"] for bs in (4, 8, 16, 32)] == [
        0,
        0,
        0,
        0,
    ]


# ---------------------------------------------------------------- bench


def test_caches_sharing_a_toolchain_share_one_tensorflow_c_api_program(
    toolchain: Toolchain, shared_cache: Path, tmp_path: Path
) -> None:
    # Its key and rpath name TensorFlow's real directory, not the path through a cache's link to the
    # toolchains (which named a new program for each such cache, its rpath into a directory soon gone).
    linked = Cache(shared_cache).share_into(tmp_path / "cache", ["toolchains"])
    via_link = ensure_toolchain(linked.root, toolchain.requirements, lambda _: None)
    assert via_link.python != toolchain.python  # reached through the link
    tf = bench.tensorflow_dir(via_link)
    assert tf == bench.tensorflow_dir(toolchain) == tf.resolve()
    assert (tf / "libtensorflow_cc.so.2").is_file()


CALLS = 500


def test_bench_against_tensorflow(run: Cli, study: Path, tmp_path: Path) -> None:
    # The JSON's shape and the engines' behaviour on one compiled batch size (1, where the wide margins
    # below hold) and one the batch rules emulate (8), one instance, one round (how rounds merge:
    # test_rounds_keep_the_fastest_call_of_each_batch_size): every engine, level and ratio is there; the
    # ratios at other sizes and instance counts are the benchmarks' (benchmarks/study.sh).
    # Two levels: the baseline and the one this machine runs best. From batch size 64 on the
    # generated code calls the runtime's matrix product, so the runtime's kernels are in the program.
    # CALLS calls of each: AOT's call at batch size 1 takes about 35 us here, and with 20 calls one
    # preemption of a few ms (a cold run's builds beside the tests) made it look 6x slower and failed the
    # margin below (2026-11-29: 1.28); over CALLS calls it is one part in several.
    cfg = tmp_path / "aot_config.yaml"
    cfg.write_text(
        f"model:\n  name: study_l12_u128\n  version: '1.0.0'\n  saved_model: {study / 'saved_model'}\n"
        "compilation:\n  batch_sizes: [1, 2, 64]\n  cpu_levels: [x86-64, x86-64-v3]\n"
    )
    out, _ = run(
        "bench",
        cfg,
        "--dist",
        tmp_path / "dist",
        "--out",
        tmp_path / "bench",
        "--batch-sizes",
        "1,8",
        "--warmup",
        "3",
        "--calls",
        str(CALLS),
        "--rounds",
        "1",
        "--instances",
        "1",
        "--json",
    )
    result = json.loads(out)
    assert result["engines"] == ["aot", "tf-capi", "ort", "tf-python"]
    for engine in result["time"]:  # the engines, and the AOT and TF series at lower levels
        assert [r["batch_size"] for r in result["time"][engine]] == [1, 8]
        assert all(r["us_per_event"] > 0 and r["calls"] == CALLS for r in result["time"][engine])
    aot = {r["batch_size"]: r for r in result["time"]["aot"]}
    assert aot[1]["compiled"] and not aot[8]["compiled"]  # 8 is emulated by the batch rules
    assert aot[8]["rule"] == "8:1,1,1,1,1,1,1,1"
    # Every CPU level this machine runs is timed: the best by itself, the lower ones forced. The
    # package carries two levels, the runtime's kernels all three: each side runs its best level
    # not above the one forced (on a machine with AVX-512 the package runs v3 and the runtime v4).
    order = ["x86-64", "x86-64-v3", "x86-64-v4"]
    levels = [lv for lv in order if cpu_target.check_host(lv).ok]

    def best(carried: list[str], ceiling: str) -> str:
        return max((lv for lv in carried if order.index(lv) <= order.index(ceiling)), key=order.index)

    package_levels = ["x86-64", "x86-64-v3"]
    assert sorted(result["peak_gflops"]) == levels and all(p > 0.5 for p in result["peak_gflops"].values())
    assert {(r["cpu_level"], r["runtime_cpu_level"]) for r in result["time"]["aot"]} == {
        (best(package_levels, levels[-1]), levels[-1])
    }
    for level in levels[:-1]:
        assert {(r["cpu_level"], r["runtime_cpu_level"]) for r in result["time"][f"aot:{level}"]} == {
            (best(package_levels, level), level)
        }
        assert f"time_tf-capi_over_aot:{level}" in result["ratios"]
        # TensorFlow again with oneDNN capped at the level's instructions, compared with that level's AOT.
        assert [r["batch_size"] for r in result["time"][f"tf-capi:{level}"]] == [1, 8]
        assert set(result["ratios"][f"time_tf-capi:{level}_over_aot:{level}"]) == {"1", "8"}
    # GFLOP/s from the profiler's count (the study model: about 385 kFLOP per event), as a fraction of the
    # peak of the higher of the two levels that ran. (Not bounded by 1: the peak is measured at another
    # moment than the model, and on a loaded machine the two see different shares of a core.)
    assert 370_000 < result["flops_per_event"] < 400_000
    for series in (s for s in result["time"] if s.startswith("aot")):
        for row in result["time"][series]:
            assert row["gflops"] == pytest.approx(
                result["flops_per_event"] * row["batch_size"] / row["seconds_per_call"] / 1e9
            )
            top = max(row["cpu_level"], row["runtime_cpu_level"], key=order.index)
            assert row["peak_fraction"] == pytest.approx(row["gflops"] / result["peak_gflops"][top])
    # Wide margins only: about 10x at batch size 1, about 75x in peak RSS on the build machines.
    assert result["ratios"]["time_tf-capi_over_aot"]["1"] > 2
    assert result["ratios"]["peak_rss_tf-capi_over_aot"]["1"] > 20
    assert [r["instances"] for r in result["memory"]["aot"]] == [1]
    # The same programs without a model: what a model adds is its peak RSS above that.
    for engine in ("aot", "tf-capi", "ort"):
        base = result["memory_baseline"][engine]
        assert base["instances"] == 0
        for row in result["memory"][engine]:
            assert 0 < row["model_kb"] == row["vm_hwm_kb"] - base["vm_hwm_kb"]
    assert result["ratios"]["model_rss_tf-capi_over_aot"]["1"] > 1
    # ONNX Runtime: the model converted from the same SavedModel, checked against TensorFlow, timed and measured.
    ort = result["ort"]
    assert ort["outputs_match"] and ort["rewritten"] == {"Erfc": 0} and "MatMul" in ort["op_types"]
    assert (
        0
        < ort["call_overhead_us"]
        < min(r["us_per_event"] for r in result["time"]["ort"] if r["batch_size"] == 1)
    )
    assert set(result["ratios"]["time_ort_over_aot"]) == {"1", "8"}
    assert result["ratios"]["peak_rss_ort_over_aot"]["1"] > 2  # a Python process with ONNX Runtime
    assert [r["instances"] for r in result["memory"]["ort"]] == [1]
    assert Path(result["json"]).is_file()
    for plot in result["plots"]:
        assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(Path(p).name for p in result["plots"]) == [
        "study-l12-u128_gflops.png",
        "study-l12-u128_memory.png",
        "study-l12-u128_time.png",
    ]


def test_bench_table_shows_levels_peak_fraction_and_peer_ratios() -> None:
    def row(bs: int, us: float, **extra: object) -> JsonObject:
        return {"batch_size": bs, "us_per_event": us, **extra}

    result = {
        "time": {
            "tf-capi:x86-64": [row(1, 50.0), row(4, 2100.0)],
            "tf-capi": [row(1, 40.0), row(4, 2000.0)],
            "ort": [row(1, 30.0)],
            "aot:x86-64": [row(1, 25.0, cpu_level="x86-64"), row(4, 12.0, cpu_level="x86-64")],
            "aot": [
                row(1, 10.0, cpu_level="x86-64-v3", peak_fraction=0.25),
                row(4, 8.0, cpu_level="x86-64-v3", peak_fraction=0.5),
            ],
        },
        "ratios": {"time_tf-capi_over_aot": {"1": 4.0, "4": 250.0}, "time_ort_over_aot": {"1": 3.0}},
        "ort": {"error": "tf2onnx: no converter for op Foo"},
    }
    lines = bench.table(result, [1, 4])
    assert lines[0].split() == [
        "batch",
        "aot",
        "x86-64-v3",
        "aot:x86-64",
        "tf-capi",
        "tf-capi:x86-64",
        "ort",
        "peak",
        "tf-capi/aot",
        "ort/aot",
    ]
    assert lines[1].split() == ["1", "10", "25", "40", "50", "30", "0.25", "4", "3"]
    assert lines[2].split() == ["4", "8", "12", "2000", "2100", "nan", "0.5", "250", "nan"]
    assert lines[3] == "ort: not timed: tf2onnx: no converter for op Foo"


# ---------------------------------------------------------------- small matrix products

TILE_OPTION = "--xla_backend_extra_options=xla_llvm_ir_gemm_tile_size="


def gemm_tiles(obj: Path) -> set[str]:
    """The "ROWS_DEPTH" tiles of XLA's small-matrix product kernels (gemm_F32_MxKxN_W_W_ROWS_DEPTH) in obj."""
    return {
        "_".join(name.split(".")[0].split("_")[-2:])
        for name in nm_defined(obj)
        if name.startswith("gemm_F32_")
    }


@pytest.mark.parametrize("xla_flags, tiles", [([], "4_8"), ([TILE_OPTION + "11:9:1*vectwidth"], "11_9")])
def test_small_matrix_products_take_our_tiles_and_match_tensorflow(
    run: Cli, study: Path, tmp_path: Path, xla_flags: list[str], tiles: str
) -> None:
    """Batch size 2 runs XLA's tiled small-matrix product: by default with 4-row x 2-vector tiles
    (XLA's own 11 x 1 left two dependent FMA chains: batch size 2 was slower per event than 1);
    a config's flag wins. The flags are in the manifest and the package verifies against TensorFlow."""
    cfg = tmp_path / "aot_config.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model": {
                    "name": "study_l12_u128",
                    "version": "1.0.0",
                    "saved_model": str(study / "saved_model"),
                },
                "compilation": {"batch_sizes": [2], "cpu_levels": ["x86-64"], "xla_flags": xla_flags},
            }
        )
    )
    run("compile", "--aot-config", cfg, "--output-directory", tmp_path / "out")
    root = tmp_path / "out" / "tfaot-model-study-l12-u128-1.0.0"
    manifest = json.loads((root / "manifest.json").read_text())
    flags = manifest["compilation"]["tfcompile_xla_flags"]
    assert flags[: 1 + len(xla_flags)] == [
        TILE_OPTION + "4:8:2*vectwidth",
        *xla_flags,
    ]  # the config's come after ours
    assert "--xla_cpu_multi_thread_eigen=false" in flags
    assert gemm_tiles(root / "lib" / "study_l12_u128_bs2.o") == {tiles}
    verification = manifest["verification"]
    assert 2 in verification["batch_sizes"]
    assert verification["outputs"]["output_0"]["max_abs"] <= verification["tolerance"]


def test_rounds_keep_the_fastest_call_of_each_batch_size() -> None:
    """`bench --rounds N` times each engine N times; each batch size keeps its fastest row."""
    rows: list[JsonObject] = []
    bench._keep_fastest(
        rows, [{"batch_size": 1, "seconds_per_call": 2.0}, {"batch_size": 8, "seconds_per_call": 1.0}]
    )
    bench._keep_fastest(
        rows,
        [{"batch_size": 1, "seconds_per_call": 1.5, "round": 2}, {"batch_size": 8, "seconds_per_call": 3.0}],
    )
    assert rows == [
        {"batch_size": 1, "seconds_per_call": 1.5, "round": 2},
        {"batch_size": 8, "seconds_per_call": 1.0},
    ]


# ---------------------------------------------------------------- tune


def test_cheapest_composition() -> None:
    costs = {1: 1.0, 2: 1.5, 4: 2.0, 8: 5.0}
    choice = tune.cheapest(costs, [3, 5, 7, 8, 9, 12])
    assert choice[3].sizes == (4,)  # one padded call of 4 beats 2 + 1
    assert choice[5].sizes == (4, 1)
    assert choice[7].sizes == (4, 4)  # padding in the last call only
    assert choice[8].sizes == (4, 4)  # cheaper than the compiled 8
    assert choice[9].sizes == (4, 4, 1)
    assert choice[12].cost == 6.0
    for t, c in choice.items():
        assert 0 <= sum(c.sizes) - t < c.sizes[-1]
    assert tune.default_sizes(5, [2, 4]) == (2, 2, 2)
    assert tune.parse_targets("1-3,8") == [1, 2, 3, 8]


def test_batch_rules_are_validated() -> None:
    assert config_mod.batch_rules(["5:4,1", "3:4"], "x") == ("5:4,1", "3:4")
    for bad in (["5:2,2"], ["5:4,4,4"], ["x"], "5:4,1", ["5:4,1", "5:2,2,1"]):
        with pytest.raises(InvalidInput):
            config_mod.batch_rules(bad, "x")


def test_tune_writes_rules_the_package_applies(built: Path, run: Cli, tmp_path: Path) -> None:
    registry = tmp_path / "tuned-registry"
    shutil.copytree(built / "registry", registry)
    run.registry = registry
    out, _ = run(
        "tune",
        "test-simple",
        "--targets",
        "1-12",
        "--warmup",
        "5",
        "--calls",
        "30",
        "--dist",
        tmp_path / "dist",
        "--out",
        tmp_path / "bench",
        "--json",
    )
    report = json.loads(out)
    kept = [e for e in report["targets"].values() if e["kept"]]
    assert len(kept) == len(report["rules"])
    for entry in report["targets"].values():  # never slower than the default rule, as measured
        if entry["kept"]:
            assert entry["measured_seconds"] < entry["measured_default_seconds"]
        else:
            assert entry["speedup"] == 1.0
    manifest = (
        json.loads((Path(report["package_dir"]) / "manifest.json").read_text()) if report["rules"] else None
    )
    if manifest:
        assert manifest["compilation"]["batch_rules"] == report["rules"]
        model_h = (
            Path(report["package_dir"]) / "include" / "tfaot-model-test-simple" / "model.h"
        ).read_text()
        assert all(f'"{r}"' in model_h for r in report["rules"])
        assert manifest["verification"]["batch_sizes"] == [1, 2, 3, 4, 7]
    entry = yaml.safe_load((registry / "models" / "test-simple.yaml").read_text())
    assert ("batch_rules" in entry.get("overrides", {})) == bool(report["rules"])
    # New rules are other inputs: the next build of the version, never the version rebuilt.
    assert entry["version"] == ("1.0.0.post1" if report["rules"] else "1.0.0")


# ---------------------------------------------------------------- CPU targets


def test_cpu_target_check() -> None:
    flags = (
        "fpu cx8 cmov mmx fxsr syscall sse sse2 pni ssse3 sse4_1 sse4_2 popcnt cx16 lahf_lm avx avx2 bmi1 bmi2 "
        "fma f16c movbe abm xsave"
    )
    cpuinfo = f"processor : 0\nflags\t\t: {flags}\n"
    assert cpu_target.check_host("", cpuinfo).ok
    assert cpu_target.check_host("x86-64-v3", cpuinfo).ok
    missing = cpu_target.check_host("x86-64-v4", cpuinfo)
    assert not missing.ok and "avx512f" in missing.missing
    assert not cpu_target.check_host("skylake-avx512", cpuinfo).ok
    unknown = cpu_target.check_host("some-future-cpu", cpuinfo)
    assert not unknown.ok and unknown.unknown
    compiled_for = Compilation(target_triple="x86_64-pc-linux", target_cpu="x86-64-v4")
    assert not cpu_target.check_package(compiled_for, cpuinfo).ok
    assert cpu_target.check_package(
        Compilation(target_triple="x86_64-pc-linux", target_cpu="x86-64-v3"), cpuinfo
    ).ok
    assert cpu_target.check_package(None, cpuinfo).ok  # a runtime package: no target CPU


# ---------------------------------------------------------------- compile path


def test_compile_helpers_write_the_same_files(
    toolchain: Toolchain, example_models: Path, tmp_path: Path
) -> None:
    """tfcompile in helper processes (jobs=3) gives the bytes of the in-process compile (jobs=1)."""
    from tfaot_dist.toolchain import run_worker

    outputs = {}
    for jobs in (1, 3):
        work = tmp_path / f"jobs{jobs}"
        (work / "out").mkdir(parents=True)
        answer = run_worker(
            toolchain,
            {
                "op": "compile",
                "saved_model": str(example_models / "multi" / "saved_model"),
                "serving_key": "serving_default",
                "batch_sizes": [1, 2, 4],
                "namespace": "ns",
                "class_name": "multi",
                "output_dir": str(work / "out"),
                "target_triple": "x86_64-pc-linux",
                "target_cpu": "",
                "jobs": jobs,
            },
            work,
        )
        assert answer["timings"].get("helpers", 0) == jobs - 1
        outputs[jobs] = {p.name: p.read_bytes() for p in sorted((work / "out").iterdir())}
    assert sorted(outputs[1]) == sorted(outputs[3]) and len(outputs[1]) == 9
    assert outputs[1] == outputs[3]


def _fake_size(include: Path, lib: Path, bs: int, buffers: dict[str, bytes]) -> None:
    """A tfcompile-like header and constants object: 64-byte header (payload size) + payload, padded."""
    header = [f'extern "C" char {n}[] asm("{n}");' for n in buffers]
    header.append("return {buffer_size, buffer + 64};")
    (include / f"m_bs{bs}.h").write_text("\n".join(header) + "\n")
    src = []
    for name, payload in buffers.items():
        blob = len(payload).to_bytes(8, "little") + bytes(56) + payload
        blob += bytes(max(128, 1 << (len(blob) - 1).bit_length()) - len(blob))  # power-of-two padding
        src.append(
            f'extern "C" __attribute__((aligned(64))) const unsigned char {name}[{len(blob)}] = '
            + "{"
            + ",".join(str(b) for b in blob)
            + "};"
        )
    (lib / f"m_bs{bs}.cc").write_text("\n".join(src) + "\n")
    subprocess.run(
        ["g++", "-c", "-O0", str(lib / f"m_bs{bs}.cc"), "-o", str(lib / f"m_bs{bs}_constants.o")], check=True
    )


def test_share_constants_on_synthetic_objects(tmp_path: Path) -> None:
    from tfaot_dist.cxx import weight_sharing

    include, lib = tmp_path / "include", tmp_path / "lib"
    include.mkdir()
    lib.mkdir()
    weights, bias = bytes(range(200)) * 5, b"\x01\x02\x03\x04"
    _fake_size(
        include, lib, 1, {"a1_constant_buffer_contents": weights[::-1], "b1_constant_buffer_contents": bias}
    )
    _fake_size(
        include,
        lib,
        2,
        {
            "a2_constant_buffer_contents": weights,
            "b2_constant_buffer_contents": bias,
            "c2_constant_buffer_contents": weights,
        },
    )
    _fake_size(include, lib, 4, {"a4_constant_buffer_contents": weights, "b4_constant_buffer_contents": bias})
    report = weight_sharing.share_constants(include, lib, "m", [1, 2, 4]).as_dict()
    assert report["per_batch_size"] == {
        "1": {"defined": 2, "shared": 0},
        "2": {"defined": 1, "shared": 2},
        "4": {"defined": 0, "shared": 2},
    }
    h4 = (include / "m_bs4.h").read_text()
    assert 'a4_constant_buffer_contents[] asm("a2_constant_buffer_contents")' in h4
    assert 'b4_constant_buffer_contents[] asm("b1_constant_buffer_contents")' in h4
    assert (
        'c2_constant_buffer_contents[] asm("a2_constant_buffer_contents")'
        in (include / "m_bs2.h").read_text()
    )
    defined = nm_defined(lib / "m_bs2_constants.o")
    assert int(defined["a2_constant_buffer_contents"][1], 16) == 64 + len(weights)  # padding cut
    # A consumer sees the same bytes through every label.
    (tmp_path / "main.cc").write_text(
        (include / "m_bs4.h").read_text().replace("return {buffer_size, buffer + 64};", "")
        + '#include <cstdio>\nint main(){std::printf("%d %d\\n", a4_constant_buffer_contents[64 + 7],'
        " b4_constant_buffer_contents[64 + 2]); return 0;}\n"
    )
    exe = tmp_path / "main"
    subprocess.run(
        [
            "g++",
            str(tmp_path / "main.cc"),
            *(str(p) for p in sorted(lib.glob("*_constants.o"))),
            "-o",
            str(exe),
        ],
        check=True,
    )
    assert subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split() == ["7", "3"]


def test_share_constants_leaves_unknown_forms_alone(tmp_path: Path) -> None:
    from tfaot_dist.cxx import weight_sharing

    include, lib = tmp_path / "include", tmp_path / "lib"
    include.mkdir()
    lib.mkdir()
    _fake_size(include, lib, 1, {"a1_constant_buffer_contents": b"x" * 100})
    (include / "m_bs1.h").write_text(
        (include / "m_bs1.h").read_text().replace(' asm("a1_constant_buffer_contents")', "")
    )
    before = (lib / "m_bs1_constants.o").read_bytes()
    report = weight_sharing.share_constants(include, lib, "m", [1]).as_dict()
    assert "left as compiled" in report["per_batch_size"]["1"]["note"]
    assert (lib / "m_bs1_constants.o").read_bytes() == before
