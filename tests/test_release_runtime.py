"""A release's own tensorflow-xla-runtime as `--runtime DIR` and as the registry's toolchain.runtime.

The runtime is built as cmsdist builds it (tests/release_runtime.py: the TF 2.12 wheel's
xla_aot_runtime_src with its CMakeLists.txt, SHARED, runtime_fork_join.cc removed, linked to a shared
Abseil of the wheel's Abseil release), once per key in the shared cache. The packages compiled
against it carry the same model objects as against ours, are verified against TensorFlow's numbers
by the harness linked to the .so, and name the release's tool.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import fresh_cache
from release_runtime import ABSEIL_DIR, RUNTIME_DIR, ensure_release_runtime

from tfaot_dist import cli, package
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import INTERFACE_INCLUDE, buildsys, scram_tool
from tfaot_dist.registry import Registry
from tfaot_dist.toolchain import Toolchain

PACKAGE = "tfaot-model-simple-1.0.0"


@pytest.fixture(scope="module")
def release(toolchain212: Toolchain, shared_cache: Path) -> Path:
    """The cached entry: tensorflow-xla-runtime/ and abseil-cpp/ install roots."""
    return ensure_release_runtime(toolchain212, shared_cache)


@pytest.fixture(scope="module")
def simple212(examples212: Path) -> Path:
    return examples212 / "simple" / "aot_config.yaml"


@pytest.fixture
def session_env(tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch, release: Path) -> Path:
    """A fresh cache sharing the expensive entries; abseil-cpp's root as cmsBuild sets it."""
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(fresh_cache(tmp_path / "cache", shared_cache)))
    monkeypatch.setenv("ABSEIL_CPP_ROOT", str(release / ABSEIL_DIR))
    return tmp_path


def compile_args(config: Path, out: Path, *extra: object) -> list[str]:
    return [
        "--registry",
        str(out.parent / "no-registry"),
        "compile",
        "--aot-config",
        str(config),
        "--output-directory",
        str(out),
        *map(str, extra),
    ]


def digests(root: Path, under: str) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((root / under).rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_compile_and_verify_against_the_release_runtime(
    toolchain212: Toolchain,
    release: Path,
    simple212: Path,
    session_env: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One CPU level: verified against TensorFlow through the .so; objects and headers as with our
    runtime; the package names the release's tool, carries the interface headers, no CMake config."""
    tmp = session_env
    python, library = toolchain212.python, release / RUNTIME_DIR / "lib" / "libtf_xla_runtime.so"
    assert (
        cli.main(
            compile_args(
                simple212,
                tmp / "release",
                "--toolchain-python",
                python,
                "--runtime",
                release / RUNTIME_DIR,
                "--cpu-levels",
                "x86-64",
            )
        )
        == 0
    )
    assert (
        cli.main(
            compile_args(simple212, tmp / "ours", "--toolchain-python", python, "--cpu-levels", "x86-64")
        )
        == 0
    )
    capsys.readouterr()
    ours, theirs = tmp / "ours" / PACKAGE, tmp / "release" / PACKAGE
    manifest, reference = package.read_manifest_json(theirs), package.read_manifest_json(ours)
    # The model objects and headers are the same bytes; so are TensorFlow's and the harness's numbers.
    for under in ("include/tfaot-model-simple", "lib", "share"):
        build_files = ("lib/cmake/", "lib/pkgconfig/")  # compared below
        got = {k: v for k, v in digests(theirs, under).items() if not k.startswith(build_files)}
        assert got == {k: v for k, v in digests(ours, under).items() if not k.startswith(build_files)}, under
        assert got
    assert manifest["verification"] == reference["verification"]
    assert manifest["verification"]["batch_sizes"] == [1, 2, 3, 4, 7]
    # What was used, without a path: the release runtime by its TensorFlow and library digest.
    assert manifest["toolchain"]["runtime"] == {
        "origin": "installed",
        "kind": "release",
        "tensorflow_version": "2.12.0",
        "key": f"release-tf2.12.0-{hashlib.sha256(library.read_bytes()).hexdigest()[:16]}",
        "library_sha256": hashlib.sha256(library.read_bytes()).hexdigest(),
    }
    assert "runtime" not in reference["toolchain"]  # other kinds: the manifest as before
    assert str(tmp) not in (theirs / "manifest.json").read_text()
    assert manifest["requires"] == [{"name": "tensorflow-xla-runtime", "version": "2.12.0"}]
    # The scram tool file, parsed as SCRAM reads it: the release's runtime tool, as cms-tfaot's.
    tool = scram_tool.parse((theirs / "etc" / "scram.d" / "tfaot-model-simple.xml").read_text())
    assert tool.uses == ["tensorflow-xla-runtime"] and tool.libs == ["tfaot-model-simple"]
    assert scram_tool.parse((ours / "etc" / "scram.d" / "tfaot-model-simple.xml").read_text()).uses == [
        "tfaot-xla-runtime"
    ]
    pc = (theirs / buildsys.pkgconfig_path("tfaot-model-simple")).read_text()
    assert "\nRequires: tensorflow-xla-runtime = 2.12.0\n" in pc
    assert not (theirs / "lib" / "cmake").exists() and (ours / "lib" / "cmake").is_dir()
    # model.h includes tfaot/Util.h and tfaot/CpuLevel.h, which the release's runtime does not have.
    assert digests(theirs, "include/tfaot") == {
        f"include/{k}": v for k, v in digests(INTERFACE_INCLUDE, "tfaot").items()
    }
    assert not (ours / "include" / "tfaot").exists()


@pytest.mark.slow
def test_multi_level_model_verifies_against_the_release_runtime(
    toolchain212: Toolchain, release: Path, simple212: Path, session_env: Path
) -> None:
    """No per-level kernels, no dispatcher in the release's runtime: the hooks of tfaot/CpuLevel.h are
    weak, so each level this CPU runs is verified, forced by TFAOT_CPU_LEVEL."""
    out = session_env / "levels"
    assert (
        cli.main(
            compile_args(
                simple212,
                out,
                "--toolchain-python",
                toolchain212.python,
                "--runtime",
                release / RUNTIME_DIR,
                "--cpu-levels",
                "x86-64,x86-64-v3",
            )
        )
        == 0
    )
    levels = package.read_manifest_json(out / PACKAGE)["verification"]["cpu_levels"]
    assert levels["x86-64"] == {"verified": True}
    assert levels["x86-64-v3"]["verified"] == cpu_target.check_host("x86-64-v3").ok


@pytest.mark.slow
def test_bad_runtimes_give_one_error_line(
    toolchain212: Toolchain,
    release: Path,
    simple212: Path,
    session_env: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp = session_env
    python = toolchain212.python
    out = tmp / "out"

    def refused(args: list[str], code: int) -> str:
        assert cli.main(args) == code
        err = capsys.readouterr().err  # progress lines, then the one error line
        assert [line for line in err.splitlines() if "error" in line] == err.splitlines()[-1:], err
        assert "Traceback" not in err, err
        assert not out.exists() or not [p for p in out.iterdir() if not p.name.endswith(".lock")]
        return err.splitlines()[-1] + "\n"

    empty = tmp / "empty"
    (empty / "lib").mkdir(parents=True)
    err = refused(compile_args(simple212, out, "--toolchain-python", python, "--runtime", empty), 3)
    assert err == (
        f"tfaot-dist: error: --runtime {empty}: not an installed XLA runtime: no manifest.json "
        f"(tfaot-xla-runtime package), runtime.json (tfaot-dist runtime tree) or "
        f"lib/libtf_xla_runtime.so (the release's tensorflow-xla-runtime)\n"
    )
    monkeypatch.setenv("ABSEIL_CPP_ROOT", "relative/abseil")
    err = refused(
        compile_args(simple212, out, "--toolchain-python", python, "--runtime", release / RUNTIME_DIR), 3
    )
    assert err == (
        "tfaot-dist: error: ABSEIL_CPP_ROOT=relative/abseil: not an absolute path of an installed "
        "abseil-cpp (no lib/)\n"
    )
    # Without Abseil's root the release's .so links (TF 2.12's runtime uses no Abseil symbol) but cannot
    # load: it names libtfaot_absl.so and has no RUNPATH, as cmsdist's relies on the release's paths.
    monkeypatch.delenv("ABSEIL_CPP_ROOT")
    err = refused(
        compile_args(
            simple212,
            out,
            "--toolchain-python",
            python,
            "--runtime",
            release / RUNTIME_DIR,
            "--cpu-levels",
            "x86-64",
        ),
        6,
    )
    assert err.startswith("tfaot-dist: error: verification harness (CPU level x86-64): "), err
    assert err.endswith(
        "error while loading shared libraries: libtfaot_absl.so: cannot open shared object file: "
        "No such file or directory\n"
    ), err

    # The registry's toolchain.runtime, named as such; options win over the registry's fields.
    registry = tmp / "registry"
    registry.mkdir()
    (registry / "registry.yaml").write_text(f"toolchain:\n  python: {python}\n  runtime: {empty}\n")
    args = [
        "--registry",
        str(registry),
        "compile",
        "--aot-config",
        str(simple212),
        "--output-directory",
        str(out),
    ]
    err = refused(args, 3)
    assert err.startswith(
        f"tfaot-dist: error: registry.yaml: toolchain.runtime: {empty}: not an installed XLA runtime"
    ), err
    other = tmp / "other"
    other.mkdir()
    assert refused([*args, "--runtime", str(other)], 3).startswith(
        f"tfaot-dist: error: --runtime {other}: not an"
    )
    (registry / "registry.yaml").write_text(
        f"toolchain:\n  python: {tmp / 'no-python'}\n  runtime: {empty}\n"
    )
    assert (
        refused(args, 8)
        == f"tfaot-dist: error: registry.yaml: toolchain.python: {tmp / 'no-python'}: no such file\n"
    )
    assert refused([*args, "--toolchain-python", str(python), "--runtime", str(other)], 3).startswith(
        f"tfaot-dist: error: --runtime {other}: not an"
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        (
            "python",
            "bin/python3",
            "expected an absolute path (letters, digits and ._/+,=@~%-), got 'bin/python3'",
        ),
        (
            "runtime",
            "/opt/rt/../../etc",
            "expected an absolute path (letters, digits and ._/+,=@~%-), got '/opt/rt/../../etc'",
        ),
        ("runtime", "/opt/a b", "expected an absolute path (letters, digits and ._/+,=@~%-), got '/opt/a b'"),
        ("python", 3, "expected a string, got 3"),
    ],
)
def test_registry_toolchain_paths_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: int | str, message: str
) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "registry.yaml").write_text(json.dumps({"toolchain": {field: value}}))
    assert cli.main(["--registry", str(registry), "specs", "--out", str(tmp_path / "specs")]) == 3
    assert capsys.readouterr().err == (
        f"tfaot-dist: error: {registry / 'registry.yaml'}: toolchain.{field}: {message}\n"
    )
    assert not (tmp_path / "specs").exists()


def test_registry_toolchain_paths_are_read_and_keep_other_build_keys(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "registry.yaml").write_text("toolchain:\n  requirements: [tensorflow-cpu==2.12.0]\n")
    plain = Registry(registry).defaults()
    assert plain.python is None and plain.runtime is None
    assert sorted(plain.as_dict()) == ["cpu_levels", "requirements", "target_cpu", "target_triple"]
    (registry / "registry.yaml").write_text(
        "toolchain:\n  requirements: [tensorflow-cpu==2.12.0]\n"
        "  python: /rel/python3/bin/python3\n  runtime: /rel/tensorflow-xla-runtime\n"
    )
    given = Registry(registry).defaults()
    assert (given.python, given.runtime) == (
        Path("/rel/python3/bin/python3"),
        Path("/rel/tensorflow-xla-runtime"),
    )
    assert given.as_dict() == {
        **plain.as_dict(),
        "python": "/rel/python3/bin/python3",
        "runtime": "/rel/tensorflow-xla-runtime",
    }
