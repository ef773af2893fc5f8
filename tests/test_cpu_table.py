"""One table of x86-64 levels (tfaot_dist/cpu/levels.py): the three detectors agree with it.

A detector cannot be shown a CPU it does not run on, so each C++ detector is
compiled into a small program that is handed made-up CPUs: CpuLevel.h's pure
`levelOf(CpuidWords)` gets CPUID words built from the table's bit positions,
and the kernels' cpu_level.cc is compiled with __builtin_cpu_supports replaced
by a lookup in the made-up feature set. Compiling the real sources (rather than
parsing them) tests what they do: the bits they read, the XCR0 checks, how they
combine features into levels. The feature sets: each level's exact set, and
that set minus each one of its non-baseline features (a feature a detector
leaves out, or asks for at the wrong level, changes the answer for one of those).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cpu.levels import FEATURES, LEVELS, best_level, required
from tfaot_dist.cxx import INTERFACE_INCLUDE
from tfaot_dist.cxx.runtime_kernels import SOURCE_DIR

CXX = os.environ.get("CXX", "g++")
# Baseline features: every x86-64 CPU has them, and both C++ detectors take them as given.
BASELINE = frozenset(f.name for f in required("x86-64"))


def _feature_sets() -> dict[str, frozenset[str]]:
    """Made-up CPUs by name: 'x86-64-v3' has exactly what v3 requires, 'x86-64-v3 - lzcnt' all that but LZCNT."""
    sets: dict[str, frozenset[str]] = {}
    for level in LEVELS:
        full = frozenset(f.name for f in required(level))
        sets[level] = full
        sets.update({f"{level} - {name}": full - {name} for name in sorted(full - BASELINE)})
    return sets


FEATURE_SETS = _feature_sets()


def _disagreements(got: list[str], expected: dict[str, str]) -> list[str]:
    assert len(got) == len(expected), got
    return [
        f"{cpu}: table {want}, detector {got[i]}"
        for i, (cpu, want) in enumerate(expected.items())
        if got[i] != want
    ]


def _cpuid_words(features: frozenset[str]) -> str:
    """leaf1 ECX, leaf7 EBX, 0x80000001 ECX and XCR0 of a CPU (and system) with exactly these features."""
    words = {(1, "ecx"): 0, (7, "ebx"): 0, (0x80000001, "ecx"): 0}
    xcr0 = 0
    for f in FEATURES:
        if f.name in features:
            leaf, register, bit = f.cpuid
            if (leaf, register) in words:
                words[(leaf, register)] |= 1 << bit
            xcr0 |= f.xcr0
    if xcr0:
        words[(1, "ecx")] |= 1 << 27  # OSXSAVE: the system saves some registers, XGETBV tells which
    return " ".join(str(v) for v in (*words.values(), xcr0 | 1))


HEADER_PROBE = r"""
#include <tfaot/CpuLevel.h>
#include <iostream>
int main() {
  tfaot_dist::cpu::CpuidWords w;
  while (std::cin >> w.leaf1Ecx >> w.leaf7Ebx >> w.ext1Ecx >> w.xcr0) {
    std::cout << tfaot_dist::cpu::levelOf(w) << "\n";
  }
}
"""

# Included before cpu_level.cc: GCC's CPU builtins answer from the feature set the probe reads.
KERNEL_FAKE = r"""
#define __builtin_cpu_init() ((void)0)
#define __builtin_cpu_supports(name) tfaot_test_supports(name)
bool tfaot_test_supports(const char* name);
"""

KERNEL_PROBE = r"""
#include <iostream>
#include <set>
#include <sstream>
#include <string>
extern "C" int tfaot_runtime_force_cpu_level(const char* level);
extern "C" const char* tfaot_runtime_cpu_level(void);
static std::set<std::string> present, asked;
bool tfaot_test_supports(const char* name) {
  asked.insert(name);
  return present.count(name) != 0;
}
int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    present.clear();
    for (std::string w; words >> w;) present.insert(w);
    tfaot_runtime_force_cpu_level("");  // decide again, from this CPU
    std::cout << tfaot_runtime_cpu_level() << "\n";
  }
  for (const auto& name : asked) std::cerr << name << "\n";  // every feature the detector asked for
}
"""


def _run(program: Path, lines: list[str]) -> tuple[list[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TFAOT_CPU_LEVEL"}
    done = subprocess.run(
        [str(program)], input="\n".join(lines) + "\n", capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.split(), done.stderr.split()


def _compile(args: list[str], tmp_path: Path) -> None:
    subprocess.run([CXX, "-std=c++17", "-O1", "-Wall", "-Werror", *args], cwd=tmp_path, check=True)


def test_interface_header_agrees_with_the_table(tmp_path: Path) -> None:
    (tmp_path / "probe.cc").write_text(HEADER_PROBE)
    _compile(["-I", str(INTERFACE_INCLUDE), "probe.cc", "-o", "probe"], tmp_path)
    levels, _ = _run(tmp_path / "probe", [_cpuid_words(s) for s in FEATURE_SETS.values()])
    expected = {cpu: str(best_level(s)) for cpu, s in FEATURE_SETS.items()}
    assert _disagreements(levels, expected) == []


def test_kernel_detector_agrees_with_the_table(tmp_path: Path) -> None:
    (tmp_path / "fake.h").write_text(KERNEL_FAKE)
    (tmp_path / "probe.cc").write_text(KERNEL_PROBE)
    source = SOURCE_DIR / "cpu_level.cc"
    _compile(["-DTFAOT_TOP_LEVEL=4", "-include", "fake.h", str(source), "probe.cc", "-o", "probe"], tmp_path)
    gcc_names = {f.name: f.gcc for f in FEATURES}
    lines = [
        " ".join(gcc_names[name] for name in sorted(s) if gcc_names[name]) for s in FEATURE_SETS.values()
    ]
    levels, asked = _run(tmp_path / "probe", lines)
    # The kernels exist for the baseline, v3 and v4: a v2 CPU runs the baseline's.
    kernel_levels = {0: "x86-64", 1: "x86-64", 2: "x86-64-v3", 3: "x86-64-v4"}
    expected = {cpu: kernel_levels[best_level(s)] for cpu, s in FEATURE_SETS.items()}
    assert _disagreements(levels, expected) == []
    assert set(asked) <= {f.gcc for f in FEATURES}, "the detector asks for a feature the table does not list"


def test_kernel_detector_compiles_with_the_real_builtins(tmp_path: Path) -> None:
    # GCC refuses a __builtin_cpu_supports name it does not know: the names above are real ones.
    _compile(["-DTFAOT_TOP_LEVEL=4", "-c", str(SOURCE_DIR / "cpu_level.cc"), "-o", "k.o"], tmp_path)


@pytest.mark.parametrize("cpu", FEATURE_SETS)
def test_setup_check_agrees_with_the_table(cpu: str) -> None:
    features = FEATURE_SETS[cpu]
    flags = {f.cpuinfo for f in FEATURES if f.name in features}
    cpuinfo = f"processor\t: 0\nflags\t\t: {' '.join(sorted(flags))}\n"
    runs = [rank for rank, level in enumerate(LEVELS) if cpu_target.check_host(level, cpuinfo).ok]
    assert max(runs, default=-1) == best_level(features)
    assert runs == list(range(len(runs)))  # a CPU that runs a level runs the levels below it
