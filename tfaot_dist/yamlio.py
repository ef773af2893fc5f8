"""Reading YAML mappings with errors that name the file and the field."""

from pathlib import Path

import yaml

from tfaot_dist.errors import InvalidInput


def load_mapping(path: Path, label: str | None = None) -> dict:
    """The mapping in a YAML file; errors name it as label (default: its path)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InvalidInput(f"{label or path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{label or path}: cannot read: {exc}") from None
    path = label or path
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InvalidInput(f"{path}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping at the top level")
    return data


class Fields:
    """Take typed fields out of one mapping; leftovers are unknown keys."""

    def __init__(self, data, file: Path | str, prefix: str = ""):
        self.file, self.prefix = file, prefix
        if not isinstance(data, dict):
            raise InvalidInput(f"{file}: {prefix or 'top level'}: expected a mapping")
        self.data = dict(data)

    def at(self, key: str) -> str:
        """How error messages name a field: 'FILE: section.key'."""
        return f"{self.file}: {self.prefix}.{key}" if self.prefix else f"{self.file}: {key}"

    def take(self, key: str, kind: type | tuple, default=..., required: bool = False):
        if key not in self.data:
            if required or default is ...:
                raise InvalidInput(f"{self.at(key)}: required field is missing")
            return default
        value = self.data.pop(key)
        if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
            raise InvalidInput(f"{self.at(key)}: expected {_kind_name(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise InvalidInput(f"{self.at(key)}: expected {_kind_name(kind)}, got {value!r}")
        return value

    def done(self) -> None:
        if self.data:
            key = sorted(self.data, key=str)[0]
            raise InvalidInput(f"{self.at(str(key))}: unknown key")


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", list: "a list", dict: "a mapping", bool: "true/false"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
