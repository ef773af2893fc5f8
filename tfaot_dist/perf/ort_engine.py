"""The `ort` engine of `tfaot-dist bench`: the same SavedModel in ONNX Runtime, the other runtime CMSSW has.

Its environment is the TensorFlow toolchain's requirements plus REQUIREMENTS (tf2onnx converts from the
SavedModel, so it needs TensorFlow), a cached venv keyed by those requirements like every toolchain. The
model is converted once per bench run (worker/ort_bench.py: tf2onnx with Keras 3's Erfc written as
1 - Erf; outputs compared with TensorFlow's), then timed and measured in processes that import ONNX
Runtime alone: one thread, every graph optimisation, inputs and outputs bound once (IO binding), driven
from Python (one Run() of a one-node model costs about 2 us more from Python than from C: reported
beside the figures as "call_overhead_us").
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import process
from tfaot_dist.documents import JsonObject
from tfaot_dist.errors import CompileFailed
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, worker_env
from tfaot_dist.util.fs import sha256_bytes, sha256_file
from tfaot_dist.util.progress import Log

REQUIREMENTS = ("tf2onnx==1.17.0", "onnxruntime==1.31.1")
WORKER = Path(__file__).parent.parent / "worker" / "ort_bench.py"
# The ONNX source converter (onnx_source.py), run in the same environment: the worker and its op table.
CONVERTER = (WORKER.parent / "onnx_convert.py", WORKER.parent / "onnx_ops.py")
TOLERANCE = 1e-5  # as the package's verification (verify.TOLERANCE): absolute or relative


def converter_digest() -> str:
    """What makes a conversion beyond the file: the converter's sources and the environment's additions
    (part of the key of each converted model and of each build key)."""
    parts = [sha256_file(path) for path in CONVERTER] + list(REQUIREMENTS)
    return sha256_bytes(json.dumps(parts).encode())


class OrtUnavailable(Exception):
    """The model cannot be run by ONNX Runtime here (conversion failed, outputs differ): the reason."""


@dataclass(frozen=True)
class OrtModel:
    env: Toolchain
    onnx: Path
    conversion: JsonObject  # the worker's convert answer: versions, rewritten ops, deviations from TensorFlow
    dims: tuple[tuple[str, int], ...] = ()  # an ONNX source's model.dims: its symbolic dimensions' values


def environment(tf_toolchain: Toolchain, cache: Path, log: Log = print) -> Toolchain:
    """The cached venv with the TensorFlow of tf_toolchain, tf2onnx and ONNX Runtime."""
    if not tf_toolchain.requirements:
        raise OrtUnavailable(
            "the TensorFlow toolchain is an existing Python (no requirements to install "
            "tf2onnx and onnxruntime beside)"
        )
    return ensure_toolchain(cache, (*tf_toolchain.requirements, *REQUIREMENTS), log)


def request(env: Toolchain, req: JsonObject, work: Path, timeout: float = 7200) -> JsonObject:
    """One worker request in env; its answer, or OrtUnavailable with the worker's message."""
    answer = worker_answer(env, WORKER, req, work, timeout, what=f"ONNX Runtime benchmark ({req['op']})")
    if not answer.get("ok"):
        raise OrtUnavailable(answer.get("message") or "the worker gave no reason")
    return answer


def worker_answer(
    env: Toolchain, worker: Path, req: JsonObject, work: Path, timeout: float, what: str
) -> JsonObject:
    """Run worker (a script of env) on req written into work: the answer file it wrote, whatever it
    says; CompileFailed with the process's output (what names it) when it wrote none."""
    work.mkdir(parents=True, exist_ok=True)
    req = {**req, "result": str(work / "result.json")}
    (work / "request.json").write_text(json.dumps(req))
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    finished = process.probe(
        [env.python, "-I", worker, work / "request.json"], env=worker_env(tmp), timeout=timeout
    )
    try:
        answer: JsonObject = json.loads((work / "result.json").read_text())
    except (OSError, ValueError):
        raise process.failure(finished, what=what, error=CompileFailed) from None
    return answer


def convert(env: Toolchain, saved_model: Path, serving_key: str, work: Path) -> OrtModel:
    """The SavedModel's serving signature as ONNX, checked against TensorFlow at batch sizes 1 and 3."""
    onnx = work / "model.onnx"
    answer = request(
        env,
        {
            "op": "convert",
            "saved_model": str(saved_model),
            "serving_key": serving_key,
            "onnx": str(onnx),
            "check_batch_sizes": [1, 3],
            "tolerance": TOLERANCE,
        },
        work / "convert",
    )
    answer.pop("ok")
    if not answer["outputs_match"]:
        raise OrtUnavailable(
            f"ONNX Runtime's outputs differ from TensorFlow's beyond {TOLERANCE}: {answer['deviations']}"
        )
    return OrtModel(env, onnx, answer)


def time_rows(
    model: OrtModel, batch_sizes: Sequence[int], warmup: int, calls: int, work: Path
) -> tuple[list[JsonObject], float]:
    """Rows {batch_size, seconds_per_call, calls, warmup} and the seconds of one Run() of a one-node model."""
    answer = _measured(
        model,
        {
            "op": "time",
            "onnx": str(model.onnx),
            "dims": dict(model.dims),
            "batch_sizes": list(batch_sizes),
            "warmup": warmup,
            "calls": calls,
        },
        work,
    )
    return answer["timings"], answer["call_overhead"]


def memory_row(model: OrtModel, instances: int, work: Path) -> JsonObject:
    """{instances, vm_hwm_kb, vm_rss_kb, heap_bytes} of a Python process holding that many sessions."""
    answer = _measured(
        model,
        {"op": "memory", "onnx": str(model.onnx), "dims": dict(model.dims), "instances": instances},
        work,
    )
    row: JsonObject = answer["row"]
    return row


def _measured(model: OrtModel, req: JsonObject, work: Path) -> JsonObject:
    """A measurement of a converted model: failing now is an error of the run, not a model ORT cannot run."""
    try:
        return request(model.env, req, work)
    except OrtUnavailable as exc:
        raise CompileFailed(f"ONNX Runtime benchmark ({req['op']}): {exc}") from None
