"""Registering models: validate everything about a new entry before writing it."""

import shutil
import tempfile
from pathlib import Path

from tfaot_dist import limits, names
from tfaot_dist.cache import ensure_entry
from tfaot_dist.config import AotConfig, load_aot_config
from tfaot_dist.documents import CheckAnswer, CheckRequest, Signature, Tensor
from tfaot_dist.errors import InvalidInput
from tfaot_dist.registry import GitSource, ModelEntry, Registry
from tfaot_dist.session import Session
from tfaot_dist.sources import SOURCE_COMPLETE, GitSources, ResolvedSource, check_git_url
from tfaot_dist.toolchain import run_worker


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
    answer = op_check(config.saved_model, config.serving_key, session, work, config.compilation.batch_sizes)
    bad = [row.op for row in answer.ops if not row.xla_cpu]
    if bad:
        raise InvalidInput(f"{config.path}: ops XLA cannot compile on CPU: {', '.join(bad)}")
    return answer.signature


def op_check(saved_model: Path, serving_key: str, session: Session, work: Path,
             batch_sizes: tuple[int, ...] = ()) -> CheckAnswer:
    check_saved_model_files(saved_model)
    toolchain = session.toolchain()
    work.mkdir(parents=True, exist_ok=True)
    request = CheckRequest(saved_model=str(saved_model), serving_key=serving_key, batch_sizes=batch_sizes,
                           max_row_elements=limits.max_row_elements(), max_batch_bytes=limits.max_batch_bytes())
    try:
        answer = run_worker(toolchain, request.to_json(), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return CheckAnswer.from_json(answer, "TensorFlow worker answer")


LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def check_saved_model_files(saved_model: Path) -> None:
    """Before TensorFlow reads them (it would say "Wire format was corrupt"): a git LFS pointer in
    place of a SavedModel file is named as such, with the fix."""
    for path in [saved_model / "saved_model.pb", *sorted((saved_model / "variables").glob("*"))]:
        try:
            with open(path, "rb") as f:
                head = f.read(len(LFS_POINTER))
        except OSError:
            continue
        if head == LFS_POINTER:
            raise InvalidInput(f"{path}: a git LFS pointer, not the file: the data repository stores it with git "
                               "LFS, whose objects tfaot-dist does not fetch; commit the file itself (`git lfs "
                               "untrack PATTERN` and `git add --renormalize .` in the data repository) or, for a "
                               "local directory, run `git lfs pull` there first")


def describe_signature(signature: Signature) -> str:
    def one(t: Tensor) -> str:
        return f"{t.name}:{t.dtype}{list(t.shape)}"

    return ", ".join(one(t) for t in signature.inputs) + " -> " + ", ".join(one(t) for t in signature.outputs)
