"""`tfaot-dist init-config`: a starter aot_config.yaml written from a SavedModel's signature.

The file is the CMS schema (config.py reads it back before it is written), with the
signature in the C++ argument order as comments, so that a user sees what the
compiled class will take and return before the first compile.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import names
from tfaot_dist.check import op_check, refusal
from tfaot_dist.config import load_aot_config
from tfaot_dist.documents import CheckAnswer, Tensor
from tfaot_dist.errors import InvalidInput
from tfaot_dist.session import Session
from tfaot_dist.util.fs import write_atomic

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)  # other sizes are combined from these (batch rules)
DEFAULT_VERSION = "1.0.0"
# tfaot::Model's argument types per dtype (the runtime interface, tfaot/Util.h).
ARRAYS = {
    "float32": "FloatArrays",
    "float64": "DoubleArrays",
    "int32": "Int32Arrays",
    "int64": "Int64Arrays",
    "bool": "BoolArrays",
}


@dataclass(frozen=True)
class Starter:
    path: Path
    name: str
    refused: str | None  # why `check` will refuse the model (ops XLA cannot compile, a failed trial compile)


def class_name_for(saved_model: Path) -> str:
    """A C++ class name from the SavedModel's directory (its parent's, when it is named saved_model)."""
    stem = saved_model.parent.name if saved_model.name in ("saved_model", "") else saved_model.name
    name = re.sub(r"[^a-z0-9_]+", "_", stem.lower()).strip("_") or "model"
    if name[0].isdigit():
        name = f"model_{name}"
    try:
        return names.cpp_identifier(name, "model.name")
    except InvalidInput:  # a C++ keyword, e.g. a directory named "class"
        return f"{name}_model"


def init_config(
    saved_model: Path,
    session: Session,
    output: Path | None = None,
    *,
    name: str | None = None,
    version: str = DEFAULT_VERSION,
    serving_key: str = "serving_default",
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES,
    force: bool = False,
) -> Starter:
    """Check the options, read the signature with TensorFlow, write the config (output: default
    aot_config.yaml beside the SavedModel directory; an existing file is kept unless force)."""
    saved_model = saved_model.absolute()
    output = (output or saved_model.parent / "aot_config.yaml").absolute()
    name = names.cpp_identifier(name, "--name") if name is not None else class_name_for(saved_model)
    names.version(version, "--version")
    names.serving_key(serving_key, "--serving-key")
    if not (saved_model / "saved_model.pb").is_file():
        raise InvalidInput(f"{saved_model}: not a SavedModel directory (no saved_model.pb)")
    if output.exists() and not force:
        raise InvalidInput(f"{output}: exists (give --force to replace it, or --output another file)")
    _check_writable(output)  # before TensorFlow is asked anything
    with tempfile.TemporaryDirectory(prefix="tfaot-init-config-") as work:
        answer = op_check(saved_model, serving_key, session, Path(work))
    return write_starter(
        saved_model,
        answer,
        output,
        name=name,
        version=version,
        serving_key=serving_key,
        batch_sizes=batch_sizes,
    )


def write_starter(
    saved_model: Path,
    answer: CheckAnswer,
    output: Path,
    *,
    name: str,
    version: str,
    serving_key: str,
    batch_sizes: tuple[int, ...],
) -> Starter:
    """Write output and read it back as an AOT config (the checked values of init_config)."""
    relative = Path(_relative(saved_model, output.parent))
    text = render_starter(
        answer,
        name=name,
        version=version,
        saved_model=relative,
        serving_key=serving_key,
        batch_sizes=batch_sizes,
    )
    # Read back before writing: what we write must load as written (a temporary sibling, same paths).
    probe = output.with_name(f".{output.name}.check")
    try:
        write_atomic(probe, text)
        try:
            load_aot_config(probe, str(output))
        finally:
            probe.unlink(missing_ok=True)
        write_atomic(output, text)
    except OSError as exc:
        raise InvalidInput(
            f"{output}: cannot write it ({exc.strerror}); give --output another file"
        ) from None
    return Starter(output, name, refusal(answer))


def _check_writable(output: Path) -> None:
    """The config can be written where it goes (a SavedModel on a read-only file system, such as
    CVMFS, is common): its nearest existing directory allows it."""
    here = output.parent
    while not here.exists() and here != here.parent:
        here = here.parent
    if not os.access(here, os.W_OK | os.X_OK):
        problem = "a read-only file system" if _read_only(here) else "permission denied"
        raise InvalidInput(f"{output}: cannot write it there ({problem}); give --output another file")


def _read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def render_starter(
    answer: CheckAnswer,
    *,
    name: str,
    version: str,
    saved_model: Path,
    serving_key: str,
    batch_sizes: tuple[int, ...],
) -> str:
    sig = answer.signature
    tensors = (*sig.inputs, *sig.outputs)
    width = (max((len(t.name) for t in tensors), default=0), max((len(_type(t)) for t in tensors), default=0))
    lines = [
        "# AOT config for tfaot-dist (the CMS aot_config.yaml schema), written by `tfaot-dist init-config`.",
        "#   tfaot-dist check aot_config.yaml                      # can XLA compile every op?",
        "#   tfaot-dist compile --aot-config aot_config.yaml --output-directory out/",
        "#",
        f"# Signature {serving_key!r}, in the C++ order (signature key names, Python string sort);",
        "# each argument holds one row per batch entry, the tensor without its batch axis:",
        "#   inputs:",
        *(f"#     {_described(t, width)}" for t in sig.inputs),
        "#   outputs:",
        *(f"#     {_described(t, width)}" for t in sig.outputs),
    ]
    bad = [row.op for row in answer.ops if not row.xla_cpu]
    if bad:
        lines.append(
            f"# Ops XLA cannot compile on CPU (`check` refuses the model until they are gone): {', '.join(bad)}"
        )
    lines += [
        "model:",
        f"  name: {name}                 # the C++ class name",
        f"  version: {json.dumps(version)}",
        f"  saved_model: {json.dumps(saved_model.as_posix() if saved_model.is_absolute() else f'./{saved_model.as_posix()}')}",
        f"  serving_key: {json.dumps(serving_key)}",
        "compilation:",
        f"  batch_sizes: [{', '.join(map(str, batch_sizes))}]   # compiled; other sizes are combined from these",
        "  namespace: tfaot_model        # the C++ namespace of the class",
        "",
    ]
    return "\n".join(lines)


def _type(t: Tensor) -> str:
    return f"{t.dtype}[{','.join(map(str, t.shape))}]"


def _described(t: Tensor, width: tuple[int, int]) -> str:
    values = 1
    for n in t.shape:
        values *= n
    return f"{t.name:{width[0]}}  {_type(t):{width[1]}}  tfaot::{ARRAYS.get(t.dtype, '?')}, {values} per row"


def _relative(target: Path, start: Path) -> str:
    """target relative to start when it lies below it, else absolute."""
    target, start = target.resolve(), start.resolve()
    return str(target.relative_to(start)) if target.is_relative_to(start) else str(target)
