"""What one command works with: the cache, the registry's defaults, offline or not, where progress goes.

cli/ builds one Session per command and hands it down. Session.resolve() is
the one place that chooses the TensorFlow toolchain and the XLA runtime of a
command: an option (--toolchain-python, --runtime) wins over the registry's
toolchain.python / toolchain.runtime, which win over our own venv and the
runtime built from its TensorFlow. Each is made or found on first use, once per
session, however many steps need it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

from tfaot_dist.cache import Cache
from tfaot_dist.cxx.installed_runtime import installed_runtime
from tfaot_dist.cxx.xla_runtime import XlaRuntime, ensure_runtime
from tfaot_dist.registry import Defaults, Registry
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, existing_toolchain

Log = Callable[[str], None]
Setting = Literal["python", "runtime"]  # the registry's toolchain.python and toolchain.runtime


@dataclass(frozen=True)
class Session:
    cache: Cache
    defaults: Defaults = field(default_factory=Defaults)
    offline: bool = False  # use the cache only: what is missing is a SourceUnavailable error
    log: Log = print
    # Tools by (python, runtime): each session (a copy made by logging_to too) resolves its own.
    _tools: dict[tuple[Path | None, Path | None], Tools] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def of_registry(cls, registry: Path, cache: Path, *, offline: bool = False, log: Log = print) -> Session:
        """The defaults of the registry at registry (the built-in ones where it has no registry.yaml)."""
        return cls(Cache(cache), Registry(registry).defaults(), offline, log)

    def logging_to(self, log: Log) -> Session:
        """The same session, progress going to log (one model's lines of a parallel build)."""
        return dataclasses.replace(self, log=log)

    def with_cache(self, cache: Path) -> Session:
        return dataclasses.replace(self, cache=Cache(cache))

    def resolve(self, python: Path | None = None, runtime: Path | None = None) -> Tools:
        """The toolchain and runtime of this command. python: an existing Python with TensorFlow
        (--toolchain-python), else the registry's toolchain.python, else our isolated venv of the
        defaults' requirements. runtime: an installed XLA runtime (--runtime), else the registry's
        toolchain.runtime, else the one built (cached) from the toolchain's TensorFlow."""
        chosen = (python or self.defaults.python, runtime or self.defaults.runtime)
        if chosen not in self._tools:
            self._tools[chosen] = Tools(self, *chosen)
        return self._tools[chosen]

    def toolchain(self) -> Toolchain:
        """The toolchain of resolve() without options (the runtime is not made)."""
        return self.resolve().toolchain

    def origin(self, setting: Setting, path: Path) -> str:
        """How an error names where an existing Python or installed runtime was given."""
        if path == getattr(self.defaults, setting):
            return f"registry.yaml: toolchain.{setting}:"
        return "--toolchain-python" if setting == "python" else "--runtime"


@dataclass(frozen=True)
class Tools:
    """What Session.resolve chose; the toolchain and the runtime are made or found on first use."""

    session: Session
    python: Path | None  # an existing Python (an option's or the registry's); None: our venv
    runtime_dir: Path | None  # an installed runtime (an option's or the registry's); None: built here

    def check_offline(self) -> None:
        """--offline: the toolchain is found now (given, or in the cache), so that a missing one is named
        (exit 4) before the command writes anything."""
        if self.session.offline:
            _ = self.toolchain  # made on first use; offline, a missing one raises

    @cached_property
    def toolchain(self) -> Toolchain:
        s = self.session
        if self.python:
            return existing_toolchain(self.python, s.origin("python", self.python))
        return ensure_toolchain(s.cache.root, s.defaults.requirements, s.log, offline=s.offline)

    @cached_property
    def runtime(self) -> XlaRuntime:
        s = self.session
        if self.runtime_dir:
            return installed_runtime(self.runtime_dir, self.toolchain, s.origin("runtime", self.runtime_dir))
        return ensure_runtime(
            self.toolchain.python,
            s.cache.root,
            s.log,
            offline=s.offline,
            path_environment=self.toolchain.path_environment,
        )
