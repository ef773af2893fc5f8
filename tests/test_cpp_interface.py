"""Build and run the C++ interface test (tests/cpp/test_interface.cc) against the example models.

The models "simple" and "multi" are compiled for batch sizes 1, 2 and 4 by
`tfaot-dist compile` (through the real toolchain, verified on the way), and the
test links their objects with the cached XLA runtime. model.h is rendered here
again with extra default rules, to test the template's rule handling too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import fresh_cache
from tfaot_dist import builder
from tfaot_dist.registry import Defaults
from tfaot_dist.render import render_model_header
from tfaot_dist.xla_runtime import ensure_runtime

ROOT = Path(__file__).resolve().parent.parent
INTERFACE_INCLUDE = ROOT / "tfaot_dist" / "runtime" / "include"
TEST_SOURCE = ROOT / "tests" / "cpp" / "test_interface.cc"


@pytest.fixture(scope="module")
def packages(example_models, tmp_path_factory, shared_cache, toolchain) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("cpp-packages")
    cache = fresh_cache(out / "cache", shared_cache)
    return {name: builder.compile_config(example_models / name / "aot_config.yaml", out / "dist", Defaults(),
                                         cache, print).root
            for name in ("simple", "multi")}


def link_flags(toolchain, shared_cache) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) that give consumers of compiled models the XLA AOT runtime."""
    rt = ensure_runtime(toolchain.python, shared_cache, print)
    return [*rt.cxxflags, f"-I{rt.include_dir}"], [*map(str, rt.libs), *rt.ldflags]


# warnings our own code (interface headers, model.h, test) must not trigger
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
STRICT_WARNINGS = WARNINGS + [
    "-Wpedantic",
    "-Wshadow",
    "-Wconversion",
    "-Wsign-conversion",
    "-Wold-style-cast",
    "-Wnon-virtual-dtor",
    "-Woverloaded-virtual",
]

SIGNATURES = {
    "simple": {
        "inputs": [{"name": "input_0", "dtype": "float32", "shape": [4]}],
        "outputs": [{"name": "output_0", "dtype": "float32", "shape": [2]}],
        "default_rules": [],
    },
    "multi": {
        "inputs": [
            {"name": "input_0", "dtype": "float32", "shape": [4]},
            {"name": "input_1", "dtype": "float64", "shape": [4]},
        ],
        "outputs": [
            {"name": "output_0", "dtype": "float32", "shape": [2]},
            {"name": "output_1", "dtype": "bool", "shape": [2]},
        ],
        "default_rules": ["3:2,2"],
    },
}


def _batch_sizes(name: str, headers: Path) -> list[int]:
    pattern = re.compile(rf"{re.escape(name)}_bs(\d+)\.h")
    return sorted(int(m.group(1)) for p in headers.iterdir() if (m := pattern.fullmatch(p.name)))


def _install_package(name: str, package_root: Path, include_dir: Path) -> list[Path]:
    """Render model.h next to the compiled headers in include/tfaot-model-NAME/; return the objects."""
    package = f"tfaot-model-{name}"
    headers = package_root / "include" / package
    sizes = _batch_sizes(name, headers)
    assert sizes == [1, 2, 4]
    pkg_dir = include_dir / package
    pkg_dir.mkdir(parents=True)
    for bs in sizes:
        shutil.copy2(headers / f"{name}_bs{bs}.h", pkg_dir)
    sig = SIGNATURES[name]
    context = {
        "package": package,
        "namespace": "tfaot_model",
        "class_name": name,
        "batch_sizes": sizes,
        "inputs": sig["inputs"],
        "outputs": sig["outputs"],
        "default_rules": sig["default_rules"],
        "tfaot_dist_version": "test",
    }
    (pkg_dir / "model.h").write_text(render_model_header(context))
    return [package_root / "lib" / obj for bs in sizes for obj in (f"{name}_bs{bs}.o", f"{name}_bs{bs}_constants.o")]


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    return gxx


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def build(tmp_path_factory, packages, toolchain, shared_cache):
    """Headers of both packages installed in a temporary include dir, plus their objects."""
    gxx = _gxx()
    tmp = tmp_path_factory.mktemp("cpp_interface")
    include_dir = tmp / "include"
    objects = []
    refs = {}
    for name, root in packages.items():
        objects += _install_package(name, root, include_dir)
        refs[name] = root / "share" / f"tfaot-model-{name}" / "reference"
    compile_flags, ldflags = link_flags(toolchain, shared_cache)
    head = [gxx, "-std=c++17", f"-I{INTERFACE_INCLUDE}", f"-I{include_dir}"]
    base = [*head, *compile_flags]
    # the same with the runtime's headers as system headers, as a careful user would include them
    base_isystem = list(head)
    for flag in compile_flags:
        base_isystem += ["-isystem", flag[2:]] if flag.startswith("-I") else [flag]
    return {"tmp": tmp, "base": base, "base_isystem": base_isystem, "objects": objects, "ldflags": ldflags,
            "refs": refs}


def test_interface(build):
    exe = build["tmp"] / "test_interface"
    cmd = [*build["base"], "-O2", *WARNINGS, str(TEST_SOURCE), *map(str, build["objects"]), *build["ldflags"],
           "-o", str(exe)]
    proc = _run(cmd)
    assert proc.returncode == 0, f"compilation failed:\n{' '.join(cmd)}\n{proc.stderr[-6000:]}"
    assert proc.stderr == "", f"compiler warnings:\n{proc.stderr[-6000:]}"
    proc = _run([str(exe), str(build["refs"]["simple"]), str(build["refs"]["multi"])], timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0, f"test_interface failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    assert " 0 failures" in proc.stdout


STRICT_USER = """
#include "tfaot/Model.h"
#include "tfaot-model-multi/model.h"
#include "tfaot-model-simple/model.h"

std::size_t use(std::vector<float>& flat, std::vector<double>& flat64, std::vector<float>& out);
std::size_t use(std::vector<float>& flat, std::vector<double>& flat64, std::vector<float>& out) {
  tfaot::Model<tfaot_model::simple> simple;
  tfaot::Model<tfaot_model::multi> multi;
  simple.setBatchRule("5:2,2,2");
  tfaot::FloatArrays a;
  std::tie(a) = simple.run<tfaot::FloatArrays>(1, tfaot::FloatArrays{{0, 1, 2, 3}});
  tfaot::FloatArrays b;
  tfaot::BoolArrays c;
  std::tie(b, c) = multi.run<tfaot::FloatArrays, tfaot::BoolArrays>(1, a, tfaot::DoubleArrays{{0, 1, 2, 3}});
  std::unique_ptr<bool[]> flags(new bool[2]);
  multi.runFlat(1, {flat, flat64}, {out, tfaot::OutputSpan(flags.get(), 2)});
  simple.runFlat(1, {flat}, {out});
  return a.size() + b.size() + c.size() + multi.inputIndex("input_1");
}
"""


def test_headers_strict_warnings(build):
    """Interface headers and model.h are clean under warnings beyond -Wall -Wextra.

    The runtime's headers (TensorFlow, XLA, Abseil) are passed with -isystem
    here: some -Wpedantic diagnostics of their macros cannot be silenced by the
    pragmas in model.h.
    """
    src = build["tmp"] / "strict.cc"
    src.write_text(STRICT_USER)
    proc = _run([*build["base_isystem"], *STRICT_WARNINGS, "-fsyntax-only", str(src)])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-6000:]


MISUSE = {
    "output count": (
        "std::get<0>(m.run<tfaot::FloatArrays, tfaot::FloatArrays>(1, tfaot::FloatArrays{{0, 1, 2, 3}}));",
        "the number of template arguments (output types) must equal the number of model outputs",
    ),
    "output type": (
        "std::get<0>(m.run<tfaot::DoubleArrays>(1, tfaot::FloatArrays{{0, 1, 2, 3}}));",
        "output I has the wrong type",
    ),
    "input type": (
        "std::get<0>(m.run<tfaot::FloatArrays>(1, tfaot::DoubleArrays{{0, 1, 2, 3}}));",
        "input I has the wrong type",
    ),
    "flat input": (
        "std::get<0>(m.run<tfaot::FloatArrays>(1, std::vector<float>{0, 1, 2, 3}));",
        "input I has the wrong type",
    ),
    "flat vector<bool>": (
        "std::vector<bool> b(4); std::vector<float> o(2); m.runFlat(1, {b}, {o});",
        "use of deleted function",
    ),
    "contract version": (
        "struct W : tfaot_model::simple { static constexpr int tfaotContractVersion = 99; };\n"
        "  tfaot::Model<W> w;",
        "was generated for another version of the tfaot interface headers",
    ),
}


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_misuse_fails_to_compile(build, case):
    """Wrong output count / types and wrong input types are compile errors with a clear message."""
    statement, message = MISUSE[case]
    src = build["tmp"] / f"misuse_{re.sub(r'[^a-z]+', '_', case)}.cc"
    src.write_text(
        '#include "tfaot/Model.h"\n#include "tfaot-model-simple/model.h"\n'
        f"void f();\nvoid f() {{\n  tfaot::Model<tfaot_model::simple> m;\n  {statement}\n}}\n"
    )
    proc = _run([*build["base"], *WARNINGS, "-fsyntax-only", str(src)])
    assert proc.returncode != 0, f"{case}: compiled although it should not"
    assert message in proc.stderr, proc.stderr[-4000:]


def test_render_rejects_unknown_dtype():
    import jinja2

    context = {
        "package": "tfaot-model-x",
        "namespace": "tfaot_model",
        "class_name": "x",
        "batch_sizes": [1],
        "inputs": [{"name": "a", "dtype": "float16", "shape": [1]}],
        "outputs": [{"name": "b", "dtype": "float32", "shape": []}],
        "default_rules": [],
        "tfaot_dist_version": "test",
    }
    with pytest.raises(jinja2.UndefinedError):
        render_model_header(context)
    with pytest.raises(KeyError):
        render_model_header({k: v for k, v in context.items() if k != "default_rules"})


def test_render_escapes_strings():
    context = {
        "package": "tfaot-model-x",
        "namespace": "tfaot_model",
        "class_name": "x",
        "batch_sizes": [1, 8],
        "inputs": [{"name": 'we"ird\\name', "dtype": "int64", "shape": [2, 3]}],
        "outputs": [{"name": "scalar", "dtype": "bool", "shape": []}],
        "default_rules": ["3:8"],
        "tfaot_dist_version": "1.0\n#error injected",
    }
    text = render_model_header(context)
    assert '"we\\"ird\\\\name"' in text
    assert "\n#error" not in text
    assert "std::vector<std::int64_t>{2, 3}" in text
    assert "std::vector<std::int64_t>{}" in text
    assert "bs * std::size_t{1} * 2 * 3 * sizeof(std::int64_t)" in text
    assert '#include "tfaot-model-x/x_bs8.h"' in text
