"""The package's shape (issue 40): modules and functions short enough to read in one go."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tfaot_dist"
MAX_FUNCTION_LINES = 80
MAX_CLI_MODULE_LINES = 400


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Each function under root (methods and nested functions too) longer than limit lines, as
    "PATH:LINE NAME: N lines". A function runs from its def line to its last line (its decorators,
    such as a command's help texts, are not counted)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines")
    return found


def long_modules(root: Path, limit: int) -> list[str]:
    """Each module under root longer than limit lines, as "PATH: N lines"."""
    counts = {path: len(path.read_text().splitlines()) for path in sorted(root.rglob("*.py"))}
    return [f"{path.relative_to(root)}: {n} lines" for path, n in counts.items() if n > limit]


def cli_modules() -> Path:
    """tfaot_dist/cli/ (a check of a directory that is not there would pass)."""
    cli = PACKAGE / "cli"
    assert (cli / "__init__.py").is_file()
    return cli


def test_no_function_in_the_cli_over_80_lines() -> None:
    assert long_functions(cli_modules()) == []


def test_no_cli_module_over_400_lines() -> None:
    assert long_modules(cli_modules(), MAX_CLI_MODULE_LINES) == []


def test_the_checks_count_lines_as_they_say(tmp_path: Path) -> None:
    """An 81-line function (decorated, nested in a class) and a 401-line module are found; 80 and 400
    lines are not."""
    body = "".join(f"        x{i} = {i}\n" for i in range(79))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(
        f"class C:\n    @staticmethod\n    def f() -> None:\n{body}        pass\n" + "\n" * 318
    )
    (tmp_path / "pkg" / "short.py").write_text(f"def g() -> None:\n{body}\n" + "\n" * 319)
    assert long_functions(tmp_path) == ["pkg/long.py:3 f: 81 lines"]
    assert long_modules(tmp_path, 400) == ["pkg/long.py: 401 lines"]
