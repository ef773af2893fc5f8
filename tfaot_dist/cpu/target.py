"""Can this machine run a package? Its XLA target CPU against the host's /proc/cpuinfo flags.

A package compiled with `compilation.target_cpu` (recorded in its manifest)
contains instructions of that CPU; on an older CPU the first evaluation dies
with SIGILL. `setup` calls check_package() and warns about a package the host
cannot run (the area may be meant for other machines). The generic target
("" = x86-64 baseline, what the registry defaults to) runs everywhere; that is
the safe choice for distributed packages. Unknown CPU names are reported as not
checkable, never as fine.

A multi-level package (`compilation.cpu_levels`) runs wherever its lowest level
runs: model.h picks the best level the CPU has when a model is constructed.

The requirements are the x86-64 micro-architecture levels of the psABI, from
the one table of tfaot_dist/cpu/levels.py, as Linux /proc/cpuinfo flags
(pni = SSE3, abm = LZCNT).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tfaot_dist.cpu.levels import cpuinfo_flags
from tfaot_dist.documents import Compilation

_V1 = cpuinfo_flags("x86-64")
_V2 = cpuinfo_flags("x86-64-v2")
_V3 = cpuinfo_flags("x86-64-v3")
_V4 = cpuinfo_flags("x86-64-v4")

# LLVM CPU names (what tfcompile's target_cpu takes) -> cpuinfo flags they need.
REQUIRED_FLAGS: dict[str, frozenset[str]] = {
    "": _V1,
    "generic": _V1,
    "x86-64": _V1,
    "x86-64-v2": _V2,
    "nehalem": _V2,
    "westmere": _V2 | {"pclmulqdq", "aes"},
    "sandybridge": _V2 | {"avx", "pclmulqdq", "aes"},
    "ivybridge": _V2 | {"avx", "f16c", "pclmulqdq", "aes"},
    "x86-64-v3": _V3,
    "haswell": _V3,
    "broadwell": _V3 | {"adx", "rdseed"},
    "skylake": _V3 | {"adx", "rdseed"},
    "znver1": _V3 | {"adx", "rdseed"},
    "znver2": _V3 | {"adx", "rdseed"},
    "znver3": _V3 | {"adx", "rdseed", "vaes"},
    "x86-64-v4": _V4,
    "skylake-avx512": _V4,
    "cascadelake": _V4 | {"avx512_vnni"},
    "icelake-server": _V4 | {"avx512_vnni", "avx512vbmi", "avx512_vbmi2"},
    "sapphirerapids": _V4 | {"avx512_vnni", "avx512_bf16", "amx_tile"},
    "znver4": _V4 | {"avx512_vnni", "avx512_bf16", "avx512vbmi"},
}


@dataclass(frozen=True)
class Check:
    target_cpu: str
    ok: bool
    missing: list[str] = field(default_factory=list)  # required flags the host lacks
    unknown: bool = False  # target_cpu is not in REQUIRED_FLAGS: cannot be checked
    levels: tuple[str, ...] = ()  # a multi-level package's levels (target_cpu is then the lowest)
    best: str = ""  # the highest of levels this CPU runs

    @property
    def message(self) -> str:
        name = self.target_cpu or "generic x86-64"
        if self.levels:
            carried = f"CPU levels {', '.join(self.levels)}"
            if self.missing:
                return f"compiled for {carried}, but this CPU lacks {', '.join(self.missing)} (for {name})"
            return f"compiled for {carried}: this CPU runs it (best level {self.best})"
        if self.unknown:
            return f"target CPU '{name}' is unknown to this check; the package may not run here"
        if self.missing:
            return f"compiled for '{name}', but this CPU lacks {', '.join(self.missing)}"
        return f"compiled for '{name}': this CPU can run it"


def host_flags(cpuinfo: str | None = None) -> set[str]:
    """The feature flags every core of the host has (the first 'flags' line of /proc/cpuinfo)."""
    text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text()
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return set(m.group(1).split()) if m else set()


def check_host(target_cpu: str, cpuinfo: str | None = None) -> Check:
    required = REQUIRED_FLAGS.get(target_cpu.strip().lower())
    if required is None:
        return Check(target_cpu, ok=False, unknown=True)
    missing = sorted(required - host_flags(cpuinfo))
    return Check(target_cpu, ok=not missing, missing=missing)


def check_package(compilation: Compilation | None, cpuinfo: str | None = None) -> Check:
    """check_host() for a package manifest's compilation (target_cpu; x86-64 triples only)."""
    comp = compilation or Compilation()
    triple = comp.target_triple or "x86_64-pc-linux"
    if not triple.startswith("x86_64"):
        return Check(comp.target_cpu or "", ok=False, unknown=True)
    if comp.cpu_levels:
        lowest = check_host(comp.cpu_levels[0], cpuinfo)
        runs = [level for level in comp.cpu_levels if check_host(level, cpuinfo).ok]
        return replace(lowest, levels=comp.cpu_levels, best=runs[-1] if runs else "")
    return check_host(comp.target_cpu or "", cpuinfo)
