"""Escaping free text for each target file, and the Jinja2 environment for specs, CMake and pkg-config files.

Identifiers (names, versions, refs, commits, paths, URLs) are validated against
strict patterns before they reach a template (names.py, specs.spec_url); free
text (commit subjects, author names, model descriptions) cannot be validated,
so it is escaped here for the file it lands in:

    spec_text()        rpm/cmsBuild specs: "%" doubled (no macro), one line
    pkgconfig_text()   .pc files: no "$" (variables), "#" (comments), "\\" (continuations)
    one_line()         every target: control characters, line breaks included, become spaces
    shown()            a value quoted in an error message: repr, at most MAX_TEXT characters
    terminal()         anything printed: control characters escaped (line breaks and tabs kept), and
                       under GitHub Actions no line can be read as a workflow command (actions_safe)
    did_you_mean()     the end of an error about an unknown name: the closest known ones

The environment's finalize hook refuses any value holding a line break, so a
value that skipped its check still cannot add a line to a spec or a shell
script.
"""

from __future__ import annotations

import difflib
import os
import re
import reprlib
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: Jinja2 loads when something is rendered (environment())
    import jinja2

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
_PKGCONFIG_SPECIAL = re.compile(r"[$#\\]")
MAX_TEXT = 200


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    """Control characters (line breaks included) become spaces; long text is cut."""
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def shown(value: object, limit: int = MAX_TEXT, quote: bool = True) -> str:
    """A value as an error message quotes it: its repr (or the text itself), cut to limit characters,
    so that no document can blow up a message (a YAML alias bomb, a 1 MB string)."""
    if isinstance(value, str):
        value = value[: limit + 1]
    text = _SHORT_REPR.repr(value) if quote else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_SHORT_REPR = reprlib.Repr()  # bounded at every level (Python 3.11 takes no arguments here)
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxlong, _SHORT_REPR.maxother = (
    3,
    MAX_TEXT,
    60,
    MAX_TEXT,
)
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def terminal(text: str) -> str:
    """Text for a terminal: control characters (escape sequences, carriage returns) become \\xNN;
    under GitHub Actions, each line is also made inert for the runner (actions_safe)."""
    text = _TERMINAL_CONTROL.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )
    return actions_safe(text) if under_actions() else text


def under_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def actions_safe(text: str) -> str:
    """Each line of text as the GitHub Actions runner must not read it as a workflow command: the
    runner takes `##[cmd]` anywhere in a line and `::cmd::` after leading white space, so "##["
    becomes "# #[" and a leading "::" becomes ": :" (our own commands are written by progress.py)."""
    out = []
    for line in text.split("\n"):
        line = line.replace("##[", "# #[")
        rest = line.lstrip()
        if rest.startswith("::"):
            line = line[: len(line) - len(rest)] + ": :" + rest[2:]
        out.append(line)
    return "\n".join(out)


def actions_json(text: str) -> str:
    """A JSON document printed under GitHub Actions: "##[" inside strings written as "#\\u0023[" (the
    same JSON value); json.dumps escapes line breaks and no line of it starts with "::"."""
    return text.replace("##[", "#\\u0023[") if under_actions() else text


def spec_text(text: str, limit: int = MAX_TEXT) -> str:
    """Free text for a spec line: rpm expands every "%", "%%" is a literal one."""
    return one_line(text, limit).replace("%", "%%")


def pkgconfig_text(text: str, limit: int = MAX_TEXT) -> str:
    """Free text for a pkg-config field: "$" expands, "#" comments, "\\" continues; all become "_"."""
    return _PKGCONFIG_SPECIAL.sub("_", one_line(text, limit))


def _single_line(value: object) -> object:
    if isinstance(value, str) and ("\n" in value or "\r" in value):
        raise ValueError(f"refusing to render a value with a line break: {value[:60]!r}")
    return value


@cache
def environment() -> jinja2.Environment:
    """Specs (spec_templates/), CMake and pkg-config files (package_templates/): no autoescape (none
    of them is XML), one line per value."""
    from tfaot_dist.util.render import make_environment, package_templates_dir, spec_templates_dir

    return make_environment(
        [spec_templates_dir(), package_templates_dir()], autoescape=False, finalize=_single_line
    )


def render(template: str, **context: object) -> str:
    return environment().get_template(template).render(**context)


def did_you_mean(name: str, known: list[str], listing: str) -> str:
    """The end of an error about an unknown name: the closest known names, else the command that lists them."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.7)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return f" (all names: {listing})"
