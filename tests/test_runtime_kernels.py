"""The runtime's per-level matrix kernels (cxx/runtime_kernels.py), built for real and run.

They are in the runtime part of dot_lib_f32.cc (cxx/runtime_parts.py), linked here with the core library.

Every level this CPU runs is forced in turn, through TFAOT_CPU_LEVEL and
through tfaot_runtime_force_cpu_level(), and the products are compared with
a double-precision reference; a level the CPU cannot run must be lowered to
one it can, never executed.
"""

from tfaot_dist.toolchain import Toolchain
import json
import re
import subprocess
from pathlib import Path

import pytest

from tfaot_dist.cxx import runtime_kernels, runtime_parts, xla_runtime
from tfaot_dist.channels import cpu_target

pytestmark = pytest.mark.slow

# Calls the entry point the generated headers call (TF 2.21's dot thunk), for
# shapes with odd sizes and every transposition, and prints the level used
# and the largest relative error against a double-precision product.
PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "xla/backends/cpu/runtime/dot_lib.h"

extern "C" int tfaot_runtime_force_cpu_level(const char* level);
extern "C" const char* tfaot_runtime_cpu_level(void);

static double worst_error() {
  // m x n x k; n of 2-4 (without transpositions) takes the few-columns kernels: rows in full tiles
  // (256), tiles and leftover rows (37, 100), leftover rows only (5).
  const long shapes[][3] = {{1, 128, 128}, {7, 5, 3}, {256, 128, 128}, {33, 17, 65}, {2, 1, 9},
                            {256, 2, 256}, {37, 3, 19}, {5, 4, 7}, {100, 2, 1}, {256, 4, 32}};
  double worst = 0;
  for (const auto& s : shapes) {
    const long m = s[0], n = s[1], k = s[2];
    for (int tl = 0; tl < 2; ++tl) {
      for (int tr = 0; tr < 2; ++tr) {
        // one float more than needed, so the products also run on unaligned buffers
        std::vector<float> lhs(m * k + 1), rhs(k * n + 1), out(m * n + 1);
        for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = std::sin(0.37 * i + m);
        for (size_t i = 0; i < rhs.size(); ++i) rhs[i] = std::cos(0.11 * i + n);
        for (int offset = 0; offset < 2; ++offset) {
          float* a = lhs.data() + offset;
          float* b = rhs.data() + offset;
          float* c = out.data() + offset;
          bool done = false;
          xla::cpu::internal::TypedMatMul<float, float, float>(nullptr, c, a, b, m, n, k, tl, tr,
                                                               [&done] { done = true; });
          if (!done) return 1e9;
          for (long i = 0; i < m; ++i) {
            for (long j = 0; j < n; ++j) {
              double want = 0, scale = 0;
              for (long p = 0; p < k; ++p) {
                const double x = tl ? a[p + i * k] : a[i + p * m];  // column-major, as XLA's contract says
                const double y = tr ? b[j + p * n] : b[p + j * k];
                want += x * y;
                scale += std::fabs(x * y);
              }
              const double err = std::fabs(c[i + j * m] - want) / (scale > 0 ? scale : 1);
              if (err > worst) worst = err;
            }
          }
        }
      }
    }
  }
  return worst;
}

int main(int argc, char** argv) {
  if (argc == 2) {
    std::printf("force %s -> %d\n", argv[1], tfaot_runtime_force_cpu_level(argv[1]));
  }
  std::printf("level %s\n", tfaot_runtime_cpu_level());
  std::printf("error %.3g\n", worst_error());
  return 0;
}
"""


@pytest.fixture(scope="module")
def runtime(toolchain: Toolchain, shared_cache: Path) -> xla_runtime.XlaRuntime:
    return xla_runtime.ensure_runtime(toolchain.python, shared_cache, lambda m: None)


@pytest.fixture(scope="module")
def part(runtime: xla_runtime.XlaRuntime, toolchain: Toolchain, shared_cache: Path) -> runtime_parts.BuiltPart:
    [built] = xla_runtime.ensure_parts(runtime, ["dot_lib_f32"], toolchain.python, shared_cache, lambda m: None)
    return built


@pytest.fixture(scope="module")
def program(runtime: xla_runtime.XlaRuntime, part: runtime_parts.BuiltPart, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("kernels")
    (work / "matmul.cc").write_text(PROGRAM)
    xla_runtime.compile_consumer(runtime, [work / "matmul.cc"], [], part.objects, work / "matmul")
    return work / "matmul"


def run(program: Path, *args: str, level: str | None = None) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin"} | ({"TFAOT_CPU_LEVEL": level} if level is not None else {})
    out = subprocess.run([program, *args], env=env, capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines()) | {"stderr": out.stderr}


def runnable(level: str) -> bool:
    return cpu_target.check_host(level).ok


def best_runnable() -> str:
    return [lv.name for lv in runtime_kernels.LEVELS if runnable(lv.name)][-1]


def test_runtime_lists_its_levels(runtime: xla_runtime.XlaRuntime) -> None:
    meta = json.loads((runtime.root / xla_runtime.MANIFEST).read_text())
    assert meta["cpu_levels"] == ["x86-64", "x86-64-v3", "x86-64-v4"]
    assert xla_runtime.XlaRuntime.from_dir(runtime.root).cpu_levels == ("x86-64", "x86-64-v3", "x86-64-v4")


@pytest.mark.parametrize("level", [lv.name for lv in runtime_kernels.LEVELS])
def test_forced_level_matches_the_reference(program: Path, level: str) -> None:
    result = run(program, level=level)
    # A level this CPU lacks is lowered to the best it runs, not executed.
    assert result["level"] == (level if runnable(level) else best_runnable())
    assert float(result["error"]) < 1e-5


def test_automatic_level_is_the_best_the_cpu_runs(program: Path) -> None:
    assert run(program)["level"] == best_runnable()


def test_api_call_forces_a_level(program: Path) -> None:
    result = run(program, "x86-64", level="x86-64-v3")
    assert result["force"] == "x86-64 -> 0"
    assert result["level"] == "x86-64"
    assert float(result["error"]) < 1e-5
    result = run(program, "x86-64-v4")
    assert result["force"] == ("x86-64-v4 -> 0" if runnable("x86-64-v4") else "x86-64-v4 -> 1")
    assert result["level"] == best_runnable()


def test_v2_runs_the_baseline_kernels(program: Path) -> None:
    """Packages may carry x86-64-v2 code; the runtime has no v2 kernels and uses the baseline's."""
    assert run(program, level="x86-64-v2")["level"] == "x86-64"
    assert run(program, "x86-64-v2")["force"] == "x86-64-v2 -> 1"


def test_unknown_level_names_are_refused(program: Path) -> None:
    assert run(program, "pentium")["force"] == "pentium -> -1"
    result = run(program, level="pentium")
    assert result["level"] == best_runnable()
    assert "TFAOT_CPU_LEVEL=pentium" in result["stderr"]


def test_each_level_uses_its_instructions(part: runtime_parts.BuiltPart) -> None:
    objects = part.root / "obj"
    registers = {}
    for lv in runtime_kernels.LEVELS:
        text = subprocess.run(["objdump", "-d", objects / f"tfaot_kernels_{lv.suffix}.o"], capture_output=True,
                              text=True, check=True).stdout
        registers[lv.name] = {r for r in ("xmm", "ymm", "zmm") if f"%{r}" in text}, "vfmadd" in text
    assert registers["x86-64"] == ({"xmm"}, False)  # SSE2 only: runs on any x86-64 CPU
    assert registers["x86-64-v3"][0] >= {"ymm"} and "zmm" not in registers["x86-64-v3"][0]
    assert registers["x86-64-v3"][1]
    assert "zmm" in registers["x86-64-v4"][0]


def test_level_objects_define_no_shared_symbols(part: runtime_parts.BuiltPart) -> None:
    """No Eigen or std function compiled for v3/v4 can be merged by the linker into baseline code."""
    objects = part.root / "obj"
    for lv in runtime_kernels.LEVELS:
        out = subprocess.run(["nm", "--defined-only", "-P", objects / f"tfaot_kernels_{lv.suffix}.o"],
                             capture_output=True, text=True, check=True).stdout
        exported = [line.split()[0] for line in out.splitlines() if re.match(r"\S+ [A-Zuvw] ", line)]
        namespace = f"tfaot_eigen_{lv.suffix}"
        assert f"tfaot_matmul_f32_{lv.suffix}" in exported
        # DW.ref.__gxx_personality_v0: a pointer to the C++ runtime's personality routine, data only
        assert all(name in (f"tfaot_matmul_f32_{lv.suffix}", "DW.ref.__gxx_personality_v0")
                   or f"{len(namespace)}{namespace}" in name for name in exported), exported


def test_wheel_entry_point_is_replaced(runtime: xla_runtime.XlaRuntime, part: runtime_parts.BuiltPart) -> None:
    """The part defines the generated code's matmul once (ours), and XLA's original under its new name;
    the core library defines neither."""
    out = subprocess.run(["nm", "-A", "--defined-only", *part.objects], capture_output=True, text=True,
                         check=True).stdout
    typed = [line for line in out.splitlines() if re.search(r" _ZN3xla3cpu8internal11TypedMatMulIfffEEv\S+E$", line)]
    assert len(typed) == 1 and "/tfaot_dispatch_thunk_dot.o:" in typed[0] and " T " in typed[0], typed
    assert re.search(r"xla__backends__cpu__runtime__dot_lib_f32\.o:\w+ [TW] tfaot_xla_typed_matmul_f32$", out,
                     re.MULTILINE)
    core = subprocess.run(["nm", "--defined-only", runtime.libs[0]], capture_output=True, text=True, check=True).stdout
    assert "tfaot_xla_typed_matmul_f32" not in core and "TypedMatMulIfffE" not in core
    assert "tfaot_runtime_force_cpu_level" in core  # the level choice the interface's hooks call
