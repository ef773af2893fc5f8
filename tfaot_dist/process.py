"""Running other programs: one way in, one line out.

Every program tfaot-dist starts (compilers, ar, pip, git, scram, the harnesses)
goes through probe() or run(): an argv list, never a shell, output captured;
the TensorFlow worker through stream(), its output going to its own log file as
it is written (long runs, read while they run and kept with a failed build).
A failure is one error line naming what failed, its exit status, the line of
output that says why, and a log file holding the whole story:

    CACHE/logs/<what>-<UTC time>-<pid>-<n>.log     command, directory, status, stdout, stderr

CACHE is $TFAOT_DIST_CACHE (the one `--help` names), so logs outlive the
temporary directories the commands ran in. A log is written to a temporary
sibling and renamed, like every file others may read. The environment is not
logged: it may hold tokens.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfaot_dist import __version__
from tfaot_dist.cache import Cache, default_cache, trusted_root
from tfaot_dist.errors import CompileFailed, TfaotError, UnexpectedError
from tfaot_dist.util.fs import write_atomic
from tfaot_dist.util.textsafe import one_line

# Statuses probe() reports for a program that never ran or was stopped (as shells and timeout(1) do).
NOT_RUN = 127
TIMED_OUT = 124

# A line that reports an error the way compilers, linkers and pip write it ("x.cc:3:5: error: ...",
# "collect2: error: ...", "ERROR: ..."): the first one says why better than the last line.
_ERROR_LINE = re.compile(r"(?:^|[\s:])(?:fatal )?error:", re.IGNORECASE)
_HINT_LIMIT = 300
_numbers = itertools.count(1)  # log names stay unique within a process (parallel compiles)


@dataclass(frozen=True)
class Finished:
    """A program that ran (or could not: status NOT_RUN, or TIMED_OUT)."""

    argv: tuple[str, ...]
    cwd: Path | None
    status: int  # the exit status; negative: killed by that signal
    stdout: str
    stderr: str
    timeout: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == 0

    def describe_status(self) -> str:
        if self.status == TIMED_OUT and self.timeout is not None:
            return f"timed out after {self.timeout:g} s"
        if self.status < 0:
            try:
                return f"killed by {signal.Signals(-self.status).name}"
            except ValueError:
                return f"killed by signal {-self.status}"
        return f"exit {self.status}"


def probe(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Finished:
    """Run argv and return how it ended, whatever that was: for programs whose exit status is an
    answer (git asked about a path, a compiler asked about a flag). Raises nothing of its own."""
    args = tuple(str(a) for a in argv)
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # run() has killed it; exc holds what it wrote so far
        return Finished(args, cwd, TIMED_OUT, _text(exc.stdout), _text(exc.stderr), timeout)
    except OSError as exc:  # not found, not executable, no such cwd
        return Finished(args, cwd, NOT_RUN, "", f"cannot run {args[0]}: {exc.strerror or exc}")
    return Finished(args, cwd, proc.returncode, proc.stdout, proc.stderr, timeout)


def stream(
    argv: Sequence[str | Path],
    output: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Finished:
    """Run argv with stdout and stderr going to the file output as they are written (not captured:
    Finished's stdout is empty); how it ended, whatever that was, like probe()."""
    args = tuple(str(a) for a in argv)
    with open(output, "wb") as log:
        try:
            proc = subprocess.run(
                args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:  # run() has killed it
            return Finished(args, cwd, TIMED_OUT, "", "", timeout)
        except OSError as exc:  # not found, not executable, no such cwd
            return Finished(args, cwd, NOT_RUN, "", f"cannot run {args[0]}: {exc.strerror or exc}")
    return Finished(args, cwd, proc.returncode, "", "", timeout)


def run(
    argv: Sequence[str | Path],
    *,
    what: str,
    error: type[TfaotError] = CompileFailed,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log_dir: Path | None = None,
) -> str:
    """Run argv to success and return its stdout; otherwise raise failure()'s error.

    what: the step in words ("compile absl/base/log_severity.cc"), the error's first words.
    error: the class raised, so each caller keeps its exit code.
    """
    finished = probe(argv, cwd=cwd, env=env, timeout=timeout)
    if not finished.ok:
        raise failure(finished, what=what, error=error, log_dir=log_dir)
    return finished.stdout


def failure(
    finished: Finished, *, what: str, error: type[TfaotError] = CompileFailed, log_dir: Path | None = None
) -> TfaotError:
    """The one-line error for a program that failed, after writing its full output to a log file."""
    if finished.status == NOT_RUN:  # nothing ran, so nothing to log
        return error(f"{what}: {one_line(finished.stderr, _HINT_LIMIT)}")
    where = _write_log(finished, what, log_dir)
    why = hint(finished)
    return error(
        f"{what} failed ({finished.describe_status()})" + (f": {why}" if why else "") + f" ({where})"
    )


def hint(finished: Finished) -> str:
    """The line of output that best says why: the first error line, else the last line written."""
    for text in (finished.stderr, finished.stdout):
        for line in text.splitlines():
            if _ERROR_LINE.search(line):
                return one_line(line, _HINT_LIMIT)
    for text in (finished.stderr, finished.stdout):
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            return one_line(lines[-1], _HINT_LIMIT)
    return ""


def _temp_logs() -> Path:
    """Where a log goes when the cache cannot take it (read at each use: TMPDIR may change)."""
    return Path(tempfile.gettempdir()) / "tfaot-dist-logs"


def default_log_dir() -> Path:
    return Cache(default_cache()).logs


def _write_log(finished: Finished, what: str, log_dir: Path | None) -> str:
    """Write the log into log_dir, else the system's temporary directory; 'log: PATH' for the message.
    A log that cannot be written must not hide the failure it reports."""
    text = "\n".join(
        [
            f"what: {what}",
            f"command: {shlex.join(finished.argv)}",
            f"directory: {finished.cwd or os.getcwd()}",
            f"status: {finished.describe_status()}",
            "---- stdout ----",
            finished.stdout.rstrip("\n"),
            "---- stderr ----",
            finished.stderr.rstrip("\n"),
            "",
        ]
    )
    return write_log(what, text, log_dir)


def write_log(what: str, text: str, log_dir: Path | None = None) -> str:
    """A log file named after what, in log_dir (default: the cache's logs/), else in the system's
    temporary directory; returns 'log: PATH' for an error line (or why none was written)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", what).strip("-.")[:60] or "command"
    name = f"{slug}-{stamp}-{os.getpid()}-{next(_numbers)}.log"
    problems = []
    for folder in (log_dir or default_log_dir(), _temp_logs()):
        try:
            write_atomic(folder / name, text)
            return f"log: {folder / name}"
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
    return f"no log written: {'; '.join(problems)}"


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):  # TimeoutExpired keeps raw bytes on some paths
        return data.decode(errors="replace")
    return data or ""


def unexpected(exc: BaseException, argv: Sequence[str], cache: Path) -> UnexpectedError:
    """The one error line of an exception nothing expected: its type and message, and the log (in
    the cache's logs/, else when the cache is refused the system's temporary directory) holding
    its traceback."""
    try:
        logs: Path | None = Cache(trusted_root(cache)).logs
    except (TfaotError, OSError):
        logs = _temp_logs()
    text = "\n".join(
        [
            f"command: {shlex.join(['tfaot-dist', *argv])}",
            f"tfaot-dist {__version__}, Python {sys.version.split()[0]}",
            "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        ]
    )
    where = write_log("unexpected-error", text, logs)
    return UnexpectedError(f"unexpected {type(exc).__name__}: {exc} ({where})")
