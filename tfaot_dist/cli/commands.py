"""The command line: parser() with every command in the order --help lists them, and main()."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

from tfaot_dist import __version__, errors
from tfaot_dist.cache import default_cache
from tfaot_dist.cli import build, cache, distribution, install, model, perf, registry
from tfaot_dist.cli.common import EXIT_CODES, UNWRITABLE, cache_note, error_line, flush_stdout, unexpected
from tfaot_dist.errors import InvalidInput, TfaotError


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
    registry.add_init(sub, common)
    registry.add_add_model(sub, common)
    registry.add_update(sub, common)
    registry.add_list(sub, common)
    registry.add_show(sub, common)
    build.add_build(sub, common)
    distribution.add_publish(sub, common)
    distribution.add_yank(sub, common)
    install.add_remove(sub, common)
    install.add_setup(sub, common)
    build.add_compile(sub, common)
    build.add_runtime(sub, common)
    model.add_check(sub, common)
    model.add_init_config(sub, common)
    build.add_verify(sub, common)
    cache.add_toolchain(sub, common)
    cache.add_cache(sub, common)
    distribution.add_specs(sub, common)
    perf.add_bench(sub, common)
    perf.add_tune(sub, common)
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
        if not flush_stdout():
            return errors.STDOUT_CLOSED
        raise
    args.cache = default_cache()
    made = False
    try:
        if args.command in USES_CACHE:
            made = not os.path.lexists(args.cache)
            trusted_root(args.cache)  # ours alone, or refused (cache.py)
        code: int = args.func(args)
        return code if flush_stdout() else errors.STDOUT_CLOSED
    except TfaotError as exc:
        return error_line(exc)
    except BrokenPipeError:  # what the command printed went to a reader that left (`| head -1`)
        flush_stdout()
        return errors.STDOUT_CLOSED
    except OSError as exc:
        if exc.errno not in UNWRITABLE or exc.filename is None:
            return unexpected(exc, argv, args.cache)
        # A place the command writes that cannot be written (a read-only file system, CVMFS): the
        # commands name their own targets where they can; this is the line for the others.
        return error_line(InvalidInput(f"{exc.filename}: cannot write there ({exc.strerror})"))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # nothing expected it: one line, the traceback in a log
        return unexpected(exc, argv, args.cache)
    finally:
        release_in_use()  # the entries this command used (cache.hold_in_use)
        if made:  # a cache this command made and left empty (it failed early, or needed nothing) goes
            with contextlib.suppress(OSError):
                args.cache.rmdir()
