"""Areas (issue 27): a package installs only what is its own; setup, repair and removal never follow
a link and never touch anything outside AREA/tfaot; pins and requirements mean what they say.

Packages are assembled by hand (tests/hostile.py), channels are directories written as a hostile
publisher would write them. Each refusal: its exit code, one error line, no traceback, and the
test's directory (area, cache, the "outside" the links point to) exactly as it was.
"""

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import Cli, snapshot
from hostile import RUNTIME, Channel, model_files, one_error, refused

from tfaot_dist.cxx import scram_tool


@pytest.fixture
def channel(tmp_path: Path) -> Channel:
    """The runtime, and an honest victim model installed in every area below."""
    return Channel(tmp_path / "channel").runtime().model("victim")


@pytest.fixture
def area(run: Cli, channel: Channel, tmp_path: Path) -> Path:
    area = tmp_path / "area"
    run("setup", "victim", "--channel", channel.root, "--area", area)
    return area


@pytest.fixture
def fake_scram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `scram` on the PATH that records each tool file it is given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scram.log"
    script = bin_dir / "scram"
    script.write_text(f'#!/bin/sh\necho "$2" >> {log}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return log


def test_an_honest_package_installs(area: Path) -> None:
    tfaot = area / "tfaot"
    assert sorted(p.name for p in (tfaot / "scram.d").iterdir()) == sorted(
        [f"{RUNTIME}.xml", "tfaot-model-victim.xml"]
    )
    tool = scram_tool.parse((tfaot / "scram.d" / "tfaot-model-victim.xml").read_text())
    assert tool.environment["TFAOT_MODEL_VICTIM_BASE"] == str(tfaot / "tfaot-model-victim" / "1.0")
    assert (tfaot / "lib" / "pkgconfig" / "tfaot-model-victim.pc").is_file()


# ---------------------------------------------------------------- ownership


@pytest.mark.parametrize(
    "rel, data",
    [
        (
            "etc/scram.d/tfaot-model-victim.xml",
            scram_tool.render_model_tool("tfaot-model-victim", "1.0", "").encode(),
        ),
        ("etc/scram.d/python3.xml", b'<tool name="python3" version="3"/>'),
        ("include/tfaot-model-victim/model.h", b"// shadows the victim's header through CPATH\n"),
        ("include/tfaot/Model.h", b"// shadows the runtime's\n"),
        ("lib/libtfaot-model-victim.a", b"!<arch>\n"),
        ("lib/pkgconfig/zlib.pc", b"Name: zlib\n"),
    ],
)
def test_a_package_installs_only_its_own_files(
    run: Cli, channel: Channel, area: Path, tmp_path: Path, fake_scram: Path, rel: str, data: bytes
) -> None:
    channel.model("evil", add={rel: data})
    line = refused(run, tmp_path, "setup", "evil", "--channel", channel.root, "--area", area, code=7)
    assert rel in line and "not tfaot-model-evil's to install" in line
    assert not fake_scram.exists()  # scram never ran


def test_a_tool_file_is_held_to_our_conventions(
    run: Cli, channel: Channel, area: Path, tmp_path: Path, fake_scram: Path
) -> None:
    """The package's own tool file name, but pointing elsewhere and adding LD_PRELOAD: refused."""
    own = scram_tool.render_model_tool("tfaot-model-evil", "1.0", "")
    evil = own.replace("</client>", '  <environment name="LD_PRELOAD" default="/tmp/evil.so"/>\n  </client>')
    channel.model("evil", replace={"etc/scram.d/tfaot-model-evil.xml": evil.encode()})
    line = refused(run, tmp_path, "setup", "evil", "--channel", channel.root, "--area", area, code=7)
    assert "etc/scram.d/tfaot-model-evil.xml" in line and "environment" in line
    rooted = own.replace("@TOOL_ROOT@", "/usr")
    channel.model(
        "evil2", replace={"etc/scram.d/tfaot-model-evil2.xml": rooted.replace("evil", "evil2").encode()}
    )
    assert "environment" in refused(
        run, tmp_path, "setup", "evil2", "--channel", channel.root, "--area", area, code=7
    )
    assert not fake_scram.exists()


def test_scram_is_given_our_own_tool_files_only(
    run: Cli, channel: Channel, tmp_path: Path, fake_scram: Path
) -> None:
    area = tmp_path / "area2"
    channel.model("other")
    run("setup", "victim", "other", "--channel", channel.root, "--area", area)
    given = sorted(Path(p).name for p in fake_scram.read_text().split())
    assert given == sorted([f"{RUNTIME}.xml", "tfaot-model-other.xml", "tfaot-model-victim.xml"])
    assert all(Path(p).parent == area / "tfaot" / "scram.d" for p in fake_scram.read_text().split())


def test_a_failing_scram_has_its_own_exit_code(
    run: Cli, channel: Channel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scram refusing a tool file exits 9 (not 1, which is `specs --check`'s), naming the command."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scram").write_text("#!/bin/sh\necho 'SCRAM error: no such tool' >&2\nexit 1\n")
    (bin_dir / "scram").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    _, err = run("setup", "victim", "--channel", channel.root, "--area", tmp_path / "area2", expect=9)
    line = one_error(err)
    assert "scram setup" in line and (f"{RUNTIME}.xml" in line or "tfaot-model-victim.xml" in line), line


def test_an_installed_row_naming_another_tool_file_is_dropped_by_repair(
    run: Cli, area: Path, tmp_path: Path, fake_scram: Path
) -> None:
    installed = area / "tfaot" / "installed.json"
    doc = json.loads(installed.read_text())
    doc["packages"]["tfaot-model-victim"]["tool_files"] = ["scram.d/python3.xml"]
    installed.write_text(json.dumps(doc))
    line = refused(run, tmp_path, "setup", "--list", "--area", area, code=3)
    assert "expected scram.d/tfaot-model-victim.xml" in line and "setup --repair" in line


# ---------------------------------------------------------------- links


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A user's own files that links in the area point at."""
    root = tmp_path / "outside"
    for rel in (
        "models/tfaot-model-b/2.0/keep.txt",
        "pkgconfig/zlib.pc",
        "cmake/Foo/FooConfig.cmake",
        "scram.d/mine.xml",
        "plain/file.txt",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    return root


@pytest.mark.parametrize(
    "link, target",
    [
        ("tfaot-model-b", "models/tfaot-model-b"),
        ("lib/pkgconfig", "pkgconfig"),
        ("lib/cmake", "cmake"),
        ("scram.d", "scram.d"),
        ("tfaot-model-victim/1.0/lib", "plain"),
        ("installed.json", "plain/file.txt"),
        ("env.sh", "plain/file.txt"),
        (".lock", "plain/file.txt"),
    ],
)
def test_setup_and_repair_never_follow_a_link(
    run: Cli, channel: Channel, area: Path, outside: Path, tmp_path: Path, link: str, target: str
) -> None:
    path = area / "tfaot" / link
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(outside / target)
    channel.model("new")
    for args in (("setup", "new"), ("setup", "victim"), ("setup", "--repair")):
        argv = [*args, "--area", area] + (["--channel", channel.root] if "--repair" not in args else [])
        before = snapshot(tmp_path)
        _, err = run(*argv, expect=7)
        line = one_error(err)
        assert "symbolic link" in line and str(area / "tfaot") in line, line
        assert snapshot(tmp_path) == before


def test_area_root_a_link_or_a_file(run: Cli, channel: Channel, outside: Path, tmp_path: Path) -> None:
    area = tmp_path / "a1"
    area.mkdir()
    (area / "tfaot").symlink_to(outside / "plain")
    assert "symbolic link" in refused(
        run, tmp_path, "setup", "victim", "--channel", channel.root, "--area", area, code=7
    )
    area = tmp_path / "a2"
    area.mkdir()
    (area / "tfaot").write_text("not a directory")
    assert "not a directory" in refused(
        run, tmp_path, "setup", "victim", "--channel", channel.root, "--area", area, code=3
    )
    assert "not a directory" in refused(run, tmp_path, "setup", "--repair", "--area", area, code=3)
    blocked = tmp_path / "a3"
    blocked.write_text("a file where the area's parent should be")
    line = refused(
        run, tmp_path, "setup", "victim", "--channel", channel.root, "--area", blocked / "sub", code=3
    )
    assert str(blocked) in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_area(run: Cli, channel: Channel, tmp_path: Path) -> None:
    area = tmp_path / "ro"
    area.mkdir()
    area.chmod(stat.S_IRUSR | stat.S_IXUSR)
    assert "cannot use it as an area" in refused(
        run, tmp_path, "setup", "victim", "--channel", channel.root, "--area", area, code=3
    )


# ---------------------------------------------------------------- pins and requirements


def test_an_exact_pin_never_takes_a_local_label(run: Cli, channel: Channel, tmp_path: Path) -> None:
    channel.model("a", "1.0")
    channel.model("a", "1.0+zz")
    area = tmp_path / "pinned"
    out, _ = run("setup", "a==1.0", "--channel", channel.root, "--area", area)
    assert "tfaot-model-a 1.0: installed" in out
    out, _ = run("setup", "a==1.0+zz", "--channel", channel.root, "--area", tmp_path / "local")
    assert "tfaot-model-a 1.0+zz: installed" in out
    out, _ = run("setup", "a>=1.0", "--channel", channel.root, "--area", tmp_path / "range")
    assert "tfaot-model-a 1.0+zz: installed" in out  # a range takes the newest, as PEP 440 orders them


def test_an_index_row_must_require_what_the_manifest_requires(
    run: Cli, channel: Channel, tmp_path: Path
) -> None:
    """The row promises a runtime the package was not verified with: exit 7 before the area is made."""
    from tfaot_dist.documents import Requirement

    files, extra = model_files("liar")
    channel.runtime()
    other = "2.21.0+b1.p1"
    from hostile import runtime_files

    rfiles, rextra = runtime_files(other)
    channel.add(RUNTIME, other, rfiles, rextra)
    channel.add("tfaot-model-liar", "1.0", files, extra, {"requires": (Requirement(RUNTIME, other),)})
    line = refused(
        run, tmp_path, "setup", "liar", "--channel", channel.root, "--area", tmp_path / "area9", code=7
    )
    assert f"the index says it requires {RUNTIME} {other}" in line and "its manifest requires" in line


# ---------------------------------------------------------------- scram and installed.json in step


@pytest.fixture
def picky_scram(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A `scram` on the PATH that records each call ("setup FILE", "tool remove NAME") and refuses
    any call naming the word in the file `refuse` while it exists: (calls, refuse)."""
    bin_dir, calls, refuse = tmp_path / "picky-bin", tmp_path / "scram-calls", tmp_path / "refuse"
    bin_dir.mkdir()
    (bin_dir / "scram").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'if [ -e {refuse} ] && echo "$*" | grep -q -- "$(cat {refuse})"; then\n'
        "  echo 'SCRAM error: refused' >&2; exit 1\n"
        "fi\n"
    )
    (bin_dir / "scram").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return calls, refuse


def registered(area: Path) -> dict[str, bool]:
    """installed.json: each package, and whether scram holds its tool."""
    rows = json.loads((area / "tfaot" / "installed.json").read_text())["packages"]
    return {name: bool(row.get("scram")) for name, row in rows.items()}


def test_a_removal_scram_refuses_half_way_is_finished_by_the_next_command(
    run: Cli, channel: Channel, tmp_path: Path, picky_scram: tuple[Path, Path]
) -> None:
    calls, refuse = picky_scram
    channel.model("other")
    area = tmp_path / "area2"
    run("setup", "victim", "other", "--channel", channel.root, "--area", area)
    refuse.write_text("tool remove tfaot-model-victim")
    calls.write_text("")
    _, err = run("remove", "other", "victim", "--area", area, expect=9)
    assert "scram tool remove tfaot-model-victim" in one_error(err)
    assert calls.read_text().splitlines() == [
        "tool remove tfaot-model-other",
        "tool remove tfaot-model-victim",
    ]
    # scram dropped other: the area says so (other stays installed, no longer registered).
    assert registered(area) == {RUNTIME: True, "tfaot-model-other": False, "tfaot-model-victim": True}

    # setup registers it again (it said "already installed" and left scram without it) ...
    calls.write_text("")
    out, _ = run("setup", "other", "--channel", channel.root, "--area", area)
    assert "tfaot-model-other 1.0: already installed" in out and "registered with scram" in out
    assert calls.read_text().splitlines() == [f"setup {area / 'tfaot' / 'scram.d' / 'tfaot-model-other.xml'}"]
    assert registered(area)["tfaot-model-other"]

    # ... or, scram willing again, the same removal finishes, asking scram only for what it holds.
    refuse.unlink()
    run("remove", "other", "--area", area)
    calls.write_text("")
    run("remove", "victim", "--area", area)
    assert calls.read_text().splitlines() == ["tool remove tfaot-model-victim"]
    assert registered(area) == {RUNTIME: True}


def test_a_registration_scram_refuses_half_way_keeps_what_scram_took(
    run: Cli, channel: Channel, tmp_path: Path, picky_scram: tuple[Path, Path]
) -> None:
    calls, refuse = picky_scram
    area = tmp_path / "area2"
    refuse.write_text("tfaot-model-victim.xml")
    _, err = run("setup", "victim", "--channel", channel.root, "--area", area, expect=9)
    assert "scram setup" in one_error(err)
    assert registered(area) == {RUNTIME: True, "tfaot-model-victim": False}
    refuse.unlink()
    calls.write_text("")
    out, _ = run("setup", "victim", "--channel", channel.root, "--area", area)
    assert calls.read_text().splitlines() == [
        f"setup {area / 'tfaot' / 'scram.d' / 'tfaot-model-victim.xml'}"
    ]
    assert registered(area) == {RUNTIME: True, "tfaot-model-victim": True}
    # Nothing left to register: no word about scram missing from the PATH (it is there).
    out, _ = run("setup", "victim", "--channel", channel.root, "--area", area)
    assert "scram is not on the PATH" not in out and "registered with scram" not in out
