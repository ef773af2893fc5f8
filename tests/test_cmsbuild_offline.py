"""The cmsBuild flavour builds offline, as cmsBuild would run it, against a release's Python and runtime.

The sandbox test expands a generated tfaot-model spec with rpmspec (cmsBuild's macros %{n},
%{realversion}, %{i}, %{relocateConfig} defined as cmsBuild defines them, the INCLUDE inlined),
runs its %prep, %build and %install with bash in a network namespace that has no route
(`unshare -n`), against a "release" directory in the test's tmp dir:

    release/python3/bin/python3         a bare Python (a venv with nothing in it) of the TF 2.12 toolchain's version
    PYTHON3PATH=<that toolchain's site-packages>   how cmsdist's python3 finds py3-tensorflow
    release/tensorflow-xla-runtime/2.12.0/lib/libtf_xla_runtime.so   built as cmsdist builds it
                                        (tests/release_runtime.py), TENSORFLOW_XLA_RUNTIME_ROOT
    release/abseil-cpp/20220623.1/      the Abseil that library needs, ABSEIL_CPP_ROOT
    release/bin/tfaot-dist              the tool (py3-tfaot-dist), run by a Python >= 3.9

and checks that nothing was downloaded or installed, that the installed tree is the package
`tfaot-dist build` makes for the same entry with the same Python and runtime (the registry's
toolchain.python and toolchain.runtime), file by file, and that the tool file names the install
root after relocation.
"""

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs it there
    import tomli as tomllib
from conftest import REPO, TF212, fresh_cache, git
from release_runtime import ABSEIL_DIR, RUNTIME_DIR, ensure_release_runtime
from test_specs import (
    as_cmsbuild_would,
    entry,
    golden_registry,  # noqa: F401 - the fixture
    specs_cli,
    write_entry,
    write_registry_yaml,
)

from tfaot_dist import cli, package
from tfaot_dist.cxx import runtime_package, scram_tool
from tfaot_dist.cxx.xla_runtime import ensure_runtime
from tfaot_dist.registry import Registry
from tfaot_dist.specs import flavors
from tfaot_dist.toolchain import WORKER_SOURCES, Toolchain

PKGREL = "slc-test/external"  # where cmsBuild installs externals: %{instroot}/%{cmsplatf}/external/%n/%v
# Which installed files differ from `tfaot-dist build`'s package, by design:
#   manifest.json: `compile` records the source it was given (the AOT config and the SavedModel's digest)
#   where `build` records the registry's git source and build key; the target triple of %{_arch}
#   (x86_64-unknown-linux-gnu, as cmsdist's tfaot-compile) where the registry says x86_64-pc-linux (the
#   objects are the same bytes all the same).
#   etc/scram.d/NAME.xml: %install replaces @TOOL_ROOT@ with %{i}, as cmsdist's tfaot-compile does;
#   and it has no <info url=...>, nor the .pc file a URL: line: `compile` is given no source URL.
#   sbom.cdx.json: the same sources as manifest.json's (and the build key in its serial number).
DIFFER_BY_DESIGN = {
    "manifest.json",
    "sbom.cdx.json",
    "etc/scram.d/tfaot-model-offline.xml",
    "lib/pkgconfig/tfaot-model-offline.pc",
}


# --- Python 3.9: what runs under the release's python3 ---------------------------------------------


@pytest.mark.parametrize("source", WORKER_SOURCES, ids=lambda path: path.name)
def test_worker_runs_under_python_39(source: Path) -> None:
    """The worker runs in the release's python3 (3.9.14 in CMSSW 14): 3.9 syntax, stdlib imports only
    (TensorFlow and NumPy aside). No 3.9 interpreter here: the parser's 3.9 grammar and an audit."""
    tree = ast.parse(source.read_text(), feature_version=(3, 9))
    # from __future__ import annotations: annotations stay strings, never evaluated (PEP 563).
    postponed = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
        # X | Y in an annotation is evaluated at definition time and fails before 3.10.
        annotations = [a.annotation for a in getattr(getattr(node, "args", None), "args", [])] + [
            getattr(node, "returns", None),
            getattr(node, "annotation", None),
        ]
        for annotation in filter(None, annotations):
            assert postponed or not any(isinstance(n, ast.BinOp) for n in ast.walk(annotation)), ast.unparse(
                annotation
            )
        # 3.10+ built-in arguments the grammar check cannot see.
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zip":
            assert not node.keywords, ast.unparse(node)
    if sys.version_info >= (3, 10):  # the list of the standard library's modules
        assert imported - sys.stdlib_module_names <= {"tensorflow", "numpy"}, imported
        # the audit saw the file's imports (pooling_rewrite.py is handed TensorFlow, it imports none)
        assert "tensorflow" in imported or source.name == "pooling_rewrite.py", imported


def test_pip_file_checks_the_python_first(golden_registry: Path) -> None:  # noqa: F811 - the fixture
    """pip/tfaot-dist.file: cmsdist's pip conventions, and the one-line Python check before pip runs."""
    files = flavors.render_all(Registry(golden_registry), "cmsbuild")
    text = files["pip/tfaot-dist.file"]
    # The Python bound and the dependencies are pyproject's.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=" + ".".join(map(str, flavors.TOOL_PYTHON))
    cmsdist_name = {
        "pyyaml": "py3-PyYAML",
        "jinja2": "py3-Jinja2",
        "gitpython": "py3-GitPython",
        "requests": "py3-requests",
        "packaging": "py3-packaging",
        "tuf": "py3-tuf",
        "securesystemslib": "py3-securesystemslib",
        "cyclonedx-python-lib": "py3-cyclonedx-python-lib",
    }
    wanted = sorted(
        cmsdist_name[dep.split(">")[0].split("=")[0].split("[")[0].strip()] for dep in project["dependencies"]
    )
    requires = [line for line in text.splitlines() if line.startswith("Requires:")]
    assert requires == ["Requires: " + " ".join(wanted)]
    assert "Source" not in text  # build-with-pip's default: pip://tfaot-dist/%{realversion}
    check = next(line for line in text.splitlines() if line.startswith("%define PipPreBuild "))
    command = check.removeprefix("%define PipPreBuild ").replace("python3 ", f"{sys.executable} ", 1)
    # Run by this Python (>= 3.9): passes silently. Under an older one it exits with the one line.
    ok = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")
    refused = subprocess.run(
        ["bash", "-c", command.replace(">= (3, 9)", ">= (99, 0)")],
        capture_output=True,
        text=True,
        check=False,
    )
    version = ".".join(map(str, sys.version_info[:3]))
    assert refused.returncode == 1
    assert (
        refused.stderr
        == f"py3-tfaot-dist: tfaot-dist needs Python >= 3.9, the release python3 is {version}\n"
    )


# --- what the specs say -----------------------------------------------------------------------------


def test_cms_data_source_builds_from_the_release_data_package(tmp_path: Path) -> None:
    """The documentation's production pattern: `BuildRequires: data-NAME` and only %{aot_config}, for a
    model in a CMSDATA repository; data-build-github.file installs it under $DATA_NAME_ROOT/<A/B>/data."""
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    git_url = "https://github.com/cms-data/PhysicsTools-TensorFlowAOT.git"
    write_entry(reg, entry("test-simple", url=git_url, ref="master"))
    files = flavors.render_all(Registry(reg), "cmsbuild")
    spec = files["tfaot-model-test-simple.spec"]
    assert "BuildRequires: data-PhysicsTools-TensorFlowAOT\n" in spec
    assert (
        "%define aot_config ${DATA_PHYSICSTOOLS_TENSORFLOWAOT_ROOT}/PhysicsTools/TensorFlowAOT/data/"
        "simple/aot_config.yaml\n"
    ) in spec
    assert "Source" not in spec and "aot_source" not in spec
    path = tmp_path / "data.spec"
    path.write_text(as_cmsbuild_would(spec, files["tfaot-compile.file"]))
    parsed = subprocess.run(["rpmspec", "-P", str(path)], capture_output=True, text=True, check=True).stdout
    # No Source to unpack: %prep makes an empty directory of its own; the config path is absolute.
    assert "rpmuncompress" not in parsed and "mkdir -p 'tfaot-model-test-simple-1.0.0'" in parsed, parsed
    assert 'config="${DATA_PHYSICSTOOLS_TENSORFLOWAOT_ROOT}/PhysicsTools/TensorFlowAOT/data/simple/' in parsed


@pytest.mark.parametrize("ref", ["HEAD", "0123456789abcdef0123456789abcdef01234567", "refs/tags/v1"])
def test_a_ref_that_is_no_branch_needs_source_branch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ref: str
) -> None:
    """cmsBuild's git download pulls a branch: a ref that names none is refused, in one line, unless
    source.branch names one; the registry keeps the field."""
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    path = write_entry(reg, entry("test-simple", ref=ref))
    _, err = specs_cli(capsys, reg, "--out", tmp_path / "out", expect=3)
    assert err == (
        f"tfaot-dist: error: {path}: source.ref {ref!r} is not a branch, and cmsBuild's git download "
        f"pulls a branch, then resets to the commit: add source.branch (a branch that contains "
        f"0123456789abcdef0123456789abcdef01234567)\n"
    )
    assert not (tmp_path / "out").exists()
    write_entry(reg, entry("test-simple", ref=ref, branch="releases/2026"))
    assert Registry(reg).load("test-simple").as_dict()["source"]["branch"] == "releases/2026"
    specs_cli(capsys, reg, "--out", tmp_path / "out")
    assert (
        "%define tfaot_branch releases/2026\n"
        in (tmp_path / "out" / "tfaot-model-test-simple.spec").read_text()
    )
    # The rpm flavour pins the archive, not a branch: any ref is fine there.
    write_entry(reg, entry("test-simple", ref=ref))
    specs_cli(capsys, reg, "--flavor", "rpm", "--out", tmp_path / "rpm")


def test_offline_compile_names_the_missing_toolchain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile --offline with nothing cached: exit 4 naming the toolchain; nothing created (cache, output)."""
    config = tmp_path / "aot_config.yaml"
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"")
    config.write_text("model: {name: x, version: 1.0.0}\ncompilation: {batch_sizes: [1]}\n")
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(cache))
    for extra in ([], ["--runtime", str(tmp_path)]):
        code = cli.main(
            [
                "compile",
                "--offline",
                "--aot-config",
                str(config),
                "--output-directory",
                str(tmp_path / "out"),
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert code == 4, err
        assert err.startswith("tfaot-dist: error: offline: toolchain ") and "is not in the cache" in err
        assert err.count("\n") == 1
    assert not (tmp_path / "out").exists() and not cache.exists()


# --- the sandbox ------------------------------------------------------------------------------------


def tree_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cmsbuild_spec(spec: str, include: str, instroot: Path) -> str:
    """The spec with its INCLUDE inlined and the macros cmsBuild defines (pkgtools' cmsBuild: %i is
    %{instroot}/%{pkgrel}; %{relocateConfig} rewrites the build-time install root to
    $RPM_INSTALL_PREFIX in the files it is given, relative to the installed package)."""
    first, body = spec.split("\n", 1)
    _, _, _, name, version = first.split()
    pkgrel = f"{PKGREL}/{name}/{version}"
    header = (
        f"%define n {name}\n%define realversion {version}\n%define pkgrel {pkgrel}\n"
        f"%define i {instroot}/%{{pkgrel}}\n"
        f'%define relocateConfig sed -i -e "s|{instroot}|$RPM_INSTALL_PREFIX|g" $RPM_INSTALL_PREFIX/%{{pkgrel}}/\n'
        f"Name: %{{n}}\nVersion: %{{realversion}}\nRelease: 1\nSummary: x\nLicense: x\n"
    )
    text = header + body.replace("## INCLUDE tfaot-compile\n", include)
    text = text.replace("\n%prep\n", "\n%description\nx\n\n%prep\n", 1)
    return text.replace("\n%install\n", "\n%install\nmkdir -p %i\n", 1)  # cmsBuild's %install preamble


def release_python(toolchain: Toolchain, release: Path) -> tuple[Path, Path]:
    """A bare Python like cmsdist's python3 (nothing installed in it, the host's dist-packages hidden) of
    the version the toolchain's TensorFlow wheel is built for, and the site-packages that PYTHON3PATH
    names for it (the release's py3-tensorflow)."""
    interpreter = Path(os.path.realpath(toolchain.python))
    subprocess.run([interpreter, "-m", "venv", "--without-pip", release / "python3"], check=True)
    return release / "python3" / "bin" / "python3", next(
        (toolchain.root / "lib").glob("python3.*/site-packages")
    )


@pytest.mark.slow
def test_runtime_from_the_release_python_offline(
    toolchain212: Toolchain,
    shared_cache: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`runtime --offline --toolchain-python` finds the release's TensorFlow through PYTHON3PATH; with
    no Abseil sdist in the cache it stops before any download, in one line, the cache as it was."""
    python3, site_packages = release_python(toolchain212, tmp_path / "release")
    monkeypatch.setenv("PYTHON3PATH", str(site_packages))
    # The runtime built online first (on a cold cache this test may be the first to need it); then
    # offline it is found in the shared cache, packaged, nothing downloaded.
    runtime = ensure_runtime(toolchain212.python, shared_cache, lambda m: print(m, file=sys.stderr))
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(fresh_cache(tmp_path / "cache", shared_cache)))
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                "--json",
                "runtime",
                "--offline",
                "--toolchain-python",
                str(python3),
                "--output-directory",
                str(out),
            ]
        )
        == 0
    )
    made = json.loads(capsys.readouterr().out)
    assert made["version"] == runtime_package.runtime_version(runtime) and made["version"].startswith(
        "2.12.0+"
    )
    # An empty cache: the Abseil sources would have to be downloaded.
    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("TFAOT_DIST_CACHE", str(empty))
    code = cli.main(
        [
            "runtime",
            "--offline",
            "--toolchain-python",
            str(python3),
            "--output-directory",
            str(tmp_path / "out2"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 4, err
    assert err.splitlines()[-1].startswith(
        "tfaot-dist: error: offline: grpcio-1.51.3.tar.gz (sha256 be7b2265"
    ), err
    assert "Traceback" not in err
    # Only the entry locks and the log: no download, no build left behind.
    left = [p for p in empty.rglob("*") if p.is_file() and p.suffix != ".lock" and "logs" not in p.parts]
    assert not left, left
    assert not (tmp_path / "out2").exists()


@pytest.mark.slow
def test_cmsbuild_spec_builds_offline_in_a_sandbox(
    toolchain212: Toolchain, examples212: Path, shared_cache: Path, tmp_path: Path
) -> None:
    # The model source: a real git repository, one example model, as the registry names it.
    work = tmp_path / "data"
    shutil.copytree(examples212 / "simple", work / "simple")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "simple", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    reg = tmp_path / "registry"
    (reg / "models").mkdir(parents=True)
    # The release (below): `tfaot-dist build` uses its Python and runtime too, through the registry.
    release = tmp_path / "release"
    python3, site_packages = release_python(toolchain212, release)
    runtime_root = release / "tensorflow-xla-runtime" / "2.12.0"
    (reg / "registry.yaml").write_text(
        f'toolchain:\n  requirements: ["{TF212[0]}"]\n  python: {python3}\n'
        f"  runtime: {runtime_root}\ncpu_levels: [x86-64]\n"
    )
    (reg / "models" / "offline.yaml").write_text(
        f"name: offline\nversion: 1.0.0\nsource:\n  git: file://{work}\n  ref: main\n  commit: {commit}\n"
        f"aot_config: simple/aot_config.yaml\noverrides:\n  batch_sizes: [1]\n"
    )
    git("init", "-q", "-b", "main", cwd=reg)
    git("add", "-A", cwd=reg)
    git("commit", "-q", "-m", "registry", cwd=reg)
    files = flavors.render_all(Registry(reg), "cmsbuild")
    name, version = "tfaot-model-offline", "1.0.0"

    # What cmsBuild's git download leaves in SOURCES: the commit exported as %{n}-%{realversion}/.
    sources, builddir, instroot = tmp_path / "SOURCES", tmp_path / "BUILD", tmp_path / "instroot"
    for d in (sources, builddir, instroot):
        d.mkdir()
    source_line = next(line for line in files[f"{name}.spec"].splitlines() if line.startswith("Source:"))
    assert "obj=%{tfaot_branch}/%{tfaot_commit}" in source_line
    git(
        "archive",
        "--format=tar.gz",
        f"--prefix={name}-{version}/",
        "-o",
        sources / f"{name}-{version}-{commit}.tgz",
        commit,
        cwd=work,
    )

    # The release: python3 with TensorFlow on PYTHON3PATH, its tensorflow-xla-runtime and abseil-cpp, the tool.
    built_release = ensure_release_runtime(toolchain212, shared_cache)
    shutil.copytree(built_release / RUNTIME_DIR, runtime_root)
    abseil_root = release / "abseil-cpp" / "20220623.1"
    shutil.copytree(built_release / ABSEIL_DIR, abseil_root)
    (release / "bin").mkdir()
    (release / "bin" / "tfaot-dist").symlink_to(Path(sys.executable).parent / "tfaot-dist")
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {
        "PATH": f"{release / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHON3_ROOT": str(release / "python3"),
        "PYTHON3PATH": str(site_packages),
        "TENSORFLOW_XLA_RUNTIME_ROOT": str(runtime_root),
        "ABSEIL_CPP_ROOT": str(abseil_root),
    }

    spec_file = tmp_path / f"{name}.spec"
    spec_file.write_text(cmsbuild_spec(files[f"{name}.spec"], files["tfaot-compile.file"], instroot))
    # rpm expands the macros and runs %prep, %build and %install (rpmbuild -bi), as cmsBuild does.
    rpm_dirs = [
        f"_topdir {tmp_path / 'rpm'}",
        f"_tmppath {tmp_path / 'rpm'}",
        f"_sourcedir {sources}",
        f"_builddir {builddir}",
    ]
    defines = [arg for d in rpm_dirs for arg in ("--define", d)]

    def sandboxed(*argv: object) -> subprocess.CompletedProcess[str]:
        # A new network namespace (root here; elsewhere, such as CI's runner user, in a user namespace).
        unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "-n"]
        return subprocess.run(
            [*unshare, "--", *map(str, argv)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )

    # The sandbox has no route: any download fails.
    probe = sandboxed(python3, "-c", "import socket; socket.create_connection(('1.1.1.1', 443), 5)")
    assert probe.returncode != 0 and "unreachable" in probe.stderr, probe.stderr
    done = sandboxed("rpmbuild", "-bi", "--nodeps", *defines, spec_file)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "compile --offline" in done.stderr, done.stderr[-3000:]

    # Nothing downloaded or installed: no pip cache, no venv, no toolchain, runtime or download in the
    # tool's cache (inside the build directory), nothing in HOME or TMPDIR.
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
    tool_cache = builddir / f"{name}-{version}" / "tfaot-cache"
    for kind in ("toolchains", "runtime", "downloads", "abseil", "sources", "archives"):
        assert not any((tool_cache / kind).glob("*")), kind
    assert not list(tool_cache.rglob("pyvenv.cfg"))

    # The installed tree is the package `tfaot-dist build` makes for the entry with the same TensorFlow.
    installed = instroot / PKGREL / name / version
    dist = tmp_path / "dist"
    mp = pytest.MonkeyPatch()
    mp.setenv("TFAOT_DIST_CACHE", str(fresh_cache(tmp_path / "cache", shared_cache)))
    mp.setenv("PYTHON3PATH", str(site_packages))
    mp.setenv("ABSEIL_CPP_ROOT", str(abseil_root))
    try:
        assert cli.main(["--registry", str(reg), "build", "offline", "--dist", str(dist)]) == 0
    finally:
        mp.undo()
    built = dist / f"{name}-{version}"
    got, want = tree_digests(installed), tree_digests(built)
    assert sorted(got) == sorted(want)
    differ = sorted(rel for rel in got if got[rel] != want[rel])
    assert differ == sorted(DIFFER_BY_DESIGN), differ
    ours, theirs = package.read_manifest_json(installed), package.read_manifest_json(built)
    for key in ("signature", "requires", "constants", "reference", "verification"):
        assert ours[key] == theirs[key], key
    assert {k: v for k, v in ours["files"].items() if k not in DIFFER_BY_DESIGN} == {
        k: v for k, v in theirs["files"].items() if k not in DIFFER_BY_DESIGN
    }
    assert ours["compilation"] == {**theirs["compilation"], "target_triple": "x86_64-unknown-linux-gnu"}
    # Both used the release's Python and runtime, recorded without a path.
    assert ours["toolchain"] == theirs["toolchain"]
    assert (
        ours["toolchain"]["environment"] == "existing" and ours["toolchain"]["tensorflow_version"] == "2.12.0"
    )
    library = runtime_root / "lib" / "libtf_xla_runtime.so"
    assert ours["toolchain"]["runtime"]["kind"] == "release"
    assert ours["toolchain"]["runtime"]["library_sha256"] == hashlib.sha256(library.read_bytes()).hexdigest()
    assert ours["requires"] == [{"name": "tensorflow-xla-runtime", "version": "2.12.0"}]
    assert scram_tool.parse((installed / "etc" / "scram.d" / f"{name}.xml").read_text()).uses == [
        "tensorflow-xla-runtime"
    ]
    tool = installed / "etc" / "scram.d" / f"{name}.xml"
    url_line = f'  <info url="file://{work}"/>\n'
    assert tool.read_text() == (built / "etc" / "scram.d" / f"{name}.xml").read_text().replace(
        "@TOOL_ROOT@", str(installed)
    ).replace(url_line, "")
    pc = f"lib/pkgconfig/{name}.pc"
    assert (installed / pc).read_text() == (built / pc).read_text().replace(f"URL: file://{work}\n", "")

    # %post after relocation: the tool file names the install root, and nothing of the build root.
    prefix = tmp_path / "cvmfs"
    shutil.copytree(instroot, prefix)
    expanded = subprocess.run(
        ["rpmspec", "-P", *defines, str(spec_file)], capture_output=True, text=True, check=True
    ).stdout
    post_script = expanded.split("\n%post\n", 1)[1]
    post = subprocess.run(
        ["bash", "-e", "-c", post_script],
        env={**env, "RPM_INSTALL_PREFIX": str(prefix)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert post.returncode == 0, post.stderr
    relocated = scram_tool.parse(
        (prefix / PKGREL / name / version / "etc" / "scram.d" / f"{name}.xml").read_text()
    )
    base = scram_tool.base_variable(name)
    assert relocated.environment[base] == str(prefix / PKGREL / name / version)
    assert (
        str(instroot)
        not in (prefix / PKGREL / name / version / "etc" / "scram.d" / f"{name}.xml").read_text()
    )
    print(json.dumps({"installed_files": len(got), "differ": differ}))
