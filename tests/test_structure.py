"""The shape of the package, computed from its source with ast: no import cycle between modules of tfaot_dist,
no function over 80 lines, no module of the command line over 400.

The import graph takes every `import` and `from ... import` wherever it stands: at the top, inside a function,
under `if TYPE_CHECKING:`. An import inside a function still makes the two modules depend on each other (it only
hides the loop until run time), and a type-only import still means one module must be read with the other: a
cycle through either is a cycle a reader walks. The worker modules (tfaot_dist/worker/) are nodes like the rest.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tfaot_dist"
MAX_FUNCTION_LINES = 80
MAX_CLI_MODULE_LINES = 400


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under root (a package's name is its __init__.py's)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


@functools.cache
def parsed(path: Path) -> list[ast.AST]:
    """Every node of a source file (read once: the checks of this module walk the same files)."""
    return list(ast.walk(ast.parse(path.read_text(), str(path))))


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that module `name` imports, at any level of its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in parsed(path):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, one level up per further dot
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = ".".join(package[: len(package) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # a submodule's name imports that module; any other name, the base's
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component of more than one module (Tarjan), as one of its cycles, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycle_through(graph, component) for component in components)


def cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One cycle inside a strongly connected component, from its first module back to it (breadth first)."""
    start = min(component)
    paths = {successor: [start, successor] for successor in sorted(graph[start] & component)}
    queue = list(paths)
    while start not in paths:
        node = queue.pop(0)
        for successor in sorted(graph[node] & component):
            if successor not in paths:
                paths[successor] = [*paths[node], successor]
                queue.append(successor)
    return paths[start]


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Each function under root (methods and nested functions too) longer than limit lines, as
    "PATH:LINE NAME: N lines". A function runs from its def line to its last line (its decorators,
    such as a command's help texts, are not counted)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in parsed(path):
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


def test_the_import_graph_is_read_from_the_source() -> None:
    """The graph sees the edges that make up the package: a test that reads none would pass on any loop."""
    graph = import_graph(PACKAGE)
    assert "tfaot_dist.channels.channel" in graph["tfaot_dist.channels.directory"]  # at the top
    assert "tfaot_dist.perf.bench" in graph["tfaot_dist.cli.perf"]  # inside a function
    assert "tfaot_dist.sources" in graph["tfaot_dist.config"]  # under TYPE_CHECKING
    assert (
        "tfaot_dist.install.ownership" in graph["tfaot_dist.install.setup_area"]
    )  # from PACKAGE import MODULE
    assert graph["tfaot_dist.pins"] == {"tfaot_dist.errors", "tfaot_dist.names"}  # a leaf


def test_cycles_are_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycle_in_the_package() -> None:
    found = cycles(import_graph(PACKAGE))
    assert found == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_no_function_over_80_lines_in_the_package() -> None:
    assert long_functions(PACKAGE) == []


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
