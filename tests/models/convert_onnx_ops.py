"""Convert every ONNX file of a directory in one process (the op-level test). Run in the ONNX Runtime
environment:

python convert_onnx_ops.py WORKER_DIR ONNX_DIR WORK_DIR RESULT.json

RESULT.json: {file stem: the converter's answer ({"ok": true, "max_deviation", "op_types", ...} or
{"ok": false, "message"})}, each converted and compared with ONNX Runtime at batch sizes 1 and 3.
"""

import importlib
import json
import os
import sys
import traceback
from typing import Any


def main(worker_dir: str, onnx_dir: str, work: str, result: str) -> None:
    sys.path.insert(0, worker_dir)
    convert: Any = importlib.import_module("onnx_convert").convert
    import onnx

    answers = {}
    for name in sorted(os.listdir(onnx_dir)):
        stem, path = name[: -len(".onnx")], os.path.join(onnx_dir, name)
        req = {"onnx": path, "dims": {}, "saved_model": os.path.join(work, stem), "check_batch_sizes": [1, 3]}
        try:
            answers[stem] = {"ok": True, **convert(req)}
        except Exception as exc:
            answers[stem] = {
                "ok": False,
                "message": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        answers[stem]["op_types"] = sorted({n.op_type for n in onnx.load(path).graph.node})
    with open(result, "w") as f:
        json.dump(answers, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
