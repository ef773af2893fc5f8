// Compiled for the baseline: it runs before anything knows the CPU.
#include "cpu_level.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tfaot_runtime {
namespace {

// The highest level with kernels in this runtime (the build defines it from
// the -march levels its compiler accepts).
#ifndef TFAOT_TOP_LEVEL
#error "TFAOT_TOP_LEVEL must be defined by the build"
#endif
constexpr int kTop = TFAOT_TOP_LEVEL;

// The levels' features: the one table of tfaot_dist/cpu/levels.py (tests/test_cpu_table.py holds this to it).
int supported() {
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("cmpxchg16b") && __builtin_cpu_supports("lahf_lm") &&
                  __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("sse3") &&
                  __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1") &&
                  __builtin_cpu_supports("sse4.2");
  const bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt") &&
                  __builtin_cpu_supports("movbe") && __builtin_cpu_supports("xsave");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  return v4 ? kV4 : v3 ? kV3 : kBaseline;
}

// The psABI level number of a name; 0: automatic, -1: unknown. x86-64-v2 is a
// level packages may carry; the runtime has no kernels of its own for it.
int parse(const char* name) {
  if (name == nullptr || name[0] == '\0') return 0;
  if (std::strcmp(name, "x86-64") == 0) return 1;
  if (std::strcmp(name, "x86-64-v2") == 0) return 2;
  if (std::strcmp(name, "x86-64-v3") == 0) return 3;
  if (std::strcmp(name, "x86-64-v4") == 0) return 4;
  return -1;
}

// The best kernels that the CPU runs, this runtime has, and are at most `wanted` (0 = no limit).
int usable(int wanted) {
  int level = supported();
  if (level > kTop) level = kTop;
  if (wanted > 0 && wanted < level) level = wanted;
  return level >= kV4 ? kV4 : level >= kV3 ? kV3 : kBaseline;
}

std::atomic<int> current{0};  // 0: not decided yet

int from_environment() {
  const char* name = std::getenv("TFAOT_CPU_LEVEL");
  int wanted = parse(name);
  if (wanted < 0) {
    std::fprintf(stderr,
                 "tfaot runtime: TFAOT_CPU_LEVEL=%s is not x86-64, x86-64-v2, x86-64-v3 or x86-64-v4; "
                 "ignored\n",
                 name);
    wanted = 0;
  }
  return usable(wanted);
}

}  // namespace

CpuLevel cpu_level() {
  int level = current.load(std::memory_order_relaxed);
  if (level == 0) {
    level = from_environment();
    int unset = 0;  // a concurrent first call may have decided already: keep its answer
    if (!current.compare_exchange_strong(unset, level)) level = unset;
  }
  return static_cast<CpuLevel>(level);
}

}  // namespace tfaot_runtime

extern "C" int tfaot_runtime_force_cpu_level(const char* level) {
  const int wanted = tfaot_runtime::parse(level);
  if (wanted < 0) return -1;
  const int got = wanted == 0 ? tfaot_runtime::from_environment() : tfaot_runtime::usable(wanted);
  tfaot_runtime::current.store(got, std::memory_order_relaxed);
  return wanted == 0 || got == wanted ? 0 : 1;  // 1: lowered to what the CPU and the kernels have
}

extern "C" const char* tfaot_runtime_cpu_level(void) {
  switch (tfaot_runtime::cpu_level()) {
    case tfaot_runtime::kV4:
      return "x86-64-v4";
    case tfaot_runtime::kV3:
      return "x86-64-v3";
    default:
      return "x86-64";
  }
}
