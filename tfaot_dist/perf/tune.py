"""`tfaot-dist tune`: batch rules chosen by measurement instead of "repeat the smallest size".

1. Measure the time per call of every compiled batch size of a package (the
   AOT benchmark program, `rules` mode, single thread).
2. For every target size, find the cheapest composition of compiled sizes
   under the model of "time = sum of the calls' times": exact calls for all
   but the last, which may be zero-padded (dynamic programming, below).
3. Time the chosen rule and the default rule of every target side by side
   (A B B A, the faster of each pair kept) and keep a tuned rule only where it
   was measured faster than the default: tuned rules are never slower than the
   default rule on the machine that tuned them.

Reproducible packages: measuring during a build would make every build
different, so tuning is a separate step that writes its result as data. For a
registry model the rules go to the entry's `overrides: batch_rules:`; that is
part of the build key, so the next `build` bakes them into model.h as the
default strategy (users can still override with setBatchRule), and rebuilding
the same entry gives the same bytes. The measurements go to OUT/NAME_tune.json.
"""

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfaot_dist import builder, process
from tfaot_dist.errors import CompileFailed, InvalidInput
from tfaot_dist.intake import next_build
from tfaot_dist.perf import bench
from tfaot_dist.registry import Registry
from tfaot_dist.session import Session
from tfaot_dist.util.fs import write_atomic
from tfaot_dist.util.progress import Log

INF = float("inf")
Plan = tuple[float, int, tuple[int, ...]]  # (modelled seconds, calls, sizes) of evaluating some rows
Report = dict[str, Any]  # the JSON report (NAME_tune.json)


@dataclass(frozen=True)
class Choice:
    target: int
    sizes: tuple[int, ...]  # evaluation order, the last one padded
    cost: float  # modelled seconds per call

    @property
    def rule(self) -> str:
        return f"{self.target}:{','.join(map(str, self.sizes))}"


def default_sizes(target: int, compiled: list[int]) -> tuple[int, ...]:
    """tfaot::BatchStrategy::makeDefaultRule: the target if compiled, else the smallest size repeated."""
    if target in compiled:
        return (target,)
    smallest = min(compiled)
    return (smallest,) * -(-target // smallest)


def cheapest(costs: dict[int, float], targets: list[int]) -> dict[int, Choice]:
    """The cheapest rule per target: exact calls covering target - r rows, then one call of a size s >= r.

    exact[n] is the cheapest way to evaluate exactly n rows with compiled sizes
    (unbounded knapsack); the last call covers the remaining r rows (1 <= r <= s)
    with s - r padding rows. Ties go to fewer calls, then to larger sizes first.
    """
    sizes = sorted(costs)
    top = max(targets)
    nothing: Plan = (INF, 0, ())
    exact: list[Plan] = [(0.0, 0, ())] + [nothing] * top
    for n in range(1, top + 1):
        best = nothing
        for s in sizes:
            if s <= n and exact[n - s][0] < INF:
                prev = exact[n - s]
                cand = (prev[0] + costs[s], prev[1] + 1, tuple(sorted(prev[2] + (s,), reverse=True)))
                if _better(cand, best):
                    best = cand
        exact[n] = best
    out = {}
    for t in targets:
        best = nothing
        for s in sizes:
            for r in range(1, min(s, t) + 1):
                prev = exact[t - r]
                if prev[0] == INF:
                    continue
                cand = (prev[0] + costs[s], prev[1] + 1, prev[2] + (s,))
                if _better(cand, best):
                    best = cand
        out[t] = Choice(t, best[2], best[0])
    return out


def _better(a: Plan, b: Plan) -> bool:
    # cost first (relative tolerance for float noise), then fewer calls, then larger sizes first
    if a[0] < b[0] * (1 - 1e-12):
        return True
    if a[0] > b[0] * (1 + 1e-12):
        return False
    return (a[1], [-x for x in a[2]]) < (b[1], [-x for x in b[2]])


def _time_rules(program: Path, rules: list[str], warmup: int, calls: int) -> dict[str, float]:
    out = process.run(
        [program, "rules", str(warmup), str(calls), *rules],
        what="timing batch rules",
        error=CompileFailed,
        timeout=7200,
    )
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {row["rule"]: row["seconds_per_call"] for row in rows}


def short(rule: str) -> str:
    """A rule for people: '40:16,16,8' -> '16x2 + 8', '5:1,1,1,1,1' -> '1x5'."""
    sizes = rule.split(":", 1)[1].split(",")
    runs: list[list[Any]] = []  # [size, count]
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    return " + ".join(f"{s}x{n}" if n > 1 else s for s, n in runs)


def parse_targets(text: str) -> list[int]:
    """'1-64' or '1,2,5-8' -> sorted target sizes."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise InvalidInput(f"--targets: expected e.g. '1-64' or '1,3,5-8', got {text!r}") from None
    if not out or min(out) < 1 or max(out) > 4096:
        raise InvalidInput(f"--targets: sizes must be within 1-4096, got {text!r}")
    return sorted(out)


def tune(
    program: Path,
    compiled: list[int],
    targets: list[int],
    warmup: int = 100,
    calls: int = 500,
    log: Log = print,
) -> Report:
    """Measure, choose and check rules for targets; returns the report (rules to keep under "rules")."""
    log(f"timing compiled batch sizes {','.join(map(str, compiled))}")
    measured = _time_rules(program, [f"{s}:{s}" for s in compiled], warmup, calls)
    costs = {s: measured[f"{s}:{s}"] for s in compiled}
    choices = cheapest(costs, targets)
    report: Report = {
        "compiled_costs_seconds": {str(s): c for s, c in costs.items()},
        "targets": {},
        "rules": [],
    }
    candidates = {t: c for t, c in choices.items() if c.sizes != default_sizes(t, compiled)}
    if candidates:
        log(f"checking {len(candidates)} tuned rules against the default rule, side by side")
        default_rules = [f"{t}:{','.join(map(str, default_sizes(t, compiled)))}" for t in candidates]
        tuned_rules = [c.rule for c in candidates.values()]
        # A B B A: slow drifts of the machine's load hit both sides alike; the faster run of each is kept.
        first = _time_rules(program, default_rules + tuned_rules, warmup, calls)
        second = _time_rules(program, tuned_rules + default_rules, warmup, calls)
        timing = {rule: min(first[rule], second[rule]) for rule in first}
    for t in targets:
        default = f"{t}:{','.join(map(str, default_sizes(t, compiled)))}"
        choice = choices[t]
        entry: dict[str, Any] = {
            "default_rule": default,
            "modelled_seconds": choice.cost,
            "modelled_default_seconds": sum(costs[s] for s in default_sizes(t, compiled)),
        }
        if t in candidates:
            tuned_s, default_s = timing[choice.rule], timing[default]
            keep = tuned_s < default_s
            entry.update(
                tuned_rule=choice.rule,
                measured_seconds=tuned_s,
                measured_default_seconds=default_s,
                kept=keep,
                speedup=default_s / tuned_s if keep else 1.0,
            )
            if keep:
                report["rules"].append(choice.rule)
        else:
            entry.update(tuned_rule=default, kept=False, speedup=1.0)
        report["targets"][str(t)] = entry
    return report


def tune_command(
    spec: str,
    registry: Registry,
    session: Session,
    dist: Path,
    targets: list[int],
    warmup: int,
    calls: int,
    out_dir: Path,
    write: bool = True,
) -> Report:
    """`tfaot-dist tune`: tune the package of spec (see bench.resolve_target); for a registry entry, write the
    kept rules into its overrides and rebuild, so the package's model.h applies them by default."""
    log = session.log
    target, entry = bench.resolve_target(spec, registry, session, dist, None)
    manifest = target.manifest
    compiled = sorted(manifest.compilation.batch_sizes)
    runtime = session.resolve().runtime
    with tempfile.TemporaryDirectory(prefix="tfaot-tune-") as tmp:
        program = bench.build_aot_program(target, runtime, session.cache.root, Path(tmp))
        report = tune(program, compiled, targets, warmup, calls, log)
    report.update(
        package=manifest.package,
        version=manifest.version,
        compiled_batch_sizes=compiled,
        protocol={"warmup": warmup, "calls": calls},
        host=bench.host_info(),
    )
    rules = sorted(report["rules"], key=lambda r: int(r.split(":")[0]))
    report["rules"] = rules
    if entry is not None and write:
        # Keep rules of targets outside this run's range; replace those inside it.
        kept = [r for r in entry.overrides.get("batch_rules", ()) if int(r.split(":")[0]) not in set(targets)]
        merged = sorted([*kept, *rules], key=lambda r: int(r.split(":")[0]))
        overrides = {k: v for k, v in entry.overrides.items() if k != "batch_rules"}
        if merged:
            overrides["batch_rules"] = tuple(merged)
        new_entry = entry
        if overrides != entry.overrides:  # other inputs: the next build of the version (intake.update_model)
            new_entry = dataclasses.replace(entry, overrides=overrides, version=next_build(entry.version))
        path = registry.save(new_entry)
        log(f"wrote {len(merged)} batch rules to {path} ({new_entry.package} {new_entry.version})")
        built = builder.build_entry(new_entry, session, dist.absolute())
        report["registry_entry"] = str(path)
        report["package_dir"] = str(built.package.root)
    name = manifest.package.removeprefix("tfaot-model-")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}_tune.json"
    write_atomic(path, json.dumps(report, indent=1, sort_keys=True) + "\n")
    report["json"] = str(path)
    return report
