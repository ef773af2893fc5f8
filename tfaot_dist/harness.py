"""Verified builds: link the fresh package into a C++ harness, run it on the inputs
TensorFlow saw, and compare with TensorFlow's outputs.

Every reference batch size is checked (the compiled ones and sizes that need
stitching and padding), through both run() and runFlat(). Floating outputs
must agree within the model's tolerance (its aot config's verification.tolerance,
default TOLERANCE), absolute or relative; integers and bools exactly. The
manifest's verification records the tolerance used.

A multi-level package is checked once per CPU level this machine can run
(TFAOT_CPU_LEVEL set for the harness, which reports the level it ran); the
levels it cannot run are recorded with the features this CPU lacks.
"""

from __future__ import annotations

import array
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfaot_dist import config, process
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import INTERFACE_INCLUDE, object_cache
from tfaot_dist.cxx.xla_runtime import XlaRuntime
from tfaot_dist.documents import Deviation, LevelCheck, ModelManifest, ReferenceCase, Signature, Verification
from tfaot_dist.errors import VerificationFailed
from tfaot_dist.util.render import render

TOLERANCE = config.DEFAULT_TOLERANCE  # where the aot config sets no verification.tolerance
TYPECODES = {"float32": "f", "float64": "d", "int32": "i", "int64": "q", "bool": "B"}
MODES = ("flat", "nested")  # always written; "padded" only where a padding rule exists


def padded_rule(target: int, sizes: Sequence[int]) -> str | None:
    """The largest compiled size repeated up to target, the last call zero-padded.

    None where that needs no padding (target a multiple of the largest size).
    """
    largest = max(sizes)
    calls = -(-target // largest)
    if calls * largest == target:
        return None
    return f"{target}:{','.join([str(largest)] * calls)}"


def verify_package(
    root: Path,
    manifest: ModelManifest,
    runtime: XlaRuntime,
    work: Path,
    cache: Path,
    tolerance: float = TOLERANCE,
) -> Verification:
    """Build and run the harness against the package in root; returns the deviation report.

    cache: where the precompiled interface headers and the harness's kept object live (cxx/pch.py,
    cxx/object_cache.py).
    tolerance: the model's (AotConfig.tolerance, or what its manifest's verification recorded).
    """
    work.mkdir(parents=True)
    package = manifest.package
    harness = build_harness(root, manifest, runtime, work, cache)
    reference = root / manifest.reference.dir
    cases = manifest.reference.cases
    sizes = manifest.compilation.batch_sizes
    if not manifest.compilation.cpu_levels:
        run_harness(harness, reference, cases, sizes, work / "out")
        return compare(package, manifest.signature, reference, cases, work / "out", tolerance)
    checks: dict[str, LevelCheck] = {}
    found: list[Verification] = []
    for level in manifest.compilation.cpu_levels:
        host = cpu_target.check_host(level)
        if not host.ok:
            checks[level] = LevelCheck(verified=False, note=f"this CPU lacks {', '.join(host.missing)}")
            continue
        out = work / "out" / level
        run_harness(harness, reference, cases, sizes, out, level)
        used = (out / "cpu_level.txt").read_text().strip()
        if used != level:
            raise VerificationFailed(
                f"{package}: TFAOT_CPU_LEVEL={level}, but the harness ran level {used!r}"
            )
        label = package if len(manifest.compilation.cpu_levels) == 1 else f"{package} (CPU level {level})"
        found.append(compare(label, manifest.signature, reference, cases, out, tolerance))
        checks[level] = LevelCheck(verified=True)
    if not found:
        raise VerificationFailed(
            f"{package}: this machine runs none of the CPU levels "
            f"{', '.join(manifest.compilation.cpu_levels)}"
        )
    worst = {
        name: Deviation(
            max_abs=max(v.outputs[name].max_abs for v in found),
            max_rel=max(v.outputs[name].max_rel for v in found),
        )
        for name in found[0].outputs
    }
    return Verification(
        tolerance=tolerance,
        batch_sizes=found[0].batch_sizes,
        outputs=worst,
        paths=found[0].paths,
        cpu_levels=checks,
    )


def build_harness(root: Path, manifest: ModelManifest, runtime: XlaRuntime, work: Path, cache: Path) -> Path:
    """The verification harness of the package in root, linked from its archive, as work/harness.
    The compile of harness.cc is kept in the cache (cxx/object_cache.py); the link is always done."""
    source, archive = work / "harness.cc", root / "lib" / f"lib{manifest.package}.a"
    includes = [root / "include", INTERFACE_INCLUDE]
    write_harness(manifest, source)
    return object_cache.program(runtime, source, includes, [archive], work / "harness", cache)


def read_array(path: Path, dtype: str) -> array.array[Any]:
    values = array.array(TYPECODES[dtype])
    values.frombytes(path.read_bytes())
    return values


def write_harness(manifest: ModelManifest, path: Path) -> None:
    comp = manifest.compilation
    path.write_text(
        render(
            "verify_harness.cc.j2",
            package=manifest.package,
            namespace=comp.namespace,
            class_name=comp.class_name,
            inputs=[t.to_json() for t in manifest.signature.inputs],
            outputs=[t.to_json() for t in manifest.signature.outputs],
            cpu_levels=list(comp.cpu_levels),
        )
    )


def run_harness(
    harness: Path,
    reference: Path,
    cases: Sequence[ReferenceCase],
    sizes: Sequence[int],
    out: Path,
    level: str | None = None,
) -> None:
    """level: the CPU level to force (TFAOT_CPU_LEVEL); None leaves the environment as it is."""
    args = [str(harness), str(out)]
    for case in cases:
        bs = case.batch_size
        (out / f"bs{bs}").mkdir(parents=True)
        args += [str(bs), str(reference / case.dir), padded_rule(bs, sizes) or "-"]
    env = {**os.environ, "TFAOT_CPU_LEVEL": level} if level else None
    what = f"verification harness (CPU level {level})" if level else "verification harness"
    process.run(args, what=what, error=VerificationFailed, timeout=600, env=env)


def compare(
    model: str,
    signature: Signature,
    reference: Path,
    cases: Sequence[ReferenceCase],
    out: Path,
    tolerance: float = TOLERANCE,
) -> Verification:
    """Maximum deviations per output; raises VerificationFailed at the first element out of tolerance
    (a float further than tolerance from TensorFlow's, both absolute and relative)."""
    outputs: dict[str, Deviation] = {}
    for k, t in enumerate(signature.outputs):
        worst_abs = worst_rel = 0.0
        for case in cases:
            bs = case.batch_size
            expected = read_array(reference / case.dir / f"output_{k}.bin", t.dtype)
            for mode in (*MODES, "padded"):
                path = out / f"bs{bs}" / f"{mode}_output_{k}.bin"
                if mode == "padded" and not path.exists():
                    continue
                got = read_array(path, t.dtype)
                if len(got) != len(expected):
                    raise VerificationFailed(
                        f"{model}: batch size {bs}, output {t.name} ({mode}): "
                        f"{len(got)} elements, TensorFlow gave {len(expected)}"
                    )
                for i, (a, b) in enumerate(zip(got, expected)):  # lengths checked above
                    diff = abs(a - b)
                    rel = diff / abs(b) if b else (0.0 if diff == 0 else math.inf)
                    exact = t.dtype not in ("float32", "float64")
                    bad = diff != 0 if exact else not (diff <= tolerance or rel <= tolerance)
                    if bad or math.isnan(a) != math.isnan(b):
                        raise VerificationFailed(
                            f"{model}: batch size {bs}, output {t.name} ({mode}), element {i}: "
                            f"compiled {a!r}, TensorFlow {b!r}"
                            + ("" if exact else f" (tolerance {tolerance:g})")
                        )
                    worst_abs = max(worst_abs, diff)
                    worst_rel = max(worst_rel, rel if math.isfinite(rel) else 0.0)
        outputs[t.name] = Deviation(max_abs=worst_abs, max_rel=worst_rel)
    return Verification(
        tolerance=tolerance,
        batch_sizes=tuple(c.batch_size for c in cases),
        outputs=outputs,
        paths=("run() nested vectors", "runFlat()", "runFlat() with a zero-padding rule"),
    )
