"""Command line: argument parsing and printing only; each command calls the functions that do its work.

One module per command group (registry, build, model, distribution, install, cache, perf); commands.py
puts them in one parser. The entry points: main(argv) (the console script, python -m tfaot_dist) and
parser() (the tests and the CLI reference read it).
"""

from tfaot_dist.cli.commands import main, parser

__all__ = ["main", "parser"]
