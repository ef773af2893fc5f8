"""A SavedModel checked with TensorFlow before anything is compiled (`check`, add-model, update,
init-config, build): its signature, whether XLA has a CPU kernel for each op, and one trial compile.

    check_target()  `tfaot-dist check`: a SavedModel directory, an aot_config.yaml or a registry entry
    op_check()      run the worker's check request; returns its typed answer
    check_model()   the same for an AOT config, refused with one line if it cannot compile
    refusal()       why an answer's model cannot be compiled, or None
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import check_answers, limits
from tfaot_dist.config import AotConfig, load_aot_config, load_source_config
from tfaot_dist.documents import CheckAnswer, CheckRequest, Signature, Tensor
from tfaot_dist.errors import InvalidInput
from tfaot_dist.onnx_source import converted
from tfaot_dist.registry import Registry
from tfaot_dist.session import Session
from tfaot_dist.sources import fetch_source
from tfaot_dist.toolchain import run_worker
from tfaot_dist.util.fs import open_regular
from tfaot_dist.util.textsafe import one_line, shown


@dataclass(frozen=True)
class Checked:
    saved_model: Path
    answer: CheckAnswer


def check_target(target: str, serving_key: str, registry: Path, session: Session) -> Checked:
    """A SavedModel directory (its signature serving_key), an aot_config.yaml, or the name of an
    entry of the registry at registry (its source fetched at its pin), checked in TensorFlow."""
    path = Path(target)
    if path.is_dir():
        saved_model = path
    else:
        if path.is_file():
            config = load_aot_config(path)
        else:
            entry = Registry.existing(registry).entry(target)
            config = load_source_config(fetch_source(entry.source, session.cache.root), entry.aot_config)
        for warning in config.warnings:
            session.log(f"warning: {warning}")
        config = converted(config, session)
        saved_model, serving_key = config.saved_model, config.serving_key
    with tempfile.TemporaryDirectory(prefix="tfaot-check-") as work:
        return Checked(saved_model, op_check(saved_model.absolute(), serving_key, session, Path(work)))


def check_model(config: AotConfig, session: Session, work: Path) -> Signature:
    """Load the SavedModel (converted from an ONNX source) in TensorFlow, check its signature and ops;
    returns the signature."""
    config = converted(config, session)
    answer = op_check(config.saved_model, config.serving_key, session, work, config.compilation.batch_sizes)
    refused = refusal(answer)
    if refused:
        raise InvalidInput(f"{config.path}: {refused}")
    return answer.signature


def refusal(answer: CheckAnswer) -> str | None:
    """Why the model cannot be compiled, in one line (each op with its first node and what to change), or None."""
    bad = [row for row in answer.ops if not row.xla_cpu]
    if bad:
        where = "; ".join(
            f"{row.op} at {_node_list(row.nodes)}: {row.advice}" if row.nodes else row.op for row in bad
        )
        return f"ops XLA cannot compile on CPU: {', '.join(row.op for row in bad)} ({where})"
    if answer.compile_error:
        return f"tfcompile cannot compile the model: {compile_error_line(answer.compile_error)}"
    return None


def _node_list(nodes: tuple[str, ...]) -> str:
    return (
        "node "
        + ", ".join(shown(n) for n in nodes[:2])
        + (f" and {len(nodes) - 2} more" if len(nodes) > 2 else "")
    )


def compile_error_line(text: str) -> str:
    """The line of a tfcompile error that says what is wrong (XLA puts it first, context after it)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return one_line(lines[0] if lines else text, limit=600)


def op_check(
    saved_model: Path, serving_key: str, session: Session, work: Path, batch_sizes: tuple[int, ...] = ()
) -> CheckAnswer:
    check_saved_model_files(saved_model)
    toolchain = session.toolchain()
    request = CheckRequest(
        saved_model=str(saved_model),
        serving_key=serving_key,
        batch_sizes=batch_sizes,
        max_row_elements=limits.max_row_elements(),
        max_batch_bytes=limits.max_batch_bytes(),
    ).to_json()
    # The same SavedModel bytes, request and toolchain give the same answer: kept, TensorFlow starts once.
    key = check_answers.answer_key(saved_model, request, toolchain)
    kept = check_answers.load(session.cache.checks, key) if key else None
    if kept is not None:
        return kept
    work.mkdir(parents=True, exist_ok=True)
    try:
        answer = CheckAnswer.from_json(run_worker(toolchain, request, work), "TensorFlow worker answer")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if key:
        check_answers.store(session.cache.checks, key, answer)
    return answer


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def check_saved_model_files(saved_model: Path) -> None:
    """Before TensorFlow reads them (it would say "Wire format was corrupt"): a git LFS pointer in
    place of a SavedModel file is named as such, with the fix. Anything in the directory that is not
    a regular file or a directory (a FIFO, socket or device, which would block or feed a reader
    forever) is refused with one line."""
    for folder, _, files in os.walk(saved_model):
        for name in files:
            try:
                open_regular(Path(folder, name)).close()
            except OSError:  # a dangling link, an unreadable file: TensorFlow says what it needs
                continue
    for path in [saved_model / "saved_model.pb", *sorted((saved_model / "variables").glob("*"))]:
        if path.is_dir():
            continue
        try:
            with open_regular(path) as f:
                head = f.read(len(LFS_POINTER))
        except OSError:
            continue
        if head == LFS_POINTER:
            raise InvalidInput(
                f"{path}: a git LFS pointer, not the file: the data repository stores it with git "
                "LFS, whose objects tfaot-dist does not fetch; commit the file itself (`git lfs "
                "untrack PATTERN` and `git add --renormalize .` in the data repository) or, for a "
                "local directory, run `git lfs pull` there first"
            )


def describe_signature(signature: Signature) -> str:
    def one(t: Tensor) -> str:
        return f"{t.name}:{t.dtype}{list(t.shape)}"

    return ", ".join(one(t) for t in signature.inputs) + " -> " + ", ".join(one(t) for t in signature.outputs)
