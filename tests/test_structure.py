"""The shape of the package, computed from its source with ast: no import cycle between modules of tfaot_dist,
no function over 80 lines.

The import graph takes every `import` and `from ... import` wherever it stands: at the top, inside a function,
under `if TYPE_CHECKING:`. An import inside a function still makes the two modules depend on each other (it only
hides the loop until run time), and a type-only import still means one module must be read with the other: a
cycle through either is a cycle a reader walks. The worker modules (tfaot_dist/worker/) are nodes like the rest.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tfaot_dist"
MAX_FUNCTION_LINES = 80
# cli.py's parser() and cmd_setup(): issue 40's CLI split (branch issue-40a) takes them apart; drop this then.
LONG_FUNCTIONS_ALLOWED_IN = {"tfaot_dist/cli.py"}


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under root (a package's name is its __init__.py's)."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that module `name` imports, at any level of its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, one level up per further dot
                package = name.split(".") if is_package else name.split(".")[:-1]
                anchor = ".".join(package[: len(package) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # a submodule, when it is one
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


def function_lengths(root: Path) -> dict[str, int]:
    """'path:line name' -> lines (end_lineno - lineno + 1), for every function and method under root."""
    lengths: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno:
                where = f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
                lengths[where] = node.end_lineno - node.lineno + 1
    return lengths


def test_the_import_graph_is_read_from_the_source() -> None:
    """The graph sees the edges that make up the package: a test that reads none would pass on any loop."""
    graph = import_graph(PACKAGE)
    assert "tfaot_dist.channels.channel" in graph["tfaot_dist.channels.directory"]  # at the top
    assert "tfaot_dist.perf.bench" in graph["tfaot_dist.cli"]  # inside a function
    assert "tfaot_dist.sources" in graph["tfaot_dist.config"]  # under TYPE_CHECKING
    assert (
        "tfaot_dist.install.ownership" in graph["tfaot_dist.install.setup_area"]
    )  # from PACKAGE import MODULE
    assert graph["tfaot_dist.pins"] == {"tfaot_dist", "tfaot_dist.errors", "tfaot_dist.names"}  # a leaf


def test_cycles_are_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycle_in_the_package() -> None:
    found = cycles(import_graph(PACKAGE))
    assert found == [], "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_no_function_over_80_lines_in_the_package() -> None:
    long = {
        where: lines
        for where, lines in function_lengths(PACKAGE).items()
        if lines > MAX_FUNCTION_LINES and where.split(":")[0] not in LONG_FUNCTIONS_ALLOWED_IN
    }
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
