"""Progress of many builds at once, shown to fit where it is read.

    terminal        log lines scroll above one status line that is redrawn ([3/12] built, now: a, b)
    plain (CI, pipes, files)   one line per event, each prefixed with the model's name
    GitHub Actions  each model's lines folded in a ::group:: when it finishes; ::error:: for failures

Builds run in parallel threads, so the reporters serialise their writes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TextIO

from tfaot_dist.util.textsafe import actions_safe

Log = Callable[[str], None]  # where a command's progress lines go (one line each)


class Reporter(Protocol):
    def start(self, name: str) -> None: ...

    def log(self, name: str | None, message: str) -> None: ...

    def finish(self, name: str, status: str, error: str | None = None) -> None: ...

    def close(self) -> None: ...


def make_reporter(total: int, stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> Reporter:
    stream = stream or sys.stderr
    if env is None:
        env = os.environ
    if env.get("GITHUB_ACTIONS") == "true":
        return GithubReporter(total, stream)
    if stream.isatty() and not env.get("CI") and env.get("TERM", "") not in ("", "dumb"):
        return TerminalReporter(total, stream)
    return PlainReporter(total, stream)


class _Base:
    def __init__(self, total: int, stream: TextIO):
        self.total, self.stream = total, stream
        self.done = 0
        self.started: dict[str, float] = {}
        self.lock = threading.Lock()

    def _counter(self) -> str:
        return f"[{self.done}/{self.total}]"

    def _elapsed(self, name: str) -> str:
        return f"{time.monotonic() - self.started.pop(name, time.monotonic()):.1f} s"

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        pass


class PlainReporter(_Base):
    def start(self, name: str) -> None:
        with self.lock:
            self.started[name] = time.monotonic()

    def log(self, name: str | None, message: str) -> None:
        with self.lock:
            self._write(f"tfaot-dist: {name + ': ' if name else ''}{message}\n")

    def finish(self, name: str, status: str, error: str | None = None) -> None:
        with self.lock:
            self.done += 1
            detail = f": {error}" if error else ""
            self._write(f"tfaot-dist: {self._counter()} {name}: {status} ({self._elapsed(name)}){detail}\n")


class TerminalReporter(_Base):
    """Log lines scroll; the last line shows the count and what is being built now."""

    def start(self, name: str) -> None:
        with self.lock:
            self.started[name] = time.monotonic()
            self._status()

    def log(self, name: str | None, message: str) -> None:
        with self.lock:
            self._write(f"\r\x1b[K{name + ': ' if name else ''}{message}\n")
            self._status()

    def finish(self, name: str, status: str, error: str | None = None) -> None:
        with self.lock:
            self.done += 1
            detail = f": {error}" if error else ""
            mark = "\x1b[31mFAILED\x1b[0m" if error else status
            self._write(f"\r\x1b[K{self._counter()} {name}: {mark} ({self._elapsed(name)}){detail}\n")
            self._status()

    def _status(self) -> None:
        running = ", ".join(sorted(self.started))
        width = 200
        with contextlib.suppress(OSError, ValueError, AttributeError):
            width = os.get_terminal_size(self.stream.fileno()).columns or width  # 0: size not set
        line = f"{self._counter()} building: {running}" if running else ""
        self._write(f"\r\x1b[K{line[: max(10, width - 1)]}")

    def close(self) -> None:
        with self.lock:
            self._write("\r\x1b[K")


class GithubReporter(_Base):
    """Parallel builds interleave, so each model's lines are held and printed in one group at its end."""

    def __init__(self, total: int, stream: TextIO):
        super().__init__(total, stream)
        self.lines: dict[str, list[str]] = {}

    def start(self, name: str) -> None:
        with self.lock:
            self.started[name] = time.monotonic()
            self.lines[name] = []

    def log(self, name: str | None, message: str) -> None:
        with self.lock:
            if name in self.lines:
                self.lines[name].append(message)
            else:
                self._write(f"tfaot-dist: {_command_safe(message)}\n")

    def finish(self, name: str, status: str, error: str | None = None) -> None:
        with self.lock:
            self.done += 1
            title = f"{self._counter()} {name}: {'FAILED' if error else status} ({self._elapsed(name)})"
            out = [f"::group::{_command_safe(title)}"]
            out += [_command_safe(line) for line in self.lines.pop(name, [])]
            out.append("::endgroup::")
            if error:
                out.append(f"::error title=tfaot-dist {name}::{_escape_data(error)}")
            self._write("\n".join(out) + "\n")


def _escape_data(text: str) -> str:
    """Workflow command data: %, CR and LF are encoded so a message cannot start a command of its own,
    and "##[" is broken (the runner reads it anywhere in a line)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace("##[", "# #[")


def _command_safe(line: str) -> str:
    """A plain line (outside data) that the runner cannot read as a workflow command: one line, and
    no "##[" anywhere nor "::" after leading spaces (textsafe.actions_safe)."""
    return actions_safe(line.replace("\r", " ").replace("\n", " "))
