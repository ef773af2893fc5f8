"""CPU time per test: a pytest plugin, and the summary of what it recorded.

    PYTHONPATH=scripts CPU_PER_TEST=FILE .venv/bin/python -m pytest -p cpu_per_test [ARGS]
    .venv/bin/python scripts/cpu_per_test.py FILE [N]   the N tests and modules that took the most CPU

Around each test it reads getrusage of the worker and of its waited-for children (the CLI run as a
subprocess, TensorFlow's worker, compilers) and appends one JSON line to FILE: the test's id, those
two CPU times, its wall time, and the worker's pid with the test's start and end (time.time(), which
scripts/processes_per_test.py matches with an strace log). Works under pytest-xdist (each worker
appends its own lines). A server a fixture starts is counted where it is waited for, with the test
that ends its fixture.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

OUT_VARIABLE = "CPU_PER_TEST"


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    own0, children0 = _cpu()
    wall0, start = time.monotonic(), time.time()
    yield
    own1, children1 = _cpu()
    out = os.environ.get(OUT_VARIABLE)
    if out:
        record = {
            "id": item.nodeid,
            "self": round(own1 - own0, 3),
            "children": round(children1 - children0, 3),
            "wall": round(time.monotonic() - wall0, 3),
            "pid": os.getpid(),
            "start": start,
            "end": time.time(),
        }
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def summary(path: str, count: int) -> None:
    with open(path) as f:
        rows: list[dict[str, Any]] = [json.loads(line) for line in f]
    cpu = {r["id"]: r["self"] + r["children"] for r in rows}
    print(
        f"{len(rows)} tests, {sum(cpu.values()):.1f} CPU-s, {sum(r['wall'] for r in rows):.1f} s of wall time"
    )
    modules: collections.Counter[str] = collections.Counter()
    for test, seconds in cpu.items():
        modules[test.split("::")[0]] += seconds
    for module, seconds in modules.most_common(count):
        print(f"{seconds:8.1f}  {module}")
    for test, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])[:count]:
        print(f"{seconds:8.2f}  {test}")


if __name__ == "__main__":
    summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
