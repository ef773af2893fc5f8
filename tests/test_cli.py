"""The first hour of a new user: help, init, messages that say what happened, one exit code per kind."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cli, DataRepo, snapshot

from tfaot_dist import cli, errors
from tfaot_dist.registry import Registry

USAGE, INVALID, UNAVAILABLE = 2, 3, 4


def subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_and_option_has_help() -> None:
    top = cli.parser()
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.dest for c in action._choices_actions} == set(action.choices)
    assert all(c.help for c in action._choices_actions)
    for name, sub in subcommands().items():
        for a in sub._actions:
            assert a.help and a.help != argparse.SUPPRESS, f"{name} {a.option_strings or a.dest}: no help"
        text = sub.format_help()
        assert sub.description and len(sub.description) > 40, name
        examples = text.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert 2 <= len(examples) <= 3, (name, examples)
        assert all("tfaot-dist" in e or "http.server" in e for e in examples), (name, examples)
        assert "exit codes:" in text and "cache: " in text, name
        assert all(f"  {code}  {meaning}" in text for code, meaning in errors.EXIT_CODES.items()), name


@pytest.mark.parametrize(
    "argv, command",
    [
        (["build", "--all", "--jobs", "2"], "build"),
        (
            ["--registry", "build", "--json", "setup", "x", "--channel", "c"],
            "setup",
        ),  # a registry named build
        (["--registry=r", "list", "--json"], "list"),
        (["compile", "--aot-config", "a.yaml", "--output-directory", "o"], "compile"),
    ],
)
def test_a_command_line_parses_the_same_with_only_its_command_declared(argv: list[str], command: str) -> None:
    """main() declares only the command argv names (cli.parser(argv)): what it parses is what the whole
    parser parses."""
    whole, only = cli.parser().parse_args(argv), cli.parser(argv).parse_args(argv)
    assert vars(only) == vars(whole) and only.func.name == command
    (action,) = [a for a in cli.parser(argv)._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(action.choices) == {command}


@pytest.mark.parametrize("argv", [["--help"], ["--reg", "r", "list"], ["bogus"], ["--json"], []])
def test_a_command_line_without_a_plain_command_gets_every_command(argv: list[str]) -> None:
    """Help, an abbreviated option or an unknown command: argparse sees every command (its choices,
    its --help), as without argv."""
    (action,) = [a for a in cli.parser(argv)._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(action.choices) == set(subcommands())


def test_every_error_class_has_a_listed_exit_code() -> None:
    """Each error class's code is in the table every --help prints (the documentation's exit-code page is
    generated from the same table: tests/test_docs.py)."""
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.TfaotError)]
    codes = {c.exit_code for c in classes if c is not errors.BuildFailed and c is not errors.TfaotError}
    # 0: success, 1: specs --check, 141: stdout closed by its reader (no error class has them)
    assert codes == set(errors.EXIT_CODES) - {0, 1, errors.STDOUT_CLOSED}


def test_help_runs_as_a_program() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "compile", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert (
        "--aot-config FILE" in out and "relative to its directory" in out and "--output-directory DIR" in out
    )


def test_init_creates_a_registry_others_read(tmp_path: Path, run: Cli) -> None:
    target = tmp_path / "new" / "reg"
    out, _ = run("init", target)
    assert f"created registry {target}" in out
    assert (target / "models").is_dir()
    defaults = Registry(target).defaults()
    assert defaults.requirements == ("tensorflow-cpu==2.21.0",) and defaults.target_cpu == ""
    before = snapshot(target)
    out, _ = run("init", target)
    assert "already a registry, left as it was" in out and snapshot(target) == before
    out, _ = run("--registry", target, "list")
    assert out.strip() == f"no models in {target} (add one with tfaot-dist add-model)"


@pytest.mark.parametrize("args", [("list",), ("build", "--all"), ("show", "x"), ("specs", "--out", "specs")])
def test_a_missing_registry_is_an_error_naming_it(tmp_path: Path, run: Cli, args: tuple[str, ...]) -> None:
    missing = tmp_path / "no-such-registry"
    line = run.error("--registry", missing, *args, expect=INVALID)
    assert (
        f"--registry: {missing} is not a registry directory" in line and f"tfaot-dist init {missing}" in line
    )
    assert not missing.exists() and not (tmp_path / "specs").exists()


def test_typos_get_a_suggestion(run: Cli, registry: Path) -> None:
    for name in ("test-simple", "test-multi"):
        (registry / "models" / f"{name}.yaml").write_text("name: x\n")  # names() only; never loaded here
    assert "did you mean test-simple?" in run.error("show", "test-simpel", expect=INVALID)
    assert "did you mean test-simple" in run.error("build", "test-simpl", expect=INVALID)
    line = run.error("show", "zzz", expect=INVALID)
    assert "zzz: no such model" in line and "tfaot-dist list" in line


def test_batch_size_errors_share_one_exit_code(run: Cli) -> None:
    assert "expected comma separated integers, got '1,two'" in run.error(
        "compile",
        "--aot-config",
        "x.yaml",
        "--output-directory",
        "out",
        "--batch-sizes",
        "1,two",
        expect=INVALID,
    )


def test_relative_source_path(
    run: Cli,
    data_repo: DataRepo,
    registry: Path,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = run.error(
        "add-model", "m", "--source", "mydata", "--aot-config", "simple/aot_config.yaml", expect=UNAVAILABLE
    )
    assert "--source: mydata: no such directory" in line and "unsupported" not in line
    repo = data_repo.bare
    monkeypatch.chdir(repo.parent)
    run("add-model", "m", "--source", repo.name, "--aot-config", "simple/aot_config.yaml")
    entry = Registry(registry).load("m")
    assert entry.source.url == repo.resolve().as_uri()


def test_publish_and_setup_say_each_status_once(built: Path, run: Cli, tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    out, err = run("publish", "--channel", channel, "--dist", built / "dist")
    assert "tfaot-model-test-simple 1.0.0: published" in out
    assert "test-simple" not in err
    area = tmp_path / "area"
    line = run.error("setup", "test-simpel", "--channel", channel, "--area", area, expect=INVALID)
    assert "did you mean test-simple?" in line
    line = run.error("setup", "nothing-like-it", "--channel", channel, "--area", area, expect=INVALID)
    assert f"tfaot-dist setup --list --channel {channel}" in line
    assert not area.exists()
    out, err = run("setup", "test-simple", "--channel", channel, "--area", area)
    assert "tfaot-model-test-simple 1.0.0: installed" in out
    assert "tfaot-model-test-simple 1.0.0" not in err


@pytest.mark.tooling
def test_the_test_command_runs_only_the_file_it_is_given() -> None:
    from conftest import REPO

    proc = subprocess.run(
        [str(REPO / "scripts" / "test"), "tests/test_toolchain.py", "--collect-only", "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # pytest -qq --collect-only: one "FILE: COUNT" line per collected file.
    files = [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("tests/")]
    assert files == ["tests/test_toolchain.py"], proc.stdout


def test_an_unexpected_error_exits_with_its_own_code_and_names_its_log(tmp_path: Path) -> None:
    """Nothing in tfaot-dist expects standard output to be a full disk (/dev/full): one error line,
    exit 10 (not 1, which is `specs --check`'s), and the traceback in a log of the cache's logs/."""
    cache = tmp_path / "cache"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TFAOT_DIST_CACHE": str(cache)}
    tool = [sys.executable, "-m", "tfaot_dist", "--registry", str(tmp_path / "registry")]
    subprocess.run([*tool, "init", str(tmp_path / "registry")], env=env, check=True, capture_output=True)
    with open("/dev/full", "w") as full:
        done = subprocess.run([*tool, "list"], env=env, stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == errors.UnexpectedError.exit_code == 10
    (log,) = (cache / "logs").iterdir()
    assert done.stderr == (
        f"tfaot-dist: error: unexpected OSError: [Errno 28] No space left on device (log: {log})\n"
    )
    text = log.read_text()
    assert "command: tfaot-dist --registry" in text and text.rstrip().endswith(
        "OSError: [Errno 28] No space left on device"
    )
    assert "Traceback (most recent call last)" in text and "tfaot_dist/cli/" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["setup", "--list", "--repair"], "argument --repair: not allowed with argument --list"),
        (
            ["setup", "--list", "--dry-run", "--channel", "c"],
            "argument --dry-run: not allowed with argument --list",
        ),
        (["toolchain", "--python", "--list"], "argument --list: not allowed with argument --python"),
        (
            ["yank", "a==1.0", "--channel", "c", "--reason", "r", "--undo"],
            "argument --undo: not allowed with argument --reason",
        ),
    ],
)
def test_a_commands_modes_exclude_each_other(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == USAGE
    assert capsys.readouterr().err.splitlines()[-1] == f"tfaot-dist {argv[0]}: error: {message}"


def test_setup_repair_with_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repair and --dry-run are two modes: together a usage error, the area as it was (the --repair of
    an area whose installed.json is not readable starts it afresh; --dry-run used to be ignored)."""
    area = tmp_path / "area"
    (area / "tfaot").mkdir(parents=True)
    (area / "tfaot" / "installed.json").write_text("not json")
    before = snapshot(area)
    with pytest.raises(SystemExit) as exited:
        cli.main(["setup", "--repair", "--dry-run", "--area", str(area)])
    assert exited.value.code == USAGE and snapshot(area) == before
    assert "error: argument --dry-run: not allowed with argument --repair" in capsys.readouterr().err
