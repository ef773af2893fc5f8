"""What every command shares: its options base class, printing (emit, log), the subcommand's --help
layout, and the one exit path (error line, exit code, closed or full stdout)."""

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
from typing import TYPE_CHECKING, Any, TypeVar

from tfaot_dist import errors
from tfaot_dist.cache import default_cache
from tfaot_dist.errors import InvalidInput, TfaotError
from tfaot_dist.session import Session
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


def area_of(area: Path | None) -> Path | None:
    """--area, else $CMSSW_BASE."""
    return area or (Path(os.environ["CMSSW_BASE"]) if os.environ.get("CMSSW_BASE") else None)


def directory(path: Path) -> Path:
    """A directory option (--dist, --output-directory, --out), absolute and resolved once: given as a
    link, the directory it points to from here on (locks and renames work on the directory itself)."""
    return path.resolve()


def int_list(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise InvalidInput(f"{option}: expected comma separated integers, got {text!r}") from None


def batch_sizes_option(text: str | None) -> tuple[int, ...] | None:
    """--batch-sizes, checked as compilation.batch_sizes is."""
    from tfaot_dist.config import batch_sizes

    return batch_sizes(int_list(text, "--batch-sizes"), "--batch-sizes") if text else None


if TYPE_CHECKING:  # annotations only (they are not evaluated): the class is private
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]


def add_command(
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


UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def unexpected(exc: Exception, argv: list[str] | None, cache: Path) -> int:
    from tfaot_dist.process import unexpected

    drop_unwritable_output()
    return error_line(unexpected(exc, sys.argv[1:] if argv is None else argv, cache))


def error_line(exc: TfaotError) -> int:
    # One line, whatever the message quotes (a line break in a value would start another).
    line = (
        shown(f"tfaot-dist: error: {exc}", MAX_ERROR, quote=False).replace("\r", "\\r").replace("\n", "\\n")
    )
    print(terminal(line), file=sys.stderr)
    return exc.exit_code


def flush_stdout() -> bool:
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


def drop_unwritable_output() -> None:
    """Output that could not be written (a full disk, a closed pipe) is not tried again at exit,
    where Python would report it once more (and exit 120)."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
