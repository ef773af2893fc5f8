"""The XLA AOT runtime, built for real (no mocks), in the shared cache ($TFAOT_DIST_CACHE).

The first build takes several minutes (Abseil, then the runtime, on 2 cores);
later runs reuse the cache. The model objects come from the built simple package.
"""

import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from tfaot_dist.cxx import xla_runtime
from tfaot_dist.toolchain import Toolchain

# The first run builds the runtime (minutes); later runs reuse the cache.
pytestmark = pytest.mark.slow

# Shared libraries a consumer may need at run time: the C and C++ runtimes.
ALLOWED_NEEDED = re.compile(
    r"^(libstdc\+\+\.so\.\d+|libm\.so\.\d+|libgcc_s\.so\.\d+|libc\.so\.\d+|libpthread\.so\.\d+"
    r"|ld-linux[-\w.]*\.so\.\d+)$"
)

# Generic driver: reads every argument buffer from a file, runs, writes every
# result buffer to a file. The model is chosen with -DMODEL_HEADER/-DMODEL_CLASS.
CONSUMER_CC = r"""
#include MODEL_HEADER
#include <cstdio>

static bool read_exact(const char* path, void* data, long size) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return false;
  long got = static_cast<long>(std::fread(data, 1, size, f));
  bool at_end = std::fgetc(f) == EOF;
  std::fclose(f);
  return got == size && at_end;
}

int main(int argc, char** argv) {
  MODEL_CLASS model;
  if (argc != 1 + model.num_args() + model.num_results()) {
    std::fprintf(stderr, "usage: %s ARG_FILE... RESULT_FILE...\n", argv[0]);
    return 3;
  }
  for (int i = 0; i < model.num_args(); ++i) {
    if (!read_exact(argv[1 + i], model.arg_data(i), model.arg_size(i))) {
      std::fprintf(stderr, "%s: expected %d bytes\n", argv[1 + i], model.arg_size(i));
      return 4;
    }
  }
  if (!model.Run()) {
    std::fprintf(stderr, "Run failed: %s\n", model.error_msg().c_str());
    return 2;
  }
  for (int j = 0; j < model.num_results(); ++j) {
    FILE* f = std::fopen(argv[1 + model.num_args() + j], "wb");
    if (!f) return 5;
    std::fwrite(model.result_data(j), 1, model.result_size(j), f);
    std::fclose(f);
  }
  return 0;
}
"""


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, msg: str) -> None:
        self.lines.append(msg)
        print(msg)


@pytest.fixture(scope="session")
def cache_dir(shared_cache: Path) -> Path:
    return shared_cache


@pytest.fixture(scope="session")
def toolchain_python(toolchain: Toolchain) -> Path:
    return toolchain.python


@pytest.fixture(scope="session")
def runtime(toolchain_python: Path, cache_dir: Path) -> xla_runtime.XlaRuntime:
    return xla_runtime.ensure_runtime(toolchain_python, cache_dir, log=_Log())


@pytest.fixture(scope="session")
def simple_package(built: Path) -> Path:
    return built / "dist" / "tfaot-model-test-simple-1.0.0"


@pytest.fixture(scope="session")
def simple_consumer(
    runtime: xla_runtime.XlaRuntime, simple_package: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The bs1 class of the built simple package, linked from its kernel and constants objects only."""
    lib = simple_package / "lib"
    work = tmp_path_factory.mktemp("consumer")
    src = work / "consumer.cc"
    src.write_text(CONSUMER_CC)
    exe = work / "simple_bs1_consumer"
    xla_runtime.compile_object(
        runtime,
        src,
        [simple_package / "include" / "tfaot-model-test-simple"],
        work / "consumer.o",
        extra_flags=['-DMODEL_HEADER="simple_bs1.h"', "-DMODEL_CLASS=tfaot_model::simple_bs1"],
    )
    xla_runtime.link_consumer(
        runtime, [work / "consumer.o"], [lib / "simple_bs1.o", lib / "simple_bs1_constants.o"], exe
    )
    return exe


def _floats(path: Path) -> list[float]:
    data = path.read_bytes()
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def test_simple_model_matches_tensorflow(simple_consumer: Path, simple_package: Path, tmp_path: Path) -> None:
    ref = simple_package / "share" / "tfaot-model-test-simple" / "reference" / "bs1"
    result = tmp_path / "output_0.bin"
    proc = subprocess.run(
        [str(simple_consumer), str(ref / "input_0.bin"), str(result)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    got, want = _floats(result), _floats(ref / "output_0.bin")
    assert len(got) == len(want) == 2
    assert all(abs(g - w) <= 1e-5 for g, w in zip(got, want)), (got, want)


def test_consumer_needs_no_tensorflow_library(simple_consumer: Path) -> None:
    dynamic = subprocess.run(
        ["readelf", "-d", str(simple_consumer)], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert needed, dynamic
    assert [n for n in needed if not ALLOWED_NEEDED.match(n)] == [], needed
    # ldd also shows what the needed libraries pull in.
    resolved = subprocess.run(
        ["ldd", str(simple_consumer)], capture_output=True, text=True, check=True
    ).stdout
    assert "tensorflow" not in resolved, resolved


def test_tree_is_self_contained(runtime: xla_runtime.XlaRuntime, toolchain_python: Path) -> None:
    root = runtime.root
    links = [p for p in root.rglob("*") if p.is_symlink()]
    assert links == []
    for lib in runtime.libs:
        assert lib.is_file() and lib.is_relative_to(root)
    meta_ns = xla_runtime.XlaRuntime.from_dir(root)
    assert meta_ns == runtime
    # The shipped absl is the compiled one, not the wheel's (whose inline
    # namespace the compiled library does not define).
    tf = xla_runtime.locate_tensorflow(toolchain_python)
    ours = (runtime.include_dir / "absl" / "base" / "options.h").read_text()
    wheels = (tf.include / "absl" / "base" / "options.h").read_text()
    ns = re.compile(r"#define\s+ABSL_OPTION_INLINE_NAMESPACE_NAME\s+(\w+)")
    found_ours, found_wheels = ns.search(ours), ns.search(wheels)
    assert found_ours and found_wheels
    assert found_ours.group(1) != found_wheels.group(1)
    # Only the headers generated code needs: a few MB, not the wheel's 287 MB.
    size = sum(p.stat().st_size for p in runtime.include_dir.rglob("*") if p.is_file())
    assert size < 30_000_000
    assert (runtime.include_dir / "tensorflow/compiler/tf2xla/xla_compiled_cpu_function.h").is_file()
    assert not (runtime.include_dir / "tensorflow/core/framework").exists()


def test_second_call_is_a_cache_hit(
    runtime: xla_runtime.XlaRuntime, toolchain_python: Path, cache_dir: Path
) -> None:
    log = _Log()
    t0 = time.monotonic()
    again = xla_runtime.ensure_runtime(toolchain_python, cache_dir, log=log)
    elapsed = time.monotonic() - t0
    assert again == runtime
    assert again.key == xla_runtime.runtime_key(toolchain_python)
    assert log.lines == []  # nothing was built or downloaded
    assert elapsed < 10, elapsed


def test_moved_tree_compiles_and_links(runtime: xla_runtime.XlaRuntime, tmp_path: Path) -> None:
    # What users get: the tree somewhere else, without TensorFlow.
    moved = tmp_path / "moved-runtime"
    shutil.copytree(runtime.root, moved)
    rt = xla_runtime.XlaRuntime.from_dir(moved)
    assert all(lib.is_relative_to(moved) for lib in rt.libs)
    src = tmp_path / "headers.cc"
    src.write_text(
        "".join(f'#include "{h}"\n' for h in xla_runtime.CODEGEN_HEADERS)
        + "int main(int argc, char**) {\n"
        + "  CHECK_GT(argc, 0);\n"  # Abseil logging, from the compiled archive
        + "  absl::BlockingCounter counter(1);\n"
        + "  counter.DecrementCount();\n"
        + "  counter.Wait();\n"
        + "  return 0;\n}\n"
    )
    exe = tmp_path / "headers"
    xla_runtime.compile_object(rt, src, [], tmp_path / "headers.o")
    xla_runtime.link_consumer(rt, [tmp_path / "headers.o"], [], exe)
    subprocess.run([str(exe)], check=True)


def test_compile_errors_carry_the_compiler_message(runtime: xla_runtime.XlaRuntime, tmp_path: Path) -> None:
    src = tmp_path / "broken.cc"
    src.write_text("int main() { return undeclared_name; }\n")
    with pytest.raises(xla_runtime.RuntimeBuildError, match="undeclared_name"):
        xla_runtime.compile_object(runtime, src, [], tmp_path / "broken.o")
