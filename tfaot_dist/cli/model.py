"""Commands on a model before it is registered: check, init-config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.cli.common import Options, arg, batch_sizes_option, command, emit, log, session_of
from tfaot_dist.errors import InvalidInput


@dataclass(frozen=True)
class CheckOptions(Options):
    target: str = arg(metavar="PATH-OR-NAME", help="SavedModel dir, aot_config.yaml or registry name")
    serving_key: str = arg(
        "--serving-key",
        default="serving_default",
        help="signature of a SavedModel directory (default: serving_default)",
    )
    table: bool = arg("--table", action="store_true", help="print every op")


@command(
    "check",
    CheckOptions,
    summary="list the ops of a model and whether XLA compiles them",
    description="Load the SavedModel's serving function with TensorFlow and report, op by op, whether XLA "
    "can compile it for CPU. Exit 3 if any cannot.",
    examples=(
        "tfaot-dist check path/to/saved_model --table",
        "tfaot-dist check my/aot_config.yaml",
        "tfaot-dist check test-simple   # a registered model",
    ),
    uses_cache=True,
)
def cmd_check(o: CheckOptions) -> int:
    from tfaot_dist import check

    checked = check.check_target(o.target, o.serving_key, o.registry, session_of(o))
    answer = checked.answer
    ops = [row.to_json() for row in answer.ops]
    bad = [r["op"] for r in ops if not r["xla_cpu"]]
    if o.table:
        width = max(len("Operation"), *(len(r["op"]) for r in ops))
        lines = [f"{'Operation':{width}}  cpu", f"{'-' * width}  ---"]
        lines += [f"{r['op']:{width}}  {'yes' if r['xla_cpu'] else 'NO'}" for r in ops]
    else:
        lines = []
    lines.append("cpu: all ops compatible" if not bad else f"cpu: incompatible ops: {', '.join(bad)}")
    if not bad:
        lines.append("compile: ok (batch size 1, x86-64)" if not answer.compile_error else "compile: FAILED")
    emit(
        o,
        {
            "saved_model": str(checked.saved_model),
            "signature": answer.signature.to_json(),
            "ops": ops,
            "incompatible": bad,
            "compile_error": answer.compile_error,
        },
        "\n".join(lines),
    )
    refused = check.refusal(answer)
    if refused:
        raise InvalidInput(f"{checked.saved_model}: {refused}")
    return 0


@dataclass(frozen=True)
class InitConfigOptions(Options):
    saved_model: Path = arg(metavar="SAVED_MODEL", type=Path, help="the SavedModel directory")
    name: str | None = arg("--name", help="model.name, the C++ class (default: from the directory name)")
    model_version: str = arg("--version", default="1.0.0", help="model.version (default: 1.0.0)")
    serving_key: str = arg(
        "--serving-key", default="serving_default", help="the signature (default: serving_default)"
    )
    batch_sizes: str | None = arg("--batch-sizes", help="compilation.batch_sizes (default: 1,2,4,8)")
    output: Path | None = arg(
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write it (default: aot_config.yaml beside the SavedModel directory)",
    )
    force: bool = arg("--force", action="store_true", help="replace an existing file")


@command(
    "init-config",
    InitConfigOptions,
    summary="write a starter aot_config.yaml for a SavedModel",
    description="Load the SavedModel's signature with TensorFlow and write an aot_config.yaml next to it: "
    "model name and version, the signature's inputs and outputs (in the C++ order) as comments, "
    "and batch sizes 1, 2, 4 and 8. An existing file is kept unless --force.",
    examples=(
        "tfaot-dist init-config models/tagger/saved_model",
        "tfaot-dist init-config sm/ --name tagger --batch-sizes 1,16 --output sm/../aot_config.yaml",
    ),
)
def cmd_init_config(o: InitConfigOptions) -> int:
    from tfaot_dist import starter

    result = starter.init_config(
        o.saved_model,
        session_of(o),
        o.output,
        name=o.name,
        version=o.model_version,
        serving_key=o.serving_key,
        batch_sizes=batch_sizes_option(o.batch_sizes) or starter.DEFAULT_BATCH_SIZES,
        force=o.force,
    )
    if result.refused:
        log(f"warning: check will refuse the model until this is changed: {result.refused}")
    emit(
        o,
        {"aot_config": str(result.path), "name": result.name, "refused": result.refused},
        f"wrote {result.path} (model.name {result.name}); next: tfaot-dist check {result.path}",
    )
    return 0
