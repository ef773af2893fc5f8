"""Spec release numbers, derived from the registry's git history (never kept by hand).

The version of a spec is the registry entry's version; its release counts the
changes that alter the built bytes while that version stays:

    Release = 1 + the commits that touched the tracked files after (and not
              counting) the commit that set the current version,
              + 1 if the tracked files have uncommitted changes.

Tracked files: the entry file (models/NAME.yaml), registry.yaml (toolchain,
target) and spec_templates/ when the templates live in the same work tree as
the registry. Walking `git log -- TRACKED` from HEAD, every commit whose entry
still has the current version counts; the first commit with another version
(or without the entry) ends the walk. So changing the pinned commit, the
config path, the overrides or the TensorFlow pin raises the release, and
changing the version starts again at 1. The result depends only on the
repository's history and work tree: rendering twice gives the same numbers,
and committing a pending change keeps the number it already had.

Outside a git work tree the release is 1. Templates of an installed tfaot-dist
(outside the registry's work tree) are not seen here; upgrading tfaot-dist
should go with a registry commit (the tool version is in every spec header,
so `specs --check` shows the upgrade).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import process

# One record of `git log -z --format=...`: fields split by \x1f.
_LOG_FORMAT = "%H%x1f%ct%x1f%an%x1f%ae%x1f%s"


@dataclass(frozen=True)
class Change:
    """One commit counted in a release."""

    release: int
    commit: str
    time: int  # committer time, seconds since the epoch
    author: str
    email: str
    subject: str


@dataclass(frozen=True)
class Release:
    number: int
    changes: tuple[Change, ...] = ()  # counted commits, newest first
    pending: bool = False  # the work tree holds a counted change not yet committed
    in_git: bool = False


def _git(root: Path, *args: str) -> process.Finished:
    """A git query: its exit status is part of the answer (not a work tree, no such revision)."""
    env = {
        **os.environ,
        "LC_ALL": "C",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    return process.probe(["git", "-C", root, *args], env=env)


def work_tree(path: Path) -> Path | None:
    """The top of the git work tree holding path, or None."""
    proc = _git(path, "rev-parse", "--show-toplevel")
    if not proc.ok:
        return None
    return Path(proc.stdout.strip()).resolve()


def derive(
    key_file: Path, extra: list[Path], version: str, version_of: Callable[[str | None], str | None]
) -> Release:
    """The release of the current `version` of key_file (the entry or registry.yaml).

    extra: more files or directories whose changes count (ignored outside key_file's work tree).
    version_of: the version a revision of key_file declares (its text, None if absent).
    """
    top = work_tree(key_file.parent)
    if top is None:
        return Release(1)
    key = key_file.resolve().relative_to(top).as_posix()
    tracked = [key]
    for path in extra:
        path = path.resolve()
        if path.is_relative_to(top) and path != top:
            tracked.append(path.relative_to(top).as_posix())

    log = _git(top, "log", "-z", f"--format={_LOG_FORMAT}", "--", *tracked)
    records = log.stdout.split("\0") if log.ok else []
    counted = []
    for record in filter(None, records):
        commit, time, author, email, subject = record.split("\x1f", 4)
        if version_of(_show(top, commit, key)) != version:
            break
        counted.append((commit, int(time), author, email, subject))

    status = _git(top, "status", "--porcelain", "-z", "--untracked-files=all", "--", *tracked)
    pending = status.ok and bool(status.stdout.strip("\0"))
    number = max(1, len(counted) + pending)
    changes = tuple(Change(number - pending - i, *c) for i, c in enumerate(counted))
    return Release(number, changes, pending, True)


def _show(top: Path, commit: str, path: str) -> str | None:
    proc = _git(top, "show", f"{commit}:{path}")
    return proc.stdout if proc.ok else None
