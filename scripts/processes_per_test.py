"""Which test started which programs: an strace log of a pytest run, matched with cpu_per_test's records.

    PYTHONPATH=scripts CPU_PER_TEST=RUN.cpu strace -f -ttt -qq --seccomp-bpf \\
        -e trace=execve,clone,clone3,fork,vfork -o RUN.strace \\
        .venv/bin/python -m pytest -p cpu_per_test [ARGS]
    .venv/bin/python scripts/processes_per_test.py RUN.strace RUN.cpu [REGEX] [N]

Without REGEX: the programs started most often (by file name) and the tests that started the most
processes. With REGEX (searched in the program's path and its first arguments, as strace abbreviates
them): the N tests that started the most matching processes, e.g. 'toolchains/.*"-I", "/' for
TensorFlow's workers, 'cc1plus' for compiles, '"-m", "tfaot_dist"' for the CLI run as a subprocess.
A process is the test's when the pytest worker that ran it is its ancestor and it started while the
test ran (a thread's spawns count for its process). Unset PYTHONDONTWRITEBYTECODE for such a run, as
scripts/test does: with it, each worker rewrites (compiles) every test module again and a module that
has no bytecode yet is compiled at every start.
"""

from __future__ import annotations

import collections
import json
import re
import sys

# "PID TIME call(args" or, for a call strace split around another process's line, "PID TIME <... call resumed>".
LINE = re.compile(r"^(\d+)\s+([\d.]+)\s+(?:<\.\.\. )?(execve|clone3?|v?fork)[( ](.*)$")
RETURNED = re.compile(r"=\s*(\d+)\s*$")
PROGRAM = re.compile(r'^"([^"]*)"')


def read_strace(path: str) -> tuple[dict[int, int], list[tuple[int, float, str, str]]]:
    """The parent of each process or thread, and each successful execve: (pid, time, program's file
    name, its arguments)."""
    parent: dict[int, int] = {}
    started: list[tuple[int, float, str, str]] = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            pid, when, call, rest = int(m[1]), float(m[2]), m[3], m[4]
            if call == "execve":
                program = PROGRAM.match(rest)
                if program and "ENOENT" not in rest and "EACCES" not in rest:
                    started.append((pid, when, program[1].rsplit("/", 1)[-1], rest))
            else:
                child = RETURNED.search(rest)
                if child:
                    parent[int(child[1])] = pid
    return parent, started


def read_tests(path: str) -> dict[int, list[tuple[float, float, str]]]:
    """Each pytest worker's tests: (start, end, id)."""
    tests: dict[int, list[tuple[float, float, str]]] = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "pid" in record:
                tests[record["pid"]].append((record["start"], record["end"], record["id"]))
    return tests


def owner(
    pid: int, when: float, parent: dict[int, int], tests: dict[int, list[tuple[float, float, str]]]
) -> str:
    seen: set[int] = set()
    while pid not in seen:
        seen.add(pid)
        if pid in tests:
            return next((test for start, end, test in tests[pid] if start <= when <= end), "(between tests)")
        if pid not in parent:
            break
        pid = parent[pid]
    return "(outside the tests: pytest itself, a background job)"


def main(argv: list[str]) -> None:
    parent, started = read_strace(argv[0])
    tests = read_tests(argv[1])
    pattern = re.compile(argv[2]) if len(argv) > 2 and argv[2] else None
    count = int(argv[3]) if len(argv) > 3 else 25
    per_test: collections.Counter[str] = collections.Counter()
    programs: collections.Counter[str] = collections.Counter()
    for pid, when, program, rest in started:
        if pattern and not pattern.search(rest):
            continue
        per_test[owner(pid, when, parent, tests)] += 1
        programs[program] += 1
    print(f"{sum(per_test.values())} processes started")
    if not pattern:
        for program, n in programs.most_common(count):
            print(f"{n:6d}  {program}")
    for test, n in per_test.most_common(count):
        print(f"{n:6d}  {test}")


if __name__ == "__main__":
    main(sys.argv[1:])
