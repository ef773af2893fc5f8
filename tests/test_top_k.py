"""top_k followed by a slice (kNN: `top_k(-distance, k + 1)[:, :, 1:]`) compiles to XLA's TopK call.

Without the worker's rewrite (graph_rewrites.top_k_kept_whole) XLA merges the two slices, no longer sees
its top-k pattern and sorts every row in full through a compiled comparator. The test compiles the zoo's
ParticleNet-like model (test size: one kNN block) at one level, which `compile` verifies against
TensorFlow at batch sizes 1, 3, 4 and 7, and reads which runtime call the generated code makes.
"""

import json
from pathlib import Path

import pytest
from conftest import Cli
from test_zoo import exported

from tfaot_dist.toolchain import Toolchain


@pytest.fixture(scope="module")
def particlenet(toolchain: Toolchain) -> Path:
    return exported("zoo", "particlenet", toolchain)  # test_zoo.py's export (read-only)


def test_knn_top_k_takes_xlas_top_k_call_and_matches_tensorflow(
    run: Cli, particlenet: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "aot_config.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model": {"name": "knn", "version": "1.0.0", "saved_model": str(particlenet / "saved_model")},
                "compilation": {"batch_sizes": [1, 4], "cpu_levels": ["x86-64"]},
            }
        )
    )
    run("compile", "--aot-config", cfg, "--output-directory", tmp_path / "out")
    root = tmp_path / "out" / "tfaot-model-knn-1.0.0"
    manifest = json.loads((root / "manifest.json").read_text())
    # and its two Dense + BatchNormalization (Keras 3: elementwise ops) folded into the products' weights
    assert manifest["compilation"]["rewritten_ops"] == {"TopKV2": 1, "ScaleShift": 2}
    assert manifest["verification"]["batch_sizes"] == [1, 3, 4, 7]  # compared with TensorFlow
    for bs in (1, 4):
        header = (root / "include" / "tfaot-model-knn" / f"knn_bs{bs}.h").read_text()
        assert "::xla::cpu::internal::TopK(" in header and "SortInplace" not in header
