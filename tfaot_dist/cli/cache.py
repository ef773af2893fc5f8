"""Commands on the cache: cache (sizes, prune), toolchain (the cached TensorFlow venvs)."""

from __future__ import annotations

from dataclasses import dataclass

from tfaot_dist.cache import Cache
from tfaot_dist.cache_admin import KINDS as CACHE_KINDS
from tfaot_dist.cache_admin import command as cache_command
from tfaot_dist.cli.common import Options, arg, command, emit, session_of


@dataclass(frozen=True)
class CacheOptions(Options):
    kinds: list[str] = arg(metavar="KIND", nargs="*", help=f"only these: {', '.join(CACHE_KINDS)}")
    prune: bool = arg("--prune", action="store_true", help="remove the entries of the kinds (default: all)")
    older_than: float | None = arg(
        "--older-than", type=float, metavar="DAYS", help="prune only entries not used for DAYS days"
    )
    max_size: str | None = arg(
        "--max-size", metavar="SIZE", help="prune the least recently used until the cache is SIZE (5G)"
    )
    dry_run: bool = arg(
        "--dry-run", action="store_true", help="say what a prune would remove; remove nothing"
    )


@command(
    "cache",
    CacheOptions,
    summary="show the cache's size per kind, or prune it",
    description="The size of each kind of entry in the cache (tfaot_dist/cache_admin.py lists the kinds). "
    "--prune removes entries of the kinds given (default: all), with --older-than or --max-size "
    "only those; never one another process is making or using (it is listed as kept).",
    examples=(
        "tfaot-dist cache",
        "tfaot-dist cache --prune builds logs --older-than 30",
        "tfaot-dist cache --prune --max-size 5G --dry-run",
    ),
    uses_cache=True,
)
def cmd_cache(o: CacheOptions) -> int:

    data, text = cache_command(Cache(o.cache), tuple(o.kinds), o.prune, o.older_than, o.max_size, o.dry_run)
    emit(o, data, text)
    return 0


@dataclass(frozen=True)
class ToolchainOptions(Options):
    python: bool = arg(
        "--python", exclusive="mode", action="store_true", help="print only the path of its Python"
    )
    listing: bool = arg(
        "--list", exclusive="mode", action="store_true", help="list the cached toolchains (creates none)"
    )


@command(
    "toolchain",
    ToolchainOptions,
    summary="create (if needed) and show the TensorFlow toolchain",
    description="The isolated venv with TensorFlow that compiles models (TensorFlow is never installed into "
    "tfaot-dist's own environment). Created on first use under CACHE/toolchains/KEY (about "
    "1.6 GB, a few minutes, network needed); KEY digests the requirements and the Python.",
    examples=(
        "tfaot-dist toolchain",
        "$(tfaot-dist toolchain --python) -c 'import tensorflow'",
        '. "$(dirname "$(tfaot-dist toolchain --python)")/activate"; saved_model_cli --help',
    ),
    uses_cache=True,
)
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
