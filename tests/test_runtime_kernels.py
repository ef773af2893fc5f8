"""The runtime's per-level matrix and convolution kernels (cxx/runtime_kernels.py), built for real and run.

They are in the runtime parts of dot_lib_f32.cc, dot_lib_f64.cc and convolution_lib_f32_2d.cc
(cxx/runtime_parts.py), linked here with the core library (the two product parts into one program, as a
model with float and double layers links them).

Every level this CPU runs is forced in turn, through TFAOT_CPU_LEVEL and
through tfaot_runtime_force_cpu_level(), and the products are compared with
a double-precision reference; a level the CPU cannot run must be lowered to
one it can, never executed.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from kept_objects import kept_program

from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import runtime_kernels, runtime_parts, xla_runtime
from tfaot_dist.toolchain import Toolchain

pytestmark = pytest.mark.slow

# Calls the entry points the generated headers call (TF 2.21's dot thunk, float and double), for
# shapes with odd sizes and every transposition, and prints the level used and the largest relative
# error against a double-precision (long double for the double product) reference.
PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "xla/backends/cpu/runtime/dot_lib.h"

extern "C" int tfaot_runtime_force_cpu_level(const char* level);
extern "C" const char* tfaot_runtime_cpu_level(void);

template <typename T>
static double worst_error() {
  // m x n x k; n of 2-4 (without transpositions) takes the few-columns kernels: rows in full tiles
  // (256), tiles and leftover rows (37, 100), leftover rows only (5), and rows left for every smaller
  // pass: one packet, a half and a quarter packet, then single rows (63; 600 as an LSTM's gates). m of 1-4 vectors and 16 or more
  // columns take the narrow kernels (groups of columns and the leftover ones; 64 and 32 rows on
  // AVX-512 and AVX2, 16 and 8 on every level); 48 rows (3 vectors on AVX-512) take Eigen's.
  const long shapes[][3] = {{1, 128, 128}, {7, 5, 3}, {256, 128, 128}, {33, 17, 65}, {2, 1, 9},
                            {256, 2, 256}, {37, 3, 19}, {5, 4, 7}, {100, 2, 1}, {256, 4, 32},
                            {64, 100, 64}, {32, 37, 8}, {16, 50, 300}, {8, 20, 5}, {48, 33, 16},
                            {63, 4, 9}, {63, 2, 5}, {600, 4, 150}, {29, 3, 11}};
  double worst = 0;
  for (const auto& s : shapes) {
    const long m = s[0], n = s[1], k = s[2];
    for (int tl = 0; tl < 2; ++tl) {
      for (int tr = 0; tr < 2; ++tr) {
        // one float more than needed, so the products also run on unaligned buffers
        std::vector<T> lhs(m * k + 1), rhs(k * n + 1), out(m * n + 1);
        for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = std::sin(0.37 * i + m);
        for (size_t i = 0; i < rhs.size(); ++i) rhs[i] = std::cos(0.11 * i + n);
        for (int offset = 0; offset < 2; ++offset) {
          T* a = lhs.data() + offset;
          T* b = rhs.data() + offset;
          T* c = out.data() + offset;
          bool done = false;
          xla::cpu::internal::TypedMatMul<T, T, T>(nullptr, c, a, b, m, n, k, tl, tr, [&done] { done = true; });
          if (!done) return 1e9;
          for (long i = 0; i < m; ++i) {
            for (long j = 0; j < n; ++j) {
              long double want = 0, scale = 0;
              for (long p = 0; p < k; ++p) {
                const long double x = tl ? a[p + i * k] : a[i + p * m];  // column-major, as XLA's contract says
                const long double y = tr ? b[j + p * n] : b[p + j * k];
                want += x * y;
                scale += std::fabs(x * y);
              }
              const double err = static_cast<double>(std::fabs(c[i + j * m] - want) / (scale > 0 ? scale : 1));
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
  std::printf("error %.3g\n", worst_error<float>());
  std::printf("error64 %.3g\n", worst_error<double>());
  return 0;
}
"""


# Calls the 2-D convolution the generated headers call (TF 2.21's convolution thunk) for shapes that
# take every branch of the per-level kernel (1x1 without copies, patches with padding, strides and
# kernel dilation, several patch blocks, filter counts that fill no vector; the direct convolution of
# few filters at stride 1, and shapes just outside its rule) and two it leaves to XLA's
# code (two feature groups; input dilation, a transposed convolution); prints the level and the
# largest error against a double-precision convolution, relative to the sum of |terms| of each output.
CONV_PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <vector>
#include "xla/backends/cpu/runtime/convolution_lib.h"

extern "C" int tfaot_runtime_force_cpu_level(const char* level);
extern "C" const char* tfaot_runtime_cpu_level(void);

struct Conv {  // XLA's arguments: input [b][x][y][c], kernel [kx][ky][c / groups][f], output [b][ox][oy][f]
  long b, x, y, c, kx, ky, f, sx, sy, px0, px1, py0, py1, lx, ly, dx, dy, groups;
  long ox() const { return ((x - 1) * lx + 1 + px0 + px1 - ((kx - 1) * dx + 1)) / sx + 1; }
  long oy() const { return ((y - 1) * ly + 1 + py0 + py1 - ((ky - 1) * dy + 1)) / sy + 1; }
};

static double worst_error() {
  const Conv convs[] = {
      {2, 11, 11, 24, 1, 1, 64, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},    // 1x1: the input is the patch matrix
      {1, 21, 21, 64, 3, 3, 64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // DeepTau's 3x3 "same"
      {3, 30, 30, 3, 3, 3, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // 2700 pixels: several patch blocks
      {2, 9, 13, 7, 3, 2, 9, 2, 3, 1, 0, 2, 1, 1, 1, 1, 1, 1},       // strides, uneven padding
      {1, 12, 10, 4, 3, 3, 6, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 1},      // kernel dilation
      {1, 8, 8, 5, 1, 1, 3, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 1},        // 1x1 with stride: patches
      {1, 10, 10, 4, 3, 3, 4, 1, 1, 0, -1, 0, -1, 1, 1, 1, 1, 1},    // negative padding after
      {1, 7, 7, 1, 5, 5, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1},        // one channel, one filter
      {1, 6, 6, 8, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2},        // two groups: XLA's code
      {1, 5, 5, 3, 3, 3, 4, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1},        // input dilation: XLA's code
      // Few filters at stride 1 (8-32 on x86-64-v4, 8-16 on v3): the direct convolution
      {4, 11, 11, 16, 3, 3, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // "same", batch 4
      {1, 11, 11, 1, 3, 3, 32, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},     // "valid", one channel
      {1, 21, 21, 16, 3, 3, 24, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 24: three blocks of 8, four of 6
      {4, 21, 21, 3, 3, 3, 32, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // three channels, batch 4
      {4, 5, 5, 16, 3, 3, 24, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},      // 5x5 "valid", batch 4
      {1, 5, 5, 3, 3, 3, 16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},       // 5x5 "same"
      {4, 1, 17, 16, 1, 3, 16, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1},     // 1xN, "same"
      {1, 1, 9, 3, 1, 5, 24, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},       // 1xN, "valid"
      {4, 11, 11, 16, 3, 3, 20, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // filters that fill no block
      {2, 9, 13, 16, 3, 5, 12, 1, 1, 1, 0, 2, 1, 1, 1, 1, 1, 1},     // uneven padding, 3x5 kernel
      {1, 10, 10, 4, 3, 3, 16, 1, 1, 0, -1, 0, -1, 1, 1, 1, 1, 1},   // negative padding after
      {1, 4, 30, 16, 3, 3, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},      // a row longer than a block of pixels
      // Just outside the direct convolution's rule: the patch product
      {1, 11, 11, 16, 3, 3, 33, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // more filters than 32
      {1, 11, 11, 16, 3, 3, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},     // fewer than 8
      {2, 11, 11, 16, 3, 3, 16, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // stride 2
      {1, 12, 10, 4, 3, 3, 16, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 1},     // kernel dilation
  };
  double worst = 0;
  for (const Conv& v : convs) {
    const long ox = v.ox(), oy = v.oy(), cg = v.c / v.groups, fg = v.f / v.groups;
    std::vector<float> in(v.b * v.x * v.y * v.c), ker(v.kx * v.ky * cg * v.f), out(v.b * ox * oy * v.f, -7.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37 * i + v.c);
    for (size_t i = 0; i < ker.size(); ++i) ker[i] = std::cos(0.11 * i + v.f);
    bool done = false;
    xla::cpu::internal::EigenConv2D<float>(nullptr, out.data(), in.data(), ker.data(), v.b, v.x, v.y, v.c, v.kx,
                                           v.ky, cg, v.f, ox, oy, v.sx, v.sy, v.px0, v.px1, v.py0, v.py1, v.lx, v.ly,
                                           v.dx, v.dy, v.groups, [&done] { done = true; });
    if (!done) return 1e9;
    for (long b = 0; b < v.b; ++b)
      for (long i = 0; i < ox; ++i)
        for (long j = 0; j < oy; ++j)
          for (long f = 0; f < v.f; ++f) {
            const long g = f / fg;
            double want = 0, scale = 0;
            for (long a = 0; a < v.kx; ++a)
              for (long e = 0; e < v.ky; ++e) {
                // position in the input dilated by lx, ly and padded: a real input element or a hole
                const long px = i * v.sx - v.px0 + a * v.dx, py = j * v.sy - v.py0 + e * v.dy;
                if (px < 0 || py < 0 || px % v.lx || py % v.ly || px / v.lx >= v.x || py / v.ly >= v.y) continue;
                for (long c = 0; c < cg; ++c) {
                  const double term = double(in[((b * v.x + px / v.lx) * v.y + py / v.ly) * v.c + g * cg + c]) *
                                      ker[((a * v.ky + e) * cg + c) * v.f + f];
                  want += term;
                  scale += std::fabs(term);
                }
              }
            const double got = out[((b * ox + i) * oy + j) * v.f + f];
            const double err = std::fabs(got - want) / (scale > 0 ? scale : 1);
            if (!(err <= worst)) worst = err;  // NaN too
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
def dot_parts(
    runtime: xla_runtime.XlaRuntime, toolchain: Toolchain, shared_cache: Path
) -> dict[str, runtime_parts.BuiltPart]:
    """The float and double product parts, built side by side."""
    built = xla_runtime.ensure_parts(
        runtime, ["dot_lib_f32", "dot_lib_f64"], toolchain.python, shared_cache, lambda m: None
    )
    return {p.name: p for p in built}


@pytest.fixture(scope="module")
def part(dot_parts: dict[str, runtime_parts.BuiltPart]) -> runtime_parts.BuiltPart:
    return dot_parts["dot_lib_f32"]


@pytest.fixture(scope="module")
def part64(dot_parts: dict[str, runtime_parts.BuiltPart]) -> runtime_parts.BuiltPart:
    return dot_parts["dot_lib_f64"]


@pytest.fixture(scope="module")
def program(
    runtime: xla_runtime.XlaRuntime,
    part: runtime_parts.BuiltPart,
    part64: runtime_parts.BuiltPart,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    work = tmp_path_factory.mktemp("kernels")
    (work / "matmul.cc").write_text(PROGRAM)
    objects = [*part.objects, *part64.objects]  # no symbol defined twice: both parts link into one model
    kept_program(runtime, work / "matmul.cc", objects, work / "matmul")
    return work / "matmul"


@pytest.fixture(scope="module")
def conv_part(
    runtime: xla_runtime.XlaRuntime, toolchain: Toolchain, shared_cache: Path
) -> runtime_parts.BuiltPart:
    [built] = xla_runtime.ensure_parts(
        runtime, ["convolution_lib_f32_2d"], toolchain.python, shared_cache, lambda m: None
    )
    return built


@pytest.fixture(scope="module")
def conv_program(
    runtime: xla_runtime.XlaRuntime,
    conv_part: runtime_parts.BuiltPart,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    work = tmp_path_factory.mktemp("conv")
    (work / "conv.cc").write_text(CONV_PROGRAM)
    kept_program(runtime, work / "conv.cc", conv_part.objects, work / "conv")
    return work / "conv"


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
    assert float(result["error64"]) < 1e-13


@pytest.mark.parametrize("level", [lv.name for lv in runtime_kernels.LEVELS])
def test_forced_level_convolves_as_the_reference(conv_program: Path, level: str) -> None:
    result = run(conv_program, level=level)
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


@pytest.mark.parametrize("stem", ["tfaot_kernels", "tfaot_kernels_f64"])
def test_each_level_uses_its_instructions(
    part: runtime_parts.BuiltPart, part64: runtime_parts.BuiltPart, stem: str
) -> None:
    objects = (part if stem == "tfaot_kernels" else part64).root / "obj"
    registers = {}
    for lv in runtime_kernels.LEVELS:
        text = subprocess.run(
            ["objdump", "-d", objects / f"{stem}_{lv.suffix}.o"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        registers[lv.name] = {r for r in ("xmm", "ymm", "zmm") if f"%{r}" in text}, "vfmadd" in text
    assert registers["x86-64"] == ({"xmm"}, False)  # SSE2 only: runs on any x86-64 CPU
    assert registers["x86-64-v3"][0] >= {"ymm"} and "zmm" not in registers["x86-64-v3"][0]
    assert registers["x86-64-v3"][1]
    assert "zmm" in registers["x86-64-v4"][0]


@pytest.mark.parametrize("kind", ["matmul", "matmul64", "conv"])
def test_level_objects_define_no_shared_symbols(
    part: runtime_parts.BuiltPart,
    part64: runtime_parts.BuiltPart,
    conv_part: runtime_parts.BuiltPart,
    kind: str,
) -> None:
    """No Eigen or std function compiled for v3/v4 can be merged by the linker into baseline code."""
    objects = {"matmul": part, "matmul64": part64, "conv": conv_part}[kind].root / "obj"
    stem = {"matmul": "tfaot_kernels", "matmul64": "tfaot_kernels_f64", "conv": "tfaot_conv_kernels"}[kind]
    for lv in runtime_kernels.LEVELS:
        out = subprocess.run(
            ["nm", "--defined-only", "-P", objects / f"{stem}_{lv.suffix}.o"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        exported = [line.split()[0] for line in out.splitlines() if re.match(r"\S+ [A-Zuvw] ", line)]
        namespace = f"tfaot_eigen_{lv.suffix}"
        entry = {"matmul": "tfaot_matmul_f32", "matmul64": "tfaot_matmul_f64", "conv": "tfaot_conv2d_f32"}[
            kind
        ]
        entry = f"{entry}_{lv.suffix}"
        assert entry in exported
        # DW.ref.__gxx_personality_v0: a pointer to the C++ runtime's personality routine, data only
        assert all(
            name in (entry, "DW.ref.__gxx_personality_v0") or f"{len(namespace)}{namespace}" in name
            for name in exported
        ), exported


def test_wheel_convolution_is_replaced(
    runtime: xla_runtime.XlaRuntime, conv_part: runtime_parts.BuiltPart
) -> None:
    out = subprocess.run(
        ["nm", "-A", "--defined-only", *conv_part.objects], capture_output=True, text=True, check=True
    ).stdout
    conv = [
        line for line in out.splitlines() if re.search(r" _ZN3xla3cpu8internal11EigenConv2DIfEEv\S+E$", line)
    ]
    assert len(conv) == 1 and "/tfaot_dispatch_thunk_conv2d.o:" in conv[0] and " T " in conv[0], conv
    assert re.search(r"convolution_lib_f32_2d\.o:\w+ [TW] tfaot_xla_eigen_conv2d_f32$", out, re.MULTILINE)


@pytest.mark.parametrize("scalar", ["f32", "f64"])
def test_wheel_entry_point_is_replaced(
    runtime: xla_runtime.XlaRuntime,
    part: runtime_parts.BuiltPart,
    part64: runtime_parts.BuiltPart,
    scalar: str,
) -> None:
    """The part defines the generated code's matmul once (ours), and XLA's original under its new name;
    the core library defines neither."""
    objects = (part if scalar == "f32" else part64).objects
    out = subprocess.run(
        ["nm", "-A", "--defined-only", *objects], capture_output=True, text=True, check=True
    ).stdout
    mangled = {"f32": "Ifff", "f64": "Iddd"}[scalar]  # one dispatcher source, built once per element type
    typed = [
        line
        for line in out.splitlines()
        if re.search(rf" _ZN3xla3cpu8internal11TypedMatMul{mangled}EEv\S+E$", line)
    ]
    assert len(typed) == 1 and "/tfaot_dispatch_thunk_dot.o:" in typed[0] and " T " in typed[0], typed
    assert re.search(
        rf"xla__backends__cpu__runtime__dot_lib_{scalar}\.o:\w+ [TW] tfaot_xla_typed_matmul_{scalar}$",
        out,
        re.MULTILINE,
    )
    core = subprocess.run(
        ["nm", "--defined-only", runtime.libs[0]], capture_output=True, text=True, check=True
    ).stdout
    assert f"tfaot_xla_typed_matmul_{scalar}" not in core and f"TypedMatMul{mangled}E" not in core
    assert "tfaot_runtime_force_cpu_level" in core  # the level choice the interface's hooks call
