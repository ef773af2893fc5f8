"""Jinja2 rendering of everything generated from templates in spec_templates/.

XML templates are autoescaped (entities for & < > " '), so free text cannot add
an element or attribute; all other values were validated before they got here.
"""

import hashlib
from collections.abc import Iterable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from tfaot_dist import __version__


def templates_dir() -> Path:
    return Path(str(resources.files("tfaot_dist.spec_templates")))


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir()),
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(enabled_extensions=("xml.j2",), default_for_string=False,
                                            default=False),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(tfaot_dist_version=__version__, **context)


MODEL_HEADER_KEYS = frozenset(
    {"package", "namespace", "class_name", "batch_sizes", "inputs", "outputs", "default_rules", "tfaot_dist_version"}
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
    """Digest of the named templates (those that shape a package): part of each build key."""
    h = hashlib.sha256()
    root = templates_dir()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()
