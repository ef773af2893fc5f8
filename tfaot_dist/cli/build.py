"""Commands that make packages: build (registry models), compile (a local AOT config), runtime, verify."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfaot_dist.cli.common import (
    FIRST_RUN,
    Options,
    arg,
    batch_sizes_option,
    command,
    directory,
    emit,
    log,
    session_of,
)
from tfaot_dist.errors import UsageError

if TYPE_CHECKING:  # annotations only: each command imports the modules it runs
    from tfaot_dist.builder import BuildResult
    from tfaot_dist.package import Package


@dataclass(frozen=True)
class BuildOptions(Options):
    names: list[str] = arg(nargs="*", metavar="NAME", help="registered models to build (or --all)")
    all: bool = arg("--all", action="store_true", help="every registered model")
    dist: Path = arg("--dist", type=Path, default=Path("dist"), help="output directory (default: ./dist)")
    jobs: int = arg(
        "--jobs", "-j", type=int, default=1, metavar="N", help="models built at once (default: 1)"
    )
    fail_fast: bool = arg(
        "--fail-fast", action="store_true", help="start no more builds after the first failure"
    )
    shard: str | None = arg(
        "--shard", metavar="K/N", help="only the K-th of N shares (by sha256 of the name), for CI"
    )
    offline: bool = arg(
        "--offline", action="store_true", help="use the cache only; fail naming what is missing"
    )


@command(
    "build",
    BuildOptions,
    summary="compile and package models that changed",
    description="Compile each named model (or --all) with XLA AOT for its batch sizes, verify the result "
    "against TensorFlow, and write tfaot-model-NAME-VERSION/ and its .tar.gz to --dist, together "
    "with the XLA runtime package. Unchanged models (same build key) come from the cache. The "
    "first build on a machine creates the TensorFlow toolchain and builds Abseil and the XLA "
    f"runtime ({FIRST_RUN}, network needed).",
    examples=(
        "tfaot-dist build test-simple",
        "tfaot-dist build --all --jobs 2",
        "tfaot-dist build --all --shard 2/8 --dist out/",
    ),
    uses_cache=True,
)
def cmd_build(o: BuildOptions) -> int:
    from tfaot_dist import scheduler
    from tfaot_dist.registry import Registry
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
        directory(o.dist),
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


def _package_json(package: Package) -> dict[str, str]:
    """What compile and runtime print of the package they made (a model's or the runtime's)."""
    return {
        "package": package.name,
        "version": package.version,
        "dir": str(package.root),
        "archive": str(package.archive),
        "sha256": package.archive_sha256,
    }


def _result_json(r: BuildResult) -> dict[str, str]:
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
class CompileOptions(Options):
    aot_config: Path = arg(
        "--aot-config",
        type=Path,
        required=True,
        metavar="FILE",
        help="the model's aot_config.yaml; the paths in it are relative to its directory",
    )
    output_directory: Path = arg(
        "--output-directory",
        type=Path,
        required=True,
        metavar="DIR",
        help="where the package directory and archive are written (created if missing)",
    )
    name: str | None = arg("--name", help="package is tfaot-model-NAME (default: model.name)")
    model_version: str | None = arg("--version", help="package version (default: model.version)")
    batch_sizes: str | None = arg("--batch-sizes", help="override compilation.batch_sizes, e.g. 1,2,4")
    cpu_levels: str | None = arg(
        "--cpu-levels", help="override compilation.cpu_levels (and clear target_cpu), e.g. x86-64,x86-64-v3"
    )
    toolchain_python: Path | None = arg(
        "--toolchain-python",
        type=Path,
        metavar="PATH",
        help="an existing Python with TensorFlow (installs nothing; default: the registry's "
        "toolchain.python)",
    )
    runtime: Path | None = arg(
        "--runtime",
        type=Path,
        metavar="DIR",
        help="an installed XLA runtime, builds none: a "
        "tfaot-xla-runtime package, a runtime tree or a release's tensorflow-xla-runtime "
        "(lib/libtf_xla_runtime.so; Abseil from $ABSEIL_CPP_ROOT); default: the registry's "
        "toolchain.runtime",
    )
    offline: bool = arg(
        "--offline",
        action="store_true",
        help="download nothing: the cached toolchain and runtime, "
        "or --toolchain-python and --runtime (as the cmsBuild specs' %%build does); what is missing is "
        "named (exit 4)",
    )


@command(
    "compile",
    CompileOptions,
    summary="compile a local aot_config.yaml, no registry",
    description="Compile and verify the model an AOT config describes, without a registry or git: the "
    "package directory tfaot-model-NAME-VERSION/ and its .tar.gz go to --output-directory. "
    "Registry defaults (TensorFlow version, target) are used when ./registry exists.",
    examples=(
        "tfaot-dist compile --aot-config simple/aot_config.yaml --output-directory out/",
        "tfaot-dist compile --aot-config cfg.yaml --output-directory out/ --batch-sizes 1,8 "
        "--name my-model --version 0.1",
    ),
    uses_cache=True,
)
def cmd_compile(o: CompileOptions) -> int:
    from tfaot_dist import builder, names

    sizes = batch_sizes_option(o.batch_sizes)
    levels = names.cpu_levels(o.cpu_levels.split(","), "--cpu-levels") if o.cpu_levels else None
    package = builder.compile_config(
        o.aot_config.absolute(),
        directory(o.output_directory),
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
        _package_json(package),
        f"compiled {package.name} {package.version} into {package.root}",
    )
    return 0


@dataclass(frozen=True)
class RuntimeOptions(Options):
    output_directory: Path = arg(
        "--output-directory",
        type=Path,
        required=True,
        metavar="DIR",
        help="where the runtime package and archive are written",
    )
    toolchain_python: Path | None = arg(
        "--toolchain-python",
        type=Path,
        metavar="PATH",
        help="an existing Python with TensorFlow (installs nothing)",
    )
    offline: bool = arg(
        "--offline",
        action="store_true",
        help="download nothing: the cached toolchain (or "
        "--toolchain-python) and the Abseil sdist in the cache's downloads/ (as the cmsBuild spec puts "
        "it there); what is missing is named (exit 4)",
    )


@command(
    "runtime",
    RuntimeOptions,
    summary="place the XLA runtime package in a directory",
    description="Build (once, cached) the XLA AOT runtime library of the registry's TensorFlow version and "
    "write its package tfaot-xla-runtime-VERSION/ and .tar.gz. build does this too.",
    examples=(
        "tfaot-dist runtime --output-directory dist/",
        "tfaot-dist --registry my-registry runtime --output-directory out/ --json",
    ),
    uses_cache=True,
)
def cmd_runtime(o: RuntimeOptions) -> int:
    from tfaot_dist.cxx import runtime_package

    tools = session_of(o, o.offline).resolve(o.toolchain_python)
    package, status = runtime_package.ensure_runtime_package(tools.runtime, directory(o.output_directory))
    emit(
        o,
        {**_package_json(package), "status": status},
        f"{package.name} {package.version}: {status} ({package.archive})",
    )
    return 0


@dataclass(frozen=True)
class VerifyOptions(Options):
    name: str = arg(metavar="NAME", help="registered model name (with --provenance: a package archive)")
    dist: Path = arg("--dist", type=Path, default=Path("dist"), help="output directory (default: ./dist)")
    rebuild: bool = arg(
        "--rebuild", action="store_true", help="rebuild from scratch and compare file by file"
    )
    provenance: Path | None = arg(
        "--provenance",
        type=Path,
        metavar="ENVELOPE",
        help="check the archive NAME against this signed provenance (provenance.dsse.json of a signed channel)",
    )
    key: list[Path] | None = arg(
        "--key",
        type=Path,
        action="append",
        metavar="KEY.pub",
        help="--provenance: a public key that may have signed it (repeatable: any one of them)",
    )


@command(
    "verify",
    VerifyOptions,
    summary="check a built package's files and numbers, or rebuild it and compare",
    description="Without --rebuild: every file of the built package against its manifest, and its objects "
    "linked again into the verification harness to compare with TensorFlow. With --rebuild: build "
    "the entry again in a fresh cache and name the first file that differs. With --provenance: NAME is a "
    "package archive, checked against its manifest and the signed provenance (in-toto, SLSA) a signed "
    "channel publishes beside it: signed by a --key, naming the archive's sha256.",
    examples=(
        "tfaot-dist verify test-simple",
        "tfaot-dist verify test-simple --rebuild",
        "tfaot-dist verify tfaot-model-x-1.0.tar.gz --provenance provenance.dsse.json --key channel.key.pub",
    ),
    uses_cache=True,
)
def cmd_verify(o: VerifyOptions) -> int:
    from tfaot_dist import verify
    from tfaot_dist.registry import Registry

    if o.provenance is not None or o.key:
        from tfaot_dist.trust.commands import verify_provenance  # cryptography: only for this check

        if o.rebuild or o.provenance is None:
            raise UsageError(
                "--provenance ENVELOPE --key KEY.pub checks an archive: no --rebuild, both options"
            )
        emit(o, *verify_provenance(Path(o.name), o.provenance, o.key or []))
        return 0
    entry = Registry.existing(o.registry).entry(o.name)
    if o.rebuild:
        rebuilt = verify.rebuild_and_compare(entry, session_of(o), directory(o.dist))
        data: dict[str, Any] = dataclasses.asdict(rebuilt)
        text = f"{entry.package} {entry.version}: rebuilt bit-identical ({rebuilt.archive_sha256})"
    else:
        package = verify.check_installed(entry, directory(o.dist))
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
