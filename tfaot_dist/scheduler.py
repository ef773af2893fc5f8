"""Building many registry entries: shards, parallel jobs, failures that do not stop the others.

    select_shard(entries, Shard(2, 8))   the 2nd of 8 shares, by sha256 of the name (stable everywhere)
    build_many(entries, ...)             builder.build_entry for each, `jobs` at a time
    build_selected(registry, ...)        `tfaot-dist build`: the selection, then the runtime packages

Each build runs its TensorFlow worker and its C++ verification harness as
subprocesses, so threads are enough to keep several cores busy; the caches
they share (toolchain, XLA runtime, sources, build cache) take file locks.
"""

from __future__ import annotations

import hashlib
import threading
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from tfaot_dist import builder, names
from tfaot_dist import package as pkg
from tfaot_dist.errors import BuildFailed, TfaotError, UsageError
from tfaot_dist.registry import ModelEntry, Registry
from tfaot_dist.session import Session
from tfaot_dist.util.progress import Reporter


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    m = names.SHARD.fullmatch(text or "")
    if not m or int(m.group(1)) > int(m.group(2)):
        raise UsageError(f"--shard: expected K/N with 1 <= K <= N (e.g. 2/8), got {text!r}")
    return Shard(int(m.group(1)), int(m.group(2)))


def shard_of(name: str, count: int) -> int:
    """The 1-based shard of a model name: sha256, not hash(), so every machine agrees."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % count + 1


def select_shard(entries: list[ModelEntry], shard: Shard | None) -> list[ModelEntry]:
    if shard is None:
        return entries
    return [e for e in entries if shard_of(e.name, shard.count) == shard.index]


@dataclass(frozen=True)
class Failure:
    name: str
    message: str  # one line
    exit_code: int


@dataclass
class Summary:
    total: int = 0  # models selected
    results: list[builder.BuildResult] = field(default_factory=list)  # in the order of the entries
    failures: list[Failure] = field(default_factory=list)  # in name order
    skipped: list[str] = field(default_factory=list)  # not started after a failure (--fail-fast)
    runtimes: list[tuple[pkg.Package, pkg.Status]] = field(default_factory=list)  # build_selected's


def failed(summary: Summary) -> BuildFailed:
    """The error of a build with failures: with the exit code of the first (in registry order)."""
    failures = summary.failures
    if summary.total == 1:  # one model: its own message, as if it had been built alone
        return BuildFailed(failures[0].message, failures[0].exit_code)
    parts = [f"{f.name} ({f.message})" for f in failures]
    skipped = f", {len(summary.skipped)} not started" if summary.skipped else ""
    return BuildFailed(
        f"{len(failures)} of {summary.total} models failed{skipped}: {'; '.join(parts)}",
        failures[0].exit_code,
    )


def load_selected(
    registry: Registry, names: list[str] | None, shard: Shard | None
) -> tuple[list[ModelEntry], list[Failure]]:
    """Entries to build: the named ones (each must load), or every entry of the shard.

    With every entry (names None) a malformed entry is that model's failure, not everyone's.
    """
    if names:
        entries = [registry.entry(n) for n in names]
        return select_shard(entries, shard), []
    entries, failures = [], []
    for name in registry.names():
        if shard is not None and shard_of(name, shard.count) != shard.index:
            continue
        try:
            entries.append(registry.load(name))
        except TfaotError as exc:
            failures.append(Failure(name, _one_line(str(exc)), exc.exit_code))
    return entries, failures


def build_selected(
    registry: Registry,
    names: list[str] | None,
    shard: Shard | None,
    session: Session,
    dist: Path,
    reporter: Callable[[int], Reporter],
    jobs: int = 1,
    fail_fast: bool = False,
) -> Summary:
    """`tfaot-dist build`: the named entries (None: every one of the shard), `jobs` at a time, then the
    runtime package each built package requires. reporter(n): the progress display of n models."""
    entries, failed_before = load_selected(registry, names, shard)
    if shard:
        session.log(f"shard {shard}: {len(entries) + len(failed_before)} models")
    if not entries and not failed_before:
        session.log(
            f"nothing to build: no models in {registry.root}" + (f" for shard {shard}" if shard else "")
        )
    summary = build_many(
        entries,
        session,
        dist,
        reporter(len(entries) + len(failed_before)),
        jobs=jobs,
        fail_fast=fail_fast,
        failed_before=failed_before,
    )
    summary.runtimes = builder.ensure_runtime_packages([r.package for r in summary.results], session, dist)
    return summary


def build_many(
    entries: list[ModelEntry],
    session: Session,
    dist: Path,
    reporter: Reporter,
    jobs: int = 1,
    fail_fast: bool = False,
    failed_before: Sequence[Failure] = (),
) -> Summary:
    """Build every entry, `jobs` at a time; a failure is recorded and the others go on (unless fail_fast).

    failed_before: models that failed before building (entries that did not load).
    """
    if jobs < 1:
        raise UsageError(f"--jobs: expected a positive number, got {jobs}")
    outcome: dict[str, builder.BuildResult | Failure] = {f.name: f for f in failed_before}
    for f in failed_before:
        reporter.start(f.name)
        reporter.finish(f.name, "failed", f.message)
    stop = threading.Event()
    if failed_before and fail_fast:
        stop.set()

    def one(entry: ModelEntry) -> None:
        reporter.start(entry.name)
        try:
            result = builder.build_entry(
                entry, session.logging_to(lambda message: reporter.log(entry.name, message)), dist
            )
        except TfaotError as exc:
            outcome[entry.name] = Failure(entry.name, _one_line(str(exc)), exc.exit_code)
            reporter.finish(entry.name, "failed", _one_line(str(exc)))
            if fail_fast:
                stop.set()
            return
        except Exception as exc:  # a bug or an OS error: still only this model's failure
            for line in traceback.format_exc().splitlines():
                reporter.log(entry.name, line)
            message = _one_line(f"{type(exc).__name__}: {exc}")
            outcome[entry.name] = Failure(entry.name, message, 1)
            reporter.finish(entry.name, "failed", message)
            if fail_fast:
                stop.set()
            return
        outcome[entry.name] = result
        reporter.finish(entry.name, result.status)

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="build") as pool:
        pending = list(entries)
        running: set[Future[None]] = set()
        while pending or running:
            while pending and len(running) < jobs and not stop.is_set():
                running.add(pool.submit(one, pending.pop(0)))
            if not running:
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()  # re-raises only what one() does not catch (KeyboardInterrupt)
    reporter.close()

    summary = Summary(total=len(entries) + len(failed_before))
    for name in sorted(outcome.keys() | {e.name for e in entries}):
        got = outcome.get(name)
        if isinstance(got, Failure):
            summary.failures.append(got)
        elif got is None:
            summary.skipped.append(name)
    summary.results = [got for e in entries if isinstance(got := outcome.get(e.name), builder.BuildResult)]
    return summary


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "failed"
