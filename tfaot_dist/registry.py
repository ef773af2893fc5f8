"""The model registry: registry/registry.yaml (defaults) and registry/models/NAME.yaml (entries).

# registry/models/test-simple.yaml
name: test-simple
version: "1.0.0"
source:
  git: https://host/org/data-repo.git
  ref: main
  commit: 0123...                       # full SHA that ref resolved to
aot_config: simple/aot_config.yaml      # inside the source
overrides:                              # optional, compilation settings
  batch_sizes: [1, 2, 4, 8]

# or, instead of git, a tar.gz or zip over http(s) pinned by its digest
# (a single top-level directory in the archive is the source root):
source:
  archive: https://host/models/data-1.0.tar.gz
  sha256: 0123...                       # 64 hex digits

# registry/registry.yaml
toolchain:
  requirements: ["tensorflow-cpu==2.21.0"]
  python: /path/bin/python3             # optional: an existing Python with TensorFlow, no venv made
  runtime: /path/tensorflow-xla-runtime # optional: an installed XLA runtime (absolute paths)
target_triple: x86_64-pc-linux
target_cpu: ""                          # non-empty: single-target packages for that CPU
cpu_levels: [x86-64, x86-64-v3, x86-64-v4]   # when target_cpu is "": code for each level
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tfaot_dist import names
from tfaot_dist.config import DEFAULT_TARGET_TRIPLE, Overrides, parse_compilation
from tfaot_dist.errors import InvalidInput
from tfaot_dist.pins import ArchiveSource, GitSource, check_git_url, check_sha256, check_url
from tfaot_dist.util.fs import write_atomic
from tfaot_dist.util.textsafe import did_you_mean, shown
from tfaot_dist.util.yamlio import Fields, load_mapping

DEFAULT_REQUIREMENTS = ("tensorflow-cpu==2.21.0",)
# Generic code for every CPU, and the two levels that pay (AVX2+FMA: 1.5-2.8x at small batches; AVX-512).
DEFAULT_CPU_LEVELS = ("x86-64", "x86-64-v3", "x86-64-v4")


@dataclass(frozen=True)
class Defaults:
    requirements: tuple[str, ...] = DEFAULT_REQUIREMENTS
    target_triple: str = DEFAULT_TARGET_TRIPLE
    target_cpu: str = ""
    cpu_levels: tuple[str, ...] = DEFAULT_CPU_LEVELS
    # toolchain.python / toolchain.runtime: an existing Python with TensorFlow and an installed
    # runtime (cxx/installed_runtime.py), used instead of our venv and runtime build.
    python: Path | None = None
    runtime: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "requirements": list(self.requirements),
            "target_triple": self.target_triple,
            "target_cpu": self.target_cpu,
            "cpu_levels": list(self.cpu_levels),
        }
        # Only when set: the build keys of registries without them stay as they were.
        for key in ("python", "runtime"):
            if getattr(self, key) is not None:
                data[key] = str(getattr(self, key))
        return data


@dataclass(frozen=True)
class ModelEntry:
    name: str
    version: str
    source: GitSource | ArchiveSource
    aot_config: str  # relative path inside the source
    overrides: Overrides = field(default_factory=dict)
    path: Path | None = None  # the YAML file it was read from

    @property
    def package(self) -> str:
        return f"tfaot-model-{self.name}"

    def as_dict(self) -> dict[str, Any]:
        """The YAML form, in a fixed key order."""
        data: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "source": self.source.as_dict(),
            "aot_config": self.aot_config,
        }
        if isinstance(self.source, GitSource) and self.source.branch:
            data["source"]["branch"] = self.source.branch
        if self.overrides:
            data["overrides"] = {
                k: (list(v) if isinstance(v, tuple) else v) for k, v in self.overrides.items()
            }
        return data


# What `tfaot-dist init` writes as registry.yaml.
INIT_REGISTRY = """\
# Defaults for every model of this registry; entries live in models/NAME.yaml
# (tfaot-dist add-model writes them).
toolchain:
  # What the isolated TensorFlow environment installs; changing it rebuilds every package.
  requirements: ["tensorflow-cpu==2.21.0"]
# Generic x86-64 code runs on every user's CPU; a newer target_cpu makes packages
# that crash (SIGILL) on older machines.
target_triple: x86_64-pc-linux
target_cpu: ""
# With target_cpu "", each package carries code for these x86-64 levels and picks
# the best one the user's CPU runs (TFAOT_CPU_LEVEL or tfaot_dist::setCpuLevel override).
cpu_levels: [x86-64, x86-64-v3, x86-64-v4]
"""


def init_registry(root: Path) -> bool:
    """Create a registry at root (registry.yaml, models/); False if root is one already (left as it was)."""
    config = root / "registry.yaml"
    if config.exists():
        return False
    if root.exists() and not root.is_dir():
        raise InvalidInput(f"{root}: exists and is not a directory")
    (root / "models").mkdir(parents=True, exist_ok=True)
    write_atomic(config, INIT_REGISTRY)
    Registry(root).defaults()  # what was written reads back
    return True


class Registry:
    def __init__(self, root: Path):
        self.root = root
        self.models_dir = root / "models"

    @classmethod
    def existing(cls, root: Path) -> Registry:
        """The --registry directory, which must exist (only add-model and init create one)."""
        if not root.is_dir():
            raise InvalidInput(
                f"--registry: {root} is not a registry directory (it does not exist; "
                f"create one with `tfaot-dist init {root}`)"
            )
        return cls(root)

    def defaults(self) -> Defaults:
        path = self.root / "registry.yaml"
        if not path.exists():
            return Defaults()
        f = Fields(load_mapping(path), path)
        toolchain = Fields(f.take("toolchain", dict, {}), path, "toolchain")
        requirements = toolchain.take("requirements", list, list(DEFAULT_REQUIREMENTS))
        python, runtime = (_absolute_path(toolchain, key) for key in ("python", "runtime"))
        toolchain.done()
        if not requirements:
            raise InvalidInput(f"{toolchain.at('requirements')}: must not be empty")
        for req in requirements:
            if not isinstance(req, str) or not names.REQUIREMENT_CHARS.fullmatch(req):
                raise InvalidInput(f"{toolchain.at('requirements')}: invalid requirement {req!r}")
        triple = names.target_triple(
            f.take("target_triple", str, DEFAULT_TARGET_TRIPLE), f.at("target_triple")
        )
        cpu = names.target_cpu(f.take("target_cpu", str, ""), f.at("target_cpu"))
        levels = names.cpu_levels(f.take("cpu_levels", list, list(DEFAULT_CPU_LEVELS)), f.at("cpu_levels"))
        f.done()
        return Defaults(tuple(requirements), triple, cpu, levels, python, runtime)

    def entry_path(self, name: str) -> Path:
        return self.models_dir / f"{name}.yaml"

    def names(self) -> list[str]:
        if not self.models_dir.is_dir():
            return []
        return sorted(p.stem for p in self.models_dir.glob("*.yaml"))

    def load(self, name: str) -> ModelEntry:
        names.model_name(name, "model name")
        path = self.entry_path(name)
        if not path.exists():
            raise InvalidInput(f"{name}: no such model in {self.models_dir}")
        return parse_entry(load_mapping(path), path)

    def entry(self, name: str) -> ModelEntry:
        """The entry a command names (NAME); an unknown name gets the closest registered names as a suggestion."""
        names.model_name(name, "NAME")
        if not self.entry_path(name).exists():
            raise InvalidInput(
                f"{name}: no such model in {self.models_dir}"
                + did_you_mean(name, self.names(), "tfaot-dist list")
            )
        return self.load(name)

    def load_all(self) -> list[ModelEntry]:
        return [self.load(n) for n in self.names()]

    def save(self, entry: ModelEntry) -> Path:
        path = self.entry_path(entry.name)
        write_atomic(path, yaml.safe_dump(entry.as_dict(), sort_keys=False))
        return path


def _absolute_path(fields: Fields, key: str) -> Path | None:
    value = fields.take(key, str, None)
    if value is None:
        return None
    if not names.AREA_PATH.fullmatch(value) or "/../" in f"{value}/":
        raise InvalidInput(
            f"{fields.at(key)}: expected an absolute path (letters, digits and ._/+,=@~%-), "
            f"got {shown(value)}"
        )
    return Path(value)


def parse_entry(data: dict[str, Any], path: Path) -> ModelEntry:
    f = Fields(data, path, known=("name", "version", "source", "aot_config", "overrides"))
    name = names.model_name(f.take("name", str, required=True), f.at("name"))
    if name != path.stem:
        raise InvalidInput(f"{f.at('name')}: {name!r} does not match the file name {path.name!r}")
    version = names.version(f.take("version", str, required=True), f.at("version"))
    source = parse_source(Fields(f.take("source", dict, required=True), path, "source", SOURCE_KEYS))
    aot_config = names.rel_path(f.take("aot_config", str, required=True), f.at("aot_config"))
    overrides = parse_compilation(f.take("overrides", dict, {}), path, "overrides", partial=True)
    f.done()
    return ModelEntry(name, version, source, aot_config, overrides, path)


SOURCE_KEYS = ("git", "ref", "commit", "branch", "archive", "sha256")


def parse_source(src: Fields) -> GitSource | ArchiveSource:
    """`git:` + ref + commit, or `archive:` + sha256; nothing else, never both."""
    if "archive" in src.data and "git" in src.data:
        raise InvalidInput(f"{src.at('archive')}: give either git or archive, not both")
    if "archive" in src.data:
        archive = ArchiveSource(
            url=check_url(src.take("archive", str, required=True), src.at("archive")),
            sha256=check_sha256(src.take("sha256", str, required=True), src.at("sha256")),
        )
        src.done()
        return archive
    url = src.take("git", str, required=True)
    check_git_url(url, src.at("git"))
    branch = src.take("branch", str, default=None)
    source = GitSource(
        url=url,
        ref=names.git_ref(src.take("ref", str, required=True), src.at("ref")),
        commit=names.commit_sha(src.take("commit", str, required=True), src.at("commit")),
        branch=names.git_ref(branch, src.at("branch")) if branch is not None else None,
    )
    src.done()
    return source
