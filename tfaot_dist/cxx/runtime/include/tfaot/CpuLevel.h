#ifndef TFAOT_CPULEVEL_H
#define TFAOT_CPULEVEL_H

/*
 * tfaot-dist C++ interface: which x86-64 level of a multi-level model package runs.
 *
 * Header-only, C++17 or newer, standard library only (and <cpuid.h> of GCC or
 * clang). A package compiled for several x86-64 psABI levels ("x86-64",
 * "x86-64-v2", "x86-64-v3", "x86-64-v4") carries code for each; its model.h
 * picks one when a model is constructed:
 *
 *   - tfaot_dist::setCpuLevel("x86-64-v3") if it was called ("" undoes it), else
 *   - the environment variable TFAOT_CPU_LEVEL if set and not empty, else
 *   - automatically: the highest carried level this CPU can run.
 *
 * A forced level the package does not carry gives the highest carried level not
 * above it. A level this CPU cannot run, or an unknown name, is a
 * std::runtime_error with one clear message (setCpuLevel throws at the call,
 * the environment variable when a model is constructed), never a SIGILL.
 *
 * The XLA runtime library may follow the level too (its matrix kernels): newer
 * tfaot runtimes export tfaot_runtime_force_cpu_level(), which setCpuLevel()
 * calls. Runtimes without it (TensorFlow 2.12's, CMSSW's release runtime) are
 * left alone. The runtime reads TFAOT_CPU_LEVEL by itself.
 */

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// Present in runtimes that can force their own CPU level; weak, so null where absent.
// level: a level name, or nullptr / "" for automatic; returns 0 if accepted, 1 if accepted but lowered
// to the kernels the runtime has, negative if refused.
extern "C" int tfaot_runtime_force_cpu_level(const char* level) __attribute__((weak));
// The level the runtime uses.
extern "C" const char* tfaot_runtime_cpu_level(void) __attribute__((weak));

namespace tfaot_dist {

namespace cpu {

// psABI level names, lowest first; a level's number is its position
inline const std::vector<std::string>& levelNames() {
  static const std::vector<std::string> names = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
  return names;
}

// the number of a level name, -1 if unknown
inline int levelIndex(const std::string& name) {
  const auto& names = levelNames();
  for (std::size_t i = 0; i < names.size(); i++) {
    if (names[i] == name) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// What CPUID and XGETBV say about a CPU: the words the levels need (one table of the levels:
// tfaot_dist/cpu/levels.py, which a test holds this detector to).
struct CpuidWords {
  unsigned leaf1Ecx = 0;        // CPUID 1: ECX
  unsigned leaf7Ebx = 0;        // CPUID 7, sub-leaf 0: EBX
  unsigned ext1Ecx = 0;         // CPUID 0x80000001: ECX
  unsigned long long xcr0 = 0;  // XCR0: the registers the operating system saves
};

// This CPU's words
inline CpuidWords readCpuid() {
  CpuidWords w;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    w.leaf1Ecx = c;
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    w.leaf7Ebx = b;
  }
  if (__get_cpuid(0x80000001, &a, &b, &c, &d)) {
    w.ext1Ecx = c;
  }
  if (w.leaf1Ecx & (1u << 27)) {  // OSXSAVE: XGETBV is there
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    w.xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
#endif
  return w;
}

// the features of `level` a CPU with words `w` (and its operating system) lacks; empty if it runs it
inline std::vector<std::string> missingFeatures(int level, const CpuidWords& w) {
  std::vector<std::string> missing;
#if defined(__x86_64__) || defined(__i386__)
  const unsigned c1 = w.leaf1Ecx, c7b = w.leaf7Ebx, cext = w.ext1Ecx;
  // AVX and AVX-512 registers also need the operating system to save them (XCR0)
  const bool ymm = (w.xcr0 & 0x6) == 0x6, zmm = (w.xcr0 & 0xe6) == 0xe6;
  struct Feature {
    int level;
    const char* name;
    bool present;
  };
  const Feature features[] = {
      {1, "cx16", (c1 & (1u << 13)) != 0},
      {1, "lahf_lm", (cext & 1u) != 0},
      {1, "popcnt", (c1 & (1u << 23)) != 0},
      {1, "sse3", (c1 & 1u) != 0},
      {1, "ssse3", (c1 & (1u << 9)) != 0},
      {1, "sse4_1", (c1 & (1u << 19)) != 0},
      {1, "sse4_2", (c1 & (1u << 20)) != 0},
      {2, "avx", (c1 & (1u << 28)) != 0 && ymm},
      {2, "avx2", (c7b & (1u << 5)) != 0 && ymm},
      {2, "bmi1", (c7b & (1u << 3)) != 0},
      {2, "bmi2", (c7b & (1u << 8)) != 0},
      {2, "f16c", (c1 & (1u << 29)) != 0},
      {2, "fma", (c1 & (1u << 12)) != 0},
      {2, "lzcnt", (cext & (1u << 5)) != 0},
      {2, "movbe", (c1 & (1u << 22)) != 0},
      {2, "xsave", (c1 & (1u << 26)) != 0},
      {3, "avx512f", (c7b & (1u << 16)) != 0 && zmm},
      {3, "avx512bw", (c7b & (1u << 30)) != 0 && zmm},
      {3, "avx512cd", (c7b & (1u << 28)) != 0 && zmm},
      {3, "avx512dq", (c7b & (1u << 17)) != 0 && zmm},
      {3, "avx512vl", (c7b & (1u << 31)) != 0 && zmm},
  };
  for (const Feature& f : features) {
    if (f.level <= level && !f.present) {
      missing.push_back(f.name);
    }
  }
#else
  (void)w;
  if (level > 0) {
    missing.push_back("x86-64");  // not an x86-64 CPU
  }
#endif
  return missing;
}

// the features of `level` this CPU (and its operating system) lacks; empty if it can run it
inline std::vector<std::string> missingFeatures(int level) { return missingFeatures(level, readCpuid()); }

// the highest level a CPU with words `w` runs
inline int levelOf(const CpuidWords& w) {
  int level = 0;
  while (level + 1 < static_cast<int>(levelNames().size()) && missingFeatures(level + 1, w).empty()) {
    level++;
  }
  return level;
}

// the highest level this CPU runs; computed once (CPUID is slow under virtualization)
inline int hostLevel() {
  static const int host = levelOf(readCpuid());
  return host;
}

inline std::string joined(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) {
    out += (out.empty() ? "" : ", ") + v;
  }
  return out;
}

// the level setCpuLevel() forced, "" if none; shared by every translation unit (inline function)
inline std::string& forced(std::unique_lock<std::mutex>&) {
  static std::string level;
  return level;
}
inline std::mutex& forcedMutex() {
  static std::mutex m;
  return m;
}

// std::runtime_error unless `level` (from `source`) names a level this CPU runs; returns its number
inline int checkedLevel(const std::string& level, const std::string& source) {
  const int index = levelIndex(level);
  if (index < 0) {
    throw std::runtime_error("tfaot: " + source + " '" + level + "' is not a CPU level (expected one of " +
                             joined(levelNames()) + ")");
  }
  const auto missing = missingFeatures(index);
  if (!missing.empty()) {
    throw std::runtime_error("tfaot: " + source + " asks for CPU level " + level + ", but this CPU lacks " +
                             joined(missing));
  }
  return index;
}

}  // namespace cpu

// Forces the CPU level of models constructed afterwards (and of the XLA runtime when it supports
// that); "" goes back to TFAOT_CPU_LEVEL or the automatic choice. Throws std::runtime_error for an
// unknown level, one this CPU cannot run, or one the runtime refuses.
inline void setCpuLevel(const std::string& level) {
  if (!level.empty()) {
    cpu::checkedLevel(level, "setCpuLevel()");
  }
  std::unique_lock<std::mutex> lock(cpu::forcedMutex());
  // The runtime answers 1 when it lowers the level to the kernels it has: fine; negative: refused.
  if (tfaot_runtime_force_cpu_level != nullptr && tfaot_runtime_force_cpu_level(level.c_str()) < 0) {
    throw std::runtime_error("tfaot: the XLA runtime refused CPU level '" + level + "'");
  }
  cpu::forced(lock) = level;
}

// The level set by setCpuLevel(), "" if none
inline std::string forcedCpuLevel() {
  std::unique_lock<std::mutex> lock(cpu::forcedMutex());
  return cpu::forced(lock);
}

// The level the XLA runtime uses, "" if the runtime does not say (older runtimes)
inline std::string runtimeCpuLevel() {
  const char* level = tfaot_runtime_cpu_level != nullptr ? tfaot_runtime_cpu_level() : nullptr;
  return level != nullptr ? level : "";
}

// The position in `carried` (level names a package carries, lowest first) of the level a model
// constructed now uses; see the top of this file. Throws std::runtime_error naming `model`.
inline std::size_t chooseCpuLevel(const std::string& model, const std::vector<std::string>& carried) {
  std::string wanted = forcedCpuLevel(), source = "setCpuLevel()";
  if (wanted.empty()) {
    const char* env = std::getenv("TFAOT_CPU_LEVEL");
    wanted = env != nullptr ? env : "";
    source = "TFAOT_CPU_LEVEL";
  }
  int limit = cpu::hostLevel();
  if (!wanted.empty()) {
    try {
      limit = cpu::checkedLevel(wanted, source);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string(e.what()) + " (model '" + model + "')");
    }
  }
  for (std::size_t i = carried.size(); i-- > 0;) {
    if (cpu::levelIndex(carried[i]) <= limit) {
      return i;
    }
  }
  throw std::runtime_error("tfaot: model '" + model + "' carries CPU levels " + cpu::joined(carried) +
                           ", none of which " +
                           (wanted.empty() ? "this CPU runs" : "is at or below " + wanted + " (" + source + ")"));
}

}  // namespace tfaot_dist

#endif  // TFAOT_CPULEVEL_H
