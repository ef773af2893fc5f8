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
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tfaot_dist import errors
from tfaot_dist.cache import default_cache
from tfaot_dist.errors import InvalidInput, TfaotError
from tfaot_dist.util.textsafe import actions_json, shown, terminal

if TYPE_CHECKING:  # annotations only: a session's toolchain and runtime modules load when a command makes one
    from tfaot_dist.session import Session

MAX_ERROR = 2000  # an error line quotes values cut to ~200 characters; this bounds the whole line


def log(message: str) -> None:
    print(terminal(f"tfaot-dist: {message}"), file=sys.stderr, flush=True)


OptionsT = TypeVar("OptionsT", bound="Options")
ARGUMENT = "tfaot_dist.cli.argument"  # the key of a field's argparse declaration in its metadata


@dataclass(frozen=True)
class Argument:
    """How a field of a command's options is given on the command line (see arg)."""

    flags: tuple[str, ...]  # none: a positional argument, named as the field
    keywords: dict[str, Any]  # argparse's: help, type, default, metavar, action, nargs, ...
    exclusive: str | None  # the fields that name the same group exclude each other (a command's modes)


def arg(*flags: str, exclusive: str | None = None, **keywords: Any) -> Any:
    """A field of a command's options, declared with its argparse flags and keywords (its value is the
    parsed argument: the field's name is its dest)."""
    return dataclasses.field(metadata={ARGUMENT: Argument(flags, keywords, exclusive)})


@dataclass(frozen=True)
class Options:
    """What every command has: --registry, --json, and the cache ($TFAOT_DIST_CACHE).

    A command's options subclass it; their fields, declared with arg(), are the command's arguments,
    in the order its --help lists them."""

    registry: Path
    json: bool
    cache: Path

    @classmethod
    def of(cls: type[OptionsT], namespace: argparse.Namespace) -> OptionsT:
        return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The arguments the fields declare (not --registry and --json: the common parser has them)."""
        groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
        for f in dataclasses.fields(cls):
            argument: Argument | None = f.metadata.get(ARGUMENT)
            if argument is None:
                continue
            to: argparse._ActionsContainer = parser
            if argument.exclusive:
                if argument.exclusive not in groups:
                    groups[argument.exclusive] = parser.add_mutually_exclusive_group()
                to = groups[argument.exclusive]
            if argument.flags:
                to.add_argument(*argument.flags, dest=f.name, **argument.keywords)
            else:
                to.add_argument(f.name, **argument.keywords)


@dataclass(frozen=True)
class Command(Generic[OptionsT]):
    """A subcommand: its name and --help texts, its options (their fields are its arguments) and the
    function that runs it."""

    name: str
    options: type[OptionsT]
    run: Callable[[OptionsT], int]
    summary: str  # its line in `tfaot-dist --help`
    description: str
    examples: tuple[str, ...]
    uses_cache: bool  # keeps things in the cache (what is there is run, compiled in or installed)

    def __call__(self, namespace: argparse.Namespace) -> int:
        return self.run(self.options.of(namespace))

    def add_to(self, sub: Subcommands, common: argparse.ArgumentParser) -> None:
        """Its parser, whose --help has the description, the examples, the exit codes and the cache."""
        epilog = (
            "examples:\n"
            + "\n".join(f"  {e}" for e in self.examples)
            + "\n\n"
            + EXIT_CODES
            + "\n\n"
            + cache_note()
        )
        parser = sub.add_parser(
            self.name,
            parents=[common],
            help=self.summary,
            description=textwrap.fill(self.description, 79),
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.options.add_arguments(parser)
        parser.set_defaults(func=self)


def command(
    name: str,
    options: type[OptionsT],
    *,
    summary: str,
    description: str,
    examples: tuple[str, ...],
    uses_cache: bool = False,
) -> Callable[[Callable[[OptionsT], int]], Command[OptionsT]]:
    """The function it decorates as the subcommand NAME (see Command)."""
    return lambda run: Command(name, options, run, summary, description, examples, uses_cache)


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
    from tfaot_dist.session import Session

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


# Measured: the README's main job on a fresh clone with an empty cache (the table "On a fresh machine").
FIRST_RUN = "about 4 minutes on 2 cores"


def cache_note() -> str:
    return (
        f"cache: {default_cache()}\n  ($TFAOT_DIST_CACHE, default ~/.cache/tfaot-dist): TensorFlow toolchains, the "
        "XLA runtime,\n  fetched sources and finished builds. Shared safely by concurrent runs (file locks);\n"
        f"  deleting it costs the first-run build again ({FIRST_RUN})."
    )


UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def exit_code(run: Callable[[], int], argv: list[str] | None, cache: Path) -> int:
    """The one exit path: run's code, or one error line and the code of its error."""
    try:
        code = run()
        return code if flush_stdout() else errors.STDOUT_CLOSED
    except TfaotError as exc:
        return _error_line(exc)
    except BrokenPipeError:  # what the command printed went to a reader that left (`| head -1`)
        flush_stdout()
        return errors.STDOUT_CLOSED
    except OSError as exc:
        if exc.errno not in UNWRITABLE or exc.filename is None:
            return _unexpected(exc, argv, cache)
        # A place the command writes that cannot be written (a read-only file system, CVMFS): the
        # commands name their own targets where they can; this is the line for the others.
        return _error_line(InvalidInput(f"{exc.filename}: cannot write there ({exc.strerror})"))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # nothing expected it: one line, the traceback in a log
        return _unexpected(exc, argv, cache)


def _unexpected(exc: Exception, argv: list[str] | None, cache: Path) -> int:
    from tfaot_dist.process import unexpected  # its log's modules: only when something went wrong

    _drop_unwritable_output()
    return _error_line(unexpected(exc, sys.argv[1:] if argv is None else argv, cache))


def _error_line(exc: TfaotError) -> int:
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


def _drop_unwritable_output() -> None:
    """Output that could not be written (a full disk, a closed pipe) is not tried again at exit,
    where Python would report it once more (and exit 120)."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
