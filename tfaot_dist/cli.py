"""Command line: argument parsing and printing only; each command calls the functions that do its work.

Each command's options are a dataclass (Options and its subclasses below), made from the parsed
arguments before the command runs, so every command reads typed values.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tfaot_dist import __version__, builder, check, errors, intake
from tfaot_dist.cache import default_cache
from tfaot_dist.cache_admin import KINDS as CACHE_KINDS
from tfaot_dist.errors import InvalidInput, TfaotError, UsageError
from tfaot_dist.registry import Registry
from tfaot_dist.session import Session
from tfaot_dist.trust.options import add_signing_options
from tfaot_dist.util.textsafe import actions_json, shown, terminal

MAX_ERROR = 2000  # an error line quotes values cut to ~200 characters; this bounds the whole line


def log(message: str) -> None:
    print(terminal(f"tfaot-dist: {message}"), file=sys.stderr, flush=True)


OptionsT = TypeVar("OptionsT", bound="Options")


@dataclass(frozen=True)
class Options:
    """What every command has: --registry, --json, and the cache ($TFAOT_DIST_CACHE)."""

    registry: Path
    json: bool
    cache: Path

    @classmethod
    def of(cls: type[OptionsT], namespace: argparse.Namespace) -> OptionsT:
        return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})


def command(run: Callable[[OptionsT], int], options: type[OptionsT]) -> Callable[[argparse.Namespace], int]:
    """A subcommand's entry point: its options, typed, from the parsed arguments; then the command."""
    return lambda namespace: run(options.of(namespace))


def emit(o: Options, data: Any, text: str) -> None:
    if o.json:
        print(actions_json(json.dumps(data, indent=1, sort_keys=True)))
    elif text:
        print(terminal(text))  # registry fields and channel rows may hold escape sequences


EXIT_CODES = "exit codes:\n" + "\n".join(
    f"  {code}  {meaning}" for code, meaning in errors.EXIT_CODES.items()
)


def session_of(o: Options, offline: bool = False) -> Session:
    """The command's session: --cache, the defaults of --registry, --offline (for the commands that have it)."""
    return Session.of_registry(o.registry, o.cache, offline=offline, log=log)


def _area(area: Path | None) -> Path | None:
    """--area, else $CMSSW_BASE."""
    return area or (Path(os.environ["CMSSW_BASE"]) if os.environ.get("CMSSW_BASE") else None)


def _directory(path: Path) -> Path:
    """A directory option (--dist, --output-directory, --out), absolute and resolved once: given as a
    link, the directory it points to from here on (locks and renames work on the directory itself)."""
    return path.resolve()


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise InvalidInput(f"{option}: expected comma separated integers, got {text!r}") from None


def _batch_sizes(text: str | None) -> tuple[int, ...] | None:
    """--batch-sizes, checked as compilation.batch_sizes is."""
    from tfaot_dist.config import batch_sizes

    return batch_sizes(_int_list(text, "--batch-sizes"), "--batch-sizes") if text else None


@dataclass(frozen=True)
class InitOptions(Options):
    directory: Path | None


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
    name: str
    source: str
    ref: str
    aot_config: str
    model_version: str | None
    batch_sizes: str | None


def cmd_add_model(o: AddModelOptions) -> int:
    from tfaot_dist.sources import source_url

    sizes = _batch_sizes(o.batch_sizes)
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
    name: str
    ref: str | None
    source: str | None
    aot_config: str | None
    model_version: str | None
    batch_sizes: str | None
    new_build: bool


def cmd_update(o: UpdateOptions) -> int:
    from tfaot_dist.sources import source_url

    sizes = _batch_sizes(o.batch_sizes)
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


def cmd_list(o: Options) -> int:
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
    name: str


def cmd_show(o: ShowOptions) -> int:
    reg = Registry.existing(o.registry)
    entry = reg.entry(o.name)
    data = {
        "entry": entry.as_dict(),
        "path": str(entry.path),
        "package": entry.package,
        "build_key": builder.build_key(entry, reg.defaults()),
    }
    emit(o, data, "\n".join(f"{k}: {v}" for k, v in data.items()))
    return 0


@dataclass(frozen=True)
class BuildOptions(Options):
    names: list[str]
    all: bool
    dist: Path
    jobs: int
    fail_fast: bool
    shard: str | None
    offline: bool


def cmd_build(o: BuildOptions) -> int:
    from tfaot_dist import scheduler
    from tfaot_dist.util.progress import make_reporter

    if o.all == bool(o.names):
        raise UsageError("build: name models or give --all (not both)")
    reg = Registry.existing(o.registry)
    shard = scheduler.parse_shard(o.shard) if o.shard else None
    summary = scheduler.build_selected(
        reg,
        None if o.all else o.names,
        shard,
        session_of(o, o.offline),
        _directory(o.dist),
        make_reporter,
        jobs=o.jobs,
        fail_fast=o.fail_fast,
    )
    results = summary.results
    data = {
        "results": [_result_json(r) for r in results],
        "runtime": [
            {
                "package": p.name,
                "version": p.version,
                "status": status,
                "dir": str(p.root),
                "archive": str(p.archive),
                "sha256": p.archive_sha256,
            }
            for p, status in summary.runtimes
        ],
        "failures": [
            {"name": f.name, "message": f.message, "exit_code": f.exit_code} for f in summary.failures
        ],
        "not_started": summary.skipped,
        "shard": str(shard) if shard else None,
    }
    lines = [f"{r.package.name} {r.package.version}: {r.status} ({r.package.archive})" for r in results]
    lines += [f"{p.name} {p.version}: {status} ({p.archive})" for p, status in summary.runtimes]
    emit(o, data, "\n".join(lines))
    if summary.failures:
        log(f"summary: {len(results)} ok, {len(summary.failures)} failed, {len(summary.skipped)} not started")
        for f in summary.failures:
            log(f"FAILED {f.name}: {f.message}")
        raise scheduler.failed(summary)
    return 0


def _result_json(r: builder.BuildResult) -> dict[str, str]:
    return {
        "name": r.name,
        "package": r.package.name,
        "version": r.package.version,
        "status": r.status,
        "build_key": r.key,
        "dir": str(r.package.root),
        "archive": str(r.package.archive),
        "sha256": r.package.archive_sha256,
    }


@dataclass(frozen=True)
class PublishOptions(Options):
    channel: str
    dist: Path
    packages: list[str]
    sign: Path | None
    timestamp_expiry: str | None


def cmd_publish(o: PublishOptions) -> int:
    from tfaot_dist.channels import channel
    from tfaot_dist.trust.commands import signing

    published = channel.publish(
        _directory(o.dist), o.channel, o.cache, log, o.packages, signing(o.sign, o.timestamp_expiry)
    )
    emit(
        o,
        {"channel": o.channel, "packages": [vars(p) for p in published]},
        "\n".join(f"{p.name} {p.version}: {p.status} ({p.sha256[:12]})" for p in published),
    )
    return 0


@dataclass(frozen=True)
class YankOptions(Options):
    requirement: str
    channel: str
    reason: str | None
    undo: bool
    sign: Path | None
    timestamp_expiry: str | None


def cmd_yank(o: YankOptions) -> int:
    from tfaot_dist.channels import channel
    from tfaot_dist.trust.commands import signing

    if o.undo == (o.reason is not None):
        raise UsageError("yank: give --reason TEXT (or --undo to take a yank back)")
    rows, changed = channel.yank(
        o.channel,
        o.cache,
        o.requirement,
        None if o.undo else o.reason,
        log,
        signing(o.sign, o.timestamp_expiry),
    )
    row = rows[0]
    state = f"yanked ({row.yanked})" if row.yanked else "not yanked"
    emit(
        o,
        {
            "channel": o.channel,
            "name": row.name,
            "version": row.version,
            "versions": [r.version for r in rows],  # every spelling of the version (1.0, 1.0.0)
            "yanked": row.yanked,
            "changed": changed,
        },
        f"{row.name} {' and '.join(r.version for r in rows)}: {state}{'' if changed else ', as it was'} "
        f"in {o.channel}",
    )
    return 0


@dataclass(frozen=True)
class KeysOptions(Options):
    action: str
    path: Path


def cmd_keys(o: KeysOptions) -> int:
    from tfaot_dist.trust.commands import keys_new

    emit(o, *keys_new(o.path))
    return 0


@dataclass(frozen=True)
class TrustOptions(Options):
    action: str
    channel: str
    sign: Path | None
    new_key: Path | None
    timestamp_expiry: str | None


def cmd_trust(o: TrustOptions) -> int:
    from tfaot_dist.trust.commands import trust_command

    emit(o, *trust_command(o.action, o.channel, o.cache, o.sign, o.new_key, o.timestamp_expiry))
    return 0


@dataclass(frozen=True)
class RemoveOptions(Options):
    packages: list[str]
    area: Path | None
    dry_run: bool


def cmd_remove(o: RemoveOptions) -> int:
    import shutil

    from tfaot_dist.channels import setup_area

    area = _area(o.area)
    if area is None:
        raise UsageError("remove: give --area (or set CMSSW_BASE)")
    removed = setup_area.remove(o.packages, area, log, shutil.which("scram"), dry_run=o.dry_run)
    verb = "would remove" if o.dry_run else "removed"
    emit(
        o,
        {
            "area": str(area.absolute()),
            "dry_run": o.dry_run,
            "removed": [
                {"name": r.name, "version": r.version, "path": str(r.path), "scram": r.scram} for r in removed
            ],
        },
        "\n".join(
            f"{verb} {r.name} {r.version} ({r.path}){' and its scram tool' if r.scram else ''}"
            for r in removed
        ),
    )
    return 0


@dataclass(frozen=True)
class SetupOptions(Options):
    requirements: list[str]
    channel: str | None
    area: Path | None
    listing: bool
    offline: bool
    dry_run: bool
    repair: bool
    trust: Path | None


SETUP_WORDS = {
    "install": "would install",
    "upgrade": "would upgrade",
    "replace": "would replace",
    "keep": "already installed:",
}


def cmd_setup(o: SetupOptions) -> int:
    import shutil

    from tfaot_dist.channels import setup_area
    from tfaot_dist.channels.channel import open_channel
    from tfaot_dist.trust import verify

    area = _area(o.area)
    location = o.channel or os.environ.get("TFAOT_DIST_CHANNEL")
    if o.repair:
        if o.requirements or o.listing or area is None:
            raise UsageError("setup --repair takes only --area (or CMSSW_BASE)")
        dropped = setup_area.repair(area, log)
        emit(
            o,
            {"area": str(area.absolute()), "dropped": dropped},
            f"repaired {area}: " + (f"dropped {', '.join(dropped)}" if dropped else "nothing to drop"),
        )
        return 0
    if o.listing:
        if o.requirements:
            raise UsageError("setup --list takes no package names")
        if area is not None:
            rows = setup_area.list_installed(area)
            emit(
                o,
                {"area": str(area.absolute()), "packages": rows},
                "\n".join(f"{r['name']:40} {r['version']:28} {r['path']}" for r in rows)
                or "nothing installed",
            )
        elif location:
            listed = open_channel(location, o.cache, o.offline)
            index = listed.index
            broken = [{"name": b.name, "version": b.version, "reason": b.reason} for b in index.broken]
            signed = verify.signed_state(listed)
            emit(
                o,
                {
                    "channel": location,
                    "signed": signed,
                    "packages": [p.as_dict() for p in index.rows],
                    "broken": broken,
                },
                "\n".join(
                    ([f"{location}: {signed}"] if signed != "unsigned" else [])  # unsigned: as before
                    + [
                        f"{p.name:40} {p.version:28} {p.sha256[:12]}"
                        + (f"  yanked: {p.yanked}" if p.yanked else "")
                        for p in index.rows
                    ]
                    + [
                        f"{b['name'] or '?':40} {b['version'] or '?':28} broken: {b['reason']}"
                        for b in broken
                    ]
                ),
            )
        else:
            raise UsageError("setup --list: give --area (installed packages) or --channel (available ones)")
        return 0
    if not o.requirements:
        raise UsageError("setup: name at least one model, e.g. test-simple or 'test-simple>=1.0,<2'")
    if area is None:
        raise UsageError("setup: give --area (or set CMSSW_BASE)")
    if not location:
        raise UsageError("setup: give --channel (or set TFAOT_DIST_CHANNEL)")
    if o.trust is not None and o.offline:
        raise UsageError("setup --trust needs the channel's current signed metadata: not with --offline")
    ch = open_channel(location, o.cache, o.offline, log)
    if not o.offline:
        ch = verify.guard(ch, setup_area.area_root(area), o.trust)  # trust/verify.py
    elif verify.read_trusted(setup_area.area_root(area), ch) is not None:
        raise UsageError(f"setup --offline: this area trusts {location}'s signatures, which need it online")
    if o.dry_run:
        steps = setup_area.plan_setup(o.requirements, ch, area)
        emit(
            o,
            {
                "area": str(area.absolute()),
                "channel": location,
                "dry_run": True,
                "plan": [dataclasses.asdict(step) for step in steps],
            },
            "\n".join(
                f"{SETUP_WORDS[s.action]} {s.name} {s.version}"
                + (f" (removes {s.previous})" if s.previous else "")
                + (f" (yanked: {s.yanked})" if s.yanked else "")
                for s in steps
            ),
        )
        return 0
    scram = shutil.which("scram")
    report = setup_area.setup(o.requirements, ch, area, o.cache, o.offline, log, scram)
    if isinstance(ch, verify.SignedChannel):
        ch.keep()  # the metadata accepted, kept for the next setup (rollback protection)
    lines = [
        f"{r.name} {r.version}: {r.status}{f' (was {r.previous})' if r.previous else ''} ({r.path})"
        for r in report.results
    ]
    if report.scram:
        lines.append(f"registered with scram: {', '.join(Path(t).name for t in report.scram)}")
    elif report.environment and not scram:
        lines.append("scram is not on the PATH; for CMake, pkg-config or plain compilers add:")
        lines += [f"  {line}" for line in setup_area.export_lines(report.environment)]
        lines.append(f"  (or: source {setup_area.area_root(area) / 'env.sh'})")
    emit(
        o,
        {
            "area": str(area.absolute()),
            "channel": location,
            "results": [
                {
                    "name": r.name,
                    "version": r.version,
                    "status": r.status,
                    "path": str(r.path),
                    "previous": r.previous,
                }
                for r in report.results
            ],
            "scram": report.scram,
            "environment": report.environment,
        },
        "\n".join(lines),
    )
    return 0


@dataclass(frozen=True)
class CompileOptions(Options):
    aot_config: Path
    output_directory: Path
    name: str | None
    model_version: str | None
    batch_sizes: str | None
    cpu_levels: str | None
    toolchain_python: Path | None
    runtime: Path | None
    offline: bool


def cmd_compile(o: CompileOptions) -> int:
    from tfaot_dist import names

    sizes = _batch_sizes(o.batch_sizes)
    levels = names.cpu_levels(o.cpu_levels.split(","), "--cpu-levels") if o.cpu_levels else None
    package = builder.compile_config(
        o.aot_config.absolute(),
        _directory(o.output_directory),
        session_of(o, o.offline),
        o.name,
        o.model_version,
        sizes,
        o.toolchain_python,
        o.runtime,
        cpu_levels=levels,
    )
    emit(
        o,
        {
            "package": package.name,
            "version": package.version,
            "dir": str(package.root),
            "archive": str(package.archive),
            "sha256": package.archive_sha256,
        },
        f"compiled {package.name} {package.version} into {package.root}",
    )
    return 0


@dataclass(frozen=True)
class RuntimeOptions(Options):
    output_directory: Path
    toolchain_python: Path | None
    offline: bool


def cmd_runtime(o: RuntimeOptions) -> int:
    from tfaot_dist.cxx import runtime_package

    tools = session_of(o, o.offline).resolve(o.toolchain_python)
    package, status = runtime_package.ensure_runtime_package(tools.runtime, _directory(o.output_directory))
    emit(
        o,
        {
            "package": package.name,
            "version": package.version,
            "status": status,
            "dir": str(package.root),
            "archive": str(package.archive),
            "sha256": package.archive_sha256,
        },
        f"{package.name} {package.version}: {status} ({package.archive})",
    )
    return 0


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
        batch_sizes=_batch_sizes(o.batch_sizes) or starter.DEFAULT_BATCH_SIZES,
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


@dataclass(frozen=True)
class VerifyOptions(Options):
    name: str
    dist: Path
    rebuild: bool


def cmd_verify(o: VerifyOptions) -> int:
    from tfaot_dist import verify

    entry = Registry.existing(o.registry).entry(o.name)
    if o.rebuild:
        rebuilt = verify.rebuild_and_compare(entry, session_of(o), _directory(o.dist))
        data: dict[str, Any] = dataclasses.asdict(rebuilt)
        text = f"{entry.package} {entry.version}: rebuilt bit-identical ({rebuilt.archive_sha256})"
    else:
        package = verify.check_installed(entry, _directory(o.dist))
        verification = verify.check_numbers(package, session_of(o))
        report = verification.to_json()
        data = {
            "package": package.name,
            "version": package.version,
            "files": len(package.model_manifest.files),
            "verification": report,
        }
        worst = max((d.max_abs for d in verification.outputs.values()), default=0.0)
        text = (
            f"{package.name} {package.version}: {data['files']} files match the manifest; outputs agree with "
            f"TensorFlow at batch sizes {report['batch_sizes']} (max abs deviation {worst:.3g})"
        )
    emit(o, data, text)
    return 0


@dataclass(frozen=True)
class CacheOptions(Options):
    kinds: list[str]
    prune: bool
    older_than: float | None
    max_size: str | None
    dry_run: bool


def cmd_cache(o: CacheOptions) -> int:
    from tfaot_dist.cache import Cache
    from tfaot_dist.cache_admin import command as cache_command

    data, text = cache_command(Cache(o.cache), tuple(o.kinds), o.prune, o.older_than, o.max_size, o.dry_run)
    emit(o, data, text)
    return 0


@dataclass(frozen=True)
class ToolchainOptions(Options):
    python: bool
    listing: bool


def cmd_toolchain(o: ToolchainOptions) -> int:
    from tfaot_dist.toolchain import list_toolchains

    if o.listing:
        found = list_toolchains(o.cache)
        emit(
            o,
            [
                {
                    "key": t.key,
                    "root": str(t.root),
                    "requirements": list(t.requirements),
                    "tensorflow": t.tensorflow_version,
                }
                for t in found
            ],
            "\n".join(
                f"{t.key} tensorflow {t.tensorflow_version} ({' '.join(t.requirements)}) {t.root}"
                for t in found
            )
            or "no toolchain cached",
        )
        return 0
    toolchain = session_of(o).toolchain()
    if o.python:
        print(toolchain.python)
        return 0
    emit(
        o,
        {
            "key": toolchain.key,
            "root": str(toolchain.root),
            "python": str(toolchain.python),
            "requirements": list(toolchain.requirements),
            "installed": list(toolchain.installed),
        },
        f"{toolchain.key} {toolchain.root} (tensorflow {toolchain.tensorflow_version})",
    )
    return 0


@dataclass(frozen=True)
class SpecsOptions(Options):
    out: Path
    flavor: Literal["cmsbuild", "rpm", "cmsbuild-prebuilt"]
    channel: str | None
    check: bool
    sources: Path | None


def cmd_specs(o: SpecsOptions) -> int:
    from tfaot_dist.specs import flavors

    result = flavors.generate(
        Registry.existing(o.registry),
        o.flavor,
        _directory(o.out),
        check=o.check,
        sources=o.sources.absolute() if o.sources else None,
        log=log,
        channel=o.channel,
    )
    if o.check:
        text = "\n".join(f"stale: {o.out / rel}" for rel in result.stale) or f"{o.out}: up to date"
    else:
        text = "\n".join(f"wrote {o.out / rel}" for rel in result.written) or f"{o.out}: up to date"
    emit(o, result.as_dict(), text)
    return 1 if result.stale else 0


def _int_tuple_arg(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma separated integers, got {text!r}") from None


@dataclass(frozen=True)
class BenchOptions(Options):
    target: str
    out: Path
    dist: Path
    warmup: int
    calls: int
    batch_sizes: tuple[int, ...]
    instances: tuple[int, ...]
    engines: str
    rounds: int
    saved_model: Path | None
    tf_no_onednn: bool
    no_plots: bool


def cmd_bench(o: BenchOptions) -> int:
    from tfaot_dist.perf import bench

    protocol = bench.Protocol(
        warmup=o.warmup,
        calls=o.calls,
        batch_sizes=o.batch_sizes,
        instances=o.instances,
        engines=tuple(o.engines.split(",")),
        rounds=o.rounds,
        tf_onednn=not o.tf_no_onednn,
    )
    result = bench.bench_command(
        o.target,
        Registry(o.registry),
        session_of(o),
        o.dist,
        protocol,
        o.out.absolute(),
        o.saved_model,
        plots=not o.no_plots,
    )
    lines = [
        f"{result['package']} {result['version']}: per-event time [us] (compiled: "
        f"{','.join(map(str, result['compiled_batch_sizes']))})",
        *bench.table(result, o.batch_sizes),
    ]
    for engine, rows in result["memory"].items():
        base = result["memory_baseline"][engine]["vm_hwm_kb"]
        lines += [
            f"memory {engine}: {r['instances']} instance(s): peak RSS {r['vm_hwm_kb']} kB "
            f"({r['model_kb']} kB above the same program without a model, {base} kB), "
            f"heap {r['heap_bytes'] / 1024:.0f} kB"
            for r in rows
        ]
    lines.append(f"results: {result['json']}" + "".join(f"\nplot: {p}" for p in result.get("plots", [])))
    emit(o, result, "\n".join(lines))
    return 0


@dataclass(frozen=True)
class TuneOptions(Options):
    target: str
    targets: str
    out: Path
    dist: Path
    warmup: int
    calls: int
    dry_run: bool


def cmd_tune(o: TuneOptions) -> int:
    from tfaot_dist.perf import tune

    report = tune.tune_command(
        o.target,
        Registry(o.registry),
        session_of(o),
        o.dist,
        tune.parse_targets(o.targets),
        o.warmup,
        o.calls,
        o.out.absolute(),
        write=not o.dry_run,
    )
    lines = ["target  default rule -> tuned rule: measured speed-up"]
    for t, e in sorted(report["targets"].items(), key=lambda kv: int(kv[0])):
        if e.get("kept"):
            lines.append(
                f"{t:>6}  {tune.short(e['default_rule'])} -> {tune.short(e['tuned_rule'])}: "
                f"{e['speedup']:.2f}x"
            )
    lines.append(
        f"{len(report['rules'])} tuned rules; other targets keep the default rule ({report['json']})"
    )
    emit(o, report, "\n".join(lines))
    return 0


if TYPE_CHECKING:  # annotations only (they are not evaluated): the class is private
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def _command(
    sub: Subcommands,
    common: argparse.ArgumentParser,
    name: str,
    summary: str,
    description: str,
    examples: list[str],
) -> argparse.ArgumentParser:
    """A subcommand whose --help has a description, examples, the exit codes and the cache location."""
    import textwrap

    epilog = (
        "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + EXIT_CODES + "\n\n" + cache_note()
    )
    return sub.add_parser(
        name,
        parents=[common],
        help=summary,
        description=textwrap.fill(description, 79),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


# Measured: the README's main job on a fresh clone with an empty cache (the table "On a fresh machine").
FIRST_RUN = "about 4 minutes on 2 cores"


def cache_note() -> str:
    return (
        f"cache: {default_cache()}\n  ($TFAOT_DIST_CACHE, default ~/.cache/tfaot-dist): TensorFlow toolchains, the "
        "XLA runtime,\n  fetched sources and finished builds. Shared safely by concurrent runs (file locks);\n"
        f"  deleting it costs the first-run build again ({FIRST_RUN})."
    )


def _add_performance_commands(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    s = _command(
        sub,
        common,
        "bench",
        "time and memory of a package against TensorFlow",
        "Time a package's compiled model per batch size against a TensorFlow C API session of the same "
        "wheel and the Python call, and measure peak memory with several instances. Writes "
        "OUT/NAME.json and NAME_time.png / NAME_memory.png.",
        [
            "tfaot-dist bench test-simple",
            "tfaot-dist bench dist/tfaot-model-test-simple-1.0.0 --saved-model data/simple/saved_model",
            "tfaot-dist bench my/aot_config.yaml --calls 50 "
            "--warmup 10 --batch-sizes 1,8 --engines aot,tf-capi --no-plots",
        ],
    )
    s.add_argument(
        "target", metavar="NAME-OR-PATH", help="registry name, package directory or aot_config.yaml"
    )
    s.add_argument("--out", type=Path, default=Path("bench"), help="results directory (default: ./bench)")
    s.add_argument(
        "--dist", type=Path, default=Path("dist"), help="where packages are built (default: ./dist)"
    )
    s.add_argument("--warmup", type=int, default=100, help="warm-up calls per batch size (default: 100)")
    s.add_argument("--calls", type=int, default=500, help="timed calls per batch size (default: 500)")
    s.add_argument(
        "--batch-sizes",
        type=_int_tuple_arg,
        default=tuple(2**i for i in range(11)),
        help="batch sizes to time (default: 1,2,4,...,1024)",
    )
    s.add_argument(
        "--instances",
        type=_int_tuple_arg,
        default=(1, 4, 12),
        help="model instances per process for the memory measurement (default: 1,4,12)",
    )
    s.add_argument(
        "--engines", default="aot,tf-capi,ort,tf-python", help="subset of aot,tf-capi,ort,tf-python"
    )
    s.add_argument("--rounds", type=int, default=1, help="repeat the timings, keep the fastest (default: 1)")
    s.add_argument(
        "--saved-model", type=Path, help="the SavedModel of a package directory (TensorFlow engines)"
    )
    s.add_argument("--tf-no-onednn", action="store_true", help="run TensorFlow with TF_ENABLE_ONEDNN_OPTS=0")
    s.add_argument("--no-plots", action="store_true", help="write the JSON only")
    s.set_defaults(func=command(cmd_bench, BenchOptions))

    s = _command(
        sub,
        common,
        "tune",
        "measure and set the batch rules of a model",
        "Time each compiled batch size, pick the cheapest composition for every target batch size and "
        "keep only rules measured faster than the default. For a registry entry the rules are written "
        "to its overrides: batch_rules and the package is rebuilt.",
        [
            "tfaot-dist tune test-simple --targets 1-64",
            "tfaot-dist tune test-simple --targets 3,5,9-12 --dry-run",
            "tfaot-dist tune my/aot_config.yaml --calls 100 --warmup 10",
        ],
    )
    s.add_argument(
        "target", metavar="NAME-OR-PATH", help="registry name, package directory or aot_config.yaml"
    )
    s.add_argument(
        "--targets", default="1-64", help="target batch sizes, e.g. 1-64 or 3,5,9-12 (default: 1-64)"
    )
    s.add_argument("--out", type=Path, default=Path("bench"), help="report directory (default: ./bench)")
    s.add_argument(
        "--dist", type=Path, default=Path("dist"), help="where packages are built (default: ./dist)"
    )
    s.add_argument("--warmup", type=int, default=100, help="warm-up calls per measurement (default: 100)")
    s.add_argument("--calls", type=int, default=500, help="timed calls per measurement (default: 500)")
    s.add_argument("--dry-run", action="store_true", help="report only; leave the registry entry as it is")
    s.set_defaults(func=command(cmd_tune, TuneOptions))


def parser() -> argparse.ArgumentParser:
    # --registry and --json go before or after the command; the top level holds the defaults.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--registry", type=Path, default=argparse.SUPPRESS, help="registry directory (default: ./registry)"
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print results as JSON on stdout"
    )

    p = argparse.ArgumentParser(
        prog="tfaot-dist",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build, verify and distribute AOT compiled TensorFlow models as C++ packages.\n"
        "`tfaot-dist COMMAND --help` explains each command with examples.",
        epilog="a first session:\n  tfaot-dist init registry\n  tfaot-dist add-model my-model --source "
        "https://host/org/data.git --aot-config my/aot_config.yaml\n  tfaot-dist build --all\n"
        "  tfaot-dist publish --channel /srv/channel\n  tfaot-dist setup my-model --channel "
        "http://host/channel/ --area $CMSSW_BASE\n\n" + EXIT_CODES + "\n\n" + cache_note(),
    )
    p.add_argument("--version", action="version", version=f"tfaot-dist {__version__}")
    p.add_argument(
        "--registry", type=Path, default=Path("registry"), help="registry directory (default: ./registry)"
    )
    p.add_argument("--json", action="store_true", help="print results as JSON on stdout")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _command(
        sub,
        common,
        "init",
        "create an empty registry",
        "Create a registry directory: registry.yaml with the defaults (TensorFlow requirements, "
        "generic x86-64 target) and an empty models/. An existing registry is left as it is.",
        ["tfaot-dist init", "tfaot-dist init my-registry", "tfaot-dist --registry my-registry init"],
    )
    s.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        type=Path,
        help="where to create it (default: --registry, i.e. ./registry)",
    )
    s.set_defaults(func=command(cmd_init, InitOptions))

    s = _command(
        sub,
        common,
        "add-model",
        "register a model from a git data repository",
        "Resolve --ref to a commit, read the AOT config there, load the SavedModel with TensorFlow to "
        "check its signature and ops, and write models/NAME.yaml pinned to that commit. Creates the "
        "registry if it does not exist. Nothing is compiled yet (see build).",
        [
            "tfaot-dist add-model my-model --source https://github.com/org/data.git --ref v1 "
            "--aot-config my/aot_config.yaml",
            "tfaot-dist add-model my-model --source ../data-repo "
            "--aot-config my/aot_config.yaml --batch-sizes 1,2,4",
            "tfaot-dist add-model my-model "
            "--source git@host:org/data.git --aot-config cfg.yaml --version 1.1.0",
        ],
    )
    s.add_argument(
        "name",
        metavar="NAME",
        help="model name (lower case, digits, - and _): the package is tfaot-model-NAME",
    )
    s.add_argument(
        "--source",
        required=True,
        metavar="URL-OR-PATH",
        help="git repository: https://, ssh://, git://, file://, user@host:path, or a local path "
        "(recorded as file:// with its absolute path)",
    )
    s.add_argument("--ref", default="HEAD", help="branch, tag or commit to pin (default: HEAD)")
    s.add_argument(
        "--aot-config", required=True, metavar="PATH", help="path of aot_config.yaml inside the repository"
    )
    s.add_argument(
        "--version",
        dest="model_version",
        help="package version, PEP 440 (default: model.version of the AOT config)",
    )
    s.add_argument("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")
    s.set_defaults(func=command(cmd_add_model, AddModelOptions))

    s = _command(
        sub,
        common,
        "update",
        "re-pin a registered model (new commit, version or settings)",
        "Resolve the entry's ref again (or --ref), check the model there as add-model does, and "
        "rewrite models/NAME.yaml, printing each field that changed. The version is --version, else "
        "the AOT config's model.version when it is higher than the entry's, else the entry's with "
        "the next build number (1.0.0 -> 1.0.0.post1) when anything the package is built from "
        "changed: a published version never changes. A new build must keep the signature. Nothing "
        "changed: the entry is left as it is.",
        [
            "tfaot-dist update my-model                    # the branch's new head",
            "tfaot-dist update my-model --ref v2 --version 2.0.0",
            "tfaot-dist update my-model --new-build        # same inputs, built anew (e.g. new TensorFlow)",
        ],
    )
    s.add_argument("name", metavar="NAME", help="registered model name (see list)")
    s.add_argument("--ref", help="branch, tag or commit to pin (default: the entry's ref)")
    s.add_argument("--source", metavar="URL-OR-PATH", help="another git repository (default: the entry's)")
    s.add_argument("--aot-config", metavar="PATH", help="another AOT config path inside the repository")
    s.add_argument(
        "--version", dest="model_version", help="package version, PEP 440, higher than the entry's"
    )
    s.add_argument("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")
    s.add_argument(
        "--new-build",
        action="store_true",
        help="the next build number even if the inputs are the same (registry.yaml changed)",
    )
    s.set_defaults(func=command(cmd_update, UpdateOptions))

    s = _command(
        sub,
        common,
        "list",
        "list registered models",
        "One line per registry entry: name, version, pinned commit (or archive digest), source.",
        ["tfaot-dist list", "tfaot-dist --registry other/registry list --json"],
    )
    s.set_defaults(func=command(cmd_list, Options))

    s = _command(
        sub,
        common,
        "show",
        "show one registry entry",
        "The entry as the registry holds it, its package name and its build key (a digest of "
        "everything that goes into the package: a changed key means a rebuild).",
        ["tfaot-dist show test-simple", "tfaot-dist show test-simple --json"],
    )
    s.add_argument("name", metavar="NAME", help="registered model name (see list)")
    s.set_defaults(func=command(cmd_show, ShowOptions))

    s = _command(
        sub,
        common,
        "build",
        "compile and package models that changed",
        "Compile each named model (or --all) with XLA AOT for its batch sizes, verify the result "
        "against TensorFlow, and write tfaot-model-NAME-VERSION/ and its .tar.gz to --dist, together "
        "with the XLA runtime package. Unchanged models (same build key) come from the cache. The "
        "first build on a machine creates the TensorFlow toolchain and builds Abseil and the XLA "
        f"runtime ({FIRST_RUN}, network needed).",
        [
            "tfaot-dist build test-simple",
            "tfaot-dist build --all --jobs 2",
            "tfaot-dist build --all --shard 2/8 --dist out/",
        ],
    )
    s.add_argument("names", nargs="*", metavar="NAME", help="registered models to build (or --all)")
    s.add_argument("--all", action="store_true", help="every registered model")
    s.add_argument("--dist", type=Path, default=Path("dist"), help="output directory (default: ./dist)")
    s.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="models built at once (default: 1)")
    s.add_argument("--fail-fast", action="store_true", help="start no more builds after the first failure")
    s.add_argument("--shard", metavar="K/N", help="only the K-th of N shares (by sha256 of the name), for CI")
    s.add_argument("--offline", action="store_true", help="use the cache only; fail naming what is missing")
    s.set_defaults(func=command(cmd_build, BuildOptions))

    s = _command(
        sub,
        common,
        "publish",
        "add the package archives of a dist directory to a channel",
        "Verify every archive in --dist against its manifest and add it to the channel directory: "
        "packages/NAME/VERSION/, index.json and a browsable catalogue (index.html, one page per "
        "version). A published version never changes: the same bytes again are a no-op, other bytes "
        "exit 7. Serve the directory with any static HTTP server. An oci://HOST/NAMESPACE channel pushes "
        "each package as an OCI artifact and keeps the index as one (credentials: "
        "TFAOT_DIST_OCI_TOKEN, TFAOT_DIST_OCI_USERNAME; TFAOT_DIST_OCI_REGISTRY=HOST[:PORT] keeps the "
        "token for that registry alone).",
        [
            "tfaot-dist publish --channel /srv/channel --dist _work/dist",
            "python3 -m http.server -d /srv/channel 8000   # then open http://127.0.0.1:8000/",
            "tfaot-dist publish --channel oci://ghcr.io/OWNER/tfaot",
        ],
    )
    s.add_argument(
        "--channel",
        required=True,
        metavar="DIR|oci://HOST/NS",
        help="channel directory (serve it over HTTP as is) or oci://HOST[:PORT]/NAMESPACE",
    )
    s.add_argument(
        "--dist", type=Path, default=Path("dist"), help="directory of built packages (default: ./dist)"
    )
    s.add_argument(
        "packages",
        nargs="*",
        metavar="PACKAGE",
        help="only these archives of --dist (NAME or a specifier, e.g. 'my-model>=1.1'), with the "
        "runtimes they require (default: every archive)",
    )
    add_signing_options(s)
    s.set_defaults(func=command(cmd_publish, PublishOptions))

    s = _command(
        sub,
        common,
        "yank",
        "mark a published version as yanked (or take the mark back)",
        "Mark one version in the channel's index as yanked, with the reason: setup skips it for names "
        "and ranges and installs it only when it is pinned exactly (NAME==VERSION), with a warning "
        "naming the reason; the catalogue shows it struck through. The archive stays, so areas and "
        "builds that use it keep working. Directory and OCI channels.",
        [
            "tfaot-dist yank 'my-model==1.0.0' --reason 'wrong normalisation, use 1.0.1' --channel /srv/channel",
            "tfaot-dist yank my-model==1.0.0 --undo --channel oci://ghcr.io/OWNER/tfaot",
        ],
    )
    s.add_argument("requirement", metavar="NAME==VERSION", help="the version to yank")
    s.add_argument("--channel", required=True, metavar="DIR|oci://HOST/NS", help="the channel")
    s.add_argument("--reason", metavar="TEXT", help="why (one line, shown by setup and the catalogue)")
    s.add_argument("--undo", action="store_true", help="take the yank back")
    add_signing_options(s)
    s.set_defaults(func=command(cmd_yank, YankOptions))

    s = _command(
        sub,
        common,
        "keys",
        "make a key pair for signing a channel",
        "keys new PATH writes an ed25519 private key (PATH, mode 0600) and its public key (PATH.pub); "
        "it never overwrites a file. Keep the private key off the channel's host; in CI put its text "
        "in the secret TFAOT_DIST_SIGNING_KEY.",
        [
            "tfaot-dist keys new ~/.tfaot/channel.key",
            "tfaot-dist publish --channel /srv/channel --sign ~/.tfaot/channel.key",
        ],
    )
    s.add_argument("action", choices=["new"], help="new: a new key pair")
    s.add_argument(
        "path", type=Path, metavar="PATH", help="the private key's file (the public key: PATH.pub)"
    )
    s.set_defaults(func=command(cmd_keys, KeysOptions))

    s = _command(
        sub,
        common,
        "trust",
        "refresh a signed channel's timestamp, or rotate its root",
        "refresh-timestamp signs a new timestamp (run it on a schedule: an expired timestamp is refused "
        "by every area that trusts the channel); rotate hands the channel's root and online roles to "
        "--new-key's key, signed by the old key and the new one (trusting areas follow it; the same "
        "key twice renews the root).",
        [
            "tfaot-dist trust refresh-timestamp --channel /srv/channel --sign KEY --timestamp-expiry 2d",
            "tfaot-dist trust rotate --channel /srv/channel --sign OLD.key --new-key NEW.key",
        ],
    )
    s.add_argument(
        "action",
        choices=["refresh-timestamp", "rotate"],
        help="refresh-timestamp: a new signed timestamp; rotate: hand the root to --new-key",
    )
    s.add_argument("--channel", required=True, metavar="DIR", help="the channel directory")
    s.add_argument("--new-key", type=Path, metavar="KEY", help="rotate: the private key taking over")
    add_signing_options(s)
    s.set_defaults(func=command(cmd_trust, TrustOptions))

    s = _command(
        sub,
        common,
        "remove",
        "take packages out of a user area",
        "Remove installed packages from AREA/tfaot: their directories, tool files, CMake and "
        "pkg-config files, their lines in env.sh and installed.json, and, with scram on the PATH, "
        "`scram tool remove NAME` for tools scram had taken. A runtime an installed model still "
        "needs is refused.",
        [
            "tfaot-dist remove my-model --area $CMSSW_BASE",
            "tfaot-dist remove my-model --dry-run --area ~/area",
            "tfaot-dist remove my-model tfaot-xla-runtime --area ~/area",
        ],
    )
    s.add_argument(
        "packages",
        nargs="+",
        metavar="NAME",
        help="installed model name or package name "
        "(a specifier such as 'my-model==1.0' must match the installed version)",
    )
    s.add_argument("--area", type=Path, help="user area (default: $CMSSW_BASE)")
    s.add_argument("--dry-run", action="store_true", help="print what would be removed, change nothing")
    s.set_defaults(func=command(cmd_remove, RemoveOptions))

    s = _command(
        sub,
        common,
        "setup",
        "install models (and their runtime) from a channel",
        "Download the newest matching version of each model and the runtime it was verified with, "
        "check every file against the manifest, and install them under AREA/tfaot/ with SCRAM tool "
        "files, CMake configs, pkg-config files and env.sh.",
        [
            "tfaot-dist setup test-simple --channel http://127.0.0.1:8000/ --area $CMSSW_BASE",
            "tfaot-dist setup 'test-simple>=1.0,<2' --channel /srv/channel --area ~/area",
            "tfaot-dist setup --list --channel http://127.0.0.1:8000/   # what is available",
        ],
    )
    s.add_argument(
        "requirements",
        nargs="*",
        metavar="NAME",
        help="model name with optional PEP 440 version specifiers, e.g. test-simple or 'test-simple>=1.0,<2'",
    )
    s.add_argument(
        "--channel",
        metavar="URL-OR-DIR",
        help="channel: directory, file://, http(s):// (default: $TFAOT_DIST_CHANNEL)",
    )
    s.add_argument("--area", type=Path, help="user area (default: $CMSSW_BASE)")
    s.add_argument(
        "--list",
        dest="listing",
        action="store_true",
        help="list installed packages (--area) or available (--channel)",
    )
    s.add_argument("--offline", action="store_true", help="use the cache only; fail naming what is missing")
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be installed, upgraded or replaced (from the index), change nothing",
    )
    s.add_argument(
        "--repair",
        action="store_true",
        help="drop invalid rows of the area's installed.json and tidy the area to what it lists",
    )
    s.add_argument(
        "--trust",
        type=Path,
        metavar="ROOT.json",
        help="verify the channel's TUF metadata against this root (the area keeps it, and from then on "
        "refuses the channel's unsigned, tampered, rolled back or expired answers)",
    )
    s.set_defaults(func=command(cmd_setup, SetupOptions))

    s = _command(
        sub,
        common,
        "compile",
        "compile a local aot_config.yaml, no registry",
        "Compile and verify the model an AOT config describes, without a registry or git: the "
        "package directory tfaot-model-NAME-VERSION/ and its .tar.gz go to --output-directory. "
        "Registry defaults (TensorFlow version, target) are used when ./registry exists.",
        [
            "tfaot-dist compile --aot-config simple/aot_config.yaml --output-directory out/",
            "tfaot-dist compile --aot-config cfg.yaml --output-directory out/ --batch-sizes 1,8 "
            "--name my-model --version 0.1",
        ],
    )
    s.add_argument(
        "--aot-config",
        type=Path,
        required=True,
        metavar="FILE",
        help="the model's aot_config.yaml; the paths in it are relative to its directory",
    )
    s.add_argument(
        "--output-directory",
        type=Path,
        required=True,
        metavar="DIR",
        help="where the package directory and archive are written (created if missing)",
    )
    s.add_argument("--name", help="package is tfaot-model-NAME (default: model.name)")
    s.add_argument("--version", dest="model_version", help="package version (default: model.version)")
    s.add_argument("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")
    s.add_argument(
        "--cpu-levels", help="override compilation.cpu_levels (and clear target_cpu), e.g. x86-64,x86-64-v3"
    )
    s.add_argument(
        "--toolchain-python",
        type=Path,
        metavar="PATH",
        help="an existing Python with TensorFlow (installs nothing; default: the registry's "
        "toolchain.python)",
    )
    s.add_argument(
        "--runtime",
        type=Path,
        metavar="DIR",
        help="an installed XLA runtime, builds none: a "
        "tfaot-xla-runtime package, a runtime tree or a release's tensorflow-xla-runtime "
        "(lib/libtf_xla_runtime.so; Abseil from $ABSEIL_CPP_ROOT); default: the registry's "
        "toolchain.runtime",
    )
    s.add_argument(
        "--offline",
        action="store_true",
        help="download nothing: the cached toolchain and runtime, "
        "or --toolchain-python and --runtime (as the cmsBuild specs' %%build does); what is missing is "
        "named (exit 4)",
    )
    s.set_defaults(func=command(cmd_compile, CompileOptions))

    s = _command(
        sub,
        common,
        "runtime",
        "place the XLA runtime package in a directory",
        "Build (once, cached) the XLA AOT runtime library of the registry's TensorFlow version and "
        "write its package tfaot-xla-runtime-VERSION/ and .tar.gz. build does this too.",
        [
            "tfaot-dist runtime --output-directory dist/",
            "tfaot-dist --registry my-registry runtime --output-directory out/ --json",
        ],
    )
    s.add_argument(
        "--output-directory",
        type=Path,
        required=True,
        metavar="DIR",
        help="where the runtime package and archive are written",
    )
    s.add_argument(
        "--toolchain-python",
        type=Path,
        metavar="PATH",
        help="an existing Python with TensorFlow (installs nothing)",
    )
    s.add_argument(
        "--offline",
        action="store_true",
        help="download nothing: the cached toolchain (or "
        "--toolchain-python) and the Abseil sdist in the cache's downloads/ (as the cmsBuild spec puts "
        "it there); what is missing is named (exit 4)",
    )
    s.set_defaults(func=command(cmd_runtime, RuntimeOptions))

    s = _command(
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

    s = _command(
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

    s = _command(
        sub,
        common,
        "verify",
        "check a built package's files and numbers, or rebuild it and compare",
        "Without --rebuild: every file of the built package against its manifest, and its objects "
        "linked again into the verification harness to compare with TensorFlow. With --rebuild: build "
        "the entry again in a fresh cache and name the first file that differs.",
        ["tfaot-dist verify test-simple", "tfaot-dist verify test-simple --rebuild"],
    )
    s.add_argument("name", metavar="NAME", help="registered model name")
    s.add_argument("--dist", type=Path, default=Path("dist"), help="output directory (default: ./dist)")
    s.add_argument("--rebuild", action="store_true", help="rebuild from scratch and compare file by file")
    s.set_defaults(func=command(cmd_verify, VerifyOptions))

    s = _command(
        sub,
        common,
        "toolchain",
        "create (if needed) and show the TensorFlow toolchain",
        "The isolated venv with TensorFlow that compiles models (TensorFlow is never installed into "
        "tfaot-dist's own environment). Created on first use under CACHE/toolchains/KEY (about "
        "1.6 GB, a few minutes, network needed); KEY digests the requirements and the Python.",
        [
            "tfaot-dist toolchain",
            "$(tfaot-dist toolchain --python) -c 'import tensorflow'",
            '. "$(dirname "$(tfaot-dist toolchain --python)")/activate"; saved_model_cli --help',
        ],
    )
    s.add_argument("--python", action="store_true", help="print only the path of its Python")
    s.add_argument(
        "--list", dest="listing", action="store_true", help="list the cached toolchains (creates none)"
    )
    s.set_defaults(func=command(cmd_toolchain, ToolchainOptions))

    s = _command(
        sub,
        common,
        "cache",
        "show the cache's size per kind, or prune it",
        "The size of each kind of entry in the cache (tfaot_dist/cache_admin.py lists the kinds). "
        "--prune removes entries of the kinds given (default: all), with --older-than or --max-size "
        "only those; never one another process is making or using (it is listed as kept).",
        [
            "tfaot-dist cache",
            "tfaot-dist cache --prune builds logs --older-than 30",
            "tfaot-dist cache --prune --max-size 5G --dry-run",
        ],
    )
    s.add_argument("kinds", metavar="KIND", nargs="*", help=f"only these: {', '.join(CACHE_KINDS)}")
    s.add_argument("--prune", action="store_true", help="remove the entries of the kinds (default: all)")
    s.add_argument(
        "--older-than", type=float, metavar="DAYS", help="prune only entries not used for DAYS days"
    )
    s.add_argument(
        "--max-size", metavar="SIZE", help="prune the least recently used until the cache is SIZE (5G)"
    )
    s.add_argument("--dry-run", action="store_true", help="say what a prune would remove; remove nothing")
    s.set_defaults(func=command(cmd_cache, CacheOptions))

    s = _command(
        sub,
        common,
        "specs",
        "render cmsBuild or rpm specs of the registry",
        "Render the packaging specs of every registry entry from spec_templates/ (byte-identical for "
        "the same registry and history).",
        [
            "tfaot-dist specs --out specs/   # with --check: exit 1 if stale",
            "tfaot-dist specs --flavor rpm --out rpm-specs/ --sources dist/",
            "tfaot-dist specs --flavor cmsbuild-prebuilt --channel https://host/channel/ --out specs/",
        ],
    )
    s.add_argument("--out", type=Path, required=True, help="output directory of the specs")
    s.add_argument(
        "--flavor",
        choices=["cmsbuild", "rpm", "cmsbuild-prebuilt"],
        default="cmsbuild",
        help="cmsbuild: CMSDIST specs (default); rpm: standard rpm specs; cmsbuild-prebuilt: "
        "CMSDIST specs that install the verified archives of a channel (--channel)",
    )
    s.add_argument(
        "--channel",
        metavar="URL",
        help="cmsbuild-prebuilt: the http(s) URL of the channel the packages were published to",
    )
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 and list files that are stale")
    s.add_argument(
        "--sources",
        type=Path,
        metavar="DIST",
        help="rpm: verify the package archives in DIST and copy them into OUT/SOURCES",
    )
    s.set_defaults(func=command(cmd_specs, SpecsOptions))
    _add_performance_commands(sub, common)
    return p


# Commands that keep things in the cache (what is there is run, compiled in or installed).
USES_CACHE = {
    "cache",
    "add-model",
    "build",
    "setup",
    "compile",
    "runtime",
    "check",
    "verify",
    "toolchain",
    "bench",
    "tune",
}


def main(argv: list[str] | None = None) -> int:
    from tfaot_dist.cache import release_in_use, trusted_root

    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit:  # --help, or a usage error: argparse printed (stdout may be closed) and exits
        if not _flush_stdout():
            return errors.STDOUT_CLOSED
        raise
    args.cache = default_cache()
    made = False
    try:
        if args.command in USES_CACHE:
            made = not os.path.lexists(args.cache)
            trusted_root(args.cache)  # ours alone, or refused (cache.py)
        code: int = args.func(args)
        return code if _flush_stdout() else errors.STDOUT_CLOSED
    except TfaotError as exc:
        return _error_line(exc)
    except BrokenPipeError:  # what the command printed went to a reader that left (`| head -1`)
        _flush_stdout()
        return errors.STDOUT_CLOSED
    except OSError as exc:
        if exc.errno not in UNWRITABLE or exc.filename is None:
            return _unexpected(exc, argv, args.cache)
        # A place the command writes that cannot be written (a read-only file system, CVMFS): the
        # commands name their own targets where they can; this is the line for the others.
        return _error_line(InvalidInput(f"{exc.filename}: cannot write there ({exc.strerror})"))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # nothing expected it: one line, the traceback in a log
        return _unexpected(exc, argv, args.cache)
    finally:
        release_in_use()  # the entries this command used (cache.hold_in_use)
        if made:  # a cache this command made and left empty (it failed early, or needed nothing) goes
            with contextlib.suppress(OSError):
                args.cache.rmdir()


UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def _unexpected(exc: Exception, argv: list[str] | None, cache: Path) -> int:
    from tfaot_dist.process import unexpected

    _drop_unwritable_output()
    return _error_line(unexpected(exc, sys.argv[1:] if argv is None else argv, cache))


def _error_line(exc: TfaotError) -> int:
    # One line, whatever the message quotes (a line break in a value would start another).
    line = (
        shown(f"tfaot-dist: error: {exc}", MAX_ERROR, quote=False).replace("\r", "\\r").replace("\n", "\\n")
    )
    print(terminal(line), file=sys.stderr)
    return exc.exit_code


def _flush_stdout() -> bool:
    """Flush stdout; False when its reader has gone (`| head -1`). Then stdout is pointed at
    /dev/null, so that the interpreter's own flush at exit has nothing to complain about."""
    try:
        sys.stdout.flush()
        return True
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False


def _drop_unwritable_output() -> None:
    """Output that could not be written (a full disk, a closed pipe) is not tried again at exit,
    where Python would report it once more (and exit 120)."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
