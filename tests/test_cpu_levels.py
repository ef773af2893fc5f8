"""Multi-level packages: code for several x86-64 levels in one package, the best chosen at run time."""

from __future__ import annotations

import array
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import Cli
from kept_objects import compile_kept

from tfaot_dist.build_key import build_key
from tfaot_dist.config import load_aot_config
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import INTERFACE_INCLUDE
from tfaot_dist.cxx.xla_runtime import ensure_runtime, link_consumer
from tfaot_dist.documents import Compilation
from tfaot_dist.errors import InvalidInput
from tfaot_dist.registry import DEFAULT_CPU_LEVELS, Defaults, Registry
from tfaot_dist.toolchain import WORKER, Toolchain, worker_env

LEVELS = ("x86-64", "x86-64-v3", "x86-64-v4")
RUNNABLE = [level for level in LEVELS if cpu_target.check_host(level).ok]
NOT_RUNNABLE = [level for level in LEVELS if level not in RUNNABLE]

# --- configuration ----------------------------------------------------------------------------------


def _config(tmp_path: Path, compilation: str) -> Path:
    (tmp_path / "saved_model").mkdir(exist_ok=True)
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"")
    path = tmp_path / "aot_config.yaml"
    path.write_text('model:\n  name: m\n  version: "1"\ncompilation:\n  batch_sizes: [1]\n' + compilation)
    return path


@pytest.mark.parametrize(
    "compilation, message",
    [
        ("  cpu_levels: [x86-64, x86-64-v5]\n", "compilation.cpu_levels: unknown CPU level 'x86-64-v5'"),
        ("  cpu_levels: [x86-64, x86-64]\n", "compilation.cpu_levels: duplicate CPU levels"),
        ("  cpu_levels: x86-64\n", "compilation.cpu_levels: expected a list"),
        ("  cpu_levels: ['$(id)']\n", "compilation.cpu_levels: unknown CPU level '$(id)'"),
        (
            "  cpu_levels: [x86-64]\n  target_cpu: haswell\n",
            "compilation.cpu_levels: give target_cpu (one CPU) or cpu_levels (several), not both",
        ),
    ],
)
def test_config_refuses_bad_cpu_levels(tmp_path: Path, compilation: str, message: str) -> None:
    path = _config(tmp_path, compilation)
    with pytest.raises(InvalidInput) as exc:
        load_aot_config(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_compile_option_refuses_unknown_levels(run: Cli) -> None:
    line = run.error(
        "compile",
        "--aot-config",
        "x.yaml",
        "--output-directory",
        "out",
        "--cpu-levels",
        "x86-64,x86_64_v3",
        expect=InvalidInput.exit_code,
    )
    assert line.endswith(
        "--cpu-levels: unknown CPU level 'x86_64_v3' (expected one of x86-64, x86-64-v2, "
        "x86-64-v3, x86-64-v4)"
    )


def test_registry_defaults_and_target_cpu_precedence(tmp_path: Path) -> None:
    assert Defaults().cpu_levels == DEFAULT_CPU_LEVELS == LEVELS
    (tmp_path / "registry.yaml").write_text("cpu_levels: [x86-64-v3, x86-64]\n")
    assert Registry(tmp_path).defaults().cpu_levels == ("x86-64", "x86-64-v3")  # lowest first
    (tmp_path / "registry.yaml").write_text("cpu_levels: [x86-64, znver4]\n")
    with pytest.raises(
        InvalidInput, match=re.escape(f"{tmp_path / 'registry.yaml'}: cpu_levels: unknown CPU level 'znver4'")
    ):
        Registry(tmp_path).defaults()

    config = load_aot_config(_config(tmp_path, ""))
    assert config.with_target_defaults("x86_64-pc-linux", "", LEVELS).compilation.cpu_levels == LEVELS
    # An explicit target_cpu (config or registry) makes a single-target package, as before levels.
    assert config.with_target_defaults("x86_64-pc-linux", "haswell", LEVELS).compilation.cpu_levels == ()
    mine = load_aot_config(_config(tmp_path, "  cpu_levels: [x86-64-v2]\n"))
    assert mine.with_target_defaults("x86_64-pc-linux", "", LEVELS).compilation.cpu_levels == ("x86-64-v2",)
    single = load_aot_config(_config(tmp_path, "  target_cpu: x86-64-v3\n"))
    resolved = single.with_target_defaults("x86_64-pc-linux", "", LEVELS).compilation
    assert (resolved.target_cpu, resolved.cpu_levels) == ("x86-64-v3", ())


def test_levels_are_part_of_the_build_key() -> None:
    from tfaot_dist.pins import GitSource
    from tfaot_dist.registry import ModelEntry

    entry = ModelEntry(
        "m", "1.0", GitSource("https://example.org/r.git", "main", "0" * 40), "m/aot_config.yaml"
    )
    keys = {
        build_key(entry, Defaults()),
        build_key(entry, Defaults(cpu_levels=("x86-64",))),
        build_key(ModelEntry(**{**entry.__dict__, "overrides": {"cpu_levels": ("x86-64",)}}), Defaults()),
    }
    assert len(keys) == 3


def test_check_package_runs_where_the_lowest_level_runs() -> None:
    v3_host = "flags : " + " ".join(sorted(cpu_target.REQUIRED_FLAGS["x86-64-v3"])) + "\n"
    old_host = "flags : " + " ".join(sorted(cpu_target.REQUIRED_FLAGS["x86-64"])) + "\n"
    multi = Compilation(target_triple="x86_64-pc-linux", target_cpu="", cpu_levels=LEVELS)
    check = cpu_target.check_package(multi, v3_host)
    assert check.ok and check.best == "x86-64-v3" and "best level x86-64-v3" in check.message
    assert cpu_target.check_package(multi, old_host).ok
    high = Compilation(target_triple="x86_64-pc-linux", target_cpu="", cpu_levels=("x86-64-v3", "x86-64-v4"))
    check = cpu_target.check_package(high, old_host)
    assert not check.ok and "lacks" in check.message and "avx2" in check.missing
    assert not cpu_target.check_package(Compilation(target_cpu="x86-64-v3"), old_host).ok  # single target


# --- a package of three levels ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multi_level(simple_every_level: Path) -> Path:
    """The simple example for every default level (and batch sizes 1, 2, 4), verified (conftest.py: made
    once per run, test_cpp_interface reads it too)."""
    return simple_every_level


def test_manifest_lists_levels_and_what_was_verified(multi_level: Path) -> None:
    manifest = json.loads((multi_level / "manifest.json").read_text())
    assert manifest["compilation"]["cpu_levels"] == list(LEVELS)
    checks = manifest["verification"]["cpu_levels"]
    assert [level for level, c in checks.items() if c["verified"]] == RUNNABLE
    for level in NOT_RUNNABLE:
        assert checks[level]["note"].startswith("this CPU lacks avx") and not checks[level]["verified"]
    files = manifest["files"]
    for bs in (1, 2, 4):
        for suffix in ("", "_x86_64_v3", "_x86_64_v4"):
            assert f"include/tfaot-model-simple/simple_bs{bs}{suffix}.h" in files
            assert f"lib/simple_bs{bs}{suffix}.o" in files


def test_weights_are_not_repeated_per_level(multi_level: Path) -> None:
    manifest = json.loads((multi_level / "manifest.json").read_text())
    per = manifest["constants"]["per_batch_size"]
    assert sorted(per) == [
        "1",
        "1@x86-64-v3",
        "1@x86-64-v4",
        "2",
        "2@x86-64-v3",
        "2@x86-64-v4",
        "4",
        "4@x86-64-v3",
        "4@x86-64-v4",
    ]
    # Every buffer of the higher levels is byte-identical to one of the lowest level.
    assert all(v["defined"] == 0 and v["shared"] > 0 for k, v in per.items() if "@" in k)
    # The higher levels read the lowest level's buffers: their constants objects are (nearly) empty.
    lib = multi_level / "lib"
    base = sum(p.stat().st_size for p in lib.glob("simple_bs[0-9]_constants.o"))
    higher = sum(p.stat().st_size for p in lib.glob("simple_bs*_x86_64_v*_constants.o"))
    assert higher < 0.02 * base, (higher, base)


def _disassembly(path: Path) -> str:
    return subprocess.run(["objdump", "-d", str(path)], check=True, capture_output=True, text=True).stdout


def test_lowest_level_has_no_avx_and_symbols_do_not_collide(multi_level: Path) -> None:
    lib = multi_level / "lib"
    for bs in (1, 2, 4):
        base = _disassembly(lib / f"simple_bs{bs}.o")
        assert "%ymm" not in base and "%zmm" not in base and "vfmadd" not in base
        v3 = _disassembly(lib / f"simple_bs{bs}_x86_64_v3.o")
        assert "%ymm" in v3 and "vfmadd" in v3 and "%zmm" not in v3
    defined: dict[str, str] = {}
    for obj in sorted(lib.glob("*.o")):
        nm = subprocess.run(
            ["nm", "--defined-only", "-g", str(obj)], check=True, capture_output=True, text=True
        )
        for line in nm.stdout.splitlines():
            symbol = line.split()[-1]
            assert symbol not in defined, f"{symbol} defined by {defined.get(symbol)} and {obj.name}"
            defined[symbol] = obj.name
    assert any("x86_64_v3" in s for s in defined) and any("x86_64_v4" in s for s in defined)


PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>
#include "tfaot/Model.h"
#include "tfaot-model-simple/model.h"

#ifdef RUNTIME_HOOK
// What a runtime that follows the level exports (tfaot/CpuLevel.h declares both weak): this one
// records the calls, refuses x86-64-v2 (-1) and lowers x86-64-v3 (1: accepted, kernels of a lower level).
static std::string runtimeLevel = "automatic";
extern "C" int tfaot_runtime_force_cpu_level(const char* level) {
  std::printf("runtime asked for '%s'\n", level == nullptr ? "(null)" : level);
  if (level != nullptr && std::string(level) == "x86-64-v2") {
    return -1;
  }
  if (level != nullptr && std::string(level) == "x86-64-v3") {
    runtimeLevel = "x86-64";
    return 1;
  }
  runtimeLevel = level == nullptr || *level == '\0' ? "automatic" : level;
  return 0;
}
extern "C" const char* tfaot_runtime_cpu_level(void) { return runtimeLevel.c_str(); }
#endif

// usage: program API_LEVEL|- OUT_DIR BATCH_SIZE INPUT_FILE [BATCH_SIZE INPUT_FILE ...]
int main(int argc, char** argv) {
  try {
    if (std::string(argv[1]) != "-") {
      tfaot_dist::setCpuLevel(argv[1]);
      std::printf("runtime level '%s'\n", tfaot_dist::runtimeCpuLevel().c_str());
    }
    tfaot::Model<tfaot_model::simple> model;
    std::printf("level %s\n", model.cpuLevel());
    std::printf("forced %s\n", tfaot_dist::forcedCpuLevel().c_str());
    for (int i = 3; i + 1 < argc; i += 2) {
      const int n = std::atoi(argv[i]);
      std::vector<float> in(static_cast<std::size_t>(n) * 4), out(static_cast<std::size_t>(n) * 2);
      std::ifstream(argv[i + 1], std::ios::binary).read(reinterpret_cast<char*>(in.data()),
                                                        static_cast<std::streamsize>(in.size() * sizeof(float)));
      model.runFlat(n, {tfaot::InputSpan(in)}, {tfaot::OutputSpan(out)});
      std::ofstream(std::string(argv[2]) + "/bs" + argv[i] + ".bin", std::ios::binary)
          .write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
"""


def _link_program(
    multi_level: Path, toolchain: Toolchain, shared_cache: Path, work: Path, *flags: str
) -> Path:
    (work / "program.cc").write_text(PROGRAM)
    runtime = ensure_runtime(toolchain.python, shared_cache, print)
    includes = [multi_level / "include", INTERFACE_INCLUDE, runtime.include_dir]
    compile_flags = [
        *runtime.cxxflags,
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        *flags,
        *(f"-I{d}" for d in includes),
    ]
    code, stderr = compile_kept(compile_flags, work / "program.cc", work / "program.o")
    assert code == 0, stderr[-6000:]
    link_consumer(
        runtime, [work / "program.o"], [multi_level / "lib" / "libtfaot-model-simple.a"], work / "program"
    )
    return work / "program"


@pytest.fixture(scope="module")
def program(
    multi_level: Path, toolchain: Toolchain, shared_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A user's program linked with the package's archive: every level's objects at once."""
    return _link_program(multi_level, toolchain, shared_cache, tmp_path_factory.mktemp("levels-program"))


@pytest.fixture(scope="module")
def hooked_program(
    multi_level: Path, toolchain: Toolchain, shared_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The same program, defining the runtime's level functions itself."""
    return _link_program(
        multi_level, toolchain, shared_cache, tmp_path_factory.mktemp("levels-hooked"), "-DRUNTIME_HOOK"
    )


def test_set_cpu_level_tells_a_runtime_that_can_follow(
    hooked_program: Path, program: Path, multi_level: Path, tmp_path: Path
) -> None:
    proc, sizes, reference = _run(hooked_program, multi_level, tmp_path / "a", api="x86-64")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:3] == [
        "runtime asked for 'x86-64'",
        "runtime level 'x86-64'",
        "level x86-64",
    ]
    _assert_matches_tensorflow(tmp_path / "a", sizes, reference)
    # Refused by the runtime: an error, and the models keep their automatic choice.
    proc, _, _ = _run(hooked_program, multi_level, tmp_path / "b", api="x86-64-v2")
    assert proc.returncode == 1 and proc.stdout == "runtime asked for 'x86-64-v2'\n"
    assert proc.stderr.strip() == "error: tfaot: the XLA runtime refused CPU level 'x86-64-v2'"
    # Lowered by the runtime (it has no such kernels): accepted, the model runs the level asked for.
    if cpu_target.check_host("x86-64-v3").ok:
        proc, _, _ = _run(hooked_program, multi_level, tmp_path / "d", api="x86-64-v3")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[:3] == [
            "runtime asked for 'x86-64-v3'",
            "runtime level 'x86-64'",
            "level x86-64-v3",
        ]
    # Without the functions (today's runtimes) nothing is called and the level is unknown to the runtime.
    proc, _, _ = _run(program, multi_level, tmp_path / "c", api="x86-64")
    assert proc.returncode == 0 and proc.stdout.splitlines()[:2] == ["runtime level ''", "level x86-64"]


def _run(
    program: Path, multi_level: Path, out: Path, api: str = "-", env_level: str | None = None
) -> tuple[subprocess.CompletedProcess[str], list[int], Path]:
    reference = multi_level / "share" / "tfaot-model-simple" / "reference"
    out.mkdir(parents=True, exist_ok=True)
    args = [str(program), api, str(out)]
    sizes = sorted(int(p.name[2:]) for p in reference.iterdir())
    for bs in sizes:
        args += [str(bs), str(reference / f"bs{bs}" / "input_0.bin")]
    env = {k: v for k, v in os.environ.items() if k != "TFAOT_CPU_LEVEL"}
    if env_level is not None:
        env["TFAOT_CPU_LEVEL"] = env_level
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    return proc, sizes, reference


def _assert_matches_tensorflow(out: Path, sizes: list[int], reference: Path) -> None:
    for bs in sizes:
        got, want = array.array("f"), array.array("f")
        got.frombytes((out / f"bs{bs}.bin").read_bytes())
        want.frombytes((reference / f"bs{bs}" / "output_0.bin").read_bytes())
        assert len(got) == len(want) == 2 * bs
        for a, b in zip(got, want):  # lengths checked above
            assert abs(a - b) <= 1e-5 or abs(a - b) <= 1e-5 * abs(b), (bs, a, b)


@pytest.mark.parametrize("level", RUNNABLE)
@pytest.mark.parametrize("how", ["environment", "api"])
def test_forced_level_runs_and_matches_tensorflow(
    program: Path, multi_level: Path, tmp_path: Path, level: str, how: str
) -> None:
    out = tmp_path / "out"
    if how == "api":
        # The API call wins over the environment variable.
        proc, sizes, reference = _run(program, multi_level, out, api=level, env_level="x86-64")
    else:
        proc, sizes, reference = _run(program, multi_level, out, env_level=level)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("runtime level")]
    assert lines[0] == f"level {level}"
    assert lines[1] == f"forced {level if how == 'api' else ''}"
    _assert_matches_tensorflow(out, sizes, reference)


def test_automatic_level_is_the_best_this_cpu_runs(program: Path, multi_level: Path, tmp_path: Path) -> None:
    proc, sizes, reference = _run(program, multi_level, tmp_path / "out", env_level="")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"level {RUNNABLE[-1]}"
    _assert_matches_tensorflow(tmp_path / "out", sizes, reference)


def test_level_not_carried_falls_back_to_the_highest_below(
    program: Path, multi_level: Path, tmp_path: Path
) -> None:
    proc, _, _ = _run(program, multi_level, tmp_path / "out", env_level="x86-64-v2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "level x86-64"


def test_unknown_or_unrunnable_level_is_one_clear_error(
    program: Path, multi_level: Path, tmp_path: Path
) -> None:
    proc, _, _ = _run(program, multi_level, tmp_path / "a", env_level="x86-64-v9")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "error: tfaot: TFAOT_CPU_LEVEL 'x86-64-v9' is not a CPU level (expected one of "
        "x86-64, x86-64-v2, x86-64-v3, x86-64-v4) (model 'simple')"
    )
    proc, _, _ = _run(program, multi_level, tmp_path / "b", api="haswell")
    assert proc.returncode == 1 and "setCpuLevel() 'haswell' is not a CPU level" in proc.stderr
    for level in NOT_RUNNABLE:  # never a SIGILL
        proc, _, _ = _run(program, multi_level, tmp_path / "c", env_level=level)
        assert proc.returncode == 1
        assert f"TFAOT_CPU_LEVEL asks for CPU level {level}, but this CPU lacks avx" in proc.stderr
        proc, _, _ = _run(program, multi_level, tmp_path / "d", api=level)
        assert proc.returncode == 1 and f"setCpuLevel() asks for CPU level {level}" in proc.stderr


def _worker_compile(toolchain: Toolchain, saved_model: Path, work: Path, **request: object) -> dict[str, Any]:
    out = work / "out"
    out.mkdir(parents=True)
    request = {
        "op": "compile",
        "saved_model": str(saved_model),
        "serving_key": "serving_default",
        "batch_sizes": [1],
        "namespace": "ns",
        "class_name": "m",
        "output_dir": str(out),
        "target_triple": "x86_64-pc-linux",
        "target_cpu": "",
        "result": str(work / "result.json"),
        "jobs": 1,
        **request,
    }
    (work / "request.json").write_text(json.dumps(request))
    subprocess.run(
        [str(toolchain.python), "-I", str(WORKER), str(work / "request.json")],
        env=worker_env(work),
        check=True,
        capture_output=True,
    )
    answer: dict[str, Any] = json.loads((work / "result.json").read_text())
    assert answer["ok"], answer
    return answer


def test_lowest_level_is_byte_identical_to_a_single_target_package(
    toolchain: Toolchain, example_models: Path, tmp_path: Path
) -> None:
    """Level x86-64 is what packages were before levels: same names, same bytes; levels add files only."""
    saved_model = example_models / "simple" / "saved_model"
    single = _worker_compile(toolchain, saved_model, tmp_path / "single")
    multi = _worker_compile(toolchain, saved_model, tmp_path / "multi", cpu_levels=["x86-64", "x86-64-v3"])
    assert sorted(single["files"]) == ["1"] and sorted(multi["files"]) == ["1", "1@x86-64-v3"]
    assert multi["files"]["1@x86-64-v3"] == {
        "header": "m_bs1_x86_64_v3.h",
        "objects": ["m_bs1_x86_64_v3.o", "m_bs1_x86_64_v3_constants.o"],
    }
    for name in ("m_bs1.h", "m_bs1.o", "m_bs1_constants.o"):
        assert (tmp_path / "single" / "out" / name).read_bytes() == (
            tmp_path / "multi" / "out" / name
        ).read_bytes()
    header = (tmp_path / "multi" / "out" / "m_bs1_x86_64_v3.h").read_text()
    assert "class m_bs1_x86_64_v3 final : public tensorflow::XlaCompiledCpuFunction" in header


def test_model_h_describes_the_levels(multi_level: Path) -> None:
    text = (multi_level / "include" / "tfaot-model-simple" / "model.h").read_text()
    assert "// CPU levels: x86-64, x86-64-v3, x86-64-v4" in text
    assert '#include "tfaot-model-simple/simple_bs4_x86_64_v4.h"' in text
    assert '#include "tfaot/CpuLevel.h"' in text
    assert json.loads((multi_level / "manifest.json").read_text())["compilation"]["target_cpu"] == ""
