"""What the command line loads to start: the commands that only parse, print help or read the registry import
none of the heavy modules (the HTTP stack, git, signatures, numpy, the builder, channels, install), which only
the commands that run them load. The suite starts `python -m tfaot_dist` hundreds of times; each heavy module
on the way in is paid by every one of them (docs/explanation/code-map.md has the figures).

Each case runs in a fresh interpreter (this one has everything loaded) and prints what it imported.
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

# Calls the CLI as the console script does and prints its exit code, its output and sys.modules as JSON.
PROGRAM = """
import contextlib, io, json, sys
from tfaot_dist import cli
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = cli.main(sys.argv[1:])
    except SystemExit as exc:  # --version, --help, a usage error: argparse exits
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(), "modules": sorted(sys.modules)}))
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


def run_fresh(tmp_path: Path, *args: str) -> Run:
    env = {**os.environ, "TFAOT_DIST_CACHE": str(tmp_path / "cache")}
    env.pop("TFAOT_DIST_SIGNING_KEY", None)  # would sign every publish
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    return Run(**json.loads(done.stdout))


def under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules that are one of prefixes or inside one of them."""
    return [m for m in modules if any(m == p or m.startswith(f"{p}.") for p in prefixes)]


def heavy(modules: list[str]) -> list[str]:
    return [m for m in under(modules, HEAVY_PACKAGES + HEAVY_OURS) if m not in PARSING_ONLY]


@pytest.fixture
def registry_with_entry(registry: Path) -> Path:
    (registry / "models" / "test-simple.yaml").write_text(ENTRY)
    return registry


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (("--version",), 0, "tfaot-dist "),
        (("--help",), 0, "a first session:"),
        (("bogus",), 2, "invalid choice: 'bogus'"),
        (("list", "--json", "--unknown-option"), 2, "unrecognized arguments: --unknown-option"),
        (("build", "--help"), 0, "--fail-fast"),
        (("setup", "--help"), 0, "--channel URL-OR-DIR"),
    ],
    ids=["version", "help", "unknown-command", "unknown-option", "build-help", "setup-help"],
)
def test_parsing_and_help_load_nothing_heavy(
    tmp_path: Path, args: tuple[str, ...], code: int, said: str
) -> None:
    result = run_fresh(tmp_path, *args)
    assert result.code == code and said in result.out + result.err, result
    assert heavy(result.modules) == []
    assert under(result.modules, REGISTRY_ONLY) == []


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


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("publish", "--channel", "{new}", "--dist", "{dist}"), "tfaot-model-x 1.0: published"),
        (("setup", "--list", "--channel", "{channel}"), "tfaot-model-x "),
        (("setup", "x", "--channel", "{channel}", "--area", "{area}"), "tfaot-model-x 1.0: installed"),
        (("setup", "x", "--dry-run", "--channel", "{channel}", "--area", "{area}"), "would install"),
        (("yank", "x==1.0", "--reason", "wrong", "--channel", "{channel}"), "1.0: yanked (wrong)"),
    ],
    ids=["publish", "setup-list", "setup", "setup-dry-run", "yank"],
)
def test_a_directory_channel_loads_no_http_and_no_signing(
    tmp_path: Path, published: Path, args: tuple[str, ...], said: str
) -> None:
    """An unsigned directory channel downloads nothing and checks no signature: neither the HTTP
    stack nor the TUF and key libraries load for it."""
    paths = {
        "channel": published,
        "new": tmp_path / "new",
        "dist": tmp_path / "dist",
        "area": tmp_path / "area",
    }
    result = run_fresh(tmp_path, *(arg.format(**paths) for arg in args))
    assert result.code == 0 and said in result.out, result
    assert under(result.modules, HTTP_AND_SIGNING) == []
    assert "tfaot_dist.channels.directory" in result.modules


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
