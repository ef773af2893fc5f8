"""An ONNX file as a model's source (model.onnx): converted into a SavedModel the pipeline compiles.

The conversion runs worker/onnx_convert.py in the ONNX Runtime environment (perf/ort_engine.py: the
TensorFlow toolchain's requirements plus tf2onnx and onnxruntime, so it has TensorFlow, onnx and
ONNX Runtime; the TensorFlow toolchain itself stays as it is). It maps each node to TensorFlow ops,
keeping ONNX's layout, writes a SavedModel whose serving signature has the ONNX input and output
names, and compares TensorFlow on it with ONNX Runtime on the original file at CHECK_BATCH_SIZES.
Its result is a cache entry CACHE/onnx/<key>, keyed by the file's digest, model.dims, the
converter's sources and the environment's requirements.

A model it does not convert (an op outside worker/onnx_ops.py's table, a vendor domain, a quantized
op, an opset outside 11-21, a symbolic dimension model.dims does not fix) is InvalidInput with the
worker's one line naming the node, its op and opset; nothing is written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from tfaot_dist import harness
from tfaot_dist.cache import ensure_entry
from tfaot_dist.config import AotConfig
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.documents import JsonObject, ModelManifest
from tfaot_dist.errors import CompileFailed, InvalidInput
from tfaot_dist.perf import ort_engine
from tfaot_dist.session import Session, Tools
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.fs import sha256_bytes, sha256_file, write_atomic

CHECK_BATCH_SIZES = (1, 3, 32)
ANSWER = "conversion.json"
# How far TensorFlow on the converted graph may be from ONNX Runtime on the file (absolute or relative
# to ONNX Runtime's value, as the package's verification): beyond it the conversion is a failure.
TOLERANCE = 1e-4


def converted(config: AotConfig, session: Session) -> AotConfig:
    """config itself for a SavedModel; for an ONNX source, config with saved_model the converted one
    and onnx_record filled (sha256, opset, producer, deviation from ONNX Runtime)."""
    if config.onnx is None:
        return config
    try:
        env = ort_engine.environment(session.toolchain(), session.cache.root, session.log)
    except ort_engine.OrtUnavailable as exc:
        raise InvalidInput(f"{config.path}: model.onnx needs the ONNX Runtime environment: {exc}") from None
    digest = sha256_file(config.onnx)
    parts = {
        "onnx": digest,
        "dims": dict(config.dims),
        "converter": ort_engine.converter_digest(),
        "requirements": list(env.requirements),
        "check_batch_sizes": list(CHECK_BATCH_SIZES),
    }
    entry = session.cache.onnx / sha256_bytes(json.dumps(parts, sort_keys=True).encode())[:20]
    with tempfile.TemporaryDirectory(prefix="tfaot-onnx-") as tmp:
        # Converted outside the cache first: a refused model leaves no trace there (not even a lock).
        made = Path(tmp)
        if not (entry / ANSWER).is_file():
            session.log(f"converting {config.onnx.name} (ONNX) into a SavedModel")
            answer = _request(env, config.onnx, dict(config.dims), made)
            write_atomic(made / ANSWER, json.dumps(answer, sort_keys=True) + "\n")

        def store(staged: Path) -> None:
            if not (made / ANSWER).is_file():  # the entry we saw was removed since (cache prune)
                raise CompileFailed(f"{entry}: removed while in use; run the command again")
            shutil.copytree(made / "saved_model", staged / "saved_model")
            shutil.copyfile(made / ANSWER, staged / ANSWER)

        ensure_entry(entry, store, log=session.log)
    answer = json.loads((entry / ANSWER).read_text())
    record = (
        ("onnx_sha256", digest),
        ("onnx_opset", str(answer["opset"])),
        ("onnx_producer", answer["producer"]),
        ("onnx_max_deviation_from_ort", f"{answer['max_deviation']:.3g}"),
    )
    return replace(config, saved_model=entry / "saved_model", onnx_record=record)


def _request(env: Toolchain, onnx: Path, dims: dict[str, int], staged: Path) -> JsonObject:
    """Run the converter into staged/saved_model; its answer, or the one line why not."""
    work = staged / "work"
    request = {
        "op": "convert",
        "onnx": str(onnx),
        "dims": dims,
        "saved_model": str(staged / "saved_model"),
        "check_batch_sizes": list(CHECK_BATCH_SIZES),
    }
    answer = _run(env, request, work, "ONNX conversion")
    if answer["max_deviation"] > TOLERANCE:
        raise CompileFailed(
            f"{onnx}: TensorFlow on the converted graph differs from ONNX Runtime by "
            f"{answer['max_deviation']:.3g} (more than {TOLERANCE:g}): {answer['deviations']}"
        )
    shutil.rmtree(work)
    return {key: value for key, value in answer.items() if key != "ok"}


def _run(env: Toolchain, request: JsonObject, work: Path, what: str) -> JsonObject:
    """One request to worker/onnx_convert.py in env: its answer; a refusal is InvalidInput."""
    answer = ort_engine.worker_answer(env, ort_engine.CONVERTER[0], request, work, timeout=3600, what=what)
    if answer.get("refusal"):
        raise InvalidInput(f"{request['onnx']}: {answer['refusal']}")
    if not answer.get("ok"):
        raise CompileFailed(f"{request['onnx']}: {what} failed: {answer.get('message')}")
    return answer


def verified_against_ort(
    config: AotConfig, root: Path, manifest: ModelManifest, tools: Tools, work: Path
) -> ModelManifest:
    """The package in root linked into the verification harness and run on its reference inputs,
    compared with ONNX Runtime's outputs on the original file (the model's tolerance); the manifest
    with what that found in its source (VerificationFailed names the first miss)."""
    if config.onnx is None:
        return manifest
    env = ort_engine.environment(tools.toolchain, tools.session.cache.root, tools.session.log)
    reference, cases = root / manifest.reference.dir, manifest.reference.cases
    ort_reference = work / "ort-reference"
    signature = manifest.signature
    request = {
        "op": "reference",
        "onnx": str(config.onnx),
        "cases": [case.to_json() for case in cases],
        "inputs": str(reference),
        "out": str(ort_reference),
        "input_names": [t.name for t in signature.inputs],
        "input_shapes": [list(t.shape) for t in signature.inputs],
        "input_dtypes": [t.dtype for t in signature.inputs],
        "output_names": [t.name for t in signature.outputs],
    }
    _run(env, request, work / "ort-request", "ONNX Runtime reference")
    for case in cases:  # the harness reads the inputs beside the outputs
        for inp in (reference / case.dir).glob("input_*.bin"):
            shutil.copyfile(inp, ort_reference / case.dir / inp.name)
    (work / "ort-harness").mkdir()
    harness_bin = harness.build_harness(
        root, manifest, tools.runtime, work / "ort-harness", tools.session.cache.root
    )
    # Every CPU level this machine runs, as the TensorFlow check; a single-target package at its one.
    levels = [lv for lv in manifest.compilation.cpu_levels if cpu_target.check_host(lv).ok]
    worst = 0.0
    runs: list[str | None] = [*levels] or [None]
    for level in runs:
        out = work / "ort-out" / (level or "default")
        harness.run_harness(harness_bin, ort_reference, cases, manifest.compilation.batch_sizes, out, level)
        label = f"{manifest.package} against ONNX Runtime" + (f" (CPU level {level})" if level else "")
        found = harness.compare(label, signature, ort_reference, cases, out, config.tolerance)
        worst = max([worst, *(d.max_abs for d in found.outputs.values())])
    tools.session.log(
        f"verified {manifest.package} against ONNX Runtime on {config.onnx.name} at batch sizes "
        f"{list(found.batch_sizes)}"
        + (f" and CPU levels {levels}" if levels else "")
        + f" (largest absolute deviation {worst:.3g})"
    )
    source = {
        **manifest.source,
        "onnx_runtime_verified_batch_sizes": ",".join(str(n) for n in found.batch_sizes),
        "onnx_runtime_verified_cpu_levels": ",".join(levels),
        "onnx_runtime_max_abs_deviation": f"{worst:.3g}",
    }
    return replace(manifest, source=source)
