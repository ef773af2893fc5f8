"""Runtime parts (cxx/runtime_parts.py): the heavy runtime sources, built only for the models that call them.

The entry-point table is checked against the symbols of every part of both
TensorFlow versions: of real builds, or recorded from real builds (RECORD) for
the parts no other test needs while what their compiler reads is unchanged; a
model that calls a product carries the part in its archive and verifies; a
model that calls none carries nothing.
"""

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli

from tfaot_dist.cxx import runtime_kernels, runtime_parts, xla_runtime
from tfaot_dist.cxx.build_kit import BUILD_FLAGS, CONSUMER_CXXFLAGS
from tfaot_dist.cxx.xla_runtime import XlaRuntime
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_bytes, sha256_file, tree_digest, write_atomic

# Parts the rest of the suite builds anyway (its models call them): the table test builds them too.
BUILT_ANYWAY = {
    "2.21": ("convolution_lib_f32_2d", "dot_lib_f32", "dot_lib_f64"),
    "2.12": (
        "runtime_single_threaded_conv2d",
        "runtime_single_threaded_conv3d",
        "runtime_single_threaded_matmul",
    ),
}
# The other parts' defined symbols, recorded from real builds: each with the identity of what its
# compiler read (its source, the runtime's include/, the compiler, the flags). A part whose identity
# differs from its record (another compiler, changed headers) is built and its own symbols are taken.
#   TFAOT_UPDATE_GOLDEN=1 scripts/test -m tf tests/test_runtime_parts.py -k table   builds every part, records
#   TFAOT_DIST_TEST_ALL_PARTS=1 scripts/test -m tf tests/test_runtime_parts.py      builds every part, compares
# (the weekly .github/workflows/soak.yml runs the second).
RECORD = Path(__file__).parent / "golden" / "runtime-part-symbols.json"
UPDATE = os.environ.get("TFAOT_UPDATE_GOLDEN") == "1"
ALL_PARTS = UPDATE or os.environ.get("TFAOT_DIST_TEST_ALL_PARTS") == "1"
# What a table entry can claim: every pattern starts with one of these (test_entry_points_are_anchored...).
ENTRY_PREFIXES = (r"^(?:void )?xla::", r"^__xla_cpu_runtime_")
RECORDED = re.compile("|".join(ENTRY_PREFIXES))


def test_entry_points_are_claimed_by_their_own_part() -> None:
    """The table as a pure function: each name goes to the part of its type and rank, or to none."""
    sources = [*runtime_parts.ENTRY_POINTS, "xla/executable_run_options.cc"]
    available = {p.name: p for p in runtime_parts.parts(sources)}
    assert "executable_run_options" not in available
    assert runtime_parts.core_sources(sources) == ["xla/executable_run_options.cc"]
    cases = {
        "void xla::cpu::internal::TypedMatMul<float, float, float>(Eigen::ThreadPoolDevice const*, void*, void*, "
        "void*, long, long, long, bool, bool, absl::lts_20260526::AnyInvocable<void ()>)": "dot_lib_f32",
        "void xla::cpu::internal::TypedMatMul<Eigen::half, Eigen::half, Eigen::half>(...)": "dot_lib_f16",
        "void xla::cpu::internal::TypedMatMul<signed char, signed char, int>(...)": "dot_lib_s8",
        "void xla::cpu::internal::EigenConv2D<float>(Eigen::ThreadPoolDevice const*, float*)": "convolution_lib_f32_2d",
        "void xla::cpu::internal::EigenTransposedConv3D<Eigen::half>(...)": "convolution_lib_f16_3d",
        "void xla::cpu::internal::EigenGenericConv2D<true, float>(...)": "convolution_lib_f32_2d",
        "xla::cpu::internal::SortInplace(xla::cpu::internal::SortDims const&)": "sort_lib",
        "__xla_cpu_runtime_EigenSingleThreadedMatMulF32": "runtime_single_threaded_matmul",
        "__xla_cpu_runtime_EigenMatMulF64": "runtime_matmul",
        "__xla_cpu_runtime_EigenBatchMatMulF32": "runtime_matmul",
        "__xla_cpu_runtime_EigenSingleThreadedConv3DF16": "runtime_single_threaded_conv3d",
    }
    for symbol, part in cases.items():
        assert [p.name for p in available.values() if p.claims(symbol)] == [part], symbol
    wanted, unclaimed = runtime_parts.claimed(
        list(available.values()), {*cases, "memset", "floorf", "xla::cpu::NewThing(int)"}
    )
    assert sorted(p.name for p in wanted) == sorted(set(cases.values()))
    assert unclaimed == {"xla::cpu::NewThing(int)"}  # XLA's, claimed by none: all parts are built then


def test_entry_points_are_anchored_in_xla_names() -> None:
    """So the records, which keep only such names, hold every symbol a pattern could claim."""
    for source, pattern in runtime_parts.ENTRY_POINTS.items():
        assert pattern.startswith(ENTRY_PREFIXES), source


def recorded_identity(src: runtime_parts.PartSource, include_digest: str, part: runtime_parts.Part) -> str:
    identity = {
        "source": sha256_file(src.src_root / part.source),
        "include": include_digest,
        "compiler": [src.compiler.full_version, src.compiler.target],
        "flags": [CONSUMER_CXXFLAGS, BUILD_FLAGS, runtime_parts.RUNTIME_FLAGS],
    }
    return sha256_bytes(json.dumps(identity, sort_keys=True).encode())


@pytest.fixture(scope="module", params=["2.21", "2.12"])
def part_symbols(
    request: pytest.FixtureRequest, shared_cache: Path
) -> tuple[XlaRuntime, dict[str, runtime_parts.Part], dict[str, set[str]]]:
    """The runtime of one TensorFlow version, its parts, and each part's defined symbols (RECORDED's
    names): built (cached across runs) or, with a matching record, recorded."""
    toolchain = request.getfixturevalue("toolchain" if request.param == "2.21" else "toolchain212")
    runtime = xla_runtime.ensure_runtime(toolchain.python, shared_cache, lambda m: None)
    src = xla_runtime.part_source(runtime, toolchain.python)
    available = {p.name: p for p in runtime_parts.parts(src.sources)}
    # 2.21: dot products of 7 types, convolutions of 2 types and ranks, sort; 2.12: 8 runtime_*.cc
    assert len(available) == {"2.21": 12, "2.12": 8}[request.param]
    records = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    recorded = records.get(runtime.tensorflow_version, {})
    include_digest = tree_digest(runtime.include_dir)
    identities = {name: recorded_identity(src, include_digest, p) for name, p in available.items()}
    matching = {n for n, r in recorded.items() if n in identities and r["identity"] == identities[n]}
    to_build = sorted(
        available if ALL_PARTS else {*BUILT_ANYWAY[request.param], *(set(available) - matching)}
    )
    built = xla_runtime.ensure_parts(runtime, to_build, toolchain.python, shared_cache, lambda m: None)
    symbols = {
        p.name: {s for s in runtime_parts.defined_symbols(p.objects) if RECORDED.search(s)} for p in built
    }
    for name in sorted(set(symbols) & matching if not UPDATE else ()):  # a record and a build agree
        assert symbols[name] == set(recorded[name]["symbols"]), f"{name}: symbols differ from {RECORD.name}"
    for name in sorted(matching - set(symbols)):
        symbols[name] = set(recorded[name]["symbols"])
    if UPDATE:  # every part but those carrying our kernels, whose sources the identity leaves out
        dispatched = {d.source for d in runtime_kernels.dispatches(src.sources)}
        records[runtime.tensorflow_version] = {
            name: {"identity": identities[name], "symbols": sorted(symbols[name])}
            for name, part in sorted(available.items())
            if part.source not in dispatched
        }
        write_atomic(RECORD, json.dumps(records, indent=1, sort_keys=True) + "\n")
    return runtime, available, symbols


@pytest.mark.slow
def test_each_part_defines_what_the_table_says_and_nothing_another_part_claims(
    part_symbols: tuple[XlaRuntime, dict[str, runtime_parts.Part], dict[str, set[str]]],
) -> None:
    runtime, available, symbols = part_symbols
    assert sorted(symbols) == sorted(available)
    for part_name, defined in symbols.items():
        claims = {name: sorted(s for s in defined if p.claims(s)) for name, p in available.items()}
        assert claims.pop(part_name), f"{part_name} defines none of its entry points"
        assert not any(claims.values()), (part_name, {k: v[:2] for k, v in claims.items() if v})
    core = runtime_parts.defined_symbols(runtime.libs[:1])
    assert not [s for s in core if any(p.claims(s) for p in available.values())]
    # The heavy sources are not in the core library.
    members = subprocess.run(
        ["ar", "t", runtime.libs[0]], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [m for m in members if any(m.endswith(f"__{name}.o") for name in available)], members


def compile_study(
    run: Cli, study: Path, out: Path, batch_sizes: list[int]
) -> tuple[Path, dict[str, Any], str]:
    cfg = out / "aot_config.yaml"
    out.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        json.dumps(
            {
                "model": {
                    "name": "study_l12_u128",
                    "version": "1.0.0",
                    "saved_model": str(study / "saved_model"),
                },
                "compilation": {"batch_sizes": batch_sizes, "cpu_levels": ["x86-64", "x86-64-v3"]},
            }
        )
    )
    _, err = run("compile", "--aot-config", cfg, "--output-directory", out / "dist")
    root = out / "dist" / "tfaot-model-study-l12-u128-1.0.0"
    return root, json.loads((root / "manifest.json").read_text()), err


def archive_members(root: Path) -> list[str]:
    out = subprocess.run(
        ["ar", "t", root / "lib" / "libtfaot-model-study-l12-u128.a"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


@pytest.mark.slow
def test_a_model_calling_the_product_carries_its_part_and_verifies(
    run: Cli, study: Path, tmp_path: Path
) -> None:
    """128-unit layers at batch size 64 call the runtime's matrix product (Eigen): the package's archive
    holds the dot_lib_f32 part (the per-level kernels, the dispatcher, XLA's renamed product)."""
    root, manifest, log = compile_study(run, study, tmp_path / "a", [1, 64])
    assert manifest["runtime_parts"] == ["dot_lib_f32"]
    assert "runtime parts the model calls: dot_lib_f32" in log
    assert "building all parts" not in log  # found through the table, not the fallback
    members = archive_members(root)
    for obj in (
        "tfaot_kernels_x86_64.o",
        "tfaot_kernels_x86_64_v3.o",
        "tfaot_dispatch_thunk_dot.o",
        "xla__backends__cpu__runtime__dot_lib_f32.o",
    ):
        assert obj in members, members
    # Only in the archive: lib/ holds the model's own objects.
    assert not [p for p in (root / "lib").iterdir() if p.name.startswith(("tfaot_", "xla__"))]
    verification = manifest["verification"]
    assert 64 in verification["batch_sizes"]
    assert verification["outputs"]["output_0"]["max_abs"] <= verification["tolerance"]


@pytest.mark.slow
def test_a_model_calling_no_runtime_code_carries_no_part(run: Cli, study: Path, tmp_path: Path) -> None:
    """Batch sizes 1 and 2 of 128-unit layers: XLA emits the products inline, no part is needed."""
    root, manifest, _ = compile_study(run, study, tmp_path / "b", [1, 2])
    assert "runtime_parts" not in manifest
    assert not [m for m in archive_members(root) if m.startswith(("tfaot_", "xla__"))]


@pytest.mark.slow
def test_an_unlisted_entry_point_builds_every_part_and_takes_the_one_defining_it(
    run: Cli,
    study: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    toolchain: Toolchain,
    shared_cache: Path,
) -> None:
    """Should the table miss an entry point (a new TensorFlow), the symbols of the built parts decide."""
    # The runtime first: its include/ holds the headers of every part (parts() is narrowed below).
    xla_runtime.ensure_runtime(toolchain.python, shared_cache, lambda m: None)
    source = "xla/backends/cpu/runtime/dot_lib_f32.cc"
    monkeypatch.setitem(runtime_parts.ENTRY_POINTS, source, r"(?!)")  # claims nothing
    # "Every part" is here the three parts other tests build anyway (the others take 10 minutes of
    # compiling on 2 cores, and the table test has their symbols): the one defining the symbol among them.
    every_part = runtime_parts.parts
    monkeypatch.setattr(
        runtime_parts,
        "parts",
        lambda sources: [p for p in every_part(sources) if p.name in BUILT_ANYWAY["2.21"]],
    )
    _, manifest, log = compile_study(run, study, tmp_path / "c", [64])
    assert "which no runtime part is known to define: building all parts" in log
    assert manifest["runtime_parts"] == ["dot_lib_f32"]
    assert manifest["verification"]["batch_sizes"]
