"""How a published version (PEP 440) is written for each consumer, so that each accepts and orders it.

    published      CMake       pkg-config, rpm   SCRAM tool file, cmsBuild spec
    1.0.0          1.0.0       1.0.0             1.0.0
    1.0.0.post2    1.0.0.2     1.0.0.post2       1.0.0.post2
    2.0.0rc1       2.0.0       2.0.0~rc1         2.0.0rc1

- CMake takes up to four integers (find_package refuses anything else): the
  release padded to three numbers, then the build (post-release) number as the
  fourth. CMake has no pre-releases: 2.0.0rc1 says 2.0.0 (as LLVM's and Qt's
  release candidates do), so `find_package(X 2.0.0)` accepts it and
  `find_package(X 1.0...<2.0.0)` does not; `X_VERSION_STRING` keeps the full
  version. Releases of more than four numbers keep their first four.
- pkg-config (pkgconf) and rpm compare alike: numbers and letters in turn, a
  `~` sorting before everything. So pre- and dev releases take a `~`
  (2.0.0~rc1 < 2.0.0) and a post-release stays as it is (1.0.0 <
  1.0.0.post2 < 1.0.0.post10 < 1.0.1).
- SCRAM does not compare tool versions, and cmsBuild puts the version in the
  package's name: both carry the published version unchanged.
"""

from __future__ import annotations

from packaging.version import Version


def cmake_version(version: str) -> str:
    """What find_package and a ConfigVersion.cmake see: at most four integers."""
    v = Version(version)
    numbers = list(v.release[:4])
    numbers += [0] * (3 - len(numbers))
    if v.post is not None:
        numbers = [*numbers[:3], v.post]
    return ".".join(str(n) for n in numbers)


def rpm_version(version: str) -> str:
    """rpm's Version and pkg-config's, sorting as PEP 440 does: "~" before pre and dev releases.

    An epoch is left out (the callers that write specs refuse one).
    """
    v = Version(version)
    out = ".".join(str(p) for p in v.release)
    if v.pre:
        out += f"~{v.pre[0]}{v.pre[1]}"
    if v.post is not None:
        out += f".post{v.post}"
    if v.dev is not None:
        out += f"~dev{v.dev}"
    if v.local:
        out += f"+{v.local}"
    return out
