"""tests/kept_objects.py: a compile is kept by what the compiler reads, not by where a run put it."""

import re
from pathlib import Path

import kept
import kept_objects
import pytest

HEADER = (
    "inline const char* where() { return __FILE__; }\n"  # the header's path, as a package's assert has it
)
SOURCE = '#include "where.h"\nint main() { return where()[0] == 0; }\n'


def compile_in_run(tmp_path: Path, run: str, header: str, *flags: str) -> tuple[int, str]:
    """SOURCE and its header in a worker's directory of the run named run, compiled with compile_kept."""
    worker = tmp_path / run / "popen-gw0"
    include, test = worker / "package" / "include", worker / "test"  # a fixture's package, a test's source
    include.mkdir(parents=True, exist_ok=True)
    test.mkdir(exist_ok=True)
    (include / "where.h").write_text(header)
    (test / "main.cc").write_text(SOURCE)
    obj = None if "-fsyntax-only" in flags else test / "main.o"
    code, stderr = kept_objects.compile_kept([*flags, f"-I{include}"], test / "main.cc", obj)
    assert obj is None or obj.is_file() or code != 0
    return code, stderr


def entries(tmp_path: Path) -> list[str]:
    """The names of the kept entries (NAME-KEY), a name once per key."""
    fixtures = tmp_path / "test-cache" / "fixtures"
    return sorted(p.name[:-21] for p in fixtures.iterdir() if re.fullmatch(r".+-[0-9a-f]{20}", p.name))


@pytest.fixture(autouse=True)
def cache_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "TEST_CACHE", tmp_path / "test-cache")


def test_the_same_compile_in_another_run_directory_is_taken_from_the_kept_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for run in ("run-1", "run-2"):
        monkeypatch.setenv(kept_objects.RUN_DIRECTORY, str(tmp_path / run / "popen-gw0"))
        assert compile_in_run(tmp_path, run, HEADER) == (0, "")
    assert entries(tmp_path) == ["object-main"]
    # What the key is made of holds the header's path: without the run's directory named, each run
    # has a key of its own.
    monkeypatch.delenv(kept_objects.RUN_DIRECTORY)
    for run in ("run-3", "run-4"):
        assert compile_in_run(tmp_path, run, HEADER) == (0, "")
    assert entries(tmp_path) == ["object-main"] * 3


def test_other_bytes_another_key_and_a_compile_that_warns_is_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kept_objects.RUN_DIRECTORY, str(tmp_path / "run" / "popen-gw0"))
    assert compile_in_run(tmp_path, "run", HEADER) == (0, "")
    assert compile_in_run(tmp_path, "run", HEADER + "inline int another() { return 1; }\n") == (0, "")
    warns = HEADER + "inline int unused() { int x; return 0; }\n"
    for _ in range(2):
        code, stderr = compile_in_run(tmp_path, "run", warns, "-Wall")
        assert code == 0 and "unused variable" in stderr
    assert entries(tmp_path) == ["object-main"] * 2


def test_a_clean_syntax_check_is_kept_and_an_error_is_always_the_compilers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kept_objects.RUN_DIRECTORY, str(tmp_path / "run" / "popen-gw0"))
    for _ in range(2):
        assert compile_in_run(tmp_path, "run", HEADER, "-fsyntax-only") == (0, "")
    assert entries(tmp_path) == ["syntax-main"]
    for _ in range(2):
        code, stderr = compile_in_run(tmp_path, "run", HEADER + "int broken = ;\n", "-fsyntax-only")
        assert code != 0 and "expected primary-expression" in stderr
    assert entries(tmp_path) == ["syntax-main"]
    with pytest.raises(ValueError, match="no -fsyntax-only"):
        kept_objects.compile_kept([], tmp_path / "run" / "popen-gw0" / "test" / "main.cc", None)
