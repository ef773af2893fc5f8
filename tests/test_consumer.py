"""A user's C++ program against installed packages: same numbers as TensorFlow, no TensorFlow linked."""

import array
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run_in_toolchain, unpack_package
from kept_objects import compile_kept

from tfaot_dist import harness
from tfaot_dist import package as pkg
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.errors import VerificationFailed
from tfaot_dist.toolchain import Toolchain

CONSUMER = r"""
#include <cstdio>
#include <fstream>
#include <vector>
#include "tfaot/Model.h"
#include "tfaot-model-test-multi/model.h"

template <typename T>
std::vector<std::vector<T>> load(const char* path, int rows, int cols) {
  std::vector<T> flat(rows * cols);
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(flat.data()), flat.size() * sizeof(T));
  std::vector<std::vector<T>> out(rows);
  for (int r = 0; r < rows; r++) out[r].assign(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
  return out;
}

int main(int, char** argv) {
  const int n = std::atoi(argv[1]);
  tfaot::Model<tfaot_model::multi> model;
  tfaot::FloatArrays y;
  tfaot::BoolArrays flags;
  std::tie(y, flags) = model.run<tfaot::FloatArrays, tfaot::BoolArrays>(
      n, load<float>(argv[2], n, 4), load<double>(argv[3], n, 4));
  for (int r = 0; r < n; r++) {
    std::printf("%.9g %.9g %d %d\n", y[r][0], y[r][1], int(flags[r][0]), int(flags[r][1]));
  }
  return 0;
}
"""

TF_RUN = """
import sys, numpy as np, tensorflow as tf
model_dir, x0, x1, n, out = sys.argv[1:6]
n = int(n)
fn = tf.saved_model.load(model_dir).signatures["serving_default"]
res = fn(input_0=tf.constant(np.fromfile(x0, np.float32).reshape(n, 4)),
         input_1=tf.constant(np.fromfile(x1, np.float64).reshape(n, 4)))
with open(out, "w") as f:
    for y, b in zip(res["output_0"].numpy(), res["output_1"].numpy()):
        f.write(f"{y[0]:.9g} {y[1]:.9g} {int(b[0])} {int(b[1])}\\n")
"""


@pytest.fixture(scope="module")
def area(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages unpacked from their archives into an empty area, as a user gets them."""
    area = tmp_path_factory.mktemp("area")
    for archive in sorted((built / "dist").glob("*.tar.gz")):
        unpack_package(archive, area)
    return area


def test_consumer_matches_tensorflow_on_fresh_inputs(
    area: Path, example_models: Path, toolchain: Toolchain, tmp_path: Path
) -> None:
    (runtime,) = area.glob("tfaot-xla-runtime-*")
    model = area / "tfaot-model-test-multi-1.0.0"
    runtime_manifest = json.loads((runtime / "manifest.json").read_text())
    assert json.loads((model / "manifest.json").read_text())["requires"] == [
        {"name": "tfaot-xla-runtime", "version": runtime_manifest["version"]}
    ]
    src = tmp_path / "consumer.cc"
    src.write_text(CONSUMER)
    exe = tmp_path / "consumer"
    flags = [*runtime_manifest["cxxflags"], "-O2", "-Wall", "-Wextra", "-Werror"]
    includes = [f"-I{model / 'include'}", f"-I{runtime / 'include'}"]
    code, stderr = compile_kept([*flags, *includes], src, exe.with_suffix(".o"))
    assert code == 0 and stderr == "", stderr[-6000:]
    subprocess.run(
        [
            "g++",
            *runtime_manifest["cxxflags"],
            str(exe.with_suffix(".o")),
            str(model / "lib" / "libtfaot-model-test-multi.a"),
            *(str(runtime / lib) for lib in runtime_manifest["libs"]),
            *runtime_manifest["system_libs"],
            "-o",
            str(exe),
        ],
        check=True,
    )

    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    n = rng.randrange(1, 12)  # stitched and padded sizes included
    x0 = tmp_path / "x0.bin"
    x1 = tmp_path / "x1.bin"
    x0.write_bytes(array.array("f", [rng.uniform(-3, 3) for _ in range(n * 4)]).tobytes())
    x1.write_bytes(array.array("d", [rng.uniform(-3, 3) for _ in range(n * 4)]).tobytes())
    got = subprocess.run(
        [str(exe), str(n), str(x0), str(x1)], check=True, capture_output=True, text=True
    ).stdout.split("\n")
    script = tmp_path / "tf_run.py"
    script.write_text(TF_RUN)
    run_in_toolchain(
        toolchain,
        script,
        example_models / "multi" / "saved_model",
        x0,
        x1,
        n,
        tmp_path / "tf.txt",
        tmp=tmp_path / "tmp",
    )
    want = (tmp_path / "tf.txt").read_text().split("\n")
    assert len(got) == len(want) == n + 1, (seed, got, want)
    for row_got, row_want in zip(got[:-1], want[:-1]):
        a, b = row_got.split(), row_want.split()
        for u, v in zip(a[:2], b[:2]):
            assert abs(float(u) - float(v)) <= 1e-5 * max(1.0, abs(float(v))), (seed, n, row_got, row_want)
        assert a[2:] == b[2:], (seed, n, row_got, row_want)

    # No TensorFlow library at run time: only the C and C++ runtimes.
    needed = subprocess.run(["readelf", "-d", str(exe)], check=True, capture_output=True, text=True).stdout
    libs = {line.split("[")[1].rstrip("]") for line in needed.splitlines() if "(NEEDED)" in line}
    assert libs <= {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"}, libs
    ldd = subprocess.run(["ldd", str(exe)], check=True, capture_output=True, text=True).stdout
    assert "tensorflow" not in ldd


def test_manifest_records_verification(built: Path) -> None:
    manifest = json.loads((built / "dist" / "tfaot-model-test-simple-1.0.0" / "manifest.json").read_text())
    report = manifest["verification"]
    assert report["batch_sizes"] == [1, 2, 3, 4, 7]
    assert report["tolerance"] == 1e-5
    assert 0 <= report["outputs"]["output_0"]["max_abs"] <= 1e-5


def test_mismatch_fails_naming_model_batch_output_element(
    built: Path, tmp_path: Path, shared_cache: Path, toolchain: Toolchain
) -> None:
    """A wrong number anywhere fails verification with a report that names where."""
    root = tmp_path / "pkg"
    shutil.copytree(built / "dist" / "tfaot-model-test-multi-1.0.0", root)
    manifest = pkg.model_manifest(json.loads((root / "manifest.json").read_text()), root / "manifest.json")
    ref = root / manifest.reference.dir / "bs7" / "output_0.bin"
    values = array.array("f", ref.read_bytes())
    values[5] += 1e-3
    ref.write_bytes(values.tobytes())
    runtime = ensure_runtime(toolchain.python, shared_cache)
    with pytest.raises(VerificationFailed) as info:
        harness.verify_package(root, manifest, runtime, tmp_path / "work", shared_cache)
    assert "tfaot-model-test-multi: batch size 7, output output_0" in str(info.value)
    assert "element 5" in str(info.value)
