"""The runtime package's version names both the runtime build and how the package is made from it."""

import shutil
from pathlib import Path

import pytest

from tfaot_dist import names
from tfaot_dist.cxx import INTERFACE_INCLUDE, runtime_package
from tfaot_dist.cxx.xla_runtime import XlaRuntime


def runtime_with_key(key: str) -> XlaRuntime:
    return XlaRuntime(
        root=Path("/nonexistent"),
        include_dir=Path("/nonexistent"),
        libs=[],
        cxxflags=[],
        ldflags=[],
        tensorflow_version="2.21.0",
        key=f"tf2.21.0-gcc12.2.0-{key}",
    )


def test_version_is_normalized_pep440_with_build_and_packaging_labels() -> None:
    for key in ("b8fd209dfb55daad", "0123456789012345"):
        version = runtime_package.runtime_version(runtime_with_key(key))
        assert names.version(version, "runtime version") == version
        build, packaging = version.split("+")[1].split(".")
        assert build == key.lstrip("0")
        assert packaging == "p" + runtime_package.packaging_digest()[: runtime_package.PACKAGING_DIGITS]


@pytest.mark.parametrize("change", ["interface header", "template"])
def test_changed_packaging_is_a_new_version(
    change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = runtime_package.packaging_digest.__wrapped__()
    if change == "interface header":
        copy = tmp_path / "include"
        shutil.copytree(INTERFACE_INCLUDE, copy)
        header = next(p for p in sorted(copy.rglob("*.h")))
        header.write_text(header.read_text() + "\n// one more line\n")
        monkeypatch.setattr(runtime_package, "INTERFACE_INCLUDE", copy)
    else:
        monkeypatch.setattr(runtime_package, "TEMPLATES", (*runtime_package.TEMPLATES, "model.h.j2"))
    after = runtime_package.packaging_digest.__wrapped__()
    assert after != before
    # Unchanged inputs give the same digest (the version is stable from build to build).
    monkeypatch.undo()
    assert runtime_package.packaging_digest.__wrapped__() == before
