"""The key of a kept compile answer (compile_answers.py): what makes the answer is in it, where this
build's files and the toolchain's venv are is not. No TensorFlow: the key is computed, not used."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tfaot_dist.compile_answers import answer_key
from tfaot_dist.documents import CompileRequest
from tfaot_dist.toolchain import Toolchain


def request(saved_model: Path, work: Path) -> CompileRequest:
    return CompileRequest(
        saved_model=str(saved_model),
        serving_key="serving_default",
        batch_sizes=(1, 2),
        namespace="tfaot_model",
        class_name="simple",
        output_dir=str(work / "compiled"),
        target_triple="x86_64-pc-linux",
        target_cpu="",
        reference_dir=str(work / "reference"),
        reference_sizes=(1, 2, 3),
    )


def test_the_key_names_the_question_not_the_places(tmp_path: Path) -> None:
    model = tmp_path / "a" / "saved_model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"graph")
    (model / "variables" / "variables.index").write_bytes(b"weights")
    venv = Toolchain("tk", tmp_path / "cache-1" / "toolchains" / "tk", (), ("tensorflow==2.21.0",))
    key = answer_key(request(model, tmp_path / "work-1"), venv, (), ())
    assert key is not None

    # Another build's paths, the same model checked out elsewhere, the venv seen through another cache.
    other = tmp_path / "b" / "saved_model"
    (other / "variables").mkdir(parents=True)
    (other / "saved_model.pb").write_bytes(b"graph")
    (other / "variables" / "variables.index").write_bytes(b"weights")
    linked = replace(venv, root=tmp_path / "cache-2" / "toolchains" / "tk")
    assert answer_key(request(other, tmp_path / "work-2"), linked, (), ()) == key

    # What the answer is made of.
    assert answer_key(request(model, tmp_path / "w"), venv, (), ("--xla_cpu_enable_fast_math=false",)) != key
    assert answer_key(replace(request(model, tmp_path / "w"), batch_sizes=(1,)), venv, (), ()) != key
    assert (
        answer_key(request(model, tmp_path / "w"), replace(venv, installed=("tensorflow==2.12.1",)), (), ())
        != key
    )
    existing = replace(
        venv, executable=Path("/usr/bin/python3")
    )  # an existing Python: its path is part of it
    assert answer_key(request(model, tmp_path / "w"), existing, (), ()) != key
    (other / "variables" / "variables.index").write_bytes(b"retrained")
    assert answer_key(request(other, tmp_path / "w"), venv, (), ()) != key

    # A link in the SavedModel: never kept (compiled every time).
    (model / "assets").symlink_to(tmp_path)
    assert answer_key(request(model, tmp_path / "w"), venv, (), ()) is None
