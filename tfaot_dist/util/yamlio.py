"""Reading YAML mappings with errors that name the file and the field.

The loader is bounded: no aliases (a few hundred bytes of them expand to
gigabytes), no duplicate keys (last-one-wins hides mistakes), integers of at
most MAX_INT_DIGITS digits, nesting of at most MAX_DEPTH levels, files of at
most MAX_BYTES. Error messages quote at most ~200 characters of any value.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from tfaot_dist.errors import InvalidInput
from tfaot_dist.util.textsafe import shown

MAX_DEPTH = 64
MAX_INT_DIGITS = 64
MAX_BYTES = 4 << 20


class _Refused(Exception):
    """The document breaks one of the loader's bounds; the message names where."""


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases, duplicate keys, huge integers or deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event: Any = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
            raise _Refused(
                f"line {event.start_mark.line + 1}: aliases (*{shown(event.anchor, 60, False)}) "
                "are not allowed"
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]  # as above: untyped in the stubs
                raise _Refused(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise _Refused(
                    f"{shown(key, 60, False)}: duplicate key (line {key_node.start_mark.line + 1})"
                )
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(c.isalnum() for c in node.value)
        if digits > MAX_INT_DIGITS:
            raise _Refused(
                f"line {node.start_mark.line + 1}: integer of {digits} digits (at most {MAX_INT_DIGITS})"
            )
        return super().construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def load_text(text: str, label: str) -> Any:
    """Any YAML document, bounded; errors name label."""
    if len(text) > MAX_BYTES:
        raise InvalidInput(f"{label}: larger than {MAX_BYTES} bytes")
    try:
        return yaml.load(text, Loader=BoundedLoader)
    except _Refused as exc:
        raise InvalidInput(f"{label}: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{label}: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InvalidInput(f"{label}: malformed YAML{where}: {shown(problem, quote=False)}") from None


def load_mapping(path: Path, label: str | None = None) -> dict[str, Any]:
    """The mapping in a YAML file; errors name it as label (default: its path)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InvalidInput(f"{label or path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{label or path}: cannot read: {exc}") from None
    where = label or str(path)
    data = load_text(text, where)
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: expected a mapping at the top level")
    return data


class Fields:
    """Take typed fields out of one mapping; leftovers are unknown keys."""

    def __init__(
        self, data: object, file: Path | str, prefix: str = "", known: tuple[str, ...] | None = None
    ) -> None:
        """known: the keys the mapping may have, which a missing field's error never calls unknown
        (None: not told; that error then names only the keys ignore_unknown took out)."""
        self.file, self.prefix, self.known = file, prefix, known
        if not isinstance(data, dict):
            raise InvalidInput(f"{file}: {prefix or 'top level'}: expected a mapping")
        self.data = dict(data)
        self.ignored: list[str] = []  # unknown keys taken out already (ignore_unknown)

    def ignore_unknown(self, known: tuple[str, ...]) -> list[str]:
        """Take the keys not in known out (a schema that warns about them); returns them as 'section.key'."""
        self.known = known
        unknown = sorted(str(k) for k in self.data if k not in known)
        for key in unknown:
            del self.data[key]
        self.ignored += unknown
        return [f"{self.prefix}.{k}" if self.prefix else k for k in unknown]

    def at(self, key: str) -> str:
        """How error messages name a field: 'FILE: section.key'."""
        return f"{self.file}: {self.prefix}.{key}" if self.prefix else f"{self.file}: {key}"

    def take(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., required: bool = False
    ) -> Any:
        """The value at key if it is of kind (a YAML value: its type is checked, not known statically)."""
        if key not in self.data:
            if required or default is ...:
                raise InvalidInput(f"{self.at(key)}: required field is missing{self._misspelt(key)}")
            return default
        value = self.data.pop(key)
        if (
            isinstance(value, bool)
            and kind is not bool
            and bool not in (kind if isinstance(kind, tuple) else ())
        ):
            raise InvalidInput(f"{self.at(key)}: expected {_kind_name(kind)}, got {shown(value)}")
        if not isinstance(value, kind):
            raise InvalidInput(f"{self.at(key)}: expected {_kind_name(kind)}, got {shown(value)}")
        return value

    def _misspelt(self, key: str) -> str:
        """What a missing field's error adds: the unknown keys of its mapping, the likeliest first."""
        left = [str(k) for k in self.data if self.known is not None and k not in self.known]
        unknown = sorted({*left, *self.ignored})
        if not unknown:
            return ""
        close = difflib.get_close_matches(key, unknown, n=len(unknown), cutoff=0.6)
        ordered = close + [k for k in unknown if k not in close]
        named = ", ".join(repr(k) for k in ordered[:5]) + (", ..." if len(ordered) > 5 else "")
        hint = f" (a misspelling of {key!r}?)" if close else ""
        return f"; unknown key{'s' if len(ordered) > 1 else ''} here: {named}{hint}"

    def done(self) -> None:
        if self.data:
            key = sorted(self.data, key=str)[0]
            raise InvalidInput(f"{self.at(str(key))}: unknown key")


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", list: "a list", dict: "a mapping", bool: "true/false"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
