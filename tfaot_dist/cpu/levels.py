"""The one table of x86-64 micro-architecture levels (psABI): what x86-64, v2, v3 and v4 require.

Three detectors judge a CPU against these levels: the Python check of `setup`
(cpu/target.py, from /proc/cpuinfo flags), the interface header's
(runtime include tfaot/CpuLevel.h, from CPUID, which model.h uses to pick a
package's level) and the XLA runtime kernels' (cxx/runtime_kernels/cpu_level.cc,
from GCC's __builtin_cpu_supports). target.py is built from this table;
tests/test_cpu_table.py compiles both C++ detectors against made-up CPUs (one
per feature set) and fails when any of the three disagrees with this table.

Each feature is named the way each detector sees it: its Linux /proc/cpuinfo
flag, GCC's __builtin_cpu_supports name, and where CPUID reports it. The
psABI's v3 lists OSXSAVE; like GCC and the kernel's flags we require XSAVE
(the CPUID bit) and check the operating system's support where it matters:
AVX and AVX-512 registers are usable only if the system saves them (XCR0).
"""

from __future__ import annotations

from dataclasses import dataclass

# Level names, lowest first: also LLVM's and GCC's -march names. A level's number is its position.
LEVELS: tuple[str, ...] = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")

# XCR0 bits the operating system sets when it saves the registers: SSE+AVX (YMM), plus AVX-512 (ZMM).
XCR0_YMM = 0x6
XCR0_ZMM = 0xE6


@dataclass(frozen=True)
class Feature:
    name: str  # the name CpuLevel.h reports as missing
    level: int  # the lowest level (index in LEVELS) that requires it
    cpuinfo: str  # the Linux /proc/cpuinfo flag
    gcc: str  # __builtin_cpu_supports name; "" for baseline features GCC does not name
    cpuid: tuple[int, str, int]  # (leaf, register, bit); leaf 7 means sub-leaf 0
    xcr0: int = 0  # XCR0 bits the operating system must set for the feature to be usable


FEATURES: tuple[Feature, ...] = (
    # x86-64 (baseline): every x86-64 CPU; the C++ detectors take it as given (their code already runs)
    Feature("cmov", 0, "cmov", "cmov", (1, "edx", 15)),
    Feature("cx8", 0, "cx8", "", (1, "edx", 8)),
    Feature("fpu", 0, "fpu", "", (1, "edx", 0)),
    Feature("fxsr", 0, "fxsr", "", (1, "edx", 24)),
    Feature("mmx", 0, "mmx", "mmx", (1, "edx", 23)),
    Feature("syscall", 0, "syscall", "", (0x80000001, "edx", 11)),
    Feature("sse", 0, "sse", "sse", (1, "edx", 25)),
    Feature("sse2", 0, "sse2", "sse2", (1, "edx", 26)),
    # x86-64-v2
    Feature("cx16", 1, "cx16", "cmpxchg16b", (1, "ecx", 13)),
    Feature("lahf_lm", 1, "lahf_lm", "lahf_lm", (0x80000001, "ecx", 0)),
    Feature("popcnt", 1, "popcnt", "popcnt", (1, "ecx", 23)),
    Feature("sse3", 1, "pni", "sse3", (1, "ecx", 0)),
    Feature("ssse3", 1, "ssse3", "ssse3", (1, "ecx", 9)),
    Feature("sse4_1", 1, "sse4_1", "sse4.1", (1, "ecx", 19)),
    Feature("sse4_2", 1, "sse4_2", "sse4.2", (1, "ecx", 20)),
    # x86-64-v3
    Feature("avx", 2, "avx", "avx", (1, "ecx", 28), XCR0_YMM),
    Feature("avx2", 2, "avx2", "avx2", (7, "ebx", 5), XCR0_YMM),
    Feature("bmi1", 2, "bmi1", "bmi", (7, "ebx", 3)),
    Feature("bmi2", 2, "bmi2", "bmi2", (7, "ebx", 8)),
    Feature("f16c", 2, "f16c", "f16c", (1, "ecx", 29)),
    Feature("fma", 2, "fma", "fma", (1, "ecx", 12)),
    Feature("lzcnt", 2, "abm", "lzcnt", (0x80000001, "ecx", 5)),
    Feature("movbe", 2, "movbe", "movbe", (1, "ecx", 22)),
    Feature("xsave", 2, "xsave", "xsave", (1, "ecx", 26)),
    # x86-64-v4
    Feature("avx512f", 3, "avx512f", "avx512f", (7, "ebx", 16), XCR0_ZMM),
    Feature("avx512bw", 3, "avx512bw", "avx512bw", (7, "ebx", 30), XCR0_ZMM),
    Feature("avx512cd", 3, "avx512cd", "avx512cd", (7, "ebx", 28), XCR0_ZMM),
    Feature("avx512dq", 3, "avx512dq", "avx512dq", (7, "ebx", 17), XCR0_ZMM),
    Feature("avx512vl", 3, "avx512vl", "avx512vl", (7, "ebx", 31), XCR0_ZMM),
)


def required(level: str) -> tuple[Feature, ...]:
    """Every feature `level` requires (its own and those of the levels below it)."""
    rank = LEVELS.index(level)
    return tuple(f for f in FEATURES if f.level <= rank)


def cpuinfo_flags(level: str) -> frozenset[str]:
    """The /proc/cpuinfo flags a CPU shows when it runs `level`."""
    return frozenset(f.cpuinfo for f in required(level))


def best_level(features: frozenset[str]) -> int:
    """The highest level (index in LEVELS) a CPU with these features (by name) runs; -1 for none."""
    best = -1
    for rank, level in enumerate(LEVELS):
        if not all(f.name in features for f in required(level)):
            break
        best = rank
    return best
