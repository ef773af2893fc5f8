"""Make the toolchain tier's expensive shared entries ahead of it: `scripts/test` runs this at nice 19 while
the fast tier and the other Pythons run, so that a cold run spends their idle cores and network waits on
them instead of making its first toolchain tests wait; when the toolchain tier starts, what is left runs
at the tier's priority beside its workers.

    .venv/bin/python tests/prewarm.py

Each entry is made by the same call the tests make, so it has the key they look for, under the cache's
locks: a test that needs one while it is being made waits for it (its core is then free for this
process), and one this script did not get to is made by the test as before. Nothing here asserts:
a failure is printed and the next entry tried, and the test that needs the entry reports it.

In the order the toolchain tier needs them: the environments (network, little CPU), the two XLA runtimes,
the exports of the examples, test and ONNX models, the simple example at every level, the study's export,
the examples' export by TensorFlow 2.12, the TensorFlow C API benchmark (tests/test_perf.py), the zoo's
exports, the parts of both runtimes the tests build (tests/test_runtime_parts.py: BUILT_ANYWAY), the
release-like runtime, then the zoo's builds.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, TF212, exported_by, kept_simple_every_level
from release_runtime import ensure_release_runtime
from test_runtime_parts import ALL_PARTS, BUILT_ANYWAY
from test_zoo import KERAS2, TF_KERAS, ZOO, ZOO212, built_area, exported

from tfaot_dist.cache import default_cache
from tfaot_dist.cxx import runtime_parts, xla_runtime
from tfaot_dist.perf import bench, ort_engine
from tfaot_dist.registry import DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import Toolchain, ensure_toolchain


def log(message: str) -> None:
    print(message, flush=True)


def step(what: str, make: Callable[..., object], *args: Any) -> None:
    t0 = time.monotonic()
    try:
        make(*args)
    except Exception:  # the test that needs it reports it; the other entries are still worth making
        log(f"prewarm: {what} failed:\n{traceback.format_exc()}")
        return
    log(f"prewarm: {what} ({time.monotonic() - t0:.0f} s)")


def parts(toolchain: Toolchain, version: str, cache: Path) -> None:
    runtime = xla_runtime.ensure_runtime(toolchain.python, cache, log)
    source = xla_runtime.part_source(runtime, toolchain.python)
    names = [
        p.name for p in runtime_parts.parts(source.sources) if ALL_PARTS or p.name in BUILT_ANYWAY[version]
    ]
    xla_runtime.ensure_parts(runtime, names, toolchain.python, cache, log)


def zoo_build(family: str, model: str, exporter: Toolchain, cache: Path, *options: str) -> None:
    compiler = TF212 if family == "zoo212" else ()
    built_area(family, exported(family, model, exporter, *options), cache, compiler)


def main() -> None:
    cache = default_cache()
    t0 = time.monotonic()
    tf221 = ensure_toolchain(cache, DEFAULT_REQUIREMENTS, log)
    tf212 = ensure_toolchain(cache, TF212, log)
    keras2 = ensure_toolchain(cache, TF_KERAS, log)
    ort_env = ort_engine.environment(tf221, cache, log)
    step("plot environment", ensure_toolchain, cache, bench.PLOT_REQUIREMENTS, log)
    for toolchain in (tf221, tf212):  # Abseil's sources are downloaded and built first
        step(f"runtime of {toolchain.key}", xla_runtime.ensure_runtime, toolchain.python, cache, log)
    models = REPO / "tests" / "models"
    step("ONNX models export", exported_by, ort_env, models / "make_onnx_models.py", "onnx-models")
    step("test models export", exported_by, tf221, models / "make_test_models.py", "test-models")
    examples = exported_by(tf221, REPO / "examples" / "make_models.py", "examples")
    step("the simple example at every level", kept_simple_every_level, examples, cache, tf221)
    step("study export", exported_by, tf221, REPO / "examples" / "make_models.py", "study", "study_l12_u128")
    step("examples export by 2.12", exported_by, tf212, REPO / "examples" / "make_models.py", "examples212")
    step("TensorFlow C API benchmark", bench.build_capi_program, tf221, cache)
    families = [
        *(("zoo", model, tf221, ()) for model in ZOO),
        *(("zoo212", model, tf212, ()) for model in ZOO212),
        *(("zoo-keras2", model, keras2, ("--keras", "2")) for model in KERAS2),
    ]
    for family, model, exporter, options in families:
        step(f"{family} export {model}", exported, family, model, exporter, *options)
    for toolchain, version in ((tf212, "2.12"), (tf221, "2.21")):
        step(f"runtime parts of {toolchain.key}", parts, toolchain, version, cache)
    step("release-like runtime", ensure_release_runtime, tf212, cache, log)
    for family, model, exporter, options in families:
        step(f"{family} build {model}", zoo_build, family, model, exporter, cache, *options)
    log(f"prewarm: done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
