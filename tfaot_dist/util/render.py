"""Every Jinja2 environment of tfaot-dist (one factory), and the package templates.

Two template folders, installed as package data:

    package_templates/   files inside packages: model.h, tool files, CMake and pkg-config
                         files, the verification harness, the benchmark (their digest is
                         part of every build key)
    spec_templates/      cmsBuild and rpm specs, CMSDIST tool files (their changes raise
                         the specs' Release, see release.py)

environment() below renders the package templates: XML templates are
autoescaped (entities for & < > " '), so free text cannot add an element or
attribute; all other values were validated before they got here. textsafe.py
builds the one-line environment of specs, CMake and pkg-config files, and
catalogue.py the HTML one, with the same factory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from tfaot_dist import __version__


def package_templates_dir() -> Path:
    return Path(str(resources.files("tfaot_dist.package_templates")))


def spec_templates_dir() -> Path:
    return Path(str(resources.files("tfaot_dist.spec_templates")))


def make_environment(
    folders: list[Path],
    *,
    autoescape: bool | Callable[[str | None], bool],
    finalize: Callable[[Any], Any] | None = None,
    keep_trailing_newline: bool = True,
) -> jinja2.Environment:
    """A Jinja2 environment as every one of tfaot-dist is: an undefined value is an error, block
    tags leave no blank lines. folders: where templates are looked up ([] for from_string only)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders) if folders else None,
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        finalize=finalize,
        keep_trailing_newline=keep_trailing_newline,
        trim_blocks=True,
        lstrip_blocks=True,
    )


@cache
def environment() -> jinja2.Environment:
    autoescape = jinja2.select_autoescape(
        enabled_extensions=("xml.j2",), default_for_string=False, default=False
    )
    return make_environment([package_templates_dir()], autoescape=autoescape)


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(tfaot_dist_version=__version__, **context)


MODEL_HEADER_KEYS = frozenset(
    {
        "package",
        "namespace",
        "class_name",
        "batch_sizes",
        "inputs",
        "outputs",
        "default_rules",
        "tfaot_dist_version",
    }
)


# Optional, with their defaults: a single-target package for the generic CPU.
MODEL_HEADER_OPTIONAL = {"cpu_levels": [], "target_cpu": ""}


def render_model_header(context: dict[str, Any]) -> str:
    """PACKAGE/model.h, the wrapper class of tfaot::Model<W> (contract in runtime/include/tfaot/Model.h).

    context: package, namespace, class_name, batch_sizes (sorted), inputs and
    outputs ([{name, dtype, shape}] in positional order), default_rules ("5:2,2,2"),
    tfaot_dist_version; optionally cpu_levels (validated level names, lowest first)
    or target_cpu. Raises KeyError for missing or unknown keys.
    """
    missing = MODEL_HEADER_KEYS - context.keys()
    unknown = context.keys() - MODEL_HEADER_KEYS - MODEL_HEADER_OPTIONAL.keys()
    if missing or unknown:
        raise KeyError(f"model.h context: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return environment().get_template("model.h.j2").render(**{**MODEL_HEADER_OPTIONAL, **context})


def templates_digest(names: Iterable[str]) -> str:
    """Digest of the named package templates (their names and bytes, not their folder): part of each build key."""
    h = hashlib.sha256()
    root = package_templates_dir()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()
