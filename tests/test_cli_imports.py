"""What the command line loads to start: the commands that only parse, print help or read the registry import
none of the heavy modules (the HTTP stack, git, signatures, numpy, the builder, channels, install), which only
the commands that run them load. The suite starts `python -m tfaot_dist` hundreds of times; each heavy module
on the way in is paid by every one of them (docs/explanation/code-map.md has the figures).

Each case runs in a fresh interpreter (this one has everything loaded) and prints what it imported. A
sequence of commands that must all stay light runs in one interpreter: sys.modules only grows, so what
is absent after the last one was absent after each; each command's result names what it added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile import hand_built_dist
from httpserve import Server

# Calls the CLI as the console script does, once per command line (a JSON list of them), and prints
# for each its exit code, its output and sys.modules after it, as JSON.
PROGRAM = """
import contextlib, io, json, sys
from tfaot_dist import cli
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # --version, --help, a usage error: argparse exits
            code = exc.code
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue(), "modules": sorted(sys.modules)})
print(json.dumps(results))
"""

HEAVY_PACKAGES = ("requests", "urllib3", "git", "securesystemslib", "cryptography", "numpy", "jinja2")
HEAVY_OURS = (
    "tfaot_dist.builder",
    "tfaot_dist.harness",
    "tfaot_dist.check",
    "tfaot_dist.sources",
    "tfaot_dist.session",
    "tfaot_dist.documents",  # 27 frozen dataclasses: about 30 ms to define
    "tfaot_dist.channels",
    "tfaot_dist.trust",
    "tfaot_dist.install",
)
# What --sign's help names, from the module of trust/ made for parsing (no cryptography).
PARSING_ONLY = {"tfaot_dist.trust", "tfaot_dist.trust.options"}
# Besides those: what only reading a registry needs (yaml, packaging versions), not parsing and help.
REGISTRY_ONLY = ("yaml", "tfaot_dist.registry", "tfaot_dist.config")
# What only remote channels (HTTP, OCI: they download) and signed ones (TUF metadata, keys) use.
HTTP_AND_SIGNING = ("requests", "urllib3", "securesystemslib", "tuf", "cryptography")
# What building runs and show, which only computes a build key, does not.
WHAT_SHOW_NEEDS_NOT = (
    "tfaot_dist.builder",
    "tfaot_dist.harness",
    "tfaot_dist.check",
    "tfaot_dist.channels",
    "tfaot_dist.sources",
    "tfaot_dist.session",
    "tfaot_dist.onnx_source",
    "git",
    "requests",
    "urllib3",
)

ENTRY = """name: test-simple
version: "1.0.0"
source:
  git: https://host/org/data-repo.git
  ref: main
  commit: 0123456789abcdef0123456789abcdef01234567
aot_config: simple/aot_config.yaml
"""


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str
    modules: list[str]


def run_sequence(tmp_path: Path, *commands: tuple[str, ...]) -> list[Run]:
    """commands run one after the other in one fresh interpreter; each Run's modules are those loaded
    after it."""
    env = {**os.environ, "TFAOT_DIST_CACHE": str(tmp_path / "cache")}
    env.pop("TFAOT_DIST_SIGNING_KEY", None)  # would sign every publish
    argv = json.dumps([list(c) for c in commands])
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, argv], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    return [Run(**result) for result in json.loads(done.stdout)]


def run_fresh(tmp_path: Path, *args: str) -> Run:
    (result,) = run_sequence(tmp_path, args)
    return result


def under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules that are one of prefixes or inside one of them."""
    return [m for m in modules if any(m == p or m.startswith(f"{p}.") for p in prefixes)]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in under(modules, HEAVY_PACKAGES + HEAVY_OURS) if m not in PARSING_ONLY]


@pytest.fixture
def registry_with_entry(registry: Path) -> Path:
    (registry / "models" / "test-simple.yaml").write_text(ENTRY)
    return registry


PARSING_AND_HELP = [
    (("--version",), 0, "tfaot-dist "),
    (("--help",), 0, "a first session:"),
    (("bogus",), 2, "invalid choice: 'bogus'"),
    (("list", "--json", "--unknown-option"), 2, "unrecognized arguments: --unknown-option"),
    (("build", "--help"), 0, "--fail-fast"),
    (("setup", "--help"), 0, "--channel URL-OR-DIR"),
]


def test_parsing_and_help_load_nothing_heavy(tmp_path: Path) -> None:
    results = run_sequence(tmp_path, *(args for args, _, _ in PARSING_AND_HELP))
    for (args, code, said), result in zip(PARSING_AND_HELP, results):
        assert result.code == code and said in result.out + result.err, (args, result)
        assert heavy(result.modules) == [], args
        assert under(result.modules, REGISTRY_ONLY) == [], args


def test_list_loads_the_registry_and_nothing_heavy(tmp_path: Path, registry_with_entry: Path) -> None:
    result = run_fresh(tmp_path, "--registry", str(registry_with_entry), "list")
    assert result.code == 0, result
    assert result.out.startswith("test-simple ") and "0123456789ab" in result.out
    assert heavy(result.modules) == []
    assert "tfaot_dist.registry" in result.modules  # what it runs: loaded as it runs


def test_an_error_line_loads_nothing_heavy(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-registry"
    result = run_fresh(tmp_path, "--registry", str(missing), "list")
    assert result.code == 3 and f"--registry: {missing} is not a registry directory" in result.err
    assert heavy(result.modules) == []


def test_a_command_loads_what_it_runs(tmp_path: Path, registry_with_entry: Path) -> None:
    """The imports inside the commands work, and this check sees them: setup --list reads an area
    (install), build fails on a missing registry after loading its scheduler."""
    area = tmp_path / "area"
    result = run_fresh(tmp_path, "setup", "--list", "--area", str(area))
    assert result.code == 0 and result.out == "nothing installed\n", result
    assert "tfaot_dist.install.setup_area" in heavy(result.modules)
    assert not area.exists()
    missing = tmp_path / "no-such-registry"
    result = run_fresh(tmp_path, "--registry", str(missing), "build", "--all")
    assert result.code == 3 and "is not a registry directory" in result.err, result
    assert "tfaot_dist.scheduler" in result.modules


def test_show_computes_the_build_key_without_the_builder(tmp_path: Path, registry_with_entry: Path) -> None:
    """show prints the build key (build_key.py, with what its parts digest: templates, worker sources,
    runtime packaging code), not the builder and what building needs (sources, checks, harness, channels)."""
    result = run_fresh(tmp_path, "--registry", str(registry_with_entry), "show", "test-simple")
    assert result.code == 0, result
    key = result.out.split("build_key: ", 1)[1].split("\n", 1)[0]
    assert len(key) == 64 and set(key) <= set("0123456789abcdef"), result.out
    assert under(result.modules, WHAT_SHOW_NEEDS_NOT) == []
    assert "tfaot_dist.build_key" in result.modules


@pytest.fixture
def published(tmp_path: Path) -> Path:
    """An unsigned directory channel with the runtime and model x 1.0 (hand-built packages)."""
    channel = tmp_path / "channel"
    result = run_fresh(
        tmp_path, "publish", "--channel", str(channel), "--dist", str(hand_built_dist(tmp_path / "dist"))
    )
    assert result.code == 0 and "tfaot-model-x 1.0: published" in result.out, result
    return channel


ON_A_DIRECTORY_CHANNEL = [
    (("publish", "--channel", "{channel}", "--dist", "{dist}"), "tfaot-model-x 1.0: published"),
    (("setup", "--list", "--channel", "{channel}"), "tfaot-model-x "),
    (("setup", "x", "--dry-run", "--channel", "{channel}", "--area", "{area}"), "would install"),
    (("setup", "x", "--channel", "{channel}", "--area", "{area}"), "tfaot-model-x 1.0: installed"),
    (("yank", "x==1.0", "--reason", "wrong", "--channel", "{channel}"), "1.0: yanked (wrong)"),
]


def test_a_directory_channel_loads_no_http_and_no_signing(tmp_path: Path) -> None:
    """An unsigned directory channel downloads nothing and checks no signature: neither the HTTP
    stack nor the TUF and key libraries load for publish, setup --list, setup (--dry-run) and yank."""
    paths = {
        "channel": tmp_path / "channel",
        "dist": hand_built_dist(tmp_path / "dist"),
        "area": tmp_path / "area",
    }
    commands = [tuple(arg.format(**paths) for arg in args) for args, _ in ON_A_DIRECTORY_CHANNEL]
    for (args, said), result in zip(ON_A_DIRECTORY_CHANNEL, run_sequence(tmp_path, *commands)):
        assert result.code == 0 and said in result.out, (args, result)
        assert under(result.modules, HTTP_AND_SIGNING) == [], args
        assert "tfaot_dist.channels.directory" in result.modules, args


# What building and a channel's writes use (C++ units, package templates, the HTML catalogue's jinja2).
WHAT_READS_NEED_NOT = ("jinja2", "tfaot_dist.cxx", "tfaot_dist.assembly", "tfaot_dist.channels.catalogue")


def test_listing_a_channel_loads_no_templates_and_no_cxx(tmp_path: Path, published: Path) -> None:
    """setup --list reads a channel: it loads neither the package assembly and the C++ modules nor
    jinja2. A publish, which writes the channel's HTML catalogue, loads jinja2 and the catalogue."""
    result = run_fresh(tmp_path, "setup", "--list", "--channel", str(published))
    assert result.code == 0 and "tfaot-model-x " in result.out, result
    assert under(result.modules, WHAT_READS_NEED_NOT) == []
    dist = hand_built_dist(tmp_path / "other-dist")
    result = run_fresh(tmp_path, "publish", "--channel", str(tmp_path / "other"), "--dist", str(dist))
    assert result.code == 0 and {"jinja2", "tfaot_dist.channels.catalogue"} <= set(result.modules), result


def test_remote_and_signed_channels_load_what_they_use(tmp_path: Path, published: Path) -> None:
    """The positive controls: the same channel over HTTP loads the HTTP stack; a signed publish, and
    setup from a signed directory channel, load the TUF and key libraries, and say it is signed."""
    server = Server(published)
    try:
        result = run_fresh(tmp_path, "setup", "--list", "--channel", server.url())
    finally:
        server.close()
    assert result.code == 0 and "tfaot-model-x " in result.out, result
    assert {"requests", "urllib3"} <= set(result.modules)
    key, signed = tmp_path / "keys" / "channel.key", tmp_path / "signed"
    key.parent.mkdir()
    assert run_fresh(tmp_path, "keys", "new", str(key)).code == 0
    dist = str(tmp_path / "dist")
    result = run_fresh(tmp_path, "publish", "--channel", str(signed), "--dist", dist, "--sign", str(key))
    assert result.code == 0 and (signed / "tuf" / "root.json").is_file(), result
    assert {"securesystemslib", "tuf", "cryptography"} <= set(result.modules)
    result = run_fresh(tmp_path, "setup", "--list", "--channel", str(signed))
    assert result.code == 0 and result.out.startswith(f"{signed}: signed (TUF root version 1)\n"), result
    assert {"securesystemslib", "tuf"} <= set(result.modules)
    area, root = tmp_path / "area", str(signed / "tuf" / "root.json")
    result = run_fresh(tmp_path, "setup", "x", "--channel", str(signed), "--area", str(area), "--trust", root)
    assert result.code == 0 and "tfaot-model-x 1.0: installed" in result.out, result
    assert {"securesystemslib", "tuf"} <= set(result.modules)
    # A directory still downloads nothing (python-tuf's client brings urllib3 along, not requests).
    assert under(result.modules, ("requests",)) == []
    (kept,) = (area / "tfaot" / "trust").iterdir()  # the accepted metadata, kept once setup succeeded
    assert (kept / "timestamp.json").is_file()
