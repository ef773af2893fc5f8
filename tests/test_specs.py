"""specs: cmsBuild and rpm specs from the registry, releases from git history, CMake and pkg-config files.

Golden files under tests/golden/ are rendered from a fixed registry (fixed
commits, URLs and git history); regenerate them after a deliberate template
change with

    TFAOT_UPDATE_GOLDEN=1 python -m pytest -q tests/test_specs.py -k golden

The rpm tests build real rpms with rpmbuild from the packages `tfaot-dist
build` made (Debian: `apt-get install rpm`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import GIT_ENV, snapshot
from httpserve import Server
from kept_objects import CMAKE_LAUNCHER, compile_kept

from tfaot_dist import cli
from tfaot_dist.cxx import buildsys
from tfaot_dist.documents import Manifest
from tfaot_dist.registry import Registry
from tfaot_dist.specs import flavors, release
from tfaot_dist.util.render import render
from tfaot_dist.util.textsafe import environment, one_line, pkgconfig_text, spec_text

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TFAOT_UPDATE_GOLDEN") == "1"

INVALID, INTEGRITY = 3, 7
SHA_A = "0123456789abcdef0123456789abcdef01234567"
SHA_B = "89abcdef0123456789abcdef0123456789abcdef"
SHA_C = "fedcba9876543210fedcba9876543210fedcba98"
HOSTILE = '%{__rm} -rf / $(reboot) `id` "><evil/> ${prefix} # \\'
IDENTITY = {
    "GIT_AUTHOR_NAME": "tfaot-dist tests",
    "GIT_AUTHOR_EMAIL": "tests@tfaot-dist.invalid",
    "GIT_COMMITTER_NAME": "tfaot-dist tests",
    "GIT_COMMITTER_EMAIL": "tests@tfaot-dist.invalid",
}


# --- helpers ----------------------------------------------------------------------------------------


def git(cwd: Path, *args: str, date: str = "2026-01-01T00:00:00Z", **env: str) -> str:
    # No user or system config: signing or another object format would change the golden commit ids.
    full = {
        **GIT_ENV,
        **IDENTITY,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        **env,
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=full, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(reg: Path, message: str, date: str = "2026-01-01T00:00:00Z", **env: str) -> None:
    git(reg, "add", "-A")
    git(reg, "commit", "-q", "-m", message, date=date, **env)


def entry(
    name: str,
    version: str = "1.0.0",
    sha: str = SHA_A,
    url: str = "https://git.example.org/ml/data.git",
    ref: str = "main",
    config: str = "simple/aot_config.yaml",
    branch: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    source = {"git": url, "ref": ref, "commit": sha, **({"branch": branch} if branch else {})}
    return {"name": name, "version": version, "source": source, "aot_config": config, **extra}


def write_entry(reg: Path, data: dict[str, Any], name: str | None = None) -> Path:
    path = reg / "models" / f"{name or data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_registry_yaml(reg: Path, tensorflow: str = "2.21.0") -> None:
    reg.mkdir(parents=True, exist_ok=True)
    (reg / "registry.yaml").write_text(
        f'toolchain:\n  requirements: ["tensorflow-cpu=={tensorflow}"]\ntarget_triple: x86_64-pc-linux\n'
        'target_cpu: ""\n'
    )


def specs_cli(
    capsys: pytest.CaptureFixture[str], reg: Path, *args: object, expect: int = 0
) -> tuple[str, str]:
    capsys.readouterr()
    code = cli.main(["--registry", str(reg), "specs", *map(str, args)])
    out, err = capsys.readouterr()
    assert code == expect, f"exit {code} (expected {expect})\nstdout: {out}\nstderr: {err}"
    return out, err


def releases(reg: Path, flavor: str = "rpm") -> dict[str, int]:
    """Release of every rendered spec, read back from the text."""
    out = {}
    for rel, text in flavors.render_all(Registry(reg), flavor).items():
        for line in text.splitlines():
            if line.startswith(("Release:", "%define tfaot_release")):
                out[rel] = int(line.split()[-1].removesuffix("%{?dist}"))
    return out


@pytest.fixture
def golden_registry(tmp_path: Path) -> Path:
    """A fixed registry with a fixed history: test-simple changed its commit once, test-multi added later."""
    reg = tmp_path / "golden-registry"
    write_registry_yaml(reg)
    git(reg, "init", "-q", "-b", "main")
    write_entry(reg, entry("test-simple"))
    commit(reg, "Add test-simple", "2026-01-01T10:00:00Z")
    write_entry(reg, entry("test-simple", sha=SHA_B))
    # Free text from git reaches the rpm changelog: it must stay one harmless line.
    commit(
        reg,
        "Retrain test-simple on 100% of %{data} $(whoami)",
        "2026-01-02T10:00:00Z",
        GIT_AUTHOR_NAME="Ann %{_bindir} <Example>",
    )
    write_entry(
        reg,
        entry(
            "test-multi",
            version="2.0.0rc1",
            sha=SHA_C,
            url="git@github.com:cms-ml/data.git",
            ref="v1",
            config="multi/aot_config.yaml",
            overrides={"batch_sizes": [1, 8]},
            branch="release-1",
        ),
    )
    commit(reg, "Add test-multi", "2026-01-03T10:00:00Z")
    return reg


# --- golden files and determinism --------------------------------------------------------------------


def assert_golden(rendered: dict[str, str], name: str) -> None:
    """rendered (file name -> text) equals the golden directory name, file for file
    (TFAOT_UPDATE_GOLDEN=1 rewrites the directory instead)."""
    expected_dir = GOLDEN / name
    if UPDATE:
        shutil.rmtree(expected_dir, ignore_errors=True)
        expected_dir.mkdir(parents=True)
        for file, text in rendered.items():
            (expected_dir / file).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / file).write_text(text)
    expected = {
        p.relative_to(expected_dir).as_posix(): p.read_text()
        for p in sorted(expected_dir.rglob("*"))
        if p.is_file()
    }
    assert sorted(rendered) == sorted(expected)
    for file, text in rendered.items():
        assert text == expected[file], f"{name}/{file} differs from {expected_dir / file}"


@pytest.mark.parametrize("flavor", ["cmsbuild", "rpm"])
def test_golden(
    golden_registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flavor: str
) -> None:
    out = tmp_path / "out"
    specs_cli(capsys, golden_registry, "--flavor", flavor, "--out", out)
    assert_golden(
        {p.relative_to(out).as_posix(): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}, flavor
    )


def test_golden_buildsys_files(tmp_path: Path) -> None:
    files = {
        "tfaot-model-test-simpleConfig.cmake": buildsys.render_cmake_config(typed(MODEL_MANIFEST)),
        "tfaot-model-test-simpleConfigVersion.cmake": buildsys.render_cmake_version(typed(MODEL_MANIFEST)),
        "tfaot-model-test-simple.pc": buildsys.render_pkgconfig(typed(MODEL_MANIFEST)),
        "tfaot-xla-runtimeConfig.cmake": buildsys.render_runtime_cmake_config(typed(RUNTIME_MANIFEST)),
        "tfaot-xla-runtime.pc": buildsys.render_runtime_pkgconfig(typed(RUNTIME_MANIFEST)),
    }
    assert_golden(files, "buildsys")


def test_golden_history_is_what_the_specs_say(golden_registry: Path) -> None:
    assert releases(golden_registry) == {
        "tfaot-model-test-simple.spec": 2,
        "tfaot-model-test-multi.spec": 1,
        "tfaot-xla-runtime.spec": 1,
    }
    rpm = flavors.render_all(Registry(golden_registry), "rpm")["tfaot-model-test-simple.spec"]
    assert "Version:        1.0.0\nRelease:        2%{?dist}" in rpm
    multi = flavors.render_all(Registry(golden_registry), "rpm")["tfaot-model-test-multi.spec"]
    assert "Version:        2.0.0~rc1\n" in multi  # sorts before 2.0.0, as in PEP 440


def test_same_registry_renders_the_same_bytes(
    golden_registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flavor in ("cmsbuild", "rpm"):
        specs_cli(capsys, golden_registry, "--flavor", flavor, "--out", tmp_path / "a")
        specs_cli(capsys, golden_registry, "--flavor", flavor, "--out", tmp_path / "b")
        assert snapshot(tmp_path / "a") == {
            k.replace(str(tmp_path / "b"), str(tmp_path / "a")): v
            for k, v in snapshot(tmp_path / "b").items()
        }
        out, _ = specs_cli(capsys, golden_registry, "--flavor", flavor, "--out", tmp_path / "a", "--json")
        assert json.loads(out)["written"] == []
        shutil.rmtree(tmp_path / "a")
        shutil.rmtree(tmp_path / "b")


def test_check_passes_after_rendering_and_lists_stale_files(
    golden_registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "specs"
    specs_cli(capsys, golden_registry, "--out", out)
    text, _ = specs_cli(capsys, golden_registry, "--out", out, "--check")
    assert "up to date" in text
    before = snapshot(out)
    write_entry(golden_registry, entry("test-simple", sha=SHA_C))
    text, _ = specs_cli(capsys, golden_registry, "--out", out, "--check", "--json", expect=1)
    assert json.loads(text)["stale"] == ["tfaot-model-test-simple.spec"]
    text, _ = specs_cli(capsys, golden_registry, "--out", out, "--check", expect=1)
    assert text.strip() == f"stale: {out / 'tfaot-model-test-simple.spec'}"
    assert snapshot(out) == before  # --check writes nothing
    specs_cli(capsys, golden_registry, "--out", out)
    specs_cli(capsys, golden_registry, "--out", out, "--check")


def test_cmsbuild_files_follow_cmsdist_conventions(golden_registry: Path) -> None:
    files = flavors.render_all(Registry(golden_registry), "cmsbuild")
    # No runtime spec: the models build against the release's own tensorflow-xla-runtime, which no spec
    # of ours may shadow (cmsdist's tfaot-compile.file: `Requires: tensorflow-xla-runtime`).
    assert sorted(files) == [
        "pip/tfaot-dist.file",
        "tfaot-compile.file",
        "tfaot-model-test-multi.spec",
        "tfaot-model-test-simple.spec",
        "tfaot-models.file",
    ]
    simple = files["tfaot-model-test-simple.spec"].splitlines()
    assert simple[0] == "### RPM external tfaot-model-test-simple 1.0.0"
    assert "%define aot_config simple/aot_config.yaml" in simple
    assert simple[-1] == "## INCLUDE tfaot-compile"
    source = next(line for line in simple if line.startswith("Source:"))
    # cmsdist's git Sources (pip/cms-tfaot.file): obj=BRANCH/COMMIT; the ref main is a branch.
    assert source.startswith(
        "Source: git+https://git.example.org/ml/data.git?obj=%{tfaot_branch}/%{tfaot_commit}&"
    )
    assert "%define tfaot_branch main" in simple
    assert f"%define tfaot_commit {SHA_B}" in simple and "%define tfaot_release 2" in simple
    multi = files["tfaot-model-test-multi.spec"]
    assert "git+ssh://git@github.com/cms-ml/data.git?" in multi and "%define tfaot_batch_sizes 1,8" in multi
    assert "%define tfaot_branch release-1\n" in multi  # source.branch: the ref v1 may be a tag
    compile_file = files["tfaot-compile.file"]
    for needed in (
        "BuildRequires: py3-tfaot-dist py3-tensorflow tensorflow-xla-runtime\n",
        "\nRequires: tensorflow-xla-runtime\n",
        '--runtime "$TENSORFLOW_XLA_RUNTIME_ROOT"',
        "\n%build\n",
        "tfaot-dist --registry tfaot-registry compile",
        'cp -pR "$pkg"/. %{i}/',
        "test -f %{i}/lib/lib%{n}.a",
        "%post\n%{relocateConfig}etc/scram.d/%{n}.xml",
        # cmsdist's tfaot-compile: the triple from the build machine's %{_arch}, ppc64le spelled out.
        "%ifarch ppc64le\n%define tfaot_target_triple powerpc64le-unknown-linux-gnu\n%else\n"
        "%define tfaot_target_triple %{_arch}-unknown-linux-gnu\n%endif\n",
        '"target_triple": "%{tfaot_target_triple}"',
    ):
        assert needed in compile_file, needed
    # No check for a _constants.o per object: TensorFlow 2.12 keeps the weights in the kernels object.
    assert '_constants.o"' not in compile_file
    # cmsdist's tfaot-models.file: Requires only where the release has TensorFlow.
    assert files["tfaot-models.file"].splitlines()[2:] == [
        "%if 0%{!?without_tensorflow:1}",
        "Requires: tfaot-model-test-multi",
        "Requires: tfaot-model-test-simple",
        "%endif",
    ]
    assert not any("tfaot-xla-runtime" in text for text in files.values())


def as_cmsbuild_would(spec: str, include: str, name: str = "tfaot-compile", root: str = "/cms/sw") -> str:
    """A cmsBuild spec with its INCLUDE inlined and the macros cmsBuild defines, for rpmspec to parse."""
    first, body = spec.split("\n", 1)
    _, _, _, name_, version = first.split()
    header = (
        f"%define n {name_}\n%define realversion {version}\n%define i {root}/{name_}/{version}\n"
        f"%define relocateConfig : relocate {root}/{name_}/{version}/\nName: %{{n}}\nVersion: %{{realversion}}\nRelease: 1\n"
        f"Summary: x\nLicense: x\n"
    )
    assert not include or f"## INCLUDE {name}\n" in body
    text = header + body.replace(f"## INCLUDE {name}\n", include)
    # %description after the preamble (Source, Requires), before the first section; cmsBuild's own
    # section preambles (pkgtools cmsBuild_consts.py): %prep removes %i, %install creates it.
    text = text.replace("\n%prep\n", "\n%description\nx\n\n%prep\nrm -fr %i\n", 1)
    return text.replace("\n%install\n", "\n%install\nmkdir -p %i\n", 1)


def test_cmsbuild_specs_parse_as_cmsbuild_would(golden_registry: Path, tmp_path: Path) -> None:
    files = flavors.render_all(Registry(golden_registry), "cmsbuild")
    expected_args = {
        # Offline: the release's python3, TensorFlow and runtime, the AOT config in $config.
        "test-simple": '--aot-config "$config" --name test-simple --version 1.0.0 --output-directory tfaot-build',
        "test-multi": (
            '--aot-config "$config" --name test-multi --version 2.0.0rc1 --batch-sizes 1,8 '
            "--output-directory tfaot-build"
        ),
    }
    for name, compile_args in expected_args.items():
        spec = tmp_path / f"{name}.spec"
        spec.write_text(as_cmsbuild_would(files[f"tfaot-model-{name}.spec"], files["tfaot-compile.file"]))
        proc = subprocess.run(["rpmspec", "-P", str(spec)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        parsed = proc.stdout
        assert (
            " ".join(parsed.replace("\\\n", " ").split()).count(
                f'compile --offline --toolchain-python "${{PYTHON3_ROOT}}/bin/python3" '
                f'--runtime "$TENSORFLOW_XLA_RUNTIME_ROOT" {compile_args}'
            )
            == 1
        ), parsed
        assert 'export TFAOT_DIST_CACHE="$PWD/tfaot-cache"' in parsed
        assert f'cp -pR "$pkg"/. /cms/sw/tfaot-model-{name}/' in parsed
        assert "sha256sum" not in parsed  # git sources: the commit pins them
        assert "BuildRequires: py3-tfaot-dist py3-tensorflow tensorflow-xla-runtime\n" in parsed
        # The release's runtime, whose tool the package's tool file uses (cmsdist's tfaot-compile.file).
        assert [line for line in parsed.splitlines() if line.startswith("Requires:")] == [
            "Requires: tensorflow-xla-runtime"
        ]
        requires = subprocess.run(
            ["rpmspec", "-q", "--requires", str(spec)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert "tensorflow-xla-runtime" in requires and "tfaot-xla-runtime" not in requires


def test_archive_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tfaot_dist import registry as registry_module

    if not hasattr(registry_module, "ArchiveSource"):
        pytest.skip("the registry has no archive sources yet")
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    digest = "ab" * 32
    data: dict[str, Any] = {
        "name": "arch",
        "version": "1.0.0",
        "source": {"archive": "https://models.example.org/data-1.0.tar.gz", "sha256": digest},
        "aot_config": "simple/aot_config.yaml",
    }
    write_entry(reg, data)
    files = flavors.render_all(Registry(reg), "cmsbuild")
    spec = files["tfaot-model-arch.spec"]
    assert (
        f"%define tfaot_source_sha256 {digest}\nSource: https://models.example.org/data-1.0.tar.gz\n" in spec
    )
    path = tmp_path / "arch.spec"
    path.write_text(as_cmsbuild_would(spec, files["tfaot-compile.file"]))
    parsed = subprocess.run(["rpmspec", "-P", str(path)], capture_output=True, text=True, check=True).stdout
    assert f'echo "{digest}  ' in parsed and "sha256sum -c -" in parsed
    assert 'root="$(ls -A)"' in parsed
    rpm_spec = flavors.render_all(Registry(reg), "rpm")["tfaot-model-arch.spec"]
    assert f"in https://models.example.org/data-1.0.tar.gz (sha256 {digest})." in rpm_spec
    path.write_text(rpm_spec)
    subprocess.run(["rpmspec", "-P", str(path)], capture_output=True, check=True)
    data["source"]["archive"] = "https://models.example.org/$(id).tar.gz"
    entry_path = write_entry(reg, data)
    _, err = specs_cli(capsys, reg, "--out", tmp_path / "out", expect=INVALID)
    assert f"{entry_path}: source.archive" in err


def test_rpm_specs_parse(golden_registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rpm"
    specs_cli(capsys, golden_registry, "--flavor", "rpm", "--out", out)
    for spec in sorted(out.glob("*.spec")):
        proc = subprocess.run(["rpmspec", "-P", str(spec)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        for tag in (
            "Name:",
            "Version:",
            "Release:",
            "Summary:",
            "License:",
            "URL:",
            "Source0:",
            "BuildRequires:",
            "%prep",
            "%install",
            "%files",
            "%changelog",
        ):
            assert f"\n{tag}" in proc.stdout, (spec.name, tag)
        assert "\n%build\n" in spec.read_text()  # rpmspec -P prints the body of %build, not its header
        query = subprocess.run(
            ["rpmspec", "-q", "--srpm", "--qf", "%{name} %{version} %{release} %{license}", str(spec)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert query.split()[0] == spec.stem and query.endswith(
            " NOASSERTION" if "model" in spec.stem else " Apache-2.0"
        )
    changelog = subprocess.run(
        [
            "rpmspec",
            "-q",
            "--srpm",
            "--qf",
            "[* %{changelogname}\\n%{changelogtext}\\n]",
            str(out / "tfaot-model-test-simple.spec"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The commit subject and author arrive literally: no macro expanded, no line added.
    assert "- Retrain test-simple on 100% of %{data} $(whoami)" in changelog
    assert "Ann %{_bindir} Example <tests@tfaot-dist.invalid> - 1.0.0-2" in changelog
    assert changelog.count("\n* ") + changelog.startswith("* ") == 2


# --- releases ---------------------------------------------------------------------------------------


def test_release_counts_changes_and_resets_with_the_version(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    write_entry(reg, entry("m"))
    assert releases(reg)["tfaot-model-m.spec"] == 1  # outside git
    git(reg, "init", "-q", "-b", "main")
    assert releases(reg)["tfaot-model-m.spec"] == 1  # untracked: the first release
    commit(reg, "add m")
    assert releases(reg)["tfaot-model-m.spec"] == 1
    write_entry(reg, entry("m", sha=SHA_B))  # same version, other source commit
    assert releases(reg)["tfaot-model-m.spec"] == 2  # pending
    commit(reg, "new weights")
    assert releases(reg)["tfaot-model-m.spec"] == 2  # committing keeps the number
    write_entry(reg, entry("m", sha=SHA_B, config="multi/aot_config.yaml"))
    commit(reg, "other config")
    assert releases(reg)["tfaot-model-m.spec"] == 3
    (reg / "notes.txt").write_text("unrelated\n")
    commit(reg, "unrelated file")
    assert releases(reg)["tfaot-model-m.spec"] == 3
    write_registry_yaml(reg, tensorflow="2.22.0")  # the TensorFlow pin changes every model's bytes
    commit(reg, "TensorFlow 2.22")
    assert releases(reg) == {"tfaot-model-m.spec": 4, "tfaot-xla-runtime.spec": 1}
    write_entry(reg, entry("m", version="1.1.0", sha=SHA_C))
    assert releases(reg)["tfaot-model-m.spec"] == 1  # a new version starts again
    commit(reg, "1.1.0")
    assert releases(reg)["tfaot-model-m.spec"] == 1
    write_entry(reg, entry("m", version="1.1.0", sha=SHA_A))
    commit(reg, "revert weights")
    assert releases(reg)["tfaot-model-m.spec"] == 2


def test_release_sees_templates_in_the_same_work_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    reg, templates = repo / "registry", repo / "spec_templates"
    write_registry_yaml(reg)
    write_entry(reg, entry("m"))
    templates.mkdir()
    (templates / "x.j2").write_text("1\n")
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "start")
    monkeypatch.setattr(flavors, "_templates", lambda: [templates])
    assert releases(reg)["tfaot-model-m.spec"] == 1
    (templates / "x.j2").write_text("2\n")
    commit(repo, "template change")
    assert releases(reg) == {"tfaot-model-m.spec": 2, "tfaot-xla-runtime.spec": 2}


def test_release_counts_spec_templates_not_package_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package template (model.h, bench_aot.cc, ...) changes the build key, not every spec's Release."""
    repo = tmp_path / "repo"
    reg, spec_dir, package_dir = repo / "registry", repo / "spec_templates", repo / "package_templates"
    write_registry_yaml(reg)
    write_entry(reg, entry("m"))
    for folder in (spec_dir, package_dir):
        folder.mkdir()
        (folder / "x.j2").write_text("1\n")
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "start")
    monkeypatch.setattr(flavors, "spec_templates_dir", lambda: spec_dir)  # what an installed tree would hold
    (package_dir / "x.j2").write_text("2\n")
    commit(repo, "package template change")
    assert releases(reg) == {"tfaot-model-m.spec": 1, "tfaot-xla-runtime.spec": 1}
    (spec_dir / "x.j2").write_text("2\n")
    commit(repo, "spec template change")
    assert releases(reg) == {"tfaot-model-m.spec": 2, "tfaot-xla-runtime.spec": 2}


def test_template_folders_split_package_and_spec_templates() -> None:
    from tfaot_dist import assembly
    from tfaot_dist.cxx import runtime_package
    from tfaot_dist.perf import bench
    from tfaot_dist.util import render

    spec_names = {p.name for p in render.spec_templates_dir().glob("*.j2")}
    package_names = {p.name for p in render.package_templates_dir().glob("*.j2")}
    assert spec_names and not spec_names & package_names
    assert all(name.endswith((".spec.j2", ".file.j2")) for name in spec_names)
    assert {*assembly.TEMPLATES, *runtime_package.TEMPLATES, bench.BENCH_TEMPLATE} == package_names


def test_release_history_outside_git_is_empty(tmp_path: Path) -> None:
    write_registry_yaml(tmp_path / "reg")
    path = write_entry(tmp_path / "reg", entry("m"))
    assert release.derive(path, [], "1.0.0", lambda text: "1.0.0") == release.Release(1)


# --- safety -----------------------------------------------------------------------------------------

INJECTED = ["%{__rm}", "$(id)", "`id`", "a\nb", 'a"b', "a<b", "a'b"]


def _bad_entries() -> Iterator[tuple[str, dict[str, Any], str]]:
    for bad in INJECTED:
        yield "version", entry("m", version=f"1.0{bad}"), "version"
        yield "ref", entry("m", ref=f"main{bad}"), "source.ref"
        yield "commit", entry("m", sha=f"{SHA_A[:-4]}{bad}"), "source.commit"
        yield "url", entry("m", url=f"https://git.example.org/ml/{bad}.git"), "source.git"
        yield "aot_config", entry("m", config=f"simple/{bad}.yaml"), "aot_config"
        yield "name", entry(f"m{bad}"), "name"


@pytest.mark.parametrize(
    "field, data, where", list(_bad_entries()), ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(_bad_entries())]
)
@pytest.mark.parametrize("flavor", ["cmsbuild", "rpm"])
def test_injected_identifiers_are_rejected(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    data: dict[str, Any],
    where: str,
    flavor: str,
) -> None:
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    write_entry(reg, entry("good"))
    path = write_entry(reg, data, name="m" if field != "name" else None)
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    (out / "keep" / "file.spec").write_text("old\n")
    before = snapshot(out)
    _, err = specs_cli(capsys, reg, "--flavor", flavor, "--out", out, expect=INVALID)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfaot-dist: error: "), err
    assert (str(path) if field != "name" else str(path.parent)) in lines[0], lines[0]
    assert f": {where}: " in lines[0], lines[0]
    assert snapshot(out) == before


@pytest.mark.parametrize("key, value", [("namespace", "ns"), ("target_cpu", "skylake")])
def test_cmsbuild_rejects_overrides_it_cannot_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    reg = tmp_path / "reg"
    write_registry_yaml(reg)
    path = write_entry(reg, entry("m", overrides={key: value}))
    _, err = specs_cli(capsys, reg, "--out", tmp_path / "out", expect=INVALID)
    assert f"{path}: overrides.{key}" in err and not (tmp_path / "out").exists()
    specs_cli(capsys, reg, "--flavor", "rpm", "--out", tmp_path / "rpm")  # rpm installs the built bytes


def test_unpinned_tensorflow_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "registry.yaml").write_text('toolchain:\n  requirements: ["tensorflow-cpu>=2.20"]\n')
    _, err = specs_cli(capsys, reg, "--out", tmp_path / "out", expect=INVALID)
    assert "registry.yaml: toolchain.requirements" in err and "pinned" in err


def test_not_a_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, err = specs_cli(capsys, tmp_path / "nothing", "--out", tmp_path / "out", expect=INVALID)
    assert "not a registry" in err and not (tmp_path / "out").exists()


def test_sources_only_for_rpm(
    golden_registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = specs_cli(capsys, golden_registry, "--out", tmp_path / "o", "--sources", tmp_path, expect=2)
    assert "--sources" in err


@pytest.mark.parametrize("text", [HOSTILE, "line\nbreak\r\u2028x", "%" * 300])
def test_free_text_escaping(text: str) -> None:
    for escaped in (spec_text(text), pkgconfig_text(text), one_line(text)):
        assert "\n" not in escaped and "\r" not in escaped and "\u2028" not in escaped
        assert len(escaped) <= 2 * 200
    assert "%" not in spec_text(text).replace("%%", "")
    assert not set("$#\\") & set(pkgconfig_text(text))


def test_a_value_with_a_line_break_is_never_rendered() -> None:
    with pytest.raises(ValueError, match="line break"):
        environment().from_string("Version: {{ v }}\n").render(v="1.0\n%post\nrm -rf /")


@pytest.mark.parametrize(
    "template, extra",
    [
        (
            "scram_tool.xml.j2",
            {
                "url": HOSTILE,
                "libs": [HOSTILE],
                "base_var": "X_BASE",
                "uses": [HOSTILE],
                "ldflags": [HOSTILE],
            },
        ),
        (
            "runtime_tool.xml.j2",
            {
                "tool": HOSTILE,
                "libs": [HOSTILE],
                "system_libs": ["m"],
                "ldflags": [HOSTILE],
                "base_var": "X_BASE",
            },
        ),
    ],
)
def test_tool_files_escape_hostile_text(template: str, extra: dict[str, Any]) -> None:
    text = render(template, package=HOSTILE, version=HOSTILE, root="@TOOL_ROOT@", **extra)
    (tool,) = ET.fromstringlist(["<root>", text, "</root>"])  # as scram reads it
    assert tool.tag == "tool" and tool.get("version") == HOSTILE
    assert not tool.findall(".//evil")
    assert all(
        el.tag in {"tool", "info", "lib", "client", "environment", "use", "flags"} for el in tool.iter()
    )


# --- CMake and pkg-config files ---------------------------------------------------------------------

MODEL_MANIFEST: dict[str, Any] = {
    "package": "tfaot-model-test-simple",
    "name": "test-simple",
    "version": "1.0.0",
    "source": {"git": "https://git.example.org/ml/data.git", "url": "https://git.example.org/ml/data.git"},
    "model": {"description": "A simple model " + HOSTILE + "\nsecond line", "author": HOSTILE},
    "requires": [{"name": "tfaot-xla-runtime", "version": "2.21.0+b8fd209dfb55daad"}],
    "files": {},
}
RUNTIME_MANIFEST = {
    "package": "tfaot-xla-runtime",
    "name": "tfaot-xla-runtime",
    "version": "2.21.0+b8fd209dfb55daad",
    "tensorflow_version": "2.21.0",
    "cxxflags": ["-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1"],
    "libs": ["lib/libtf_xla_runtime.a", "lib/libtfaot_absl.a"],
    "system_libs": ["-lpthread", "-lm"],
    "files": {},
    "kind": "runtime",
}


def typed(manifest: dict[str, Any]) -> Manifest:
    """The manifest as buildsys reads it (documents.Manifest: field types checked)."""
    return Manifest.from_json(manifest, "manifest")


def fake_tree(root: Path) -> tuple[Path, Path]:
    """A model package and a runtime package with empty libraries and the four generated files."""
    model, runtime = root / "model", root / "runtime"
    files = {
        model / buildsys.cmake_config_path("tfaot-model-test-simple"): buildsys.render_cmake_config(
            typed(MODEL_MANIFEST)
        ),
        model / buildsys.pkgconfig_path("tfaot-model-test-simple"): buildsys.render_pkgconfig(
            typed(MODEL_MANIFEST)
        ),
        runtime / buildsys.cmake_config_path("tfaot-xla-runtime"): buildsys.render_runtime_cmake_config(
            typed(RUNTIME_MANIFEST)
        ),
        runtime / buildsys.pkgconfig_path("tfaot-xla-runtime"): buildsys.render_runtime_pkgconfig(
            typed(RUNTIME_MANIFEST)
        ),
        model / "lib" / "libtfaot-model-test-simple.a": "",
        runtime / "lib" / "libtf_xla_runtime.a": "",
        runtime / "lib" / "libtfaot_absl.a": "",
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return model, runtime


def pkg_config(*args: str, path: list[Path]) -> str:
    env = {
        **os.environ,
        "PKG_CONFIG_PATH": ":".join(str(p / "lib" / "pkgconfig") for p in path),
        "PKG_CONFIG_LIBDIR": "",
    }
    return subprocess.run(
        ["pkg-config", *args], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_pkgconfig_flags_on_a_moved_tree(tmp_path: Path) -> None:
    model, runtime = fake_tree(tmp_path / "first")
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "first", moved)  # relocatable: nothing remembers the old place
    model, runtime = moved / "model", moved / "runtime"
    flags = pkg_config(
        "--define-prefix", "--cflags", "--libs", "tfaot-model-test-simple", path=[model, runtime]
    )
    # No -std= (the consumer's own stays), TensorFlow's headers as system headers.
    assert flags.split() == [
        f"-I{model}/include",
        "-isystem",
        f"{runtime}/include",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        f"-L{model}/lib",
        "-ltfaot-model-test-simple",
        f"-L{runtime}/lib",
        "-ltf_xla_runtime",
        "-ltfaot_absl",
        "-lpthread",
        "-lm",
        "-Wl,--exclude-libs,libtf_xla_runtime.a:libtfaot_absl.a",
    ]
    # Without --define-prefix the paths follow ${pcfiledir}: the same directories.
    plain = pkg_config("--cflags", "--libs", "tfaot-model-test-simple", path=[model, runtime]).split()
    dirs = [f[2:] for f in plain if f[:2] in ("-I", "-L")]
    dirs.insert(1, plain[plain.index("-isystem") + 1])
    assert [os.path.normpath(d) for d in dirs] == [
        str(model / "include"),
        str(runtime / "include"),
        str(model / "lib"),
        str(runtime / "lib"),
    ]
    assert pkg_config("--modversion", "tfaot-model-test-simple", path=[model, runtime]) == "1.0.0"
    assert (
        pkg_config("--print-requires", "tfaot-model-test-simple", path=[model, runtime])
        == "tfaot-xla-runtime = 2.21.0+b8fd209dfb55daad"
    )
    # The hostile description stays one harmless line: no variable, comment or continuation.
    listed = pkg_config("--list-all", path=[model, runtime])
    line = next(ln for ln in listed.splitlines() if ln.startswith("tfaot-model-test-simple "))
    assert line.split(" - ", 1)[1] == pkgconfig_text(MODEL_MANIFEST["model"]["description"])
    assert "_(reboot)" in line and "second line" in line


def test_pkgconfig_before_verification_accepts_any_build_of_the_tensorflow_version(tmp_path: Path) -> None:
    fresh = {k: v for k, v in MODEL_MANIFEST.items() if k != "requires"}
    fresh["toolchain"] = {"tensorflow_version": "2.21.0"}
    model, runtime = fake_tree(tmp_path)
    (model / buildsys.pkgconfig_path("tfaot-model-test-simple")).write_text(
        buildsys.render_pkgconfig(typed(fresh))
    )
    runtime_pc = runtime / buildsys.pkgconfig_path("tfaot-xla-runtime")
    for runtime_version, found in (
        ("2.21.0+b8fd209dfb55daad", True),
        ("2.21.0", True),
        ("2.21.1", False),
        ("2.22.0+b8fd209dfb55daad", False),
        ("2.20.0", False),
    ):
        runtime_pc.write_text(
            buildsys.render_runtime_pkgconfig(typed({**RUNTIME_MANIFEST, "version": runtime_version}))
        )
        env = {
            **os.environ,
            "PKG_CONFIG_PATH": f"{model}/lib/pkgconfig:{runtime}/lib/pkgconfig",
            "PKG_CONFIG_LIBDIR": "",
        }
        proc = subprocess.run(["pkg-config", "--exists", "tfaot-model-test-simple"], env=env, check=False)
        assert (proc.returncode == 0) == found, runtime_version


CMAKE_PROBE = """
cmake_minimum_required(VERSION 3.16)
project(probe LANGUAGES NONE)
find_package(tfaot-model-test-simple REQUIRED)
foreach(t tfaot::model-test-simple tfaot::xla-runtime tfaot::xla-runtime-tf_xla_runtime
          tfaot::xla-runtime-tfaot_absl)
  foreach(p IMPORTED_LOCATION INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES
            INTERFACE_COMPILE_DEFINITIONS INTERFACE_COMPILE_FEATURES)
    get_target_property(v ${t} ${p})
    message(STATUS "PROBE ${t} ${p}=${v}")
  endforeach()
endforeach()
find_package(tfaot-model-test-simple REQUIRED)  # a second call finds the same targets
"""


def test_cmake_config_gives_imported_targets(tmp_path: Path) -> None:
    model, runtime = fake_tree(tmp_path / "tree")
    project = tmp_path / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(CMAKE_PROBE)
    proc = subprocess.run(
        [
            "cmake",
            "-S",
            str(project),
            "-B",
            str(tmp_path / "build"),
            f"-DCMAKE_PREFIX_PATH={model};{runtime}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = dict(
        line.split("PROBE ", 1)[1].split("=", 1) for line in proc.stdout.splitlines() if "PROBE " in line
    )
    m, r = "tfaot::model-test-simple", "tfaot::xla-runtime"
    assert probe[f"{m} IMPORTED_LOCATION"] == f"{model}/lib/libtfaot-model-test-simple.a"
    assert probe[f"{m} INTERFACE_INCLUDE_DIRECTORIES"] == f"{model}/include"
    assert probe[f"{m} INTERFACE_LINK_LIBRARIES"] == r
    assert probe[f"{r} INTERFACE_INCLUDE_DIRECTORIES"] == f"{runtime}/include"
    assert probe[f"{r} INTERFACE_COMPILE_DEFINITIONS"] == "_GLIBCXX_USE_CXX11_ABI=1"
    assert probe[f"{r} INTERFACE_COMPILE_FEATURES"] == "cxx_std_17"
    assert probe[f"{r} INTERFACE_LINK_LIBRARIES"] == "tfaot::xla-runtime-tf_xla_runtime"
    assert (
        probe["tfaot::xla-runtime-tf_xla_runtime INTERFACE_LINK_LIBRARIES"] == "tfaot::xla-runtime-tfaot_absl"
    )
    assert probe["tfaot::xla-runtime-tfaot_absl INTERFACE_LINK_LIBRARIES"] == "pthread;m"
    assert probe["tfaot::xla-runtime-tfaot_absl IMPORTED_LOCATION"] == f"{runtime}/lib/libtfaot_absl.a"


def test_cmake_config_reports_a_missing_archive(tmp_path: Path) -> None:
    model, runtime = fake_tree(tmp_path / "tree")
    (model / "lib" / "libtfaot-model-test-simple.a").unlink()
    project = tmp_path / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(CMAKE_PROBE)
    proc = subprocess.run(
        [
            "cmake",
            "-S",
            str(project),
            "-B",
            str(tmp_path / "build"),
            f"-DCMAKE_PREFIX_PATH={model};{runtime}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "libtfaot-model-test-simple.a is missing" in " ".join(proc.stderr.split())


@pytest.mark.parametrize(
    "field, value",
    [
        ("package", "tfaot-model-x\nadd_library(evil)"),
        ("version", '1.0"x'),
        ("cxxflags", ["-O2;evil"]),
        ("libs", ["lib/lib$(id).a"]),
        ("system_libs", ["-lm\nevil"]),
    ],
)
def test_buildsys_rejects_unsafe_manifest_values(field: str, value: list[str] | str) -> None:
    from tfaot_dist.errors import InvalidInput

    manifest = {
        **(RUNTIME_MANIFEST if field in ("cxxflags", "libs", "system_libs") else MODEL_MANIFEST),
        field: value,
    }
    render_fn = (
        buildsys.render_runtime_cmake_config
        if field in ("cxxflags", "libs", "system_libs")
        else buildsys.render_cmake_config
    )
    with pytest.raises(InvalidInput, match=field):
        render_fn(typed(manifest))


# --- real rpms from built packages ------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rpmbuild(spec: Path, sources: Path, top: Path) -> Path:
    proc = subprocess.run(
        [
            "rpmbuild",
            "-bb",
            "--nodeps",  # Debian's rpm database knows no packages: skip BuildRequires
            "--define",
            f"_topdir {top}",
            "--define",
            f"_sourcedir {sources}",
            "--define",
            f"_tmppath {top}/tmp",
            "--define",
            "_binary_payload w1.gzdio",
            str(spec),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rpm,) = (top / "RPMS").rglob(f"{spec.stem}-*.rpm")
    return rpm


def rpm_dump(rpm: Path) -> dict[str, str]:
    """Installed path -> sha256 of every regular file in the rpm."""
    out = subprocess.run(
        ["rpm", "-qp", "--dump", str(rpm)], check=True, capture_output=True, text=True
    ).stdout
    files = {}
    for line in out.splitlines():
        path, _size, _mtime, digest, mode = line.split()[:5]
        if int(mode, 8) & 0o170000 == 0o100000:
            files[path] = digest
    return files


def rpm_extract(rpm: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    payload = subprocess.run(["rpm2cpio", str(rpm)], check=True, capture_output=True).stdout
    subprocess.run(["cpio", "-idm", "--quiet"], input=payload, cwd=dest, check=True, capture_output=True)


def check_rpm_matches_package(rpm: Path, package_dir: Path, root: str, work: Path) -> None:
    """The rpm holds exactly the package's files, with the package's bytes (tool files relocated)."""
    manifest = json.loads((package_dir / "manifest.json").read_text())
    expected = {}
    for rel in [*manifest["files"], "manifest.json"]:
        data = (package_dir / rel).read_bytes()
        if rel.startswith("etc/scram.d/"):
            data = data.replace(b"@TOOL_ROOT@", root.encode())
        expected[f"{root}/{rel}"] = sha256(data)
    assert rpm_dump(rpm) == expected
    rpm_extract(rpm, work)
    tools = list((work / root.lstrip("/") / "etc" / "scram.d").glob("*.xml"))
    assert tools
    for tool_file in tools:
        tool = ET.parse(tool_file).getroot()
        assert tool.tag == "tool"
        base = next(e for e in tool.iter("environment") if e.get("name", "").endswith("_BASE"))
        assert base.get("default") == root


@pytest.fixture(scope="module")
def rpm_specs(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rpm specs of the built registry, with the package archives verified and placed in SOURCES/."""
    out = tmp_path_factory.mktemp("rpm-specs")
    assert (
        cli.main(
            [
                "--registry",
                str(built / "registry"),
                "specs",
                "--flavor",
                "rpm",
                "--out",
                str(out),
                "--sources",
                str(built / "dist"),
            ]
        )
        == 0
    )
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["test-simple", "test-multi"])
def test_rpm_of_a_model_holds_the_verified_files(
    built: Path, rpm_specs: Path, tmp_path: Path, name: str
) -> None:
    package = f"tfaot-model-{name}"
    assert (rpm_specs / "SOURCES" / f"{package}-1.0.0.tar.gz").read_bytes() == (
        built / "dist" / f"{package}-1.0.0.tar.gz"
    ).read_bytes()
    rpm = rpmbuild(rpm_specs / f"{package}.spec", rpm_specs / "SOURCES", tmp_path / "rpmbuild")
    assert rpm.name == f"{package}-1.0.0-1.x86_64.rpm"
    root = f"/opt/tfaot/{package}/1.0.0"
    check_rpm_matches_package(rpm, built / "dist" / f"{package}-1.0.0", root, tmp_path / "extracted")
    requires = subprocess.run(
        ["rpm", "-qp", "--requires", str(rpm)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert "tfaot-xla-runtime = 2.21.0" in requires
    # Every kernel object travels with its weights and the archive.
    files = rpm_dump(rpm)
    kernels = [p for p in files if p.endswith(".o") and not p.endswith("_constants.o")]
    assert kernels and all(k.removesuffix(".o") + "_constants.o" in files for k in kernels)
    assert f"{root}/lib/lib{package}.a" in files


@pytest.mark.slow
def test_rpm_of_the_runtime(built: Path, rpm_specs: Path, tmp_path: Path) -> None:
    (runtime_dir,) = [p for p in (built / "dist").glob("tfaot-xla-runtime-*") if p.is_dir()]
    assert (rpm_specs / "SOURCES" / "tfaot-xla-runtime-2.21.0.tar.gz").is_file()
    rpm = rpmbuild(rpm_specs / "tfaot-xla-runtime.spec", rpm_specs / "SOURCES", tmp_path / "rpmbuild")
    assert rpm.name == "tfaot-xla-runtime-2.21.0-1.x86_64.rpm"
    check_rpm_matches_package(rpm, runtime_dir, "/opt/tfaot/tfaot-xla-runtime/2.21.0", tmp_path / "extracted")


@pytest.mark.slow
def test_specs_of_the_built_registry_both_flavours_and_check(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reg = tmp_path / "registry"
    shutil.copytree(built / "registry", reg)
    for flavor in ("cmsbuild", "rpm"):
        out = tmp_path / flavor
        specs_cli(capsys, reg, "--flavor", flavor, "--out", out)
        specs_cli(capsys, reg, "--flavor", flavor, "--out", out, "--check")
    rpm_out = tmp_path / "rpm-sources"
    specs_cli(capsys, reg, "--flavor", "rpm", "--out", rpm_out, "--sources", built / "dist")
    specs_cli(capsys, reg, "--flavor", "rpm", "--out", rpm_out, "--sources", built / "dist", "--check")

    data = yaml.safe_load((reg / "models" / "test-simple.yaml").read_text())
    data["source"]["ref"] = "v1"  # same commit, other ref: the spec changes
    write_entry(reg, data)
    for flavor in ("cmsbuild", "rpm"):
        text, _ = specs_cli(
            capsys, reg, "--flavor", flavor, "--out", tmp_path / flavor, "--check", "--json", expect=1
        )
        assert json.loads(text)["stale"] == ["tfaot-model-test-simple.spec"]
    # The archive in dist was built from the old entry: it is refused as a source.
    _, err = specs_cli(
        capsys, reg, "--flavor", "rpm", "--out", tmp_path / "x", "--sources", built / "dist", expect=INVALID
    )
    assert "build key differs" in err and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_sources_refuses_a_tampered_archive(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import io
    import tarfile

    dist = tmp_path / "dist"
    shutil.copytree(built / "dist", dist, ignore=shutil.ignore_patterns("tfaot-xla-runtime*"))
    archive = dist / "tfaot-model-test-simple-1.0.0.tar.gz"
    # Rewrite one header inside the archive, keeping the manifest: the digest no longer matches.
    raw = io.BytesIO()
    with tarfile.open(archive) as src, tarfile.open(fileobj=raw, mode="w") as dst:
        for member in src:
            f = src.extractfile(member) if member.isfile() else None
            data = f.read() if f is not None else None
            if member.name.endswith("/model.h"):
                assert data is not None
                data += b"// tampered\n"
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    archive.write_bytes(gzip.compress(raw.getvalue()))
    _, err = specs_cli(
        capsys,
        built / "registry",
        "--flavor",
        "rpm",
        "--out",
        tmp_path / "out",
        "--sources",
        dist,
        expect=INTEGRITY,
    )
    assert "include/tfaot-model-test-simple/model.h: sha256 or size differs from the manifest" in err
    assert not (tmp_path / "out").exists()


SIMPLE_CONSUMER = r"""
#include <cstdio>
#include <fstream>
#include <vector>
#include "tfaot/Model.h"
#include "tfaot-model-test-simple/model.h"

int main(int, char** argv) {
  std::vector<float> x(4);
  std::ifstream(argv[1], std::ios::binary).read(reinterpret_cast<char*>(x.data()), 4 * sizeof(float));
  tfaot::Model<tfaot_model::simple> model;
  tfaot::FloatArrays in = {x};
  tfaot::FloatArrays out;
  std::tie(out) = model.run<tfaot::FloatArrays>(1, in);
  std::printf("%.9g %.9g\n", out[0][0], out[0][1]);
  return 0;
}
"""

CMAKE_CONSUMER = """
cmake_minimum_required(VERSION 3.16)
project(consumer LANGUAGES CXX)
find_package(tfaot-model-test-simple REQUIRED)
add_executable(consumer consumer.cc)
target_link_libraries(consumer PRIVATE tfaot::model-test-simple)
"""


@pytest.mark.slow
def test_real_packages_with_generated_cmake_and_pkgconfig_files(built: Path, tmp_path: Path) -> None:
    """The four files written into copies of the real packages (as assemble will): consumers build and run."""
    import array

    model = tmp_path / "model"
    shutil.copytree(built / "dist" / "tfaot-model-test-simple-1.0.0", model)
    (runtime_dir,) = [p for p in (built / "dist").glob("tfaot-xla-runtime-*") if p.is_dir()]
    runtime = tmp_path / "runtime"
    shutil.copytree(runtime_dir, runtime)
    model_manifest = json.loads((model / "manifest.json").read_text())
    runtime_manifest = json.loads((runtime / "manifest.json").read_text())
    for root, files in (
        (
            model,
            {
                buildsys.cmake_config_path("tfaot-model-test-simple"): buildsys.render_cmake_config(
                    typed(model_manifest)
                ),
                buildsys.pkgconfig_path("tfaot-model-test-simple"): buildsys.render_pkgconfig(
                    typed(model_manifest)
                ),
            },
        ),
        (
            runtime,
            {
                buildsys.cmake_config_path("tfaot-xla-runtime"): buildsys.render_runtime_cmake_config(
                    typed(runtime_manifest)
                ),
                buildsys.pkgconfig_path("tfaot-xla-runtime"): buildsys.render_runtime_pkgconfig(
                    typed(runtime_manifest)
                ),
            },
        ),
    ):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    src = tmp_path / "consumer.cc"
    src.write_text(SIMPLE_CONSUMER)
    reference = model / model_manifest["reference"]["dir"] / "bs1"
    want = array.array("f", (reference / "output_0.bin").read_bytes())

    def check(exe: Path) -> None:
        got = subprocess.run(
            [str(exe), str(reference / "input_0.bin")], check=True, capture_output=True, text=True
        ).stdout.split()
        assert len(got) == len(want) and all(abs(float(g) - w) <= 1e-5 for g, w in zip(got, want)), (
            got,
            want,
        )

    def flags(what: str) -> list[str]:
        return pkg_config("--define-prefix", what, "tfaot-model-test-simple", path=[model, runtime]).split()

    code, stderr = compile_kept(["-O1", *flags("--cflags")], src, tmp_path / "pc-consumer.o")
    assert code == 0, stderr[-6000:]
    subprocess.run(
        ["g++", str(tmp_path / "pc-consumer.o"), "-o", str(tmp_path / "pc-consumer"), *flags("--libs")],
        check=True,
    )
    check(tmp_path / "pc-consumer")

    (tmp_path / "CMakeLists.txt").write_text(CMAKE_CONSUMER)
    build = tmp_path / "cmake-build"
    subprocess.run(
        [
            "cmake",
            "-S",
            str(tmp_path),
            "-B",
            str(build),
            f"-DCMAKE_PREFIX_PATH={model};{runtime}",
            "-DCMAKE_BUILD_TYPE=Release",
            CMAKE_LAUNCHER,
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    check(build / "consumer")


# --- the prebuilt cmsBuild flavour: archives from a channel over HTTP ---------------------------------


def download_source(parsed_spec: str, sources: Path) -> Path:
    """What cmsBuild does before rpmbuild runs: fetch the spec's Source URL into SOURCES/."""
    import urllib.request

    (url,) = [line.split(None, 1)[1] for line in parsed_spec.splitlines() if line.startswith("Source:")]
    sources.mkdir(parents=True, exist_ok=True)
    target = sources / url.rsplit("/", 1)[1]
    with urllib.request.urlopen(url, timeout=60) as answer:
        target.write_bytes(answer.read())
    return target


def run_prebuilt(
    files: dict[str, str], spec_name: str, top: Path
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The spec as cmsBuild would see it, its Source downloaded, then %prep, %build and %install by rpmbuild -bi.

    Returns rpmbuild's result and the install directory (%{i}).
    """
    spec = top / f"{spec_name}.spec"
    top.mkdir(parents=True, exist_ok=True)
    spec.write_text(
        as_cmsbuild_would(
            files[f"{spec_name}.spec"],
            files["tfaot-prebuilt.file"],
            "tfaot-prebuilt",
            root=str(top / "install"),
        )
    )
    parsed = subprocess.run(["rpmspec", "-P", str(spec)], capture_output=True, text=True, check=True).stdout
    download_source(parsed, top / "SOURCES")
    proc = subprocess.run(
        [
            "rpmbuild",
            "-bi",
            "--nodeps",
            "--define",
            f"_topdir {top}",
            "--define",
            f"_sourcedir {top / 'SOURCES'}",
            "--define",
            f"_tmppath {top}/tmp",
            "--define",
            "__os_install_post %{nil}",
            str(spec),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    version = files[f"{spec_name}.spec"].split("\n", 1)[0].split()[-1]
    return proc, top / "install" / spec_name / version


def check_installed_tree(install: Path, manifest_bytes: bytes) -> None:
    """install holds exactly the package's files with the package's bytes; tool files point at install."""
    manifest = json.loads(manifest_bytes)
    assert (install / "manifest.json").read_bytes() == manifest_bytes
    expected = {}
    for rel in manifest["files"]:
        expected[rel] = manifest["files"][rel]["sha256"]
    got = {str(p.relative_to(install)): sha256(p.read_bytes()) for p in install.rglob("*") if p.is_file()}
    assert sorted(got) == sorted([*expected, "manifest.json"])
    tools = [rel for rel in expected if rel.startswith("etc/scram.d/")]
    assert tools == [f"etc/scram.d/{install.parent.name}.xml"]
    for rel, digest in expected.items():
        if rel in tools:
            tool = ET.fromstringlist(["<root>", (install / rel).read_text(), "</root>"])[
                0
            ]  # as scram reads it
            base = next(e for e in tool.iter("environment") if e.get("name", "").endswith("_BASE"))
            assert base.get("default") == str(install) and "@TOOL_ROOT@" not in (install / rel).read_text()
        else:
            assert got[rel] == digest, rel


def fake_package(root: Path, name: str, version: str, source: dict[str, str] | None, runtime: str) -> Path:
    """A small package tree in the layout of `tfaot-dist build` (for the fast tests; the slow ones use real ones)."""
    from tfaot_dist.cxx import scram_tool

    tree = root / f"{name}-{version}"
    if name == flavors.RPM_RUNTIME:
        files = {
            f"etc/scram.d/{name}.xml": scram_tool.render_runtime_tool(version, ["libtf_xla_runtime.a"], []),
            "lib/libtf_xla_runtime.a": "!<arch>\n",
            "include/tfaot/Model.h": "// runtime\n",
        }
    else:
        files = {
            f"etc/scram.d/{name}.xml": scram_tool.render_model_tool(name, version, ""),
            f"lib/lib{name}.a": f"!<arch>\n{name}\n",
            f"include/{name}/model.h": f"// {name}\n",
        }
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    manifest: dict[str, Any] = {
        "package": name,
        "version": version,
        "files": {
            rel: {"sha256": sha256(text.encode()), "size": len(text.encode())} for rel, text in files.items()
        },
    }
    if source is not None:
        manifest |= {
            "source": source,
            "requires": [{"name": flavors.RPM_RUNTIME, "version": runtime}],
            "toolchain": {"tensorflow_version": "2.21.0"},
        }
    else:
        manifest["tensorflow_version"] = "2.21.0"
    (tree / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return tree


def publish_fake(channel: Path, trees: list[Path]) -> None:
    """index.json and packages/NAME/VERSION/{archive, manifest.json}, as channel.publish lays them out."""
    import gzip
    import tarfile

    rows = []
    for tree in trees:
        manifest = json.loads((tree / "manifest.json").read_text())
        name, version = manifest["package"], manifest["version"]
        base = channel / "packages" / name / version
        base.mkdir(parents=True)
        archive = base / f"{name}-{version}.tar.gz"

        def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:  # the same bytes on every run (golden digests)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.isdir() else 0o644
            return info

        with gzip.GzipFile(archive, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
            tar.add(tree, arcname=tree.name, filter=fixed)
        (base / "manifest.json").write_bytes((tree / "manifest.json").read_bytes())
        runtime = name == flavors.RPM_RUNTIME
        rows.append(
            {
                "name": name,
                "version": version,
                "kind": "runtime" if runtime else "model",
                "archive": f"packages/{name}/{version}/{archive.name}",
                "size": archive.stat().st_size,
                "sha256": sha256(archive.read_bytes()),
                "manifest": f"packages/{name}/{version}/manifest.json",
                "manifest_sha256": sha256((tree / "manifest.json").read_bytes()),
                "requires": manifest.get("requires", []),
                "tensorflow_version": "2.21.0",
                "batch_sizes": [] if runtime else [1],
                "signature": None if runtime else {},
            }
        )
    (channel / "index.json").write_text(json.dumps({"format": "tfaot-dist-channel/1", "packages": rows}))


RUNTIME_VERSION = "2.21.0+b8fd209dfb55daad"
SIMPLE_SOURCE = {
    "git": "https://git.example.org/ml/data.git",
    "ref": "main",
    "commit": SHA_B,
    "url": "https://git.example.org/ml/data.git",
    "aot_config": "simple/aot_config.yaml",
}
MULTI_SOURCE = {
    "git": "git@github.com:cms-ml/data.git",
    "ref": "v1",
    "commit": SHA_C,
    "url": "git@github.com:cms-ml/data.git",
    "aot_config": "multi/aot_config.yaml",
}


@pytest.fixture
def fake_channel(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """The golden registry's packages (small fakes) and their runtime in a channel served on 127.0.0.1."""
    from httpserve import Server

    trees = tmp_path / "trees"
    channel = tmp_path / "channel"
    publish_fake(
        channel,
        [
            fake_package(trees, "tfaot-model-test-simple", "1.0.0", SIMPLE_SOURCE, RUNTIME_VERSION),
            fake_package(trees, "tfaot-model-test-multi", "2.0.0rc1", MULTI_SOURCE, RUNTIME_VERSION),
            fake_package(trees, "tfaot-xla-runtime", RUNTIME_VERSION, None, ""),
        ],
    )
    server = Server(channel)
    yield server, channel
    server.close()


def test_prebuilt_golden(
    golden_registry: Path,
    fake_channel: tuple[Server, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, _ = fake_channel
    out = tmp_path / "out"
    specs_cli(
        capsys, golden_registry, "--flavor", "cmsbuild-prebuilt", "--channel", server.url(), "--out", out
    )
    # The server's port changes from run to run: the golden files name the channel http://channel.example.org/.
    rendered = {
        p.name: p.read_text().replace(server.url(), "http://channel.example.org/")
        for p in sorted(out.iterdir())
    }
    assert sorted(rendered) == [
        "tfaot-model-test-multi.spec",
        "tfaot-model-test-simple.spec",
        "tfaot-models.file",
        "tfaot-prebuilt.file",
        "tfaot-xla-runtime.spec",
    ]
    assert_golden(rendered, "cmsbuild-prebuilt")
    specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url(),
        "--out",
        out,
        "--check",
    )


def test_prebuilt_specs_parse_and_install_from_the_channel(
    golden_registry: Path, fake_channel: tuple[Server, Path], tmp_path: Path
) -> None:
    server, channel = fake_channel
    files = flavors.render_all(Registry(golden_registry), "cmsbuild-prebuilt", server.url())
    for spec_name, version in (
        ("tfaot-model-test-simple", "1.0.0"),
        ("tfaot-model-test-multi", "2.0.0rc1"),
        ("tfaot-xla-runtime", RUNTIME_VERSION),
    ):
        archive = channel / "packages" / spec_name / version / f"{spec_name}-{version}.tar.gz"
        top = tmp_path / spec_name
        proc, install = run_prebuilt(files, spec_name, top)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert (top / "SOURCES" / archive.name).read_bytes() == archive.read_bytes()
        parsed = subprocess.run(
            ["rpmspec", "-P", "--define", f"_sourcedir {top / 'SOURCES'}", str(top / f"{spec_name}.spec")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert (
            f'echo "{sha256(archive.read_bytes())}  {top / "SOURCES" / archive.name}" | sha256sum -c -'
            in parsed
        )
        requires = [line for line in parsed.splitlines() if line.startswith("Requires:")]
        assert requires == ([] if spec_name == "tfaot-xla-runtime" else ["Requires: tfaot-xla-runtime"])
        assert f"%post\n: relocate {install}/etc/scram.d/{spec_name}.xml" in parsed
        check_installed_tree(
            install, (channel / "packages" / spec_name / version / "manifest.json").read_bytes()
        )
    assert server.count(
        f"packages/tfaot-xla-runtime/{RUNTIME_VERSION}/tfaot-xla-runtime-{RUNTIME_VERSION}.tar.gz"
    )


def test_prebuilt_refuses_a_tampered_archive_before_unpacking(
    golden_registry: Path, fake_channel: tuple[Server, Path], tmp_path: Path
) -> None:
    server, channel = fake_channel
    files = flavors.render_all(Registry(golden_registry), "cmsbuild-prebuilt", server.url())
    rel = "packages/tfaot-model-test-simple/1.0.0/tfaot-model-test-simple-1.0.0.tar.gz"
    good = (channel / rel).read_bytes()
    server.replace(rel, good[:-1] + bytes([good[-1] ^ 1]))  # the server now serves other bytes
    proc, install = run_prebuilt(files, "tfaot-model-test-simple", tmp_path / "top")
    assert proc.returncode != 0
    assert "sha256sum: WARNING: 1 computed checksum did NOT match" in proc.stderr, proc.stderr[-2000:]
    assert "%prep" in proc.stderr and not install.exists()
    assert not (tmp_path / "top" / "BUILD" / "tfaot-model-test-simple-1.0.0").exists()


def test_prebuilt_refuses_what_is_not_the_entry_s_build(
    golden_registry: Path,
    fake_channel: tuple[Server, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, channel = fake_channel
    out = tmp_path / "out"
    # A channel URL that cannot be placed in a spec, or none at all.
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        "ftp://x/",
        "--out",
        out,
        expect=INVALID,
    )
    assert "--channel" in err and "ftp://x/" in err
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url("$(id)/"),
        "--out",
        out,
        expect=INVALID,
    )
    assert "--channel" in err and "cannot be placed in a spec" in err
    _, err = specs_cli(capsys, golden_registry, "--flavor", "cmsbuild-prebuilt", "--out", out, expect=2)
    assert "--channel" in err
    _, err = specs_cli(capsys, golden_registry, "--channel", server.url(), "--out", out, expect=2)
    assert "--channel" in err
    # The entry moved to another commit since the channel's build: refused, naming the field.
    write_entry(golden_registry, entry("test-simple", sha=SHA_A))
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url(),
        "--out",
        out,
        expect=INVALID,
    )
    assert (
        "tfaot-model-test-simple/1.0.0/manifest.json: not the build of models/test-simple.yaml "
        "(source.commit differ)" in err
    )
    # A version the channel does not have.
    write_entry(golden_registry, entry("test-simple", version="1.0.1", sha=SHA_B))
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url(),
        "--out",
        out,
        expect=4,
    )
    assert "index.json: no tfaot-model-test-simple 1.0.1" in err
    # An index whose archive path would put shell or macro text into the spec.
    write_entry(golden_registry, entry("test-simple", sha=SHA_B))
    index = channel / "index.json"
    good_index = index.read_text()
    index.write_text(
        good_index.replace(
            '"packages/tfaot-model-test-simple/1.0.0/tfaot-model-test-simple-1.0.0.tar.gz"',
            '"packages/$(id)%{x}/tfaot-model-test-simple-1.0.0.tar.gz"',
        )
    )
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url(),
        "--out",
        out,
        expect=INVALID,
    )
    assert (
        len(err.splitlines()) == 1
        and "index.json: " in err
        and "archive" in err
        and "'packages/$(id)%{x}/" in err
    )
    index.write_text(good_index)
    # A manifest that is not the one the index lists.
    manifest = channel / "packages/tfaot-model-test-simple/1.0.0/manifest.json"
    manifest.write_text(manifest.read_text() + " ")
    _, err = specs_cli(
        capsys,
        golden_registry,
        "--flavor",
        "cmsbuild-prebuilt",
        "--channel",
        server.url(),
        "--out",
        out,
        expect=INTEGRITY,
    )
    assert "manifest.json: sha256 differs from the channel index" in err
    assert not out.exists()


@pytest.mark.slow
def test_prebuilt_specs_install_the_published_packages(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real packages of `build`, published to a channel served over HTTP: each prebuilt spec's Source is
    downloaded, rpmbuild runs %prep (sha256 check), %build and %install, and the installed tree holds the
    package's bytes."""
    from httpserve import Server

    channel = tmp_path / "channel"
    assert cli.main(["publish", "--channel", str(channel), "--dist", str(built / "dist")]) == 0
    server = Server(channel)
    try:
        out = tmp_path / "specs"
        specs_cli(
            capsys,
            built / "registry",
            "--flavor",
            "cmsbuild-prebuilt",
            "--channel",
            server.url(),
            "--out",
            out,
        )
        files = {p.name: p.read_text() for p in out.iterdir()}
        (runtime_dir,) = [p for p in (built / "dist").glob("tfaot-xla-runtime-*") if p.is_dir()]
        packages = {
            "tfaot-model-test-simple": built / "dist" / "tfaot-model-test-simple-1.0.0",
            "tfaot-model-test-multi": built / "dist" / "tfaot-model-test-multi-1.0.0",
            "tfaot-xla-runtime": runtime_dir,
        }
        assert files["tfaot-xla-runtime.spec"].startswith(
            f"### RPM external {runtime_dir.name.replace('-2.', ' 2.', 1)}\n"
        )
        for name, package in packages.items():
            proc, install = run_prebuilt(files, name, tmp_path / name)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            check_installed_tree(install, (package / "manifest.json").read_bytes())
            for rel in json.loads((package / "manifest.json").read_text())["files"]:  # and the bytes on disk
                if not rel.startswith("etc/scram.d/"):
                    assert (install / rel).read_bytes() == (package / rel).read_bytes(), rel
        # Other bytes at the archive's URL: %prep stops before anything is unpacked or installed.
        archive = "packages/tfaot-model-test-simple/1.0.0/tfaot-model-test-simple-1.0.0.tar.gz"
        data = (channel / archive).read_bytes()
        server.replace(archive, data[:1000] + bytes([data[1000] ^ 1]) + data[1001:])
        proc, install = run_prebuilt(files, "tfaot-model-test-simple", tmp_path / "tampered")
        assert proc.returncode != 0 and "computed checksum did NOT match" in proc.stderr, proc.stderr[-2000:]
        assert (
            not install.exists()
            and not (tmp_path / "tampered" / "BUILD" / "tfaot-model-test-simple-1.0.0").exists()
        )
    finally:
        server.close()
