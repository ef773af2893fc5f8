"""The typed model manifest and the worker's compile protocol (documents.py), without TensorFlow:
manifests read back to the same bytes, refusals name the field, the request is the wire format."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tfaot_dist.documents import CompileAnswer, CompileRequest, ModelManifest, RuntimeManifest
from tfaot_dist.errors import InvalidInput

SHA = "ab" * 32
TENSOR: dict[str, Any] = {"dtype": "float32", "name": "input_0", "shape": [4]}
MANIFEST: dict[str, Any] = {
    "build_key": "1" * 64,
    "compilation": {
        "batch_sizes": [1, 2],
        "class_name": "simple",
        "namespace": "tfaot_model",
        "target_cpu": "",
        "target_triple": "x86_64-pc-linux",
        "tf_xla_flags": [],
        "xla_flags": [],
    },
    "constants": {
        "buffers": 4,
        "bytes": 100,
        "format": 1,
        "original_bytes": 200,
        "per_batch_size": {
            "1": {"defined": 2, "shared": 0},
            "2": {"defined": 0, "note": "identical to 1", "shared": 2},
        },
        "unique_buffers": 2,
    },
    "digests": {"aot_config": SHA, "saved_model": SHA},
    "files": {
        "include/tfaot-model-x/model.h": {"sha256": SHA, "size": 10},
        "lib/x.o": {"sha256": SHA, "size": 0},
    },
    "model": {"author": "a", "description": "d", "serving_key": "serving_default"},
    "name": "x",
    "package": "tfaot-model-x",
    "reference": {
        "cases": [{"batch_size": 1, "dir": "bs1"}, {"batch_size": 3, "dir": "bs3"}],
        "dir": "share/tfaot-model-x/reference",
    },
    "requires": [{"name": "tfaot-xla-runtime", "version": "2.21.0+b8fd209dfb55daad"}],
    "signature": {
        "inputs": [TENSOR],
        "order": "by name",
        "outputs": [{"dtype": "bool", "name": "output_0", "shape": [2, 3]}],
    },
    "source": {
        "aot_config": "x/aot_config.yaml",
        "commit": "c" * 40,
        "git": "https://h/r.git",
        "ref": "main",
        "url": "https://h/r.git",
    },
    "tool": {"name": "tfaot-dist", "version": "0.1.0"},
    "toolchain": {"requirements": ["tensorflow-cpu==2.21.0"], "tensorflow_version": "2.21.0"},
    "verification": {
        "batch_sizes": [1, 3],
        "outputs": {"output_0": {"max_abs": 0.0, "max_rel": 5.4e-07}},
        "paths": ["run()"],
        "tolerance": 1e-05,
    },
    "version": "1.0.0",
}


def dumped(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"  # as package.write_manifest writes it


DROP = object()  # variant(field=DROP) leaves the field out


def variant(**changes: object) -> dict[str, Any]:
    doc = copy.deepcopy(MANIFEST)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node: Any = doc
        for key in parents:
            node = node[key]
        if value is DROP:
            del node[last]
        else:
            node[last] = value
    return doc


@pytest.mark.parametrize(
    "doc",
    [
        MANIFEST,
        variant(build_key=None),  # tfaot-dist compile: written as null
        variant(compilation__batch_rules=["3:2,1"], compilation__target_cpu=None),
        variant(
            toolchain={
                "environment": "existing",
                "installed": ["tensorflow==2.21.0"],
                "tensorflow_version": "2.21.0",
                "runtime": {"key": "k-1", "origin": "installed"},
            }
        ),
    ],
    ids=["build", "compile", "tuned", "existing-toolchain"],
)
def test_manifest_reads_back_to_the_same_bytes(doc: dict[str, Any]) -> None:
    typed = ModelManifest.from_json(json.loads(dumped(doc)), "manifest.json")
    assert dumped(typed.to_json()) == dumped(doc)


def test_manifest_fields_are_typed() -> None:
    typed = ModelManifest.from_json(MANIFEST, "m")
    assert typed.signature.inputs[0].shape == (4,) and typed.signature.outputs[0].dtype == "bool"
    assert [c.batch_size for c in typed.reference.cases] == [1, 3]
    assert typed.requires[0].version == "2.21.0+b8fd209dfb55daad"
    assert typed.constants.per_batch_size["2"].note == "identical to 1"
    assert typed.verification is not None and typed.verification.outputs["output_0"].max_rel == 5.4e-07
    assert typed.toolchain.requirements == ("tensorflow-cpu==2.21.0",) and typed.toolchain.runtime is None


@pytest.mark.parametrize(
    "doc, message",
    [
        (
            variant(signature__inputs=[dict(TENSOR, dtype="complex64")]),
            "m.signature.inputs[0].dtype: expected one of float32, float64, int32, int64, bool, got 'complex64'",
        ),
        (
            variant(signature__inputs=[dict(TENSOR, shape=[4, -1])]),
            "m.signature.inputs[0].shape[1]: expected a number >= 0",
        ),
        (variant(compilation__batch_sizes="1,2"), "m.compilation.batch_sizes: expected a list, got '1,2'"),
        (variant(files={"../etc/passwd": {"sha256": SHA, "size": 1}}), "m.files.../etc/passwd: invalid path"),
        (
            variant(verification__outputs={"o": {"max_abs": "0", "max_rel": 0}}),
            "m.verification.outputs.o.max_abs: expected a number, got '0'",
        ),
        (
            variant(verification__tolerance=1.0),  # `verify` checks within it again: never beyond 1e-2
            "m.verification.tolerance: expected a number above 0 and at most 0.01, got 1.0",
        ),
        (
            variant(reference__cases=[{"batch_size": 0, "dir": "bs0"}]),
            "m.reference.cases[0].batch_size: expected a number > 0",
        ),
        (variant(package="tfaot-xla-runtime"), "m.package: 'tfaot-xla-runtime' is not a model package"),
        (variant(requires=DROP), "m.requires: required field is missing"),
        (
            variant(toolchain__runtime={"origin": "somewhere", "key": "k"}),
            "m.toolchain.runtime.origin: expected one of",
        ),
    ],
)
def test_bad_manifest_names_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        ModelManifest.from_json(doc, "m")
    assert str(info.value).startswith(message)


def test_compile_request_is_the_wire_format() -> None:
    """The request as the worker (worker/tf_worker.py, hashed into build keys) has always received it."""
    request = CompileRequest(
        saved_model="/s",
        serving_key="serving_default",
        batch_sizes=(1, 2),
        namespace="ns",
        class_name="c",
        output_dir="/o",
        target_triple="x86_64-pc-linux",
        target_cpu=None,
        reference_dir="/r",
        reference_sizes=(1, 2, 3, 5),
    )
    assert json.dumps(request.to_json(), indent=1) == json.dumps(
        {
            "op": "compile",
            "saved_model": "/s",
            "serving_key": "serving_default",
            "batch_sizes": [1, 2],
            "namespace": "ns",
            "class_name": "c",
            "output_dir": "/o",
            "target_triple": "x86_64-pc-linux",
            "target_cpu": None,
            "reference_dir": "/r",
            "reference_sizes": [1, 2, 3, 5],
        },
        indent=1,
    )
    # Fields added later are sent only when they differ from what the worker assumes without them.
    xla = dataclasses.replace(request, activation_formulas="xla").to_json()
    assert list(xla)[-1:] == ["activation_formulas"] and xla["activation_formulas"] == "xla"


ANSWER = {
    "ok": True,
    "signature": {"inputs": [TENSOR], "outputs": [TENSOR]},
    "files": {"1": {"header": "c_bs1.h", "objects": ["c_bs1.o", "c_bs1_constants.o"]}},
    "reference": [{"batch_size": 1, "dir": "bs1"}],
    "tensorflow_version": "2.21.0",
    "timings": {"load": 0.5},
}


def test_compile_answer_is_typed() -> None:
    answer = CompileAnswer.from_json(ANSWER, "answer")
    assert answer.files["1"].objects == ("c_bs1.o", "c_bs1_constants.o")
    assert answer.signature.order is None and answer.reference[0].dir == "bs1"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"files": {"1": {"header": "../c_bs1.h", "objects": []}}},
            "answer.files.1.header: invalid file name '../c_bs1.h'",
        ),
        (
            {"files": {"1": {"header": "c.h", "objects": ["/tmp/x.o"]}}},
            "answer.files.1.objects[0]: invalid file name",
        ),
        ({"tensorflow_version": 2.21}, "answer.tensorflow_version: expected a string, got 2.21"),
    ],
)
def test_bad_compile_answer_names_the_field(
    change: dict[str, dict[str, dict[str, list[object] | str]]]
    | dict[str, dict[str, dict[str, list[str] | str]]]
    | dict[str, float],
    message: str,
) -> None:
    with pytest.raises(InvalidInput) as info:
        CompileAnswer.from_json({**ANSWER, **change}, "answer")
    assert str(info.value).startswith(message)


def test_check_answer_and_the_signature_line() -> None:
    from tfaot_dist.check import describe_signature
    from tfaot_dist.documents import CheckAnswer, CheckRequest

    assert CheckRequest(saved_model="/s", serving_key="k").to_json() == {
        "op": "check",
        "saved_model": "/s",
        "serving_key": "k",
    }
    answer = CheckAnswer.from_json(
        {
            "ok": True,
            "signature": ANSWER["signature"],
            "ops": [{"op": "MatMul", "xla_cpu": True}, {"op": "StringToNumber", "xla_cpu": False}],
        },
        "answer",
    )
    assert [o.op for o in answer.ops if not o.xla_cpu] == ["StringToNumber"]
    assert describe_signature(answer.signature) == "input_0:float32[4] -> input_0:float32[4]"
    with pytest.raises(InvalidInput, match=r"^answer.ops\[0\].xla_cpu: expected true or false, got 'yes'"):
        CheckAnswer.from_json({**answer.to_json(), "ops": [{"op": "MatMul", "xla_cpu": "yes"}]}, "answer")


RUNTIME_MANIFEST = {
    "compiler": "g++",
    "cxxflags": ["-std=c++17", "-DEIGEN_MPL2_ONLY"],
    "files": {
        "lib/libtf_xla_runtime.a": {"sha256": SHA, "size": 5},
        "include/x.h": {"sha256": SHA, "size": 0},
    },
    "kind": "runtime",
    "libs": ["lib/libtf_xla_runtime.a", "lib/libtfaot_absl.a"],
    "name": "tfaot-xla-runtime",
    "package": "tfaot-xla-runtime",
    "runtime_key": "2.21.0-gcc-b8fd209dfb55daad",
    "scram_tool": "tfaot-xla-runtime",
    "system_libs": ["-lpthread", "-lm"],
    "tensorflow_version": "2.21.0",
    "tool": {"name": "tfaot-dist", "version": "0.1.0"},
    "version": "2.21.0+b8fd209dfb55daad.p303909c2",
}


@pytest.mark.parametrize("levels", [None, ["x86-64", "x86-64-v3", "x86-64-v4"]])
def test_runtime_manifest_reads_back_to_the_same_bytes(levels: list[str] | None) -> None:
    written = RUNTIME_MANIFEST if levels is None else {**RUNTIME_MANIFEST, "cpu_levels": levels}
    typed = RuntimeManifest.from_json(json.loads(dumped(written)), "manifest.json")
    assert dumped(typed.to_json()) == dumped(written)
    assert typed.cpu_levels == tuple(levels or ())
    assert (
        typed.libs == ("lib/libtf_xla_runtime.a", "lib/libtfaot_absl.a")
        and typed.files["include/x.h"].size == 0
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("package", "tfaot-model-x", "m.package: expected one of tfaot-xla-runtime, got 'tfaot-model-x'"),
        ("libs", ["../lib.a"], "m.libs[0]: invalid path '../lib.a'"),
        ("cxxflags", "-O2", "m.cxxflags: expected a list, got '-O2'"),
        ("runtime_key", None, "m.runtime_key: required field is missing"),
        (
            "cpu_levels",
            ["x86-64", "avx9"],
            "m.cpu_levels: unknown CPU level 'avx9' (expected one of x86-64, x86-64-v2, x86-64-v3, x86-64-v4)",
        ),
    ],
)
def test_runtime_manifest_refusals_name_the_field(
    field: str, value: list[str] | str | None, message: str
) -> None:
    doc = {k: v for k, v in RUNTIME_MANIFEST.items() if k != field}
    if value is not None:
        doc[field] = value
    with pytest.raises(InvalidInput) as exc:
        RuntimeManifest.from_json(doc, "m")
    assert str(exc.value) == message


def test_runtime_package_on_disk_reads_back_to_its_bytes(built: Path) -> None:
    """The runtime package a real build wrote: its manifest.json typed and written again, byte for byte."""
    (root,) = [p for p in (built / "dist").glob("tfaot-xla-runtime-*") if p.is_dir()]
    data = (root / "manifest.json").read_text()
    typed = RuntimeManifest.from_json(json.loads(data), "manifest.json")
    assert dumped(typed.to_json()) == data
    assert typed.version == root.name.removeprefix("tfaot-xla-runtime-")
