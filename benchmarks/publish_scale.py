"""Publishing one package into a big directory channel against publishing it into an empty one.

    python benchmarks/publish_scale.py [--packages 20000] [--rounds 3] [--json OUT]

In-process (publish()) and as a command (`tfaot-dist publish` in a new process, as users run it).
A publish renders the catalogue pages of what it adds (and of listed versions without a page)
and reads only the manifests of versions new to the listing; index.json itself is read, checked
and written whole. This measures both sides in one run: the big channel is made once (its
archives, manifests, index and pages, as many publishes would have left them), then one new
package is published into a copy of it and into an empty channel, best of --rounds each,
alternating. No TensorFlow: the packages are assembled by hand (tests/hostile.py).
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hostile import RUNTIME, RUNTIME_VERSION, archive_bytes, model_files, runtime_files  # noqa: E402

from tfaot_dist.channels import catalogue  # noqa: E402
from tfaot_dist.channels.channel import index_line, render_index, verify_archive  # noqa: E402
from tfaot_dist.channels.directory import DirectoryChannel  # noqa: E402
from tfaot_dist.channels.publishing import publish  # noqa: E402
from tfaot_dist.documents import Manifest, load_json  # noqa: E402


def big_channel(root: Path, packages: int) -> None:
    """packages model versions (and the runtime), laid out as publish lays them out."""
    rows, manifests = [], {}
    items = [(RUNTIME, RUNTIME_VERSION, *runtime_files())]
    items += [(f"tfaot-model-m{i:05d}", "1.0", *model_files(f"m{i:05d}")) for i in range(packages)]
    for name, version, files, extra in items:
        base = root / "packages" / name / version
        base.mkdir(parents=True)
        archive = base / f"{name}-{version}.tar.gz"
        archive.write_bytes(archive_bytes(name, version, files, extra))
        verified = verify_archive(archive)
        (base / "manifest.json").write_bytes(verified.manifest_bytes)
        row = index_line(verified)
        rows.append(row)
        manifests[row.key] = Manifest.from_json(load_json(verified.manifest_bytes, "m"), "m")
    with DirectoryChannel(str(root)).transaction() as tx:
        catalogue.write_pages(tx.writer, rows, manifests, lambda row: None)
        (root / "index.json").write_text(render_index(rows))
        catalogue.write_listing(tx.writer, rows, manifests, lambda row: None)


def one_publish(channel: Path, dist: Path) -> float:
    start = time.perf_counter()
    publish(dist, str(channel), channel.parent / "cache", log=lambda m: None)
    return time.perf_counter() - start


def one_command(channel: Path, dist: Path) -> float:
    """The same as a user runs it: `tfaot-dist publish` in a new process (start-up and imports included)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "tfaot_dist", "publish", "--channel", str(channel), "--dist", str(dist)],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--packages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="publish-scale-") as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        big_channel(work / "big", args.packages)
        made = time.perf_counter() - start
        dist = work / "dist"
        dist.mkdir()
        files, extra = model_files("new-one")
        (dist / "tfaot-model-new-one-1.0.tar.gz").write_bytes(
            archive_bytes("tfaot-model-new-one", "1.0", files, extra)
        )
        rfiles, rextra = runtime_files()
        (dist / f"{RUNTIME}-{RUNTIME_VERSION}.tar.gz").write_bytes(
            archive_bytes(RUNTIME, RUNTIME_VERSION, rfiles, rextra)
        )
        times: dict[str, list[float]] = {"empty": [], "big": [], "cli_empty": [], "cli_big": []}
        for _ in range(args.rounds):
            for kind in ("empty", "big", "cli_empty", "cli_big"):
                target = work / f"round-{kind}"
                if kind.endswith("big"):
                    shutil.copytree(work / "big", target)
                times[kind].append((one_command if kind.startswith("cli") else one_publish)(target, dist))
                shutil.rmtree(target)
        best = {k: min(v) for k, v in times.items()}
        result = {
            "packages": args.packages,
            "make_big_channel_s": round(made, 1),
            "publish_empty_s": round(best["empty"], 3),
            "publish_big_s": round(best["big"], 3),
            "ratio_big_over_empty": round(best["big"] / best["empty"], 1),
            "command_empty_s": round(best["cli_empty"], 3),
            "command_big_s": round(best["cli_big"], 3),
            "command_ratio_big_over_empty": round(best["cli_big"] / best["cli_empty"], 1),
            "rounds": args.rounds,
        }
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
