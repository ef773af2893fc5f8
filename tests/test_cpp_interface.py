"""Build and run the C++ interface test (tests/cpp/test_interface.cc) against the example models.

The models "simple" and "multi" are compiled for batch sizes 1, 2 and 4 by
`tfaot-dist compile` (through the real toolchain, verified on the way), and the
test links their objects with the cached XLA runtime. model.h is rendered here
again with extra default rules, to test the template's rule handling too.

The CMSSW contract is tested with a double of CMSSW's PhysicsTools/TensorFlowAOT
interface written for these tests (tests/cpp/cmssw: the declarations are the
contract's facts, the code is ours), compiled with CMSSW's compiler flags
against the packages as shipped (their own model.h, the runtime package's
headers as system headers, as scram's SYSTEM_INCLUDE makes them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_cache
from kept_objects import compile_kept

from tfaot_dist import builder
from tfaot_dist.cache import Cache
from tfaot_dist.cpu import target as cpu_target
from tfaot_dist.cxx import INTERFACE_INCLUDE, runtime_package, scram_tool
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.registry import Defaults
from tfaot_dist.session import Session
from tfaot_dist.toolchain import Toolchain
from tfaot_dist.util.render import render_model_header

ROOT = Path(__file__).resolve().parent.parent
TEST_SOURCE = ROOT / "tests" / "cpp" / "test_interface.cc"
CMSSW_DOUBLE = ROOT / "tests" / "cpp" / "cmssw"
CMSSW_SOURCES = [
    CMSSW_DOUBLE / "PhysicsTools" / "TensorFlowAOT" / "src" / "Batching.cc",
    CMSSW_DOUBLE / "PhysicsTools" / "TensorFlowAOT" / "src" / "Wrapper.cc",
    ROOT / "tests" / "cpp" / "cmssw_consumer.cc",
    ROOT / "tests" / "cpp" / "cmssw_second_unit.cc",
]

# CMSSW's C++ flags (cmsdist scram-tools.file/tools/gcc: gcc-cxxcompiler.xml and env.sh), without -std;
# -Werror on top, so that any warning they leave a warning fails the build too.
CMSSW_CXXFLAGS = [
    "-O2",
    "-pthread",
    "-pipe",
    "-fPIC",
    "-DGNU_GCC",
    "-D_GNU_SOURCE",
    "-fvisibility-inlines-hidden",
    "-fno-math-errno",
    "-felide-constructors",
    "-Wall",
    "-Wextra",
    "-Wreturn-type",
    "-Wunused",
    "-Wparentheses",
    "-Wnon-virtual-dtor",
    "-Wpessimizing-move",
    "-Wclass-memaccess",
    "-Wno-non-template-friend",
    "-Wno-long-long",
    "-Wno-cast-function-type",
    "-Wno-unused-but-set-parameter",
    "-Wno-ignored-qualifiers",
    "-Wno-unused-parameter",
    "-Wno-unused-local-typedefs",
    "-Wno-attributes",
    "-Wno-psabi",
    "-Werror=main",
    "-Werror=pointer-arith",
    "-Werror=overlength-strings",
    "-Werror=return-type",
    "-Werror=missing-braces",
    "-Werror=unused-value",
    "-Werror=unused-label",
    "-Werror=address",
    "-Werror=format",
    "-Werror=sign-compare",
    "-Werror=write-strings",
    "-Werror=delete-non-virtual-dtor",
    "-Werror=strict-aliasing",
    "-Werror=narrowing",
    "-Werror=unused-but-set-variable",
    "-Werror=reorder",
    "-Werror=unused-variable",
    "-Werror=conversion-null",
    "-Werror=return-local-addr",
    "-Werror=switch",
    "-Werror=format-contains-nul",
    "-Werror=type-limits",
    "-Werror=overflow",
    "-Werror",
]
CMSSW_FLAGS = ["-std=c++20", *CMSSW_CXXFLAGS]


@pytest.fixture(scope="module")
def packages(
    example_models: Path,
    simple_every_level: Path,
    tmp_path_factory: pytest.TempPathFactory,
    shared_cache: Path,
    toolchain: Toolchain,
) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("cpp-packages")
    cache = fresh_cache(out / "cache", shared_cache)
    # simple with every default CPU level (model.h dispatches, under both contracts: conftest.py makes it
    # once per run, test_cpu_levels reads it too), multi with one
    multi = builder.compile_config(
        example_models / "multi" / "aot_config.yaml",
        out / "dist",
        Session(Cache(cache), Defaults(cpu_levels=("x86-64",))),
    )
    return {"simple": simple_every_level, "multi": multi.root}


def link_flags(toolchain: Toolchain, shared_cache: Path) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) that give consumers of compiled models the XLA AOT runtime."""
    rt = ensure_runtime(toolchain.python, shared_cache, print)
    return [*rt.cxxflags, f"-I{rt.include_dir}"], [*map(str, rt.libs), *rt.ldflags]


# warnings our own code (interface headers, model.h, test) must not trigger
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
STRICT_WARNINGS = [
    *WARNINGS,
    "-Wpedantic",
    "-Wshadow",
    "-Wconversion",
    "-Wsign-conversion",
    "-Wold-style-cast",
    "-Wnon-virtual-dtor",
    "-Woverloaded-virtual",
]

SIGNATURES: dict[str, dict[str, Any]] = {
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
    return [
        package_root / "lib" / obj
        for bs in sizes
        for obj in (f"{name}_bs{bs}.o", f"{name}_bs{bs}_constants.o")
    ]


def _gxx() -> str:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    return gxx


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def build(
    tmp_path_factory: pytest.TempPathFactory,
    packages: dict[str, Path],
    toolchain: Toolchain,
    shared_cache: Path,
) -> dict[str, Any]:
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
    return {
        "tmp": tmp,
        "base": base,
        "base_isystem": base_isystem,
        "objects": objects,
        "ldflags": ldflags,
        "refs": refs,
    }


def test_interface(build: dict[str, Any]) -> None:
    exe = build["tmp"] / "test_interface"
    flags = [*build["base"][1:], "-O2", *WARNINGS]
    code, stderr = compile_kept(flags, TEST_SOURCE, exe.with_suffix(".o"))
    assert code == 0, f"compilation failed:\n{' '.join(flags)}\n{stderr[-6000:]}"
    assert stderr == "", f"compiler warnings:\n{stderr[-6000:]}"
    proc = _run(
        [_gxx(), str(exe.with_suffix(".o")), *map(str, build["objects"]), *build["ldflags"], "-o", str(exe)]
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-6000:]
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


def test_headers_strict_warnings(build: dict[str, Any]) -> None:
    """Interface headers and model.h are clean under warnings beyond -Wall -Wextra.

    The runtime's headers (TensorFlow, XLA, Abseil) are passed with -isystem
    here: some -Wpedantic diagnostics of their macros cannot be silenced by the
    pragmas in model.h.
    """
    src = build["tmp"] / "strict.cc"
    src.write_text(STRICT_USER)
    code, stderr = compile_kept([*build["base_isystem"][1:], *STRICT_WARNINGS, "-fsyntax-only"], src, None)
    assert code == 0 and stderr == "", stderr[-6000:]


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


@pytest.fixture(scope="module")
def misuse_diagnostics(build: dict[str, Any]) -> dict[str, str]:
    """What the compiler says about each case of MISUSE, by case: the cases are functions of one
    translation unit, compiled once (each compile spends 4 s on the headers); a diagnostic belongs to
    the case whose lines it names last (an error in a header follows the `required from here` line of
    the statement that instantiated it)."""
    src = build["tmp"] / "misuse.cc"
    lines = ['#include "tfaot/Model.h"', '#include "tfaot-model-simple/model.h"']
    case_of_line = {}
    for i, case in enumerate(sorted(MISUSE)):
        lines += [f"void f{i}();", f"void f{i}() {{", "  tfaot::Model<tfaot_model::simple> m;"]
        for statement_line in MISUSE[case][0].split("\n"):
            lines.append(f"  {statement_line.strip()}")
            case_of_line[len(lines)] = case
        lines.append("}")
    src.write_text("\n".join(lines) + "\n")
    proc = _run([*build["base"], *WARNINGS, "-fsyntax-only", str(src)])
    assert proc.returncode != 0, "the misuse cases compiled"
    said = dict.fromkeys(MISUSE, "")
    named = re.compile(re.escape(str(src)) + r":(\d+):\d+:")
    current: str | None = None  # the case the diagnostic being read belongs to
    for text in proc.stderr.splitlines():
        found = named.match(text)
        if found:
            current = case_of_line.get(int(found.group(1)))
        if current:
            said[current] += text + "\n"
    return said


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_misuse_fails_to_compile(misuse_diagnostics: dict[str, str], case: str) -> None:
    """Wrong output count / types and wrong input types are compile errors with a clear message."""
    said = misuse_diagnostics[case]
    assert "error:" in said, f"{case}: compiled although it should not"
    assert MISUSE[case][1] in said, said[-4000:]


def test_render_rejects_unknown_dtype() -> None:
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


def test_render_escapes_strings() -> None:
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


# --- the CMSSW contract -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime_root(toolchain: Toolchain, shared_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime package as shipped (include/ with tfaot/ and the eigen3 paths, lib/, tool file)."""
    runtime = ensure_runtime(toolchain.python, shared_cache, print)
    package, _ = runtime_package.ensure_runtime_package(runtime, tmp_path_factory.mktemp("runtime-dist"))
    return package.root


def _tool(root: Path, name: str) -> scram_tool.ToolFile:
    return scram_tool.parse((root / "etc" / "scram.d" / f"{name}.xml").read_text())


def _link_inputs(packages: dict[str, Path], runtime_root: Path) -> list[str]:
    """Archives and flags as scram links a user of the model tools: libraries, then every tool's LDFLAGS."""
    manifest = json.loads((runtime_root / "manifest.json").read_text())
    tools = [_tool(root, f"tfaot-model-{name}") for name, root in packages.items()]
    tools.append(_tool(runtime_root, scram_tool.RUNTIME_TOOL))
    archives = [str(root / "lib" / f"libtfaot-model-{name}.a") for name, root in packages.items()]
    archives += [str(runtime_root / lib) for lib in manifest["libs"]]
    return [
        *archives,
        *manifest["system_libs"],
        *(flag for t in tools for flag in t.flags.get("LDFLAGS", [])),
    ]


def _cmssw_includes(
    packages: dict[str, Path], runtime_root: Path, runtime_flag: str = "-isystem"
) -> list[str]:
    return [
        f"-I{CMSSW_DOUBLE}",
        *(f"-I{root / 'include'}" for root in packages.values()),
        runtime_flag,
        str(runtime_root / "include"),
    ]


def _compile_objects(sources: list[Path], flags: list[str], out: Path) -> list[Path]:
    objects = []
    for src in sources:
        obj = out / f"{src.stem}.o"
        code, stderr = compile_kept(flags, src, obj)
        assert code == 0 and stderr == "", f"{src.name}:\n{stderr[-6000:]}"
        objects.append(obj)
    return objects


def test_runtime_tool_makes_tensorflow_headers_system_headers(runtime_root: Path) -> None:
    tool = _tool(runtime_root, scram_tool.RUNTIME_TOOL)
    assert tool.flags["SYSTEM_INCLUDE"] == ["1"]
    assert not [f for flags in tool.flags.values() for f in flags if f.startswith(("-std=", "-D_GLIBCXX"))]
    for path in (
        "eigen3/unsupported/Eigen/CXX11/Tensor",
        "third_party/eigen3/unsupported/Eigen/CXX11/Tensor",
        "eigen3/Eigen/Core",
        "tensorflow/compiler/tf2xla/xla_compiled_cpu_function.h",
        "tensorflow/core/platform/types.h",
        "tfaot/Model.h",
    ):
        assert (runtime_root / "include" / path).is_file(), path


def test_cmssw_contract_consumer_matches_tensorflow(
    packages: dict[str, Path], runtime_root: Path, tmp_path: Path
) -> None:
    """CMSSW's tfaot::Model<W> (its contract, in our double) runs the packages' model.h unchanged,
    built warning-free with CMSSW's flags, at compiled (1, 2, 4) and emulated (3, 7) batch sizes."""
    objects = _compile_objects(
        CMSSW_SOURCES, [*CMSSW_FLAGS, *_cmssw_includes(packages, runtime_root)], tmp_path
    )
    exe = tmp_path / "cmssw_consumer"
    proc = _run(
        [_gxx(), *CMSSW_FLAGS, *map(str, objects), *_link_inputs(packages, runtime_root), "-o", str(exe)]
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-6000:]
    refs = {name: root / "share" / f"tfaot-model-{name}" / "reference" for name, root in packages.items()}
    sizes = sorted(int(p.name[2:]) for p in refs["simple"].iterdir())
    assert sizes == [1, 2, 3, 4, 7]
    proc = _run([str(exe), str(refs["simple"]), str(refs["multi"]), *map(str, sizes)], timeout=120)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for n in sizes:
        assert f"batch size {n}: simple ok, multi ok" in proc.stdout
    assert "names tfaot_model_simple tfaot_model_multi" in proc.stdout
    assert "throws UnknownBatchSize" in proc.stdout and "throws UnknownResult" in proc.stdout
    assert "second unit: 0 failures" in proc.stdout and proc.stdout.rstrip().endswith("0 failures")
    best = [level for level in ("x86-64", "x86-64-v3", "x86-64-v4") if cpu_target.check_host(level).ok][-1]
    assert f"cpu levels {best} x86-64\n" in proc.stdout  # simple carries three levels, multi one

    # Forced through the environment: the generic code gives the same numbers; a bad name is an error.
    env = {**os.environ, "TFAOT_CPU_LEVEL": "x86-64"}
    proc = _run([str(exe), str(refs["simple"]), str(refs["multi"]), *map(str, sizes)], timeout=120, env=env)
    assert proc.returncode == 0 and "cpu levels x86-64 x86-64\n" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("0 failures")
    env["TFAOT_CPU_LEVEL"] = "x86-64-v9"
    proc = _run([str(exe), str(refs["simple"]), str(refs["multi"]), "1"], timeout=120, env=env)
    assert proc.returncode != 0 and "TFAOT_CPU_LEVEL 'x86-64-v9' is not a CPU level" in proc.stderr


def test_without_system_include_tensorflow_headers_break_cmssw_flags(
    packages: dict[str, Path], runtime_root: Path, tmp_path: Path
) -> None:
    """Why the runtime tool sets SYSTEM_INCLUDE: with -I, TensorFlow's own headers fail CMSSW's flags."""
    src = CMSSW_SOURCES[-1]
    proc = _run(
        [_gxx(), *CMSSW_FLAGS, *_cmssw_includes(packages, runtime_root, "-I"), "-fsyntax-only", str(src)]
    )
    assert proc.returncode != 0
    assert re.search(r"/include/(tsl|tensorflow|xla|absl)/\S+: error:", proc.stderr), proc.stderr[-3000:]


OUR_PLUGIN = """
#include "tfaot/Model.h"
#include "tfaot-model-multi/model.h"
#include "tfaot-model-simple/model.h"

std::size_t plugin(std::size_t n);
std::size_t plugin(std::size_t n) {
  tfaot::Model<tfaot_model::simple> simple;
  tfaot::Model<tfaot_model::multi> multi;
  tfaot::FloatArrays a;
  std::tie(a) = simple.run<tfaot::FloatArrays>(static_cast<int>(n), tfaot::FloatArrays(n, std::vector<float>(4)));
  tfaot::FloatArrays b;
  tfaot::BoolArrays c;
  std::tie(b, c) = multi.run<tfaot::FloatArrays, tfaot::BoolArrays>(static_cast<int>(n), a,
                                                                      tfaot::DoubleArrays(n, std::vector<double>(4)));
  return a.size() + b.size() + c.size();
}
"""


@pytest.mark.parametrize("contract", ["cmssw", "ours"])
def test_plugin_library_exports_no_runtime_symbols(
    packages: dict[str, Path], runtime_root: Path, tmp_path: Path, contract: str
) -> None:
    """A plugin library linked as the tools say exports none of the symbols the runtime's archives
    define (XLA runtime, Abseil), so another TensorFlow's runtime in the process (a release's
    libtf_xla_runtime.so) cannot interpose on them, nor they on it; without the tools' LDFLAGS it
    would export them. (Weak symbols that headers instantiate in the plugin's own objects, such as
    vtables, follow the plugin's own visibility settings, as for any CMSSW plugin.)
    """
    if contract == "cmssw":
        flags = [*CMSSW_FLAGS, *_cmssw_includes(packages, runtime_root)]
        objects = _compile_objects(CMSSW_SOURCES[:2] + CMSSW_SOURCES[3:], flags, tmp_path)
    else:
        src = tmp_path / "plugin.cc"
        src.write_text(OUR_PLUGIN)
        flags = [
            *CMSSW_FLAGS,
            *(f"-I{root / 'include'}" for root in packages.values()),
            "-isystem",
            str(runtime_root / "include"),
        ]
        objects = _compile_objects([src], flags, tmp_path)
    manifest = json.loads((runtime_root / "manifest.json").read_text())
    runtime_defined = set()
    for lib in manifest["libs"]:
        nm = _run(["nm", "--defined-only", str(runtime_root / lib)])
        runtime_defined |= {
            parts[2]
            for line in nm.stdout.splitlines()
            if len(parts := line.split()) == 3 and parts[1] in "TDBR"
        }
    assert len(runtime_defined) > 1000

    def exported(link: list[str], name: str) -> set[str]:
        lib = tmp_path / name
        proc = _run([_gxx(), "-shared", *CMSSW_FLAGS, *map(str, objects), *link, "-o", str(lib)])
        assert proc.returncode == 0, proc.stderr[-4000:]
        nm = _run(["nm", "-D", "--defined-only", str(lib)])
        return {
            parts[2] for line in nm.stdout.splitlines() if len(parts := line.split()) == 3
        } & runtime_defined

    inputs = _link_inputs(packages, runtime_root)
    leaked = exported(inputs, "libplugin.so")
    assert leaked == set(), "\n".join(sorted(leaked)[:50])
    without = [flag for flag in inputs if not flag.startswith("-Wl,--exclude-libs")]
    assert len(without) < len(inputs) and len(exported(without, "libplugin_unguarded.so")) > 100


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_our_interface_under_cmssw_flags(
    build: dict[str, Any], std: str, toolchain: Toolchain, shared_cache: Path
) -> None:
    """tfaot-dist's own interface (not a system header here) and model.h: clean under CMSSW's flags
    in C++17 and C++20, and the test program still passes."""
    rt = ensure_runtime(toolchain.python, shared_cache, print)
    exe = build["tmp"] / f"test_interface_{std.replace('+', 'p')}"
    flags = [
        f"-std={std}",
        *CMSSW_CXXFLAGS,
        f"-I{INTERFACE_INCLUDE}",
        f"-I{build['tmp'] / 'include'}",
        "-isystem",
        str(rt.include_dir),
    ]
    code, stderr = compile_kept(flags, TEST_SOURCE, exe.with_suffix(".o"))
    assert code == 0 and stderr == "", stderr[-6000:]
    link = [_gxx(), f"-std={std}", *CMSSW_CXXFLAGS, str(exe.with_suffix(".o")), *map(str, build["objects"])]
    proc = _run([*link, *build["ldflags"], "-o", str(exe)])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-6000:]
    proc = _run([str(exe), str(build["refs"]["simple"]), str(build["refs"]["multi"])], timeout=120)
    assert proc.returncode == 0 and " 0 failures" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_interface_gives_way_to_cmssw_in_one_unit(
    build: dict[str, Any], toolchain: Toolchain, shared_cache: Path, tmp_path: Path
) -> None:
    """Both interfaces in one translation unit: no redefinition; tfaot:: is CMSSW's, ours tfaot_dist::."""
    rt = ensure_runtime(toolchain.python, shared_cache, print)
    src = tmp_path / "both.cc"
    src.write_text(
        '#include "tfaot/Model.h"\n#include "PhysicsTools/TensorFlowAOT/interface/Model.h"\n'
        "static_assert(TFAOT_DIST_CMSSW_INTERFACE == 1);\n"
        "tfaot_dist::BatchRule ours();\ntfaot::BatchRule theirs();\n"
    )
    flags = [*CMSSW_FLAGS, f"-I{INTERFACE_INCLUDE}", f"-I{CMSSW_DOUBLE}", "-isystem", str(rt.include_dir)]
    code, stderr = compile_kept([*flags, "-fsyntax-only"], src, None)
    assert code == 0 and stderr == "", stderr[-4000:]
