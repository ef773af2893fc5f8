"""`build --all` when nothing changed: 100 registered models whose packages are all up to date.

    python benchmarks/up_to_date.py [--models 100] [--repeat 5] [--work DIR]

Prints the median wall time of `tfaot-dist build --all` and of `tfaot-dist --version` (the
cost of starting the tool at all) and their ratio; the goal is a ratio below 3.

How the 100 up-to-date packages are made, honestly and fast: one model (the example *simple*,
batch size 1) is registered with add-model and built for real. The other entries are the same
registry entry under other names (plain YAML files, as add-model would write them, pointing at
the same source commit), and each gets a package directory in dist that is a copy of the real
one with its manifest's name, package and build_key rewritten to what `build` computes for that
entry (build_key.py), next to a copy of the archive. That is exactly what `build` looks at
to decide "up to date" (the manifest's build key and the archive's presence), so the timed
command does the work it would do on a real 100-model dist; it never compiles.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tfaot_dist.build_key import build_key
from tfaot_dist.cache import default_cache
from tfaot_dist.registry import Registry

REPO = Path(__file__).resolve().parent.parent


def tool(*args: object, capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfaot_dist", *map(str, args)], check=True, capture_output=capture, text=True
    )


def prepare(work: Path, count: int) -> tuple[Path, Path]:
    registry, dist = work / "registry", work / "dist"
    if not (work / "data" / "data-repo.git").exists():
        shutil.rmtree(work / "data", ignore_errors=True)
        url = subprocess.run(
            [sys.executable, str(REPO / "examples" / "make_data_repo.py"), str(work / "data")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    else:
        url = f"file://{work / 'data' / 'data-repo.git'}"
    shutil.rmtree(registry, ignore_errors=True)
    registry.mkdir(parents=True)
    shutil.copyfile(REPO / "registry" / "registry.yaml", registry / "registry.yaml")
    tool(
        "--registry",
        registry,
        "add-model",
        "bench-000",
        "--source",
        url,
        "--aot-config",
        "simple/aot_config.yaml",
        "--batch-sizes",
        "1",
    )
    print("building bench-000 for real (a minute the first time) ...", file=sys.stderr)
    tool("--registry", registry, "build", "bench-000", "--dist", dist)

    reg = Registry(registry)
    defaults = reg.defaults()
    real = dist / "tfaot-model-bench-000-1.0.0"
    entry_yaml = yaml.safe_load((registry / "models" / "bench-000.yaml").read_text())
    manifest = json.loads((real / "manifest.json").read_text())
    for i in range(1, count):
        name = f"bench-{i:03}"
        (registry / "models" / f"{name}.yaml").write_text(
            yaml.safe_dump({**entry_yaml, "name": name}, sort_keys=False)
        )
        key = build_key(reg.load(name), defaults)
        target = dist / f"tfaot-model-{name}-1.0.0"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(real, target)
        (target / "manifest.json").write_text(
            json.dumps(
                {**manifest, "name": name, "package": f"tfaot-model-{name}", "build_key": key},
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
        shutil.copyfile(dist / f"{real.name}.tar.gz", dist / f"{target.name}.tar.gz")
    return registry, dist


def median_time(args: list[object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        tool(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=100)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--work", type=Path, help="work directory, kept for reuse (default: a temporary one)")
    args = p.parse_args()
    os.environ.setdefault("TFAOT_DIST_CACHE", str(default_cache()))
    with tempfile.TemporaryDirectory(prefix="tfaot-bench-") as tmp:
        work = (args.work or Path(tmp)).absolute()
        registry, dist = prepare(work, args.models)
        out = json.loads(tool("--registry", registry, "build", "--all", "--dist", dist, "--json").stdout)
        statuses = {r["status"] for r in out["results"]}
        if len(out["results"]) != args.models or statuses != {"up to date"}:
            print(f"not all up to date: {statuses}", file=sys.stderr)
            return 1
        build = median_time(["--registry", registry, "build", "--all", "--dist", dist], args.repeat)
        version = median_time(["--version"], args.repeat)
    print(f"build --all, {args.models} models up to date: {build:.3f} s (median of {args.repeat})")
    print(f"tfaot-dist --version:                   {version:.3f} s")
    print(f"ratio: {build / version:.2f} (goal: below 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
