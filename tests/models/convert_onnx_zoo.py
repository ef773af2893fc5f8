"""Convert every exported file of examples/onnx-zoo/ (MANIFEST.json) in one process. Run in the ONNX Runtime
environment:

python convert_onnx_zoo.py WORKER_DIR ZOO_DIR WORK_DIR RESULT.json

RESULT.json: {file name: the converter's answer ({"ok": true, "max_deviation", ...} or {"ok": false,
"message"}) and "ops", the file's [domain, op_type] pairs, read after onnx.checker accepted it}, each
converted and compared with ONNX Runtime at batch sizes 1, 3 and 32. A symbolic particle axis ('n_part')
is fixed to the size the file was exported with.
"""

import importlib
import json
import os
import sys
from typing import Any


def main(worker_dir: str, zoo: str, work: str, result: str) -> None:
    sys.path.insert(0, worker_dir)
    convert: Any = importlib.import_module("onnx_convert").convert
    import onnx

    with open(os.path.join(zoo, "MANIFEST.json")) as f:
        files = json.load(f)["files"]
    answers = {}
    for name, entry in sorted(files.items()):
        if not entry["file"]:
            continue  # the exporter failed on this model: nothing to convert
        req = {
            "onnx": os.path.join(zoo, entry["file"]),
            "dims": {"n_part": 16},
            "saved_model": os.path.join(work, name),
            "check_batch_sizes": [1, 3, 32],
        }
        try:
            answers[name] = {"ok": True, **convert(req)}
        except Exception as exc:
            answers[name] = {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        onnx.checker.check_model(req["onnx"], full_check=True)
        nodes = onnx.load(req["onnx"]).graph.node
        answers[name]["ops"] = sorted({(n.domain or "ai.onnx", n.op_type) for n in nodes})
    with open(result, "w") as f:
        json.dump(answers, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
