"""Registry commands: init, add-model, update, list, show."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfaot_dist.cli.common import Options, arg, batch_sizes_option, command, emit, log, session_of


@dataclass(frozen=True)
class InitOptions(Options):
    directory: Path | None = arg(
        metavar="DIR", nargs="?", type=Path, help="where to create it (default: --registry, i.e. ./registry)"
    )


@command(
    "init",
    InitOptions,
    summary="create an empty registry",
    description="Create a registry directory: registry.yaml with the defaults (TensorFlow requirements, "
    "generic x86-64 target) and an empty models/. An existing registry is left as it is.",
    examples=("tfaot-dist init", "tfaot-dist init my-registry", "tfaot-dist --registry my-registry init"),
)
def cmd_init(o: InitOptions) -> int:
    from tfaot_dist.registry import init_registry

    root = (o.directory or o.registry).absolute()
    if not init_registry(root):
        emit(o, {"registry": str(root), "status": "exists"}, f"{root}: already a registry, left as it was")
        return 0
    emit(
        o,
        {"registry": str(root), "status": "created"},
        f"created registry {root} (registry.yaml, models/); next: tfaot-dist --registry {o.directory or root} "
        "add-model NAME --source REPO --aot-config PATH",
    )
    return 0


@dataclass(frozen=True)
class AddModelOptions(Options):
    name: str = arg(
        metavar="NAME", help="model name (lower case, digits, - and _): the package is tfaot-model-NAME"
    )
    source: str = arg(
        "--source",
        required=True,
        metavar="URL-OR-PATH",
        help="git repository: https://, ssh://, git://, file://, user@host:path, or a local path "
        "(recorded as file:// with its absolute path)",
    )
    ref: str = arg("--ref", default="HEAD", help="branch, tag or commit to pin (default: HEAD)")
    aot_config: str = arg(
        "--aot-config", required=True, metavar="PATH", help="path of aot_config.yaml inside the repository"
    )
    model_version: str | None = arg(
        "--version", help="package version, PEP 440 (default: model.version of the AOT config)"
    )
    batch_sizes: str | None = arg("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")


@command(
    "add-model",
    AddModelOptions,
    summary="register a model from a git data repository",
    description="Resolve --ref to a commit, read the AOT config there, load the SavedModel with TensorFlow "
    "to check its signature and ops, and write models/NAME.yaml pinned to that commit. Creates the "
    "registry if it does not exist. Nothing is compiled yet (see build).",
    examples=(
        "tfaot-dist add-model my-model --source https://github.com/org/data.git --ref v1 "
        "--aot-config my/aot_config.yaml",
        "tfaot-dist add-model my-model --source ../data-repo --aot-config my/aot_config.yaml --batch-sizes 1,2,4",
        "tfaot-dist add-model my-model --source git@host:org/data.git --aot-config cfg.yaml --version 1.1.0",
    ),
    uses_cache=True,
)
def cmd_add_model(o: AddModelOptions) -> int:
    from tfaot_dist import intake
    from tfaot_dist.registry import Registry
    from tfaot_dist.sources import source_url

    sizes = batch_sizes_option(o.batch_sizes)
    overrides: dict[str, object] = {"batch_sizes": sizes} if sizes else {}
    if not o.registry.exists():
        log(f"creating registry {o.registry}")
    entry = intake.add_model(
        Registry(o.registry),
        session_of(o),
        o.name,
        source_url(o.source),
        o.ref,
        o.aot_config,
        o.model_version,
        overrides,
    )
    path = Registry(o.registry).entry_path(entry.name)
    emit(
        o,
        {"entry": entry.as_dict(), "path": str(path)},
        f"registered {entry.package} {entry.version} at {entry.source.pin[:12]} ({path})",
    )
    return 0


@dataclass(frozen=True)
class UpdateOptions(Options):
    name: str = arg(metavar="NAME", help="registered model name (see list)")
    ref: str | None = arg("--ref", help="branch, tag or commit to pin (default: the entry's ref)")
    source: str | None = arg(
        "--source", metavar="URL-OR-PATH", help="another git repository (default: the entry's)"
    )
    aot_config: str | None = arg(
        "--aot-config", metavar="PATH", help="another AOT config path inside the repository"
    )
    model_version: str | None = arg("--version", help="package version, PEP 440, higher than the entry's")
    batch_sizes: str | None = arg("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")
    new_build: bool = arg(
        "--new-build",
        action="store_true",
        help="the next build number even if the inputs are the same (registry.yaml changed)",
    )


@command(
    "update",
    UpdateOptions,
    summary="re-pin a registered model (new commit, version or settings)",
    description="Resolve the entry's ref again (or --ref), check the model there as add-model does, and "
    "rewrite models/NAME.yaml, printing each field that changed. The version is --version, else "
    "the AOT config's model.version when it is higher than the entry's, else the entry's with "
    "the next build number (1.0.0 -> 1.0.0.post1) when anything the package is built from "
    "changed: a published version never changes. A new build must keep the signature. Nothing "
    "changed: the entry is left as it is.",
    examples=(
        "tfaot-dist update my-model                    # the branch's new head",
        "tfaot-dist update my-model --ref v2 --version 2.0.0",
        "tfaot-dist update my-model --new-build        # same inputs, built anew (e.g. new TensorFlow)",
    ),
)
def cmd_update(o: UpdateOptions) -> int:
    from tfaot_dist import intake
    from tfaot_dist.registry import Registry
    from tfaot_dist.sources import source_url

    sizes = batch_sizes_option(o.batch_sizes)
    overrides: dict[str, object] = {"batch_sizes": sizes} if sizes else {}
    update = intake.update_model(
        Registry.existing(o.registry),
        session_of(o),
        o.name,
        url=source_url(o.source) if o.source else None,
        ref=o.ref,
        aot_config=o.aot_config,
        version=o.model_version,
        overrides=overrides,
        new_build=o.new_build,
    )
    new = update.new
    if update.changes:
        width = max(len(field) for field, _, _ in update.changes)
        text = "\n".join(
            [
                f"updated {new.package} {update.old.version} -> {new.version} ({new.path})",
                *(f"  {field:{width}}  {a} -> {b}" for field, a, b in update.changes),
            ]
        )
    else:
        text = f"{new.package} {new.version}: up to date at {new.source.pin[:12]} (nothing changed)"
    emit(
        o,
        {
            "entry": new.as_dict(),
            "path": str(new.path),
            "status": "updated" if update.changes else "up to date",
            "changes": [{"field": f, "old": a, "new": b} for f, a, b in update.changes],
        },
        text,
    )
    return 0


@command(
    "list",
    Options,
    summary="list registered models",
    description="One line per registry entry: name, version, pinned commit (or archive digest), source.",
    examples=("tfaot-dist list", "tfaot-dist --registry other/registry list --json"),
)
def cmd_list(o: Options) -> int:
    from tfaot_dist.registry import Registry

    reg = Registry.existing(o.registry)
    entries = reg.load_all()
    rows = [e.as_dict() for e in entries]
    text = "\n".join(f"{e.name:30} {e.version:12} {e.source.pin[:12]} {e.source.url}" for e in entries) or (
        f"no models in {reg.root} (add one with tfaot-dist add-model)"
    )
    emit(o, {"models": rows}, text)
    return 0


@dataclass(frozen=True)
class ShowOptions(Options):
    name: str = arg(metavar="NAME", help="registered model name (see list)")


@command(
    "show",
    ShowOptions,
    summary="show one registry entry",
    description="The entry as the registry holds it, its package name and its build key (a digest of "
    "everything that goes into the package: a changed key means a rebuild).",
    examples=("tfaot-dist show test-simple", "tfaot-dist show test-simple --json"),
)
def cmd_show(o: ShowOptions) -> int:
    from tfaot_dist.build_key import build_key
    from tfaot_dist.registry import Registry

    reg = Registry.existing(o.registry)
    entry = reg.entry(o.name)
    data = {
        "entry": entry.as_dict(),
        "path": str(entry.path),
        "package": entry.package,
        "build_key": build_key(entry, reg.defaults()),
    }
    emit(o, data, "\n".join(f"{k}: {v}" for k, v in data.items()))
    return 0
