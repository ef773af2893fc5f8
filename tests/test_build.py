"""build and compile with real TensorFlow: package contents, digests, argument order, up-to-date checks."""

import json
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any, NoReturn

import pytest
from conftest import Cli
from test_sbom import validate as validate_sbom

from tfaot_dist import compile_answers
from tfaot_dist.consumer_versions import cmake_version, rpm_version
from tfaot_dist.toolchain import WORKER, Toolchain, worker_env
from tfaot_dist.util.fs import sha256_file


def package_dir(built: Path, name: str) -> Path:
    return built / "dist" / f"tfaot-model-{name}-1.0.0"


@pytest.mark.parametrize("name, cls", [("test-simple", "simple"), ("test-multi", "multi")])
def test_package_is_complete(built: Path, name: str, cls: str) -> None:
    root = package_dir(built, name)
    manifest = json.loads((root / "manifest.json").read_text())
    files = manifest.pop("files")
    for bs in (1, 2, 4):
        for rel in (
            f"include/tfaot-model-{name}/{cls}_bs{bs}.h",
            f"lib/{cls}_bs{bs}.o",
            f"lib/{cls}_bs{bs}_constants.o",
        ):
            assert rel in files, rel
        # TF 2.21 headers pass nullptr for the compilation result proto: the metadata object is not shipped.
        assert f"lib/{cls}_bs{bs}_metadata.o" not in files
    for rel in (
        f"include/tfaot-model-{name}/model.h",
        f"lib/libtfaot-model-{name}.a",
        f"etc/scram.d/tfaot-model-{name}.xml",
        "sbom.cdx.json",
    ):
        assert rel in files
    # The bill of materials: valid CycloneDX by the library's own validator, naming the commit built.
    sbom = (root / "sbom.cdx.json").read_text()
    validate_sbom(sbom)
    (model,) = [c for c in json.loads(sbom)["components"] if c["type"] == "machine-learning-model"]
    assert model["version"] == manifest["source"]["commit"]
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert on_disk == sorted([*files, "manifest.json"])
    for rel, meta in files.items():
        assert sha256_file(root / rel) == meta["sha256"], rel
        assert (root / rel).stat().st_size == meta["size"]
    assert manifest["toolchain"]["tensorflow_version"] == "2.21.0"
    assert manifest["compilation"]["batch_sizes"] == [1, 2, 4]
    assert len(manifest["source"]["commit"]) == 40


def test_archive_holds_the_directory(built: Path) -> None:
    root = package_dir(built, "test-simple")
    archive = root.parent / f"{root.name}.tar.gz"
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for rel in json.loads((root / "manifest.json").read_text())["files"]:
            member = members[f"{root.name}/{rel}"]
            assert member.mtime == 0 and member.uid == 0 and member.uname == ""
            data = tar.extractfile(member)
            assert data is not None and data.read() == (root / rel).read_bytes()


def test_signature_order_is_recorded_by_name(built: Path) -> None:
    manifest = json.loads((package_dir(built, "test-multi") / "manifest.json").read_text())
    sig = manifest["signature"]
    assert [(t["name"], t["dtype"], t["shape"]) for t in sig["inputs"]] == [
        ("input_0", "float32", [4]),
        ("input_1", "float64", [4]),
    ]
    assert [(t["name"], t["dtype"], t["shape"]) for t in sig["outputs"]] == [
        ("output_0", "float32", [2]),
        ("output_1", "bool", [2]),
    ]
    header = (package_dir(built, "test-multi") / "include/tfaot-model-test-multi/multi_bs2.h").read_text()
    assert re.search(r'kNames\[\] = \{"feed_input_0", "feed_input_1", nullptr\}', header)
    assert re.search(r'kNames\[\] = \{"fetch_output_0", "fetch_output_1", nullptr\}', header)


def nm(path: Path, *flags: str) -> set[str]:
    out = subprocess.run(["nm", *flags, str(path)], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip() and not line.endswith(":")}


@pytest.mark.parametrize("name", ["test-simple", "test-multi"])
def test_static_archive_defines_what_the_headers_need(built: Path, name: str) -> None:
    root = package_dir(built, name)
    defined = nm(root / "lib" / f"libtfaot-model-{name}.a", "--defined-only")
    for header in (root / "include" / f"tfaot-model-{name}").glob("*_bs*.h"):
        text = header.read_text()
        # The headers refer to the weights in *_constants.o: the object upstream dropped on TF 2.21.
        constants = set(re.findall(r'asm\("(\w+_constant_buffer_contents)"\)', text))
        kernels = set(re.findall(r"XLA_CPU_KernelError\* (\w+)\(const XLA_CPU_KernelCallFrame", text))
        assert constants and kernels
        assert constants | kernels <= defined, header.name
    # The kernels need nothing from outside but libm.
    undefined = nm(root / "lib" / f"libtfaot-model-{name}.a", "-u") - defined
    assert undefined <= {"floorf", "expf", "tanhf", "logf", "exp", "log", "tanh", "memcpy", "memset"}


def test_second_build_is_up_to_date_without_tensorflow(
    built: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfaot_dist import cli

    def no_tensorflow(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("an up-to-date package compiled again")

    # Any compile, from TensorFlow or from its kept answer (compile_answers.py), is a package built again.
    monkeypatch.setattr(compile_answers, "compile_answer", no_tensorflow)
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    before = sha256_file(built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz")
    assert (
        cli.main(
            ["--registry", str(built / "registry"), "build", "--all", "--dist", str(built / "dist"), "--json"]
        )
        == 0
    )
    results = json.loads(capsys.readouterr().out)["results"]
    assert {r["status"] for r in results} == {"up to date"}
    assert results[1]["sha256"] == before


def test_other_output_dir_reuses_the_build_cache(
    built: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfaot_dist import cli

    monkeypatch.setattr(compile_answers, "compile_answer", None)  # compiling would fail
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    assert (
        cli.main(
            [
                "--registry",
                str(built / "registry"),
                "build",
                "test-simple",
                "--dist",
                str(built / "dist2"),
                "--json",
            ]
        )
        == 0
    )
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["status"] == "cached"
    assert result["sha256"] == sha256_file(built / "dist" / "tfaot-model-test-simple-1.0.0.tar.gz")


def test_compile_local_config(
    run: Cli, example_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfaot_dist import package as pkg

    written: list[
        dict[str, Any]
    ] = []  # the manifest is assembled, verified, and only then written: once, complete
    write = pkg.write_manifest

    def write_and_record(root: Path, manifest: dict[str, Any]) -> None:
        written.append(manifest)
        write(root, manifest)

    monkeypatch.setattr(pkg, "write_manifest", write_and_record)
    out, _ = run(
        "compile",
        "--aot-config",
        example_models / "simple" / "aot_config.yaml",
        "--output-directory",
        tmp_path / "out",
        "--name",
        "test-simple",
        "--version",
        "2.0",
        "--batch-sizes",
        "2,1",
        "--json",
    )
    result = json.loads(out)
    root = Path(result["dir"])
    assert root == tmp_path / "out" / "tfaot-model-test-simple-2.0"
    assert sorted(p.name for p in (root / "include" / "tfaot-model-test-simple").glob("*_bs*.h")) == [
        "simple_bs1.h",
        "simple_bs2.h",
    ]
    assert sha256_file(Path(result["archive"])) == result["sha256"]
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["source"]["saved_model_sha256"] == manifest["digests"]["saved_model"]
    assert manifest["compilation"]["batch_sizes"] == [1, 2]
    assert written == [manifest] and manifest["build_key"] is None
    assert manifest["verification"]["batch_sizes"] == [1, 2, 3, 5]


@pytest.mark.parametrize("name", ["test-simple", "test-multi"])
def test_manifest_is_typed_and_names_the_exact_runtime(built: Path, name: str) -> None:
    """manifest.json reads as a ModelManifest and writes back to the same bytes; the .pc file
    Requires exactly the runtime the manifest requires (known before assembly)."""
    from tfaot_dist import package as pkg
    from tfaot_dist.documents import ModelManifest

    root = package_dir(built, name)
    text = (root / "manifest.json").read_text()
    typed = ModelManifest.from_json(json.loads(text), "manifest.json")
    assert json.dumps(typed.to_json(), indent=1, sort_keys=True) + "\n" == text
    (runtime,) = typed.requires
    assert runtime.name == "tfaot-xla-runtime" and runtime.version.startswith("2.21.0+")
    pc = (root / "lib" / "pkgconfig" / f"tfaot-model-{name}.pc").read_text()
    assert f"\nRequires: tfaot-xla-runtime = {runtime.version}\n" in pc
    # Straight from the build, each consumer's form of the version (consumer_versions.py)
    assert f"\nVersion: {rpm_version(typed.version)}\n" in pc
    version_file = f"lib/cmake/tfaot-model-{name}/tfaot-model-{name}ConfigVersion.cmake"
    assert version_file in typed.files
    assert f'\nset(PACKAGE_VERSION "{cmake_version(typed.version)}")\n' in (root / version_file).read_text()
    assert typed.verification is not None and typed.verification.batch_sizes == (1, 2, 3, 4, 7)
    assert pkg.Package(typed.package, typed.version, root, root, json.loads(text)).model_manifest == typed


@pytest.mark.tf
def test_runtime_command_places_the_runtime_package(run: Cli, tmp_path: Path) -> None:
    out, _ = run("runtime", "--output-directory", tmp_path / "rt", "--json")
    result = json.loads(out)
    root = Path(result["dir"])
    assert root.name == f"tfaot-xla-runtime-{result['version']}"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["kind"] == "runtime" and manifest["libs"] == [
        "lib/libtf_xla_runtime.a",
        "lib/libtfaot_absl.a",
    ]
    for rel in (
        "include/tfaot/Model.h",
        "etc/scram.d/tfaot-xla-runtime.xml",
        "include/eigen3/unsupported/Eigen/CXX11/Tensor",
        "include/third_party/eigen3/Eigen/Core",
        "lib/pkgconfig/tfaot-xla-runtime.pc",
        "lib/cmake/tfaot-xla-runtime/tfaot-xla-runtimeConfig.cmake",
        "sbom.cdx.json",
    ):
        assert rel in manifest["files"], rel
    assert sha256_file(Path(result["archive"])) == result["sha256"]


def test_check_lists_ops(run: Cli, example_models: Path, test_models: Path) -> None:
    out, _ = run("check", example_models / "simple" / "saved_model", "--table", "--json")
    ops = {row["op"]: row["xla_cpu"] for row in json.loads(out)["ops"]}
    assert ops["MatMul"] and ops["Tanh"] and ops["Softmax"]
    _, err = run("check", test_models / "string_op" / "saved_model", "--table", expect=3)
    assert "ops XLA cannot compile on CPU: AsString, StringToNumber" in err
    # Each op with the node that uses it and what to change, in the one error line.
    [line] = [ln for ln in err.splitlines() if ln.startswith("tfaot-dist: error:")]
    assert "AsString at node 'StatefulPartitionedCall/" in line and "/AsString'" in line, line
    assert "StringToNumber at node 'StatefulPartitionedCall/" in line, line
    assert "string processing: do it before the model and feed numbers" in line, line


def test_check_compiles_the_graph_compile_gets(run: Cli, test_models: Path) -> None:
    """Every op of value_shape has an XLA kernel, yet XLA needs a length the input decides: check refuses it
    naming the node and what to change, as compile would fail; the simple model passes the same compile."""
    out, err = run("check", test_models / "value_shape" / "saved_model", "--json", expect=3)
    answer = json.loads(out)
    assert answer["incompatible"] == [] and all(row["xla_cpu"] for row in answer["ops"])
    assert "with op Range must be a compile-time constant" in answer["compile_error"]
    [line] = [ln for ln in err.splitlines() if ln.startswith("tfaot-dist: error:")]
    assert "tfcompile cannot compile the model: Input 1 to node `StatefulPartitionedCall/" in line, line
    assert "/range` with op Range must be a compile-time constant" in line, line
    assert "use fixed sizes (pad to a maximum)" in line, line


@pytest.mark.parametrize("seed", ["1", "2", "3"])
def test_argument_order_does_not_depend_on_hash_seed(
    toolchain: Toolchain, test_models: Path, tmp_path: Path, seed: str
) -> None:
    """FACTS.md: TensorFlow's own order changes with PYTHONHASHSEED; ours is by name, always."""
    out = tmp_path / "out"
    out.mkdir()
    request = {
        "op": "compile",
        "saved_model": str(test_models / "two_inputs" / "saved_model"),
        "serving_key": "serving_default",
        "batch_sizes": [1],
        "namespace": "ns",
        "class_name": "two",
        "output_dir": str(out),
        "target_triple": "x86_64-pc-linux",
        "target_cpu": "",
        "result": str(tmp_path / "result.json"),
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    env = {**worker_env(tmp_path), "PYTHONHASHSEED": seed}
    subprocess.run(
        [str(toolchain.python), "-I", str(WORKER), str(tmp_path / "request.json")],
        env=env,
        check=True,
        capture_output=True,
    )
    answer = json.loads((tmp_path / "result.json").read_text())
    assert answer["ok"], answer
    assert [t["name"] for t in answer["signature"]["inputs"]] == ["feats", "ids"]
    header = (out / "two_bs1.h").read_text()
    assert '{"feed_feats", "feed_ids", nullptr}' in header
    assert '{"fetch_output_0", "fetch_output_1", nullptr}' in header


def test_rebuild_is_bit_identical(
    built: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two clean builds (other cache, other output directory, source fetched again) give the same bytes."""
    from tfaot_dist import cli

    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    assert (
        cli.main(
            [
                "--registry",
                str(built / "registry"),
                "verify",
                "test-multi",
                "--rebuild",
                "--dist",
                str(built / "dist"),
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["archive_sha256"] == sha256_file(built / "dist" / "tfaot-model-test-multi-1.0.0.tar.gz")


def test_verify_finds_a_tampered_file(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from tfaot_dist import cli

    dist = tmp_path / "dist"
    shutil.copytree(built / "dist", dist)
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(built / "cache"))
    assert (
        cli.main(["--registry", str(built / "registry"), "verify", "test-simple", "--dist", str(dist)]) == 0
    )
    obj = dist / "tfaot-model-test-simple-1.0.0" / "lib" / "simple_bs2_constants.o"
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 1
    obj.write_bytes(bytes(data))
    capsys.readouterr()
    assert (
        cli.main(["--registry", str(built / "registry"), "verify", "test-simple", "--dist", str(dist)]) == 7
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tfaot-dist: error: {obj}: sha256 differs from the manifest"]
