"""Where a toolchain's TensorFlow is (cxx/xla_runtime.locate_tensorflow): asked of the toolchain's own
Python, which may be any supported version (an existing release's: 3.9 on el9 and CMSSW 14), and
remembered in the process until its directory changes. A stand-in TensorFlow (the package and its
dist-info) on an existing Python's PYTHONPATH: no toolchain needed, so it runs under every Python."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tfaot_dist.cxx import xla_runtime


def test_tensorflow_is_located_once_until_its_directory_changes(tmp_path: Path) -> None:
    """The interpreter starts once for repeated questions (a process builds many models), and again
    once a distribution is installed or removed where TensorFlow is. The interpreter is a script that
    counts its starts and runs the tests' Python."""
    site = tmp_path / "site"
    package = site / "tensorflow"
    (package / "include").mkdir(parents=True)
    (package / "xla_aot_runtime_src").mkdir()
    (package / "xla_aot_runtime_src" / "CMakeLists.txt").write_text("# stand-in\n")
    (package / "__init__.py").write_text("")

    def install(version: str) -> None:
        info = site / f"tensorflow_cpu-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: {version}\n")
        (info / "top_level.txt").write_text("tensorflow\n")

    install("2.21.0")
    starts = tmp_path / "starts"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho >>"{starts}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    where = (("PYTHONPATH", str(site)),)
    first = xla_runtime.locate_tensorflow(python, where)
    assert (first.dir, first.dist, first.version) == (package, "tensorflow-cpu", "2.21.0")
    assert xla_runtime.locate_tensorflow(python, where) == first
    assert len(starts.read_text().splitlines()) == 1
    shutil.rmtree(site / "tensorflow_cpu-2.21.0.dist-info")  # an upgrade: another dist-info
    install("2.21.1")
    assert xla_runtime.locate_tensorflow(python, where).version == "2.21.1"
    assert len(starts.read_text().splitlines()) == 2
    # What the tools need is looked at on every call, remembered or not.
    (package / "xla_aot_runtime_src" / "CMakeLists.txt").unlink()
    with pytest.raises(xla_runtime.RuntimeBuildError, match="ships no xla_aot_runtime_src"):
        xla_runtime.locate_tensorflow(python, where)
    assert len(starts.read_text().splitlines()) == 2
