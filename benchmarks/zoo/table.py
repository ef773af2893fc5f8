"""One table of `tfaot-dist bench` results: per model and batch size, AOT at each CPU level, the TF C API,
ONNX Runtime, the peak fraction and the peers' time over AOT's; then memory. Markdown on stdout.

    python benchmarks/zoo/table.py RESULTS_DIR [--batch-sizes 1,4,32,256] [--json OUT.json]

RESULTS_DIR holds the NAME.json files of bench runs (benchmarks/zoo/run.sh writes them). Times are
microseconds per event, each the fastest round of its run; "aot" is the level the package picks on this
machine by itself, "aot LEVEL" the same program forced lower (TFAOT_CPU_LEVEL). The ratio columns give,
for each level the run has (best first), the TF C API's and ONNX Runtime's time over that level's AOT
time: the goals "peer / AOT >= 1 at every level". Where the run has the TF C API with oneDNN capped at a
level ("tf-capi:LEVEL"), that level's TF ratio uses it (what TensorFlow does on a machine of that level) and
the column "TF v3" shows it; ONNX Runtime has no such cap: its ratios are always its best code's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

LEVELS = ("x86-64", "x86-64-v3", "x86-64-v4")


def per_event(result: dict[str, Any], series: str) -> dict[int, dict[str, Any]]:
    return {r["batch_size"]: r for r in result["time"].get(series, [])}


def rows(result: dict[str, Any], batch_sizes: list[int]) -> list[dict[str, Any]]:
    aot = per_event(result, "aot")
    forced = {s.removeprefix("aot:"): per_event(result, s) for s in result["time"] if s.startswith("aot:")}
    peers = {e: per_event(result, e) for e in ("tf-capi", "ort")}
    capped = {lv: per_event(result, f"tf-capi:{lv}") for lv in LEVELS}
    out = []
    for bs in batch_sizes:
        if bs not in aot:
            continue
        row = {
            "model": result["package"].removeprefix("tfaot-model-"),
            "batch": bs,
            "level": aot[bs].get("cpu_level", ""),
            "aot": aot[bs]["us_per_event"],
            "compiled": aot[bs].get("compiled", True),
            "peak": aot[bs].get("peak_fraction"),
            "forced": {lv: r[bs]["us_per_event"] for lv, r in forced.items() if bs in r},
        }
        row["levels"] = {row["level"]: row["aot"], **row["forced"]}
        for peer, times in peers.items():
            row[peer] = times[bs]["us_per_event"] if bs in times else None
            row[f"{peer}_over_aot"] = {
                lv: times[bs]["us_per_event"] / t for lv, t in row["levels"].items() if bs in times
            }
        row["tf-capi_at"] = {lv: times[bs]["us_per_event"] for lv, times in capped.items() if bs in times}
        row["tf-capi_over_aot"].update(
            (lv, tf / row["levels"][lv]) for lv, tf in row["tf-capi_at"].items() if lv in row["levels"]
        )
        out.append(row)
    return out


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}" if x < 1000 else f"{x:.0f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--batch-sizes", default="1,4,32,256")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.batch_sizes.split(",")]
    results = [json.loads(p.read_text()) for p in sorted(args.results.glob("*.json"))]
    table = [row for result in results for row in rows(result, sizes)]
    print(
        "| model | batch | AOT (level) | peak | AOT v3 | AOT x86-64 | TF C API | TF v3 | ORT "
        "| TF/AOT, ORT/AOT: v4 | v3 | x86-64 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        level = r["level"].replace("x86-64-", "")
        emulated = "" if r["compiled"] else "*"
        ratios = " | ".join(
            f"{fmt(r['tf-capi_over_aot'].get(lv), 2)}, {fmt(r['ort_over_aot'].get(lv), 2)}"
            if lv in r["levels"]
            else "-"
            for lv in reversed(LEVELS)
        )
        print(
            f"| {r['model']} | {r['batch']}{emulated} | {fmt(r['aot'])} ({level}) | {fmt(r['peak'], 2)} "
            f"| {fmt(r['forced'].get('x86-64-v3'))} | {fmt(r['forced'].get('x86-64'))} | {fmt(r['tf-capi'])} "
            f"| {fmt(r['tf-capi_at'].get('x86-64-v3'))} | {fmt(r['ort'])} | {ratios} |"
        )
    print("\n| model | peak RSS AOT | TF C API | ORT (Python) | TF / AOT | ORT / AOT | ORT Run() overhead |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        kb: dict[str, float] = {}
        for engine, mem_rows in result["memory"].items():
            kb.update((engine, r["vm_hwm_kb"]) for r in mem_rows if r["instances"] == 1)
        overhead = result.get("ort", {}).get("call_overhead_us")
        name = result["package"].removeprefix("tfaot-model-")

        ratio = {
            e: f"{kb[e] / kb['aot']:.1f}" if e in kb and "aot" in kb else "-" for e in ("tf-capi", "ort")
        }
        rss = {e: f"{kb[e] / 1024:.1f} MB" if e in kb else "-" for e in ("aot", "tf-capi", "ort")}
        print(
            f"| {name} | {rss['aot']} | {rss['tf-capi']} | {rss['ort']} | {ratio['tf-capi']} | {ratio['ort']} "
            f"| {fmt(overhead, 2)} us |"
        )
    loads = sorted({round(x, 1) for result in results for x in result["host"]["load_average"][:1]})
    print(
        f"\n{len(results)} runs; host {results[0]['host']['cpu'] if results else '?'}, load average at the "
        f"start of the runs {loads}. * emulated batch size (batch rules)."
    )
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
