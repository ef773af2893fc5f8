"""The C++ build kit: the same sources built in two directories give the same archive bytes (no TensorFlow)."""

import re
from pathlib import Path

import pytest

from tfaot_dist.cxx import build_kit
from tfaot_dist.errors import RuntimeBuildError

SOURCES = {
    "a/util.cc": "namespace { int hidden = 1; }\nconst char* where() { return __FILE__; }\nint a() { return hidden; }\n",
    "b/util.cc": "int b() { return 2; }\n",  # the same basename: objects must not collide in the archive
}


def build(root: Path, jobs: int) -> bytes:
    src = root / "src"
    for rel, text in SOURCES.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    objdir = root / "obj"
    objdir.mkdir()
    units = [
        build_kit.Unit(
            cmd=[
                build_kit.CXX,
                *build_kit.CONSUMER_CXXFLAGS,
                *build_kit.BUILD_FLAGS,
                *build_kit.reproducible_flags(rel, {root: "build"}),
                "-c",
                rel,
                "-o",
                str(objdir / build_kit.object_name(rel)),
            ],
            cwd=src,
            obj=objdir / build_kit.object_name(rel),
            name=rel,
        )
        for rel in SOURCES
    ]
    lines: list[str] = []
    build_kit.compile_all(units, jobs, lines.append)
    assert lines and lines[-1].startswith("  compiled 2/2")
    build_kit.archive(root / "lib.a", list(reversed([u.obj for u in units])))
    return (root / "lib.a").read_bytes()


def test_two_directories_give_the_same_archive(tmp_path: Path) -> None:
    first, second = build(tmp_path / "one", 1), build(tmp_path / "elsewhere-two", 2)
    assert first == second
    assert str(tmp_path).encode() not in first  # no build directory inside
    assert b"a__util.o/" in first and b"b__util.o/" in first  # both members, sorted, flattened names


def test_a_failing_unit_raises_one_line_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bad.cc").write_text("int f() { return undeclared_name; }\n")
    unit = build_kit.Unit(
        cmd=[build_kit.CXX, "-c", "bad.cc", "-o", str(tmp_path / "bad.o")],
        cwd=tmp_path,
        obj=tmp_path / "bad.o",
        name="bad.cc",
    )
    with pytest.raises(RuntimeBuildError) as info:
        build_kit.compile_all([unit], 1, lambda line: None, RuntimeBuildError)
    message = str(info.value)
    # The compiler's first error line (its quotes follow the locale).
    assert re.match(
        r"compile bad\.cc failed \(exit 1\): bad\.cc:1:18: error: .undeclared_name. was not declared", message
    ), message
    assert "\n" not in message and message.endswith(")")
    log = Path(message.rsplit("(log: ", 1)[1][:-1])
    assert log.parent == tmp_path / "cache" / "logs" and "undeclared_name" in log.read_text()


def test_compiler_identity() -> None:
    cc = build_kit.compiler()
    assert cc.version_line and cc.full_version[0].isdigit() and cc.arch in cc.target
    assert build_kit.accepts(cc, ["-std=c++17"]) and not build_kit.accepts(cc, ["-std=no-such-standard"])
