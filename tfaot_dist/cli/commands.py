"""The command line: every command, in the order `tfaot-dist --help` lists them; parser() and main().

A command's own modules (the registry, builder, channels, install, trust, check, scheduler, ...) are imported
inside its function, and types only its annotations name under `if TYPE_CHECKING:`: the cli modules import
only what declaring their options needs, so `--version`, `--help` and a usage error load none of them, `list`
only the registry, and each command what it runs (tests/test_cli_imports.py checks the light ones; the
documentation's code map has the figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from tfaot_dist import __version__, errors
from tfaot_dist.cache import default_cache, release_in_use, trusted_root
from tfaot_dist.cli import build, cache, distribution, install, model, perf, registry, trust
from tfaot_dist.cli.common import EXIT_CODES, Command, cache_note, exit_code, flush_stdout

COMMANDS: tuple[Command[Any], ...] = (
    registry.cmd_init,
    registry.cmd_add_model,
    registry.cmd_update,
    registry.cmd_list,
    registry.cmd_show,
    build.cmd_build,
    distribution.cmd_publish,
    distribution.cmd_yank,
    trust.cmd_keys,
    trust.cmd_trust,
    install.cmd_remove,
    install.cmd_setup,
    build.cmd_compile,
    build.cmd_runtime,
    model.cmd_check,
    model.cmd_init_config,
    build.cmd_verify,
    cache.cmd_toolchain,
    cache.cmd_cache,
    distribution.cmd_specs,
    perf.cmd_bench,
    perf.cmd_tune,
)


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given argv, only the command it names (when it names one plainly: then no
    other command can be what argparse reads or shows). Declaring all of them takes 14 ms, and every
    command line pays it."""
    chosen = command_named(argv) if argv is not None else None
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
    for c in COMMANDS:
        if chosen is None or c.name == chosen:
            c.add_to(sub, common)
    return p


def command_named(argv: list[str]) -> str | None:
    """The command argv runs, read as the top level reads it (--registry PATH and --json may come
    first); None when that is not plain (then every command is declared and argparse decides)."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--registry":
            i += 2
        elif word == "--json" or word.startswith("--registry="):
            i += 1
        elif word.startswith("-"):
            return None  # --help, --version, or a mistake argparse names
        else:
            return word if word in {c.name for c in COMMANDS} else None
    return None


def main(argv: list[str] | None = None) -> int:
    p = parser(sys.argv[1:] if argv is None else argv)
    try:
        args = p.parse_args(argv)
    except SystemExit:  # --help, or a usage error: argparse printed (stdout may be closed) and exits
        if not flush_stdout():
            return errors.STDOUT_CLOSED
        raise
    args.cache = default_cache()
    chosen: Command[Any] = args.func
    made = chosen.uses_cache and not os.path.lexists(args.cache)

    def run() -> int:
        if chosen.uses_cache:
            trusted_root(args.cache)  # ours alone, or refused (cache.py)
        return chosen(args)

    try:
        return exit_code(run, argv, args.cache)
    finally:
        release_in_use()  # the entries this command used (cache.hold_in_use)
        if made:  # a cache this command made and left empty (it failed early, or needed nothing) goes
            with contextlib.suppress(OSError):
                args.cache.rmdir()
