"""What one command works with: the cache, the registry's defaults, offline or not, where progress goes.

cli.py builds one Session per command and hands it down; the TensorFlow
toolchain and the XLA runtime built with it are resolved once per session
(toolchain_and_runtime), however many steps need them.
"""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tfaot_dist.cache import Cache
from tfaot_dist.cxx.installed_runtime import installed_runtime
from tfaot_dist.cxx.xla_runtime import XlaRuntime, ensure_runtime
from tfaot_dist.registry import Defaults, Registry
from tfaot_dist.toolchain import Toolchain, ensure_toolchain, existing_toolchain

Log = Callable[[str], None]


@dataclass(frozen=True)
class Session:
    cache: Cache
    defaults: Defaults = field(default_factory=Defaults)
    offline: bool = False  # use the cache only: what is missing is a SourceUnavailable error
    log: Log = print

    @classmethod
    def of_registry(cls, registry: Path, cache: Path, *, offline: bool = False, log: Log = print) -> "Session":
        """The defaults of the registry at registry (the built-in ones where it has no registry.yaml)."""
        return cls(Cache(cache), Registry(registry).defaults(), offline, log)

    def logging_to(self, log: Log) -> "Session":
        """The same session, progress going to log (one model's lines of a parallel build)."""
        return dataclasses.replace(self, log=log)

    def with_cache(self, cache: Path) -> "Session":
        return dataclasses.replace(self, cache=Cache(cache))

    def toolchain(self) -> Toolchain:
        """The registry's existing Python (toolchain.python), else the isolated TensorFlow of the
        defaults' requirements, created if missing."""
        return self._toolchain

    def toolchain_and_runtime(self) -> tuple[Toolchain, XlaRuntime]:
        """The toolchain and the registry's installed runtime (toolchain.runtime), else the XLA runtime
        built from its TensorFlow (cached builds, resolved once)."""
        return self._toolchain, self._runtime

    def existing_toolchain_and_runtime(self, python: Path,
                                       runtime_dir: Path | None = None) -> tuple[Toolchain, XlaRuntime]:
        """An existing Python with TensorFlow (--toolchain-python, e.g. a release's python3), and an
        installed runtime (--runtime) or the cached one built from that TensorFlow (offline: with
        the Abseil sources already in the cache). Either may be the registry's (toolchain.python,
        toolchain.runtime), and errors then say so."""
        toolchain = existing_toolchain(python, self.origin("python", python))
        if runtime_dir:
            return toolchain, installed_runtime(runtime_dir, toolchain, self.origin("runtime", runtime_dir))
        return toolchain, ensure_runtime(toolchain.python, self.cache.root, self.log, offline=self.offline,
                                         path_environment=toolchain.path_environment)

    def origin(self, key: str, path: Path) -> str:
        """How an error names where an existing Python or installed runtime was given."""
        if path == getattr(self.defaults, key):
            return f"registry.yaml: toolchain.{key}:"
        return "--toolchain-python" if key == "python" else "--runtime"

    @cached_property
    def _toolchain(self) -> Toolchain:
        if self.defaults.python:
            return existing_toolchain(self.defaults.python, self.origin("python", self.defaults.python))
        return ensure_toolchain(self.cache.root, self.defaults.requirements, self.log, offline=self.offline)

    @cached_property
    def _runtime(self) -> XlaRuntime:
        if self.defaults.runtime:
            return installed_runtime(self.defaults.runtime, self._toolchain,
                                     self.origin("runtime", self.defaults.runtime))
        return ensure_runtime(self._toolchain.python, self.cache.root, self.log, offline=self.offline,
                              path_environment=self._toolchain.path_environment)
