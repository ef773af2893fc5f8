"""Commands on a model before it is registered: check, init-config."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfaot_dist import check
from tfaot_dist.cli.common import (
    Options,
    add_command,
    batch_sizes_option,
    command,
    emit,
    log,
    session_of,
)
from tfaot_dist.errors import InvalidInput

if TYPE_CHECKING:
    from tfaot_dist.cli.common import Subcommands


@dataclass(frozen=True)
class CheckOptions(Options):
    target: str
    serving_key: str
    table: bool


def cmd_check(o: CheckOptions) -> int:
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
    saved_model: Path
    name: str | None
    model_version: str
    serving_key: str
    batch_sizes: str | None
    output: Path | None
    force: bool


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


def add_check(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    s = add_command(
        sub,
        common,
        "check",
        "list the ops of a model and whether XLA compiles them",
        "Load the SavedModel's serving function with TensorFlow and report, op by op, whether XLA "
        "can compile it for CPU. Exit 3 if any cannot.",
        [
            "tfaot-dist check path/to/saved_model --table",
            "tfaot-dist check my/aot_config.yaml",
            "tfaot-dist check test-simple   # a registered model",
        ],
    )
    s.add_argument("target", metavar="PATH-OR-NAME", help="SavedModel dir, aot_config.yaml or registry name")
    s.add_argument(
        "--serving-key",
        default="serving_default",
        help="signature of a SavedModel directory (default: serving_default)",
    )
    s.add_argument("--table", action="store_true", help="print every op")
    s.set_defaults(func=command(cmd_check, CheckOptions))


def add_init_config(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    s = add_command(
        sub,
        common,
        "init-config",
        "write a starter aot_config.yaml for a SavedModel",
        "Load the SavedModel's signature with TensorFlow and write an aot_config.yaml next to it: "
        "model name and version, the signature's inputs and outputs (in the C++ order) as comments, "
        "and batch sizes 1, 2, 4 and 8. An existing file is kept unless --force.",
        [
            "tfaot-dist init-config models/tagger/saved_model",
            "tfaot-dist init-config sm/ --name tagger --batch-sizes 1,16 --output sm/../aot_config.yaml",
        ],
    )
    s.add_argument("saved_model", metavar="SAVED_MODEL", type=Path, help="the SavedModel directory")
    s.add_argument("--name", help="model.name, the C++ class (default: from the directory name)")
    s.add_argument("--version", dest="model_version", default="1.0.0", help="model.version (default: 1.0.0)")
    s.add_argument(
        "--serving-key", default="serving_default", help="the signature (default: serving_default)"
    )
    s.add_argument("--batch-sizes", help="compilation.batch_sizes (default: 1,2,4,8)")
    s.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write it (default: aot_config.yaml beside the SavedModel directory)",
    )
    s.add_argument("--force", action="store_true", help="replace an existing file")
    s.set_defaults(func=command(cmd_init_config, InitConfigOptions))
