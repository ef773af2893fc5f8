"""Registering models: validate everything about a new entry before writing it."""

import shutil
import tempfile
from pathlib import Path

from tfaot_dist import names
from tfaot_dist.cache import ensure_entry
from tfaot_dist.config import AotConfig, load_aot_config
from tfaot_dist.documents import CheckAnswer, CheckRequest, Signature, Tensor
from tfaot_dist.errors import InvalidInput
from tfaot_dist.registry import GitSource, ModelEntry, Registry
from tfaot_dist.session import Session
from tfaot_dist.sources import SOURCE_COMPLETE, GitSources, ResolvedSource, check_git_url
from tfaot_dist.toolchain import run_worker
from tfaot_dist.util.textsafe import one_line, shown


def add_model(registry: Registry, session: Session, name: str, url: str, ref: str, aot_config: str,
              version: str | None = None, overrides: dict | None = None) -> ModelEntry:
    """session: its defaults are registry's (cli builds it so)."""
    log = session.log
    names.model_name(name, "NAME")
    check_git_url(url, "--source")
    names.git_ref(ref, "--ref")
    names.rel_path(aot_config, "--aot-config")
    if version is not None:
        names.version(version, "--version")
    if registry.entry_path(name).exists():
        raise InvalidInput(f"{name}: already registered ({registry.entry_path(name)})")

    # Fetch into a scratch cache: a source that fails validation leaves the real cache untouched.
    with tempfile.TemporaryDirectory(prefix="tfaot-add-") as scratch_dir:
        scratch = Path(scratch_dir)
        sources = GitSources(scratch / "cache")
        commit = sources.resolve_ref(url, ref)
        log(f"{url} {ref} -> {commit}")
        src = sources.fetch(url, commit)
        config = load_source_config(src, aot_config).with_overrides(overrides or {})
        signature = check_model(config, session, scratch / "check")
        log(f"signature: {describe_signature(signature)}")
        # HEAD is no branch name: record the branch it points at, which fetchers that pull a branch
        # (cmsBuild's git download, the cmsbuild specs) need.
        branch = sources.head_branch(url) if ref == "HEAD" else None
        entry = ModelEntry(name, version or config.version, GitSource(url, ref, commit, branch), aot_config,
                           overrides or {})
        # Copied, not renamed: the scratch dir may be on another file system.
        ensure_entry(session.cache.sources / commit, lambda staged: shutil.copytree(src.root, staged / "tree"),
                     marker=SOURCE_COMPLETE)
    registry.save(entry)
    return entry


def load_source_config(src: ResolvedSource, aot_config: str) -> AotConfig:
    path = src.root / aot_config
    if not path.is_file():
        raise InvalidInput(f"{src.url}@{src.commit[:12]}: aot config {aot_config!r} not found")
    label = f"{src.url}@{src.commit[:12]}: {aot_config}"
    return load_aot_config(path, label, within=src.root)


def check_model(config: AotConfig, session: Session, work: Path) -> Signature:
    """Load the SavedModel in TensorFlow, check its signature and ops; returns the signature."""
    answer = op_check(config.saved_model, config.serving_key, session, work)
    refused = refusal(answer)
    if refused:
        raise InvalidInput(f"{config.path}: {refused}")
    return answer.signature


def refusal(answer: CheckAnswer) -> str | None:
    """Why the model cannot be compiled, in one line (each op with its first node and what to change), or None."""
    bad = [row for row in answer.ops if not row.xla_cpu]
    if bad:
        where = "; ".join(f"{row.op} at {_node_list(row.nodes)}: {row.advice}" if row.nodes else row.op
                          for row in bad)
        return f"ops XLA cannot compile on CPU: {', '.join(row.op for row in bad)} ({where})"
    if answer.compile_error:
        return f"tfcompile cannot compile the model: {compile_error_line(answer.compile_error)}"
    return None


def _node_list(nodes: tuple[str, ...]) -> str:
    return "node " + ", ".join(shown(n) for n in nodes[:2]) + (f" and {len(nodes) - 2} more" if len(nodes) > 2 else "")


def compile_error_line(text: str) -> str:
    """The line of a tfcompile error that says what is wrong (XLA puts it first, context after it)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return one_line(lines[0] if lines else text, limit=600)


def op_check(saved_model: Path, serving_key: str, session: Session, work: Path) -> CheckAnswer:
    toolchain = session.toolchain()
    work.mkdir(parents=True, exist_ok=True)
    try:
        answer = run_worker(toolchain, CheckRequest(saved_model=str(saved_model), serving_key=serving_key).to_json(),
                            work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CheckAnswer.from_json(answer, "TensorFlow worker answer")


def describe_signature(signature: Signature) -> str:
    def one(t: Tensor) -> str:
        return f"{t.name}:{t.dtype}{list(t.shape)}"

    return ", ".join(one(t) for t in signature.inputs) + " -> " + ", ".join(one(t) for t in signature.outputs)
