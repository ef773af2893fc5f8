"""scram tool files as SCRAM reads them, and as cmsdist writes them.

SCRAM (cms-sw/SCRAM, SCRAM/BuildSystem/SimpleDoc.py) reads a tool file by
wrapping its text in a root element and parsing that with ElementTree; the
ToolFile reader then takes the tool name, version, <lib>, <use>, <flags> and
the <client> <environment> variables, treating NAME_BASE (upper case, '-' to
'_') as the tool's root. cmsdist's tool files (scram-tools.file/tools/*) carry
no XML declaration, never set -std=, and mark externals' headers as system
headers with <flags SYSTEM_INCLUDE="1"/>. The tests read every tool file we
ship that way and check those conventions.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import Cli, snapshot, unpack_package

from tfaot_dist.cxx import scram_tool

# cmsdist's form, as a release installs it (config/toolbox/ARCH/tools/selected/): the release's runtime tool.
RELEASE_RUNTIME_TOOL = """<tool name="tensorflow-xla-runtime" version="2.12.0">
  <client>
    <environment name="TENSORFLOW_XLA_RUNTIME_BASE" default="/cvmfs/cms.cern.ch/external/tensorflow-xla-runtime/2.12.0"/>
    <environment name="LIBDIR" default="$TENSORFLOW_XLA_RUNTIME_BASE/lib"/>
  </client>
  <lib name="tf_xla_runtime"/>
  <use name="eigen"/>
  <use name="tensorflow-includes"/>
</tool>
"""


def read_as_scram(text: str) -> ET.Element:
    """SCRAM's reading: the file's text inside <root>...</root>, a standard XML parser."""
    return ET.fromstringlist(["<root>", text, "</root>"])


def resolve(value: str, variables: dict[str, str]) -> str:
    """$VAR and ${VAR} replaced from the tool's own variables, as SCRAM's ToolFile does."""
    while m := re.search(r"\$\{(\w+)\}|\$(\w+)", value):
        value = value[: m.start()] + variables[m.group(1) or m.group(2)] + value[m.end() :]
    return value


def check_conventions(text: str, file_name: str, root: Path | None = None) -> scram_tool.ToolFile:
    """One tool file against SCRAM's reader and cmsdist's conventions; root: the package it belongs to."""
    assert text.startswith("<tool "), text[:80]  # no declaration, no comment: scram wraps the text
    (tool_element,) = read_as_scram(text)
    tool = scram_tool.parse(text)
    assert tool.name == tool_element.get("name") == Path(file_name).stem
    assert tool.name == tool.name.lower() and tool.version
    base = scram_tool.base_variable(tool.name)
    assert list(tool.environment) == [base, "LIBDIR", "INCLUDE"]
    assert tool.environment[base] == "@TOOL_ROOT@"
    assert tool.environment["LIBDIR"] == f"${base}/lib" and tool.environment["INCLUDE"] == f"${base}/include"
    flags = [f for values in tool.flags.values() for f in values]
    assert not [f for f in flags if f.startswith(("-std=", "-D_GLIBCXX_USE_CXX11_ABI"))], flags
    if root is not None:
        variables = {base: str(root)}
        variables.update({k: resolve(v, variables) for k, v in tool.environment.items() if k != base})
        assert Path(variables["INCLUDE"]).is_dir() and Path(variables["LIBDIR"]).is_dir()
        ours = [lib for lib in tool.libs if (Path(variables["LIBDIR"]) / f"lib{lib}.a").is_file()]
        assert ours, tool.libs
        (exclude,) = tool.flags["LDFLAGS"]
        assert exclude == scram_tool.exclude_libs([f"lib{lib}.a" for lib in ours])
    return tool


def test_rendered_tool_files_follow_the_conventions() -> None:
    model = check_conventions(
        scram_tool.render_model_tool(
            "tfaot-model-test-simple", "1.0.0", "https://git.example.org/ml/data.git"
        ),
        "tfaot-model-test-simple.xml",
    )
    assert model.uses == ["tfaot-xla-runtime"] and model.libs == ["tfaot-model-test-simple"]
    assert model.url == "https://git.example.org/ml/data.git"
    assert scram_tool.base_variable("tfaot-model-test-simple") == "TFAOT_MODEL_TEST_SIMPLE_BASE"
    runtime = check_conventions(
        scram_tool.render_runtime_tool(
            "2.21.0", ["libtf_xla_runtime.a", "libtfaot_absl.a"], ["-lpthread", "-lm"]
        ),
        "tfaot-xla-runtime.xml",
    )
    assert runtime.name != "tensorflow-xla-runtime"  # never the release's tool (see cxx/scram_tool.py)
    assert runtime.libs == ["tf_xla_runtime", "tfaot_absl", "pthread", "m"]
    assert runtime.flags["SYSTEM_INCLUDE"] == ["1"]
    assert runtime.version == "2.21.0"  # as cmsdist versions its tensorflow-xla-runtime: TensorFlow's version


@pytest.mark.parametrize(
    "text, message",
    [
        ('<?xml version="1.0"?>\n<tool name="x" version="1"/>', "not a tool file SCRAM can read"),
        ('<tool name="x" version="1"/><tool name="y" version="1"/>', "expected one <tool> element"),
        ('<tool name="x" version="1"><evil/></tool>', "unexpected element <evil>"),
        ('<tool name="x" version="1" revision="1"/>', "unexpected attributes ['revision']"),
        ('<tool name="X" version="1"/>', "not a lower-case scram tool name"),
    ],
)
def test_what_scram_would_refuse_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scram_tool.parse(text)


def test_every_shipped_tool_file_reads_as_scram_reads_it(built: Path, tmp_path: Path) -> None:
    """The tool files inside the package archives, each with its package unpacked next to it."""
    archives = sorted((built / "dist").glob("*.tar.gz"))
    assert len(archives) == 3  # test-simple, test-multi, the runtime
    seen = {}
    for archive in archives:
        root = unpack_package(archive, tmp_path)
        manifest = json.loads((root / "manifest.json").read_text())
        (xml,) = (root / "etc" / "scram.d").glob("*.xml")
        tool = check_conventions(xml.read_text(), xml.name, root)
        seen[tool.name] = tool
        if manifest.get("kind") == "runtime":
            assert tool.flags["SYSTEM_INCLUDE"] == ["1"]
            assert tool.version == manifest["tensorflow_version"]
        else:
            assert tool.uses == [scram_tool.RUNTIME_TOOL] and tool.version == manifest["version"]
            assert (root / "include" / manifest["package"] / "model.h").is_file()
    assert sorted(seen) == ["tfaot-model-test-multi", "tfaot-model-test-simple", "tfaot-xla-runtime"]


def test_setup_next_to_a_release_runtime_tool(
    built: Path, run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An area whose release already has a tensorflow-xla-runtime tool: ours comes next to it under its
    own name, models use ours, the release's tool file is untouched; an area that already has our
    runtime tool (the same version) is left exactly as it was."""
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # no scram here
    channel = tmp_path / "channel"
    run("publish", "--channel", channel, "--dist", built / "dist")
    area = tmp_path / "CMSSW_14_2_0"
    release_tools = area / "config" / "toolbox" / "el9_amd64_gcc12" / "tools" / "selected"
    release_tools.mkdir(parents=True)
    (release_tools / "tensorflow-xla-runtime.xml").write_text(RELEASE_RUNTIME_TOOL)
    release_before = snapshot(area / "config")

    out, _ = run("setup", "test-simple", "test-multi", "--channel", channel, "--area", area, "--json")
    assert {r["status"] for r in json.loads(out)["results"]} == {"installed", "already installed"}
    assert snapshot(area / "config") == release_before
    installed = {p.name: p.read_text() for p in (area / "tfaot" / "scram.d").glob("*.xml")}
    assert sorted(installed) == [
        "tfaot-model-test-multi.xml",
        "tfaot-model-test-simple.xml",
        "tfaot-xla-runtime.xml",
    ]
    release = {scram_tool.parse(RELEASE_RUNTIME_TOOL).name}
    tools = {name: scram_tool.parse(text) for name, text in installed.items()}
    assert not {t.name for t in tools.values()} & release
    for name in ("tfaot-model-test-multi.xml", "tfaot-model-test-simple.xml"):
        assert tools[name].uses == [scram_tool.RUNTIME_TOOL]
    runtime = tools["tfaot-xla-runtime.xml"]
    runtime_root = Path(runtime.environment["TFAOT_XLA_RUNTIME_BASE"])
    assert (
        runtime_root.is_relative_to(area / "tfaot")
        and (runtime_root / "lib" / "libtf_xla_runtime.a").is_file()
    )

    before = snapshot(area)
    out, _ = run("setup", "test-simple", "--channel", channel, "--area", area, "--json")
    assert {r["status"] for r in json.loads(out)["results"]} == {"already installed"}
    assert snapshot(area) == before
