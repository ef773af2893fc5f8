"""harness.compare without TensorFlow: output files as the verification harness writes them
(float32 .bin files per batch size and path) against TensorFlow's reference files, within the
model's tolerance (absolute or relative); integers exactly whatever the tolerance."""

import array
import json
import shutil
from pathlib import Path

import pytest
from conftest import Cli

from tfaot_dist import harness, verify
from tfaot_dist import package as pkg
from tfaot_dist.documents import ReferenceCase, Signature
from tfaot_dist.errors import VerificationFailed
from tfaot_dist.session import Session

TENSORFLOW = [0.5, 1.0, -2.0, 0.0]


def signature(dtype: str) -> Signature:
    return Signature.from_json(
        {
            "inputs": [{"dtype": "float32", "name": "x", "shape": [4]}],
            "outputs": [{"dtype": dtype, "name": "probs", "shape": [4]}],
        },
        "signature",
    )


def write_case(tmp_path: Path, typecode: str, expected: list[float], got: list[float]) -> Path:
    """reference/bs1/output_0.bin and out/bs1/{flat,nested}_output_0.bin, as compare reads them; returns out."""
    (tmp_path / "reference" / "bs1").mkdir(parents=True)
    (tmp_path / "reference" / "bs1" / "output_0.bin").write_bytes(array.array(typecode, expected).tobytes())
    (tmp_path / "out" / "bs1").mkdir(parents=True)
    for mode in harness.MODES:
        (tmp_path / "out" / "bs1" / f"{mode}_output_0.bin").write_bytes(array.array(typecode, got).tobytes())
    return tmp_path / "out"


CASES = (ReferenceCase(batch_size=1, dir="bs1"),)


def test_an_element_2e_5_off_fails_at_the_default_and_passes_at_1e_4(tmp_path: Path) -> None:
    got = [0.5, 1.00002, -2.0, 0.0]  # element 1: 2.0e-5 off, absolute and relative
    out = write_case(tmp_path, "f", TENSORFLOW, got)
    with pytest.raises(VerificationFailed) as info:
        harness.compare("m", signature("float32"), tmp_path / "reference", CASES, out)
    assert str(info.value) == (
        "m: batch size 1, output probs (flat), element 1: compiled 1.0000200271606445, TensorFlow 1.0 "
        "(tolerance 1e-05)"
    )
    found = harness.compare("m", signature("float32"), tmp_path / "reference", CASES, out, 1e-4)
    assert found.tolerance == 1e-4  # what the manifest's verification records
    assert found.outputs["probs"].max_abs == pytest.approx(2.0027e-5, rel=1e-4)
    assert found.outputs["probs"].max_rel == found.outputs["probs"].max_abs


def test_relative_deviation_passes_a_large_value(tmp_path: Path) -> None:
    """1000.0625 for 1000: 6.25e-5 relative (0.0625 absolute) passes at 1e-4, not at the default."""
    out = write_case(tmp_path, "f", [1000.0], [1000.0625])
    reference = tmp_path / "reference"
    with pytest.raises(VerificationFailed, match="element 0"):
        harness.compare("m", signature("float32"), reference, CASES, out, harness.TOLERANCE)
    assert harness.compare("m", signature("float32"), reference, CASES, out, 1e-4).tolerance == 1e-4


def test_default_tolerance_is_recorded(tmp_path: Path) -> None:
    out = write_case(tmp_path, "f", TENSORFLOW, [0.5, 1.000005, -2.0, 0.0])
    found = harness.compare("m", signature("float32"), tmp_path / "reference", CASES, out)
    assert found.tolerance == harness.TOLERANCE == 1e-5


def test_integers_stay_exact_whatever_the_tolerance(tmp_path: Path) -> None:
    out = write_case(tmp_path, "i", [1, 2, 3, 4], [1, 2, 3, 5])
    with pytest.raises(VerificationFailed) as info:
        harness.compare("m", signature("int32"), tmp_path / "reference", CASES, out, 1e-2)
    assert str(info.value) == "m: batch size 1, output probs (flat), element 3: compiled 5, TensorFlow 4"


def test_compile_verifies_within_the_configs_tolerance_and_verify_uses_the_recorded_one(
    run: Cli, example_models: Path, tmp_path: Path
) -> None:
    """verification.tolerance reaches the manifest of a compiled package, and `verify` checks the
    package again within that tolerance, not the default."""
    model = tmp_path / "simple"
    shutil.copytree(example_models / "simple", model)
    config = (model / "aot_config.yaml").read_text()
    (model / "aot_config.yaml").write_text(config + "verification:\n  tolerance: 1.0e-4\n")
    out, _ = run(
        "compile", "--aot-config", model / "aot_config.yaml", "--output-directory", tmp_path / "out", "--json"
    )
    root = Path(json.loads(out)["dir"])
    manifest = pkg.model_manifest(pkg.read_manifest_json(root), root / pkg.MANIFEST)
    assert manifest.verification is not None and manifest.verification.tolerance == 1e-4

    # TensorFlow's reference 5e-5 further from the package's outputs: within 1e-4, not within 1e-5.
    ref = root / manifest.reference.dir / "bs1" / "output_0.bin"
    values = array.array("f", ref.read_bytes())
    values[0] += 5e-5 * max(1.0, abs(values[0]))
    ref.write_bytes(values.tobytes())
    session = Session.of_registry(run.registry, run.cache)
    package = pkg.Package(
        manifest.package, manifest.version, root, root.parent / f"{root.name}.tar.gz", pkg.read_manifest(root)
    )
    assert verify.check_numbers(package, session).tolerance == 1e-4
    with pytest.raises(VerificationFailed, match=r"batch size 1, output output_0 \(flat\), element 0: "):
        harness.verify_package(root, manifest, session.resolve().runtime, tmp_path / "work", run.cache)
