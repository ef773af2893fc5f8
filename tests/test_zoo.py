"""The architecture zoo (examples/make_zoo.py) with TensorFlow 2.21: every model is registered, built at
the registry's default CPU levels, verified at each level this machine runs, and a user's C++ program
linked against its unpacked package matches TensorFlow on fresh inputs (padded sequences included).

The models are the generator's small "test" size (same structure as the benchmark size). The same goes
for Keras 2 exports (tf_keras) of the recurrent models with TensorFlow 2.21, and for the recurrent and
convolutional models exported and compiled by TensorFlow 2.12 (tf.keras is Keras 2 there).
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import shutil
import subprocess
import sys
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, TF212, DataRepo, fresh_cache, run_in_toolchain, tensorflow_answers, unpack_package
from kept import code_of, host_parts, kept, source_digest, toolchain_parts

from tfaot_dist import cli
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import pch, runtime_parts
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.registry import DEFAULT_CPU_LEVELS, DEFAULT_REQUIREMENTS
from tfaot_dist.toolchain import WORKER_SOURCES, Toolchain, ensure_toolchain, worker_env

pytestmark = [pytest.mark.slow]

ZOO = [
    "deepjet",
    "deeptau",
    "deeptau_small",
    "particlenet",
    "transformer",
    "gru_tagger",
    "regression64",
    "conv3d",
    "pooling",
    "recurrent",
]
# Inputs that hold sequences padded with zeros at the end (masking, the LSTM branches of DeepJet), and the
# token ids of the tagger (0 is its padding id; its vocabulary has 20 ids at test size).
PADDED = {
    ("recurrent", "sequence"),
    ("deepjet", "cpf"),
    ("deepjet", "npf"),
    ("deepjet", "sv"),
    ("gru_tagger", "ids"),
}
VOCABULARY = 20
TOLERANCE = 1e-5  # max abs deviation, relative to the output's scale (max(1, max |TensorFlow output|))
ROWS = 5  # batch of the consumer: compiled sizes 1 and 4, stitched

# dtype -> (tfaot arrays type, C++ element type, array typecode)
CXX_TYPES = {
    "float32": ("FloatArrays", "float", "f"),
    "float64": ("DoubleArrays", "double", "d"),
    "int32": ("Int32Arrays", "std::int32_t", "i"),
    "int64": ("Int64Arrays", "std::int64_t", "q"),
}

# Reads each input (raw little-endian rows), runs the model through tfaot::Model::run, writes each output.
CONSUMER = """\
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>
#include "tfaot/Model.h"
#include "{package}/model.h"

template <typename T>
std::vector<std::vector<T>> load(const std::string& path, int rows, std::size_t cols) {{
  std::vector<T> flat(rows * cols);
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(flat.data()), flat.size() * sizeof(T));
  std::vector<std::vector<T>> out(rows);
  for (int r = 0; r < rows; r++) out[r].assign(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
  return out;
}}

template <typename T>
void save(const std::string& path, const std::vector<std::vector<T>>& rows) {{
  std::ofstream f(path, std::ios::binary);
  for (const auto& row : rows) f.write(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(T));
}}

int main(int, char** argv) {{
  const int n = std::atoi(argv[1]);
  const std::string dir = argv[2];
  tfaot::Model<{cpp_class}> model;
{declarations}
  std::tie({outputs}) = model.run<{output_types}>(n, {inputs});
{saves}
  return 0;
}}
"""

TF_RUN = """
import json, sys
import numpy as np
import tensorflow as tf
saved_model, case = sys.argv[1:3]
spec = json.load(open(case + "/signature.json"))
fn = tf.saved_model.load(saved_model).signatures["serving_default"]
feeds = {t["name"]: np.fromfile(f"{case}/input_{i}.bin", t["dtype"]).reshape([spec["rows"]] + t["shape"])
         for i, t in enumerate(spec["inputs"])}
out = fn(**{k: tf.constant(v) for k, v in feeds.items()})
for i, t in enumerate(spec["outputs"]):
    out[t["name"]].numpy().tofile(f"{case}/tf_output_{i}.bin")
"""


def consumer_source(package: str, cpp_class: str, signature: dict[str, Any]) -> str:
    declarations, inputs = [], []
    for i, t in enumerate(signature["inputs"]):
        element = CXX_TYPES[t["dtype"]][1]
        declarations.append(
            f'  auto in{i} = load<{element}>(dir + "/input_{i}.bin", n, {math.prod(t["shape"])});'
        )
        inputs.append(f"in{i}")
    outputs, types, saves = [], [], []
    for i, t in enumerate(signature["outputs"]):
        arrays = CXX_TYPES[t["dtype"]][0]
        declarations.append(f"  tfaot::{arrays} out{i};")
        outputs.append(f"out{i}")
        types.append(f"tfaot::{arrays}")
        saves.append(f'  save(dir + "/output_{i}.bin", out{i});')
    return CONSUMER.format(
        package=package,
        cpp_class=cpp_class,
        declarations="\n".join(declarations),
        outputs=", ".join(outputs),
        output_types=", ".join(types),
        inputs=", ".join(inputs),
        saves="\n".join(saves),
    )


def fresh_inputs(model: str, signature: dict[str, Any], rows: int, rng: random.Random) -> list[array[Any]]:
    """Inputs in signature order, flat; padded inputs get a random length per row and zeros after it."""
    values = []
    for t in signature["inputs"]:
        typecode = CXX_TYPES[t["dtype"]][2]
        row = math.prod(t["shape"])
        value: array[Any]
        if typecode in "iq":
            value = array(typecode, [rng.randrange(1, VOCABULARY) for _ in range(rows * row)])
        else:
            value = array(typecode, [rng.uniform(-2.0, 2.0) for _ in range(rows * row)])
        if (model, t["name"]) in PADDED:
            step = row // t["shape"][0]  # elements per sequence step
            for r in range(rows):
                length = rng.randrange(1, t["shape"][0] + 1)
                for k in range(r * row + length * step, (r + 1) * row):
                    value[k] = 0
        values.append(value)
    return values


def read(path: Path, dtype: str) -> array[Any]:
    return array(CXX_TYPES[dtype][2], path.read_bytes())


def make_zoo(toolchain: Toolchain, out: Path, names: list[str], *options: str) -> Path:
    run_in_toolchain(toolchain, REPO / "examples" / "make_zoo.py", out, *options, *names, tmp=out / ".tmp")
    return out


def build_area(
    root: Path, models: Path, names: list[str], shared_cache: Path, requirements: Sequence[str] | None = None
) -> Path:
    """Models registered from a git data repository, built with `build --all` at the registry's default CPU
    levels (with the toolchain of requirements, else the default) and unpacked into an area; returns it."""
    repo = DataRepo(root / "data")
    for name in names:
        repo.add_model(
            name,
            models / name / "saved_model",
            yaml.safe_load((models / name / "aot_config.yaml").read_text()),
        )
    repo.commit("zoo")
    registry = root / "registry"
    (registry / "models").mkdir(parents=True)
    defaults = yaml.safe_load((REPO / "registry" / "registry.yaml").read_text())
    if requirements:
        defaults["toolchain"]["requirements"] = list(requirements)
    (registry / "registry.yaml").write_text(yaml.safe_dump(defaults))
    mp = pytest.MonkeyPatch()
    mp.setenv("TFAOT_DIST_CACHE", str(fresh_cache(root / "cache", shared_cache)))
    try:
        for name in names:
            assert (
                cli.main(
                    [
                        "--registry",
                        str(registry),
                        "add-model",
                        package_name(name),
                        "--source",
                        repo.url,
                        "--aot-config",
                        f"{name}/aot_config.yaml",
                    ]
                )
                == 0
            ), name
        assert cli.main(["--registry", str(registry), "build", "--all", "--dist", str(root / "dist")]) == 0
    finally:
        mp.undo()
    area = root / "area"
    for archive in sorted((root / "dist").glob("*.tar.gz")):
        unpack_package(archive, area)
    return area


def package_name(model: str) -> str:
    return f"zoo-{model.replace('_', '-')}"


def package_dir(area: Path, model: str) -> Path:
    (found,) = area.glob(f"tfaot-model-{package_name(model)}-*")
    return found


def check_levels(area: Path, model: str) -> None:
    """The package carries the registry's default levels, verified at each one this machine runs."""
    manifest = json.loads((package_dir(area, model) / "manifest.json").read_text())
    levels = manifest["verification"]["cpu_levels"]
    assert sorted(levels) == sorted(DEFAULT_CPU_LEVELS), levels
    for level, state in levels.items():
        # Every level this machine runs is verified; the others say why not (no AVX-512 here, for example).
        assert state["verified"] == cpu_target.check_host(level).ok, (level, state)
    assert levels["x86-64"]["verified"] and levels["x86-64-v3"]["verified"]
    for name, deviation in manifest["verification"]["outputs"].items():
        assert deviation["max_abs"] <= TOLERANCE, (name, deviation)


def check_consumer(area: Path, model: str, saved_model: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    """A user's program against the unpacked package, at each level this machine runs: TensorFlow's numbers
    (TensorFlow of the toolchain, which made the package) on fresh inputs, padded sequences included."""
    pkg = package_dir(area, model)
    manifest = json.loads((pkg / "manifest.json").read_text())
    (runtime,) = area.glob("tfaot-xla-runtime-*")
    runtime_manifest = json.loads((runtime / "manifest.json").read_text())
    signature = manifest["signature"]
    compilation = manifest["compilation"]
    src = tmp_path / "consumer.cc"
    src.write_text(
        consumer_source(
            pkg.name.rsplit("-", 1)[0], f"{compilation['namespace']}::{compilation['class_name']}", signature
        )
    )
    flags = [
        *runtime_manifest["cxxflags"],
        "-O1",
        "-Wall",
        f"-I{pkg / 'include'}",
        f"-I{runtime / 'include'}",
    ]
    # Its compile is kept while the area (a kept directory: its name is its key), the source and the
    # flags are the same; the link, which takes the package's archives, is done every time.
    parts = {"area": area.parent.name, "source": src.read_text(), "flags": flags, "host": host_parts()}
    kept_obj = kept(
        f"{area.parent.name.rsplit('-', 1)[0]}-consumer",  # NAME-built-consumer: its old keys pruned
        parts,
        lambda out: subprocess.run(
            ["g++", *flags, "-c", str(src), "-o", str(out / "consumer.o")], check=True
        ),
    )
    exe = tmp_path / "consumer"
    subprocess.run(
        [
            "g++",
            *runtime_manifest["cxxflags"],
            str(kept_obj / "consumer.o"),
            *map(str, sorted((pkg / "lib").glob("*.a"))),
            *(str(runtime / lib) for lib in runtime_manifest["libs"]),
            *runtime_manifest["system_libs"],
            "-o",
            str(exe),
        ],
        check=True,
    )
    ldd = subprocess.run(["ldd", str(exe)], check=True, capture_output=True, text=True).stdout
    assert "tensorflow" not in ldd and "libtf" not in ldd, ldd

    case = tmp_path / "case"
    shutil.copytree(zoo_answers(model, signature, saved_model, toolchain), case)

    levels = [level for level in DEFAULT_CPU_LEVELS if cpu_target.check_host(level).ok]
    assert "x86-64" in levels
    for level in levels:
        subprocess.run([str(exe), str(ROWS), str(case)], check=True, env={"TFAOT_CPU_LEVEL": level})
        for i, t in enumerate(signature["outputs"]):
            want = read(case / f"tf_output_{i}.bin", t["dtype"])
            got = read(case / f"output_{i}.bin", t["dtype"])
            assert len(got) == len(want) == ROWS * math.prod(t["shape"]), (level, t["name"])
            scale = max(1.0, *map(abs, want))
            deviation = max(abs(a - b) for a, b in zip(got, want))
            assert deviation <= TOLERANCE * scale, (model, level, t["name"], deviation)


def zoo_answers(model: str, signature: dict[str, Any], saved_model: Path, toolchain: Toolchain) -> Path:
    """Fresh inputs (input_I.bin, seeded by the model's name) and TensorFlow's outputs for them
    (tf_output_I.bin), kept (conftest.tensorflow_answers)."""
    values = fresh_inputs(model, signature, ROWS, random.Random(model))
    inputs = {f"input_{i}.bin": value.tobytes() for i, value in enumerate(values)}  # little-endian on x86-64
    inputs["signature.json"] = json.dumps({"rows": ROWS, **signature}, sort_keys=True).encode()
    return tensorflow_answers(toolchain, model, TF_RUN, saved_model, inputs)


# ---------------------------------------------------------------- TensorFlow 2.21, Keras 3


def family_params(family: str, models: list[str]) -> list[Any]:
    """Each model of a family in an xdist group of its own: its export and its build are made once, and the
    models of the zoo spread over the workers."""
    return [pytest.param(model, marks=pytest.mark.xdist_group(f"{family}-{model}")) for model in models]


def exported(family: str, model: str, exporter: Toolchain, *options: str) -> Path:
    """model's directory (saved_model/, aot_config.yaml) exported by exporter: kept between runs while
    make_zoo.py and the exporter's environment are the same (tests/kept.py)."""
    parts = {
        "script": source_digest(REPO / "examples" / "make_zoo.py"),
        "exporter": toolchain_parts(exporter),
        "model": model,
        "options": list(options),
    }
    return kept(f"{family}-{model}", parts, lambda out: make_zoo(exporter, out, [model], *options)) / model


@functools.cache
def shared_toolchain(shared_cache: Path, requirements: tuple[str, ...]) -> Toolchain:
    """The shared cache's toolchain of requirements, found once per worker: its check reads each of its
    26k files (a third of a CPU-second), and each zoo test's kept area or export asks for its key."""
    return ensure_toolchain(shared_cache, requirements, lambda m: print(m, file=sys.stderr))


def built_area(family: str, model: Path, shared_cache: Path, requirements: Sequence[str] = ()) -> Path:
    """The area of model's package and its runtime, built by `build --all`: kept between runs while the
    export, the tool's code, the registry's defaults, the test code that builds it, the compile toolchain
    and the host are the same (tests/kept.py)."""
    compiler = shared_toolchain(shared_cache, tuple(requirements) or DEFAULT_REQUIREMENTS)
    parts = {
        "export": source_digest(model),
        "tool": source_digest(REPO / "tfaot_dist"),
        "registry": source_digest(REPO / "registry" / "registry.yaml"),
        "tests": code_of(built_area, build_area, package_name, DataRepo, fresh_cache, unpack_package),
        "toolchain": toolchain_parts(compiler),
        "host": host_parts(),
    }

    def make(root: Path) -> None:
        build_area(root, model.parent, [model.name], shared_cache, requirements or None)
        for step in ("dist", "cache", "data", "registry"):  # the area is all its users read
            shutil.rmtree(root / step)

    return kept(f"{family}-{model.name}-built", parts, make) / "area"


@pytest.fixture
def zoo_model(model: str, toolchain: Toolchain) -> Path:
    return exported("zoo", model, toolchain)


@pytest.fixture
def zoo_area(zoo_model: Path, shared_cache: Path) -> Path:
    return built_area("zoo", zoo_model, shared_cache)


@pytest.mark.parametrize("model", family_params("zoo", ZOO))
def test_zoo_model_verifies_at_every_level(zoo_area: Path, model: str) -> None:
    check_levels(zoo_area, model)


GATHER_OR_SCATTER = re.compile(r"\bvp?(?:gather|scatter)\w*", re.ASCII)


@pytest.mark.parametrize("model", family_params("zoo", ZOO))
def test_v4_code_has_no_gathers_or_scatters(zoo_area: Path, model: str) -> None:
    """At x86-64-v4 tfcompile is told to prefer plain loads and stores: without it these models' v4
    objects hold 30-370 AVX-512 gathers and scatters (strided softmax rows, pooling windows), slower
    than the shuffles v3 uses. The manifest says which features each level was compiled with."""
    pkg = package_dir(zoo_area, model)
    compilation = json.loads((pkg / "manifest.json").read_text())["compilation"]
    assert compilation["tfcompile_target_features"] == {"x86-64-v4": "+prefer-no-gather,+prefer-no-scatter"}
    objects = sorted((pkg / "lib").glob("*_x86_64_v4.o"))
    assert objects
    for obj in objects:
        code = subprocess.run(["objdump", "-d", str(obj)], check=True, capture_output=True, text=True).stdout
        assert re.search(r"\tv\w+ ", code), obj.name  # VEX-encoded code was disassembled (AVX and up)
        assert not GATHER_OR_SCATTER.search(code), (obj.name, GATHER_OR_SCATTER.findall(code)[:3])


@pytest.mark.parametrize("model", family_params("zoo", ZOO))
def test_zoo_consumer_matches_tensorflow(
    zoo_area: Path, zoo_model: Path, toolchain: Toolchain, tmp_path: Path, model: str
) -> None:
    check_consumer(zoo_area, model, zoo_model / "saved_model", toolchain, tmp_path)


@pytest.mark.parametrize("model", family_params("zoo", ["deeptau"]))
def test_header_probe_reads_the_precompiled_header_and_finds_the_same_calls(
    zoo_area: Path, toolchain: Toolchain, shared_cache: Path, tmp_path: Path, model: str
) -> None:
    """The build's compile of the generated headers (which runtime parts they call) takes the -O0
    precompiled header, and it finds the same calls as a compile of the headers as text: GCC read the
    .gch (its dependency file lists no tfaot_pch.h), not the header."""
    pkg = package_dir(zoo_area, model)
    manifest = json.loads((pkg / "manifest.json").read_text())
    headers = sorted(p for p in (pkg / "include").rglob("*.h") if p.name != "model.h")
    runtime = ensure_runtime(toolchain.python, shared_cache)

    def calls(work: Path, flags: Callable[[], Sequence[str]]) -> set[str]:
        model = runtime_parts.CompiledModel([], headers, manifest["compilation"]["namespace"], work)
        objects = runtime_parts.header_calls(
            model, runtime.compiler, runtime.cxxflags, runtime.include_dir, flags
        )
        assert objects, "no generated header calls the runtime"
        return runtime_parts.undefined_symbols(objects)

    with_pch = calls(tmp_path / "pch", lambda: [*pch.probe_flags(runtime, shared_cache), "-MD"])
    assert "-include" in pch.probe_flags(runtime, shared_cache)  # the .gch was built
    # What GCC read as text: the generated headers and what they include, not what those include.
    read = {Path(p) for p in (tmp_path / "pch" / "runtime_calls.d").read_text().split()[1:] if p != "\\"}
    assert not [p for p in read if p.name == "tfaot_pch.h" or p.match("absl/base/config.h")], sorted(read)
    as_text = calls(tmp_path / "text", tuple)
    assert with_pch == as_text
    assert any(runtime_parts.XLA_SYMBOL.search(s) for s in as_text), sorted(as_text)[:5]


# ---------------------------------------------------------------- TensorFlow 2.21, Keras 2 (tf_keras)

# Keras 2 exports on TensorFlow 2.21 come from tf_keras: an environment of its own makes them (the
# compile toolchain stays TensorFlow alone; loading a SavedModel needs no Keras).
TF_KERAS = (DEFAULT_REQUIREMENTS[0], "tf-keras==2.21.0")
KERAS2 = ["recurrent", "gru_tagger"]


@pytest.fixture
def keras2_model(model: str, shared_cache: Path, toolchain: Toolchain) -> Path:
    exporter = shared_toolchain(shared_cache, TF_KERAS)
    return exported("zoo-keras2", model, exporter, "--keras", "2")


@pytest.mark.parametrize("model", family_params("zoo-keras2", KERAS2))
def test_keras2_export_verifies_and_matches_tensorflow(
    keras2_model: Path,
    shared_cache: Path,
    toolchain: Toolchain,
    tmp_path: Path,
    model: str,
) -> None:
    area = built_area("zoo-keras2", keras2_model, shared_cache)
    check_levels(area, model)
    check_consumer(area, model, keras2_model / "saved_model", toolchain, tmp_path)


# ---------------------------------------------------------------- TensorFlow 2.12 (Keras 2, tf.keras)

ZOO212 = [
    "recurrent",
    "deepjet",
    "deeptau",
    "deeptau_small",
    "conv3d",
    "pooling",
]  # the recurrent and convolutional ones


@pytest.fixture
def zoo212_model(model: str, toolchain212: Toolchain) -> Path:
    return exported("zoo212", model, toolchain212)


@pytest.mark.parametrize("model", family_params("zoo212", ZOO212))
def test_zoo_with_tf212_verifies_and_matches_tensorflow(
    zoo212_model: Path,
    shared_cache: Path,
    toolchain212: Toolchain,
    tmp_path: Path,
    model: str,
) -> None:
    area = built_area("zoo212", zoo212_model, shared_cache, TF212)
    manifest = json.loads((package_dir(area, model) / "manifest.json").read_text())
    assert manifest["toolchain"]["tensorflow_version"] == "2.12.0"
    assert "tfcompile_target_features" not in manifest["compilation"]  # its LLVM predates the features
    check_levels(area, model)
    check_consumer(area, model, zoo212_model / "saved_model", toolchain212, tmp_path)


# ---------------------------------------------------------------- Conv3D as Conv2D (TensorFlow 2.21)

# Runs in the toolchain: for each padding, stride and kernel shape, a graph with one Conv3D, the worker's
# rewrite, and both graphs run by TensorFlow on the same input; prints the worst deviation relative to scale.
CONV3D_SCRIPT = """
import importlib.util, sys
import numpy as np
import tensorflow as tf
spec = importlib.util.spec_from_file_location("graph_rewrites", sys.argv[1])
rewrites = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rewrites)
rng = np.random.default_rng(0)
worst, cases = 0.0, 0
for padding in ("SAME", "VALID"):
    for strides in ((1, 1, 1), (2, 1, 1), (2, 2, 3), (3, 1, 2)):
        for kernel in ((3, 3, 3), (1, 2, 3), (2, 1, 1)):
            x = rng.normal(size=(2, 7, 6, 5, 3)).astype("float32")
            graph = tf.Graph()
            with graph.as_default():
                fed = tf.compat.v1.placeholder(tf.float32, x.shape, name="x")
                weights = tf.constant(rng.normal(size=(*kernel, 3, 4)).astype("float32"))
                tf.nn.conv3d(fed, weights, [1, *strides, 1], padding, name="conv")
            graph_def = graph.as_graph_def()
            want = tf.compat.v1.Session(graph=graph).run("conv:0", {"x:0": x})
            assert rewrites.conv3d_as_conv2d(tf, graph_def) == {"Conv3D": 1}
            assert "Conv3D" not in {n.op for n in graph_def.node}
            rewritten = tf.Graph()
            with rewritten.as_default():
                tf.graph_util.import_graph_def(graph_def, name="")
            got = tf.compat.v1.Session(graph=rewritten).run("conv:0", {"x:0": x})
            assert got.shape == want.shape, (padding, strides, kernel, got.shape, want.shape)
            worst = max(worst, float(np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))))
            cases += 1
print(cases, worst)
"""


def test_conv3d_rewrite_equals_tensorflows_conv3d(toolchain: Toolchain, tmp_path: Path) -> None:
    """The worker's Conv3D -> Conv2D rewrite against TensorFlow's own Conv3D: SAME and VALID padding, strides
    of 1 to 3 per axis, kernels deeper and shallower than wide (the zoo's conv3d model compiles through it)."""
    script = tmp_path / "conv3d.py"
    script.write_text(CONV3D_SCRIPT)
    proc = subprocess.run(
        [str(toolchain.python), "-I", str(script), str(WORKER_SOURCES[1])],
        env=worker_env(tmp_path),
        check=True,
        capture_output=True,
        text=True,
    )
    cases, worst = proc.stdout.split()
    assert int(cases) == 24
    assert float(worst) <= TOLERANCE, worst
